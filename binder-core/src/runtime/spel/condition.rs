//! Listener conditions (`#[stream_listener(condition = "...")]`): which messages of a binding a
//! listener takes, from their headers. The grammar is in [`super::syntax::parser`].

use super::syntax::ast::Condition;
use super::syntax::error::SyntaxError;
use super::syntax::parser;

/// Why a condition does not parse: what was expected, at which position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(transparent)]
pub struct ConditionError(#[from] SyntaxError);

impl ConditionError {
    /// The syntax error, with its position.
    pub fn syntax(&self) -> &SyntaxError {
        &self.0
    }
}

impl Condition {
    /// Parses a condition.
    pub fn parse(src: &str) -> Result<Condition, ConditionError> {
        Ok(parser::condition(src)?)
    }

    /// Evaluates against headers, given as a lookup of a header's text.
    pub fn matches(&self, header: &dyn Fn(&str) -> Option<String>) -> bool {
        match self {
            Condition::And(a, b) => a.matches(header) && b.matches(header),
            Condition::Or(a, b) => a.matches(header) || b.matches(header),
            Condition::Not(a) => !a.matches(header),
            Condition::Equals(name, value) => header(name) == *value,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(src: &str, headers: &[(&str, &str)]) -> bool {
        let c = Condition::parse(src).unwrap();
        c.matches(&|n| {
            headers
                .iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn comparisons_and_logic() {
        let h = [("type", "created"), ("region", "eu")];
        assert!(eval("headers['type'] == 'created'", &h));
        assert!(!eval("headers['type'] != 'created'", &h));
        assert!(eval(
            "headers['type'] == 'created' && headers['region'] == 'eu'",
            &h
        ));
        assert!(eval(
            "headers['type'] == 'x' || headers['region'] == 'eu'",
            &h
        ));
        assert!(eval("!(headers['type'] == 'x')", &h));
        assert!(eval("headers['missing'] == null", &h));
        assert!(eval("headers['type'] != null", &h));
        assert!(eval("headers['q'] == 'it''s'", &[("q", "it's")]));
    }

    #[test]
    fn both_quote_styles_with_doubled_quotes() {
        let h = [("type", "created"), ("q", "it's"), ("say", r#"say "hi""#)];
        assert!(eval(r#"headers["type"] == "created""#, &h));
        assert!(eval(r#"headers['type'] == "created""#, &h));
        assert!(eval(r#"headers["q"] == "it's""#, &h));
        assert!(eval("headers['q'] == 'it''s'", &h));
        assert!(eval(r#"headers['say'] == "say ""hi""""#, &h));
        assert!(eval(r#"headers['say'] == 'say "hi"'"#, &h));
        // `''` is two quotes inside a double-quoted literal.
        assert!(!eval(r#"headers['q'] == "it''s""#, &h));
    }

    #[test]
    fn syntax_errors_name_the_position() {
        for (src, what) in [
            ("headers['type'] = 'x'", "expected `==` or `!=`"),
            ("header['type'] == 'x'", "expected headers['name']"),
            ("headers['type'] == x", "expected a 'quoted' value"),
            (r#"headers['type'] == "x"#, "unterminated 'quoted' value"),
            ("headers['type'] == 'x' and", "unexpected text"),
            ("(headers['a'] == 'b'", "expected `)`"),
        ] {
            let e = Condition::parse(src).unwrap_err().to_string();
            assert!(e.contains(what), "{src}: {e}");
        }
    }
}
