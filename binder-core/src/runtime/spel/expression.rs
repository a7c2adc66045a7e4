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
//! same lexer and parser ([`super::syntax`]) serve listener conditions. A header value renders as
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
use std::sync::Arc;

use super::syntax::ast::Term;
use super::syntax::error::SyntaxError;
use super::syntax::parser;
use crate::message::{HeaderValue, Message};

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

/// Why an expression does not parse, or cannot be evaluated against a message.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ExpressionError {
    /// The text does not parse (with the position where it stopped).
    #[error(transparent)]
    Syntax(#[from] SyntaxError),
    /// A header the expression reads is not on the message.
    #[error("`{expression}`: header `{header}` is missing")]
    MissingHeader {
        /// The expression.
        expression: String,
        /// The header.
        header: String,
    },
    /// A payload field the expression reads is not in the payload.
    #[error("`{expression}`: the payload has no field `{path}`")]
    MissingField {
        /// The expression.
        expression: String,
        /// The field's path, dotted.
        path: String,
    },
    /// The expression reads the payload, which is not JSON.
    #[error("`{expression}`: the payload is not JSON ({source})")]
    NotJson {
        /// The expression.
        expression: String,
        /// The JSON parser's error.
        source: Arc<serde_json::Error>,
    },
}

impl RoutingKeyExpression {
    /// Parses an expression.
    pub fn parse(source: &str) -> Result<Self, ExpressionError> {
        Ok(RoutingKeyExpression {
            source: source.to_owned(),
            terms: parser::expression(source)?,
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
            .map_err(|e| ExpressionError::NotJson {
                expression: self.source.clone(),
                source: Arc::new(e),
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
                ExpressionError::MissingHeader {
                    expression: self.source.clone(),
                    header: name.clone(),
                }
            }),
            Term::Payload(path) => {
                let mut v = payload.expect("parsed when a term reads the payload");
                for field in path {
                    v = v.get(field).ok_or_else(|| ExpressionError::MissingField {
                        expression: self.source.clone(),
                        path: path.join("."),
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
