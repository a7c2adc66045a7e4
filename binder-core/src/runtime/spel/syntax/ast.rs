//! What the parser builds: conditions over headers, and the terms of an expression.

/// A parsed listener condition.
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

/// One term of an expression; an expression concatenates its terms with `+`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Term {
    /// `'text'`.
    Literal(String),
    /// `headers['name']` or `headers.name`.
    Header(String),
    /// `payload.field.field` or `payload['field']`: a path into the JSON payload.
    Payload(Vec<String>),
}
