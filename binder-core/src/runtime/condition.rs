//! Listener conditions (`#[stream_listener(condition = "...")]`): which messages of a binding a
//! listener takes, from their headers.
//!
//! ```text
//! cond   := and ('||' and)*
//! and    := unary ('&&' unary)*
//! unary  := '!' unary | '(' cond ')' | cmp
//! cmp    := headers['name'] ('==' | '!=') 'literal'
//!         | headers['name'] ('==' | '!=') null
//! ```
//!
//! String literals are SpEL's: `'text'` or `"text"`, a doubled quote standing for one
//! (`'it''s'`, `"say ""hi"""`). [`string_literal`] reads them here and in routing-key
//! expressions alike.
//!
//! This file has no dependencies: the macros crate includes it too, so a condition that does
//! not parse is a compile error, with the same parser the runtime uses.

/// A parsed condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// Both hold.
    And(Box<Condition>, Box<Condition>),
    /// Either holds.
    Or(Box<Condition>, Box<Condition>),
    /// It does not hold.
    Not(Box<Condition>),
    /// `headers['name'] == value` (`None`: the header is absent).
    Equals(String, Option<String>),
}

/// Why a condition does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionError(pub String);

impl std::fmt::Display for ConditionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConditionError {}

/// Why [`string_literal`] read no literal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LiteralError {
    /// The text does not start with `'` or `"`.
    NotQuoted,
    /// The closing quote is missing.
    Unterminated,
}

/// Reads the SpEL string literal at the start of `src`: `'text'` or `"text"`. Inside, the
/// quote that opened it is written twice to stand for itself (`'it''s'`, `"say ""hi"""`),
/// and the other quote is plain text. Returns the text and the literal's length in `src`.
pub(crate) fn string_literal(src: &str) -> Result<(String, usize), LiteralError> {
    let quote = match src.chars().next() {
        Some(q @ ('\'' | '"')) => q,
        _ => return Err(LiteralError::NotQuoted),
    };
    let mut out = String::new();
    let mut pos = 1;
    loop {
        let Some(c) = src[pos..].chars().next() else {
            return Err(LiteralError::Unterminated);
        };
        pos += c.len_utf8();
        if c != quote {
            out.push(c);
        } else if src[pos..].starts_with(quote) {
            pos += 1;
            out.push(quote);
        } else {
            return Ok((out, pos));
        }
    }
}

struct Cursor<'a> {
    src: &'a str,
    pos: usize,
}

impl Cursor<'_> {
    fn rest(&self) -> &str {
        &self.src[self.pos..]
    }
    fn ws(&mut self) {
        let t = self.rest().trim_start();
        self.pos = self.src.len() - t.len();
    }
    fn eat(&mut self, tok: &str) -> bool {
        self.ws();
        if self.rest().starts_with(tok) {
            self.pos += tok.len();
            true
        } else {
            false
        }
    }
    fn fail<T>(&self, what: &str) -> Result<T, ConditionError> {
        Err(ConditionError(format!(
            "invalid condition `{}`: {what} at position {}",
            self.src, self.pos
        )))
    }
    fn literal(&mut self) -> Result<String, ConditionError> {
        self.ws();
        match string_literal(self.rest()) {
            Ok((text, len)) => {
                self.pos += len;
                Ok(text)
            }
            Err(LiteralError::NotQuoted) => self.fail("expected a 'quoted' value"),
            Err(LiteralError::Unterminated) => self.fail("unterminated 'quoted' value"),
        }
    }
    fn or(&mut self) -> Result<Condition, ConditionError> {
        let mut left = self.and()?;
        while self.eat("||") {
            left = Condition::Or(Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }
    fn and(&mut self) -> Result<Condition, ConditionError> {
        let mut left = self.unary()?;
        while self.eat("&&") {
            left = Condition::And(Box::new(left), Box::new(self.unary()?));
        }
        Ok(left)
    }
    fn unary(&mut self) -> Result<Condition, ConditionError> {
        if self.eat("!") && !self.rest().starts_with('=') {
            return Ok(Condition::Not(Box::new(self.unary()?)));
        }
        if self.eat("(") {
            let inner = self.or()?;
            if !self.eat(")") {
                return self.fail("expected `)`");
            }
            return Ok(inner);
        }
        if !self.eat("headers") {
            return self.fail("expected headers['name']");
        }
        if !self.eat("[") {
            return self.fail("expected `[` after `headers`");
        }
        let name = self.literal()?;
        if !self.eat("]") {
            return self.fail("expected `]`");
        }
        let negate = if self.eat("==") {
            false
        } else if self.eat("!=") {
            true
        } else {
            return self.fail("expected `==` or `!=`");
        };
        let value = if self.eat("null") {
            None
        } else {
            Some(self.literal()?)
        };
        let cmp = Condition::Equals(name, value);
        Ok(if negate {
            Condition::Not(Box::new(cmp))
        } else {
            cmp
        })
    }
}

impl Condition {
    /// Parses a condition.
    pub fn parse(src: &str) -> Result<Condition, ConditionError> {
        let mut c = Cursor { src, pos: 0 };
        let cond = c.or()?;
        c.ws();
        if !c.rest().is_empty() {
            return c.fail("unexpected text");
        }
        Ok(cond)
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
    fn string_literals() {
        let ok = |s: &str, n| Ok((s.to_owned(), n));
        assert_eq!(string_literal("'a' + x"), ok("a", 3));
        assert_eq!(string_literal(r#""a" + x"#), ok("a", 3));
        assert_eq!(string_literal("''"), ok("", 2));
        assert_eq!(string_literal(r#""""#), ok("", 2));
        assert_eq!(string_literal("''''"), ok("'", 4));
        assert_eq!(string_literal(r#""""""#), ok("\"", 4));
        assert_eq!(string_literal(r#"'é''"'"#), ok(r#"é'""#, 7));
        assert_eq!(string_literal("x"), Err(LiteralError::NotQuoted));
        assert_eq!(string_literal(""), Err(LiteralError::NotQuoted));
        assert_eq!(string_literal("'open"), Err(LiteralError::Unterminated));
        assert_eq!(string_literal(r#""open'"#), Err(LiteralError::Unterminated));
        assert_eq!(string_literal("'x''"), Err(LiteralError::Unterminated));
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
