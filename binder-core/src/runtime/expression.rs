//! Routing-key expressions (`routingKeyExpression`): a small, safe subset of what Spring
//! Cloud Stream users write in SpEL.
//!
//! ```text
//! expr  := term ('+' term)*
//! term  := 'literal' | headers['name'] | headers.name | payload.field(.field)* | payload['field']
//! ```
//!
//! Literals (and names in brackets) are SpEL's, in either quote: `'text'` or `"text"`, with
//! the quote that opened them doubled to stand for itself (`'it''s'`, `"say ""hi"""`). The
//! same reader serves listener conditions. A header value renders as
//! text; a payload field is read from the JSON payload (strings bare, numbers as written).
//! A missing header or field is an error at send time, never a silent `null`.
//!
//! ```
//! use binder_core::runtime::RoutingKeyExpression;
//! use binder_core::Message;
//!
//! let e = RoutingKeyExpression::parse("'orders.' + headers['region'] + '.' + payload.kind").unwrap();
//! let m = Message::new(r#"{"kind":"created"}"#).with_header("region", "eu");
//! assert_eq!(e.evaluate(&m).unwrap(), "orders.eu.created");
//! ```

use std::fmt;

use super::condition::{LiteralError, string_literal};
use crate::message::{HeaderValue, Message};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Term {
    Literal(String),
    Header(String),
    Payload(Vec<String>),
}

/// A term's value, borrowed from the expression or the message.
enum Value<'a> {
    Text(&'a str),
    Header(&'a HeaderValue),
    Json(&'a serde_json::Value),
}

/// A partition key as [`RoutingKeyExpression::evaluate_key`] yields it, for the Java hash
/// of the type Spring would see.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PartitionKey {
    /// A literal, or several terms concatenated.
    Text(String),
    /// A header, with its AMQP type.
    Header(HeaderValue),
    /// A payload field, with its JSON type.
    Json(serde_json::Value),
}

/// A parsed routing-key expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutingKeyExpression {
    source: String,
    terms: Vec<Term>,
}

/// A syntax or evaluation error, with the position where it applies.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ExpressionError(String);

struct Parser<'a> {
    src: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn rest(&self) -> &str {
        &self.src[self.pos..]
    }

    fn skip_ws(&mut self) {
        let trimmed = self.rest().trim_start();
        self.pos = self.src.len() - trimmed.len();
    }

    fn fail<T>(&self, what: &str) -> Result<T, ExpressionError> {
        Err(ExpressionError(format!(
            "invalid expression `{}`: {what} at position {}",
            self.src, self.pos
        )))
    }

    fn eat(&mut self, token: &str) -> bool {
        if self.rest().starts_with(token) {
            self.pos += token.len();
            true
        } else {
            false
        }
    }

    fn quoted(&mut self) -> Result<String, ExpressionError> {
        match string_literal(self.rest()) {
            Ok((text, len)) => {
                self.pos += len;
                Ok(text)
            }
            Err(LiteralError::NotQuoted) => self.fail("expected a quoted name"),
            Err(LiteralError::Unterminated) => self.fail("unterminated literal"),
        }
    }

    fn ident(&mut self) -> Result<String, ExpressionError> {
        let len = self
            .rest()
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-'))
            .unwrap_or(self.rest().len());
        if len == 0 {
            return self.fail("expected a name");
        }
        let id = self.rest()[..len].to_owned();
        self.pos += len;
        Ok(id)
    }

    /// `['name']` or `.name`.
    fn accessor(&mut self) -> Result<Option<String>, ExpressionError> {
        if self.eat("[") {
            let name = self.quoted()?;
            if !self.eat("]") {
                return self.fail("expected `]`");
            }
            Ok(Some(name))
        } else if self.eat(".") {
            self.ident().map(Some)
        } else {
            Ok(None)
        }
    }

    fn term(&mut self) -> Result<Term, ExpressionError> {
        self.skip_ws();
        if self.rest().starts_with(['\'', '"']) {
            return self.quoted().map(Term::Literal);
        }
        if self.eat("headers") {
            return match self.accessor()? {
                Some(name) => Ok(Term::Header(name)),
                None => self.fail("expected `['name']` after `headers`"),
            };
        }
        if self.eat("payload") {
            let mut path = Vec::new();
            while let Some(field) = self.accessor()? {
                path.push(field);
            }
            if path.is_empty() {
                return self.fail("expected a field after `payload`");
            }
            return Ok(Term::Payload(path));
        }
        self.fail("expected a 'literal', headers['name'] or payload.field")
    }
}

impl RoutingKeyExpression {
    /// Parses an expression.
    pub fn parse(source: &str) -> Result<Self, ExpressionError> {
        let mut p = Parser {
            src: source,
            pos: 0,
        };
        let mut terms = vec![p.term()?];
        loop {
            p.skip_ws();
            if p.rest().is_empty() {
                break;
            }
            if !p.eat("+") {
                return p.fail("expected `+`");
            }
            terms.push(p.term()?);
        }
        Ok(RoutingKeyExpression {
            source: source.to_owned(),
            terms,
        })
    }

