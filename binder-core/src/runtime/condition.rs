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
        if !self.eat("'") {
            return self.fail("expected a 'quoted' value");
        }
        let mut out = String::new();
        loop {
            let Some(c) = self.rest().chars().next() else {
                return self.fail("unterminated 'quoted' value");
            };
            self.pos += c.len_utf8();
            if c == '\'' {
                if self.rest().starts_with('\'') {
                    self.pos += 1;
                    out.push('\'');
                } else {
                    return Ok(out);
                }
            } else {
                out.push(c);
            }
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
    fn syntax_errors_name_the_position() {
        for (src, what) in [
            ("headers['type'] = 'x'", "expected `==` or `!=`"),
            ("header['type'] == 'x'", "expected headers['name']"),
            ("headers['type'] == x", "expected a 'quoted' value"),
            ("headers['type'] == 'x' and", "unexpected text"),
            ("(headers['a'] == 'b'", "expected `)`"),
        ] {
            let e = Condition::parse(src).unwrap_err().to_string();
            assert!(e.contains(what), "{src}: {e}");
        }
    }
}