    /// Evaluates the expression against a message.
    pub fn evaluate(&self, message: &Message) -> Result<String, ExpressionError> {
        let payload = self.payload(message)?;
        let mut out = String::new();
        for term in &self.terms {
            match self.value(term, message, payload.as_ref())? {
                Value::Text(s) => out.push_str(s),
                Value::Header(v) => out.push_str(&v.to_string()),
                Value::Json(serde_json::Value::String(s)) => out.push_str(s),
                Value::Json(other) => out.push_str(&other.to_string()),
            }
        }
        Ok(out)
    }

    /// Evaluates a partition key, typed as SpEL would yield it: a lone header keeps its AMQP
    /// type and a lone payload field its JSON type; a literal, or several terms joined with
    /// `+`, are text.
    pub(crate) fn evaluate_key(&self, message: &Message) -> Result<PartitionKey, ExpressionError> {
        let [term] = self.terms.as_slice() else {
            return self.evaluate(message).map(PartitionKey::Text);
        };
        let payload = self.payload(message)?;
        Ok(match self.value(term, message, payload.as_ref())? {
            Value::Text(s) => PartitionKey::Text(s.to_owned()),
            Value::Header(v) => PartitionKey::Header(v.clone()),
            Value::Json(v) => PartitionKey::Json(v.clone()),
        })
    }

    /// The payload as JSON, if a term reads it.
    fn payload(&self, message: &Message) -> Result<Option<serde_json::Value>, ExpressionError> {
        if !self.reads_payload() {
            return Ok(None);
        }
        serde_json::from_slice(&message.payload)
            .map(Some)
            .map_err(|e| {
                ExpressionError(format!("`{}`: the payload is not JSON ({e})", self.source))
            })
    }

    /// One term's value; `payload` is the parsed payload when a term reads it.
    fn value<'a>(
        &'a self,
        term: &'a Term,
        message: &'a Message,
        payload: Option<&'a serde_json::Value>,
    ) -> Result<Value<'a>, ExpressionError> {
        match term {
            Term::Literal(s) => Ok(Value::Text(s)),
            Term::Header(name) => message.headers.get(name).map(Value::Header).ok_or_else(|| {
                ExpressionError(format!("`{}`: header `{name}` is missing", self.source))
            }),
            Term::Payload(path) => {
                let mut v = payload.expect("parsed when a term reads the payload");
                for field in path {
                    v = v.get(field).ok_or_else(|| {
                        ExpressionError(format!(
                            "`{}`: the payload has no field `{}`",
                            self.source,
                            path.join(".")
                        ))
                    })?;
                }
                Ok(Value::Json(v))
            }
        }
    }

    /// Whether the expression reads the payload.
    pub fn reads_payload(&self) -> bool {
        self.terms.iter().any(|t| matches!(t, Term::Payload(_)))
    }
}

impl fmt::Display for RoutingKeyExpression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_headers_payload_and_concatenation() {
        let m = Message::new(r#"{"order":{"id":7,"region":"eu"}}"#)
            .with_header("type", "created")
            .with_header("n", 3i32);
        let eval = |e: &str| {
            RoutingKeyExpression::parse(e)
                .unwrap()
                .evaluate(&m)
                .unwrap()
        };
        assert_eq!(eval("'fixed'"), "fixed");
        assert_eq!(eval("'it''s'"), "it's");
        assert_eq!(eval(r#""addProduct.x""#), "addProduct.x");
        assert_eq!(eval(r#""say ""hi""""#), r#"say "hi""#);
        assert_eq!(eval(r#""it's " + 'a "b"'"#), r#"it's a "b""#);
        assert_eq!(
            eval(r#"headers["type"] + "." + payload["order"]['id']"#),
            "created.7"
        );
        assert_eq!(eval("headers['type']"), "created");
        assert_eq!(eval("headers.type + '.' + headers['n']"), "created.3");
        assert_eq!(
            eval("payload.order.region + '-' + payload['order']['id']"),
            "eu-7"
        );
    }

    #[test]
    fn syntax_errors_say_where() {
        for (src, what) in [
            ("'open", "unterminated literal"),
            (r#""open'"#, "unterminated literal"),
            ("headers[type]", "expected a quoted name"),
            ("headers", "expected `['name']`"),
            ("payload", "expected a field"),
            ("'a' 'b'", "expected `+`"),
            ("T(java.lang.System).exit(0)", "expected a 'literal'"),
            ("headers['x'", "expected `]`"),
        ] {
            let e = RoutingKeyExpression::parse(src).unwrap_err().to_string();
            assert!(e.contains(what), "{src}: {e}");
            assert!(e.contains("position"), "{e}");
        }
    }

    #[test]
    fn missing_values_are_errors_not_null() {
        let m = Message::new("{}");
        let e = RoutingKeyExpression::parse("headers['type']").unwrap();
        assert!(
            e.evaluate(&m)
                .unwrap_err()
                .to_string()
                .contains("header `type` is missing")
        );
        let e = RoutingKeyExpression::parse("payload.kind").unwrap();
        assert!(
            e.evaluate(&m)
                .unwrap_err()
                .to_string()
                .contains("no field `kind`")
        );
        let e = RoutingKeyExpression::parse("payload.kind").unwrap();
        let bad = Message::new("not json");
        assert!(
            e.evaluate(&bad)
                .unwrap_err()
                .to_string()
                .contains("not JSON")
        );
    }
}
