//! Syntax errors: what was expected, where, in which language.

use std::fmt;

/// The language a text was parsed as; it names the text in messages and chooses their
/// wording where the two languages have always spoken differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// A listener condition (`headers['type'] == 'created'`).
    Condition,
    /// A routing-key or partition-key expression (`'orders.' + headers['region']`).
    Expression,
}

/// What the parser expected where it stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    /// A quoted literal (a condition's value, or a name in brackets).
    Quoted,
    /// The closing quote of a literal.
    ClosingQuote,
    /// `==` or `!=` after a header in a condition.
    Comparison,
    /// `headers['name']` at the start of a comparison.
    HeaderReference,
    /// `['name']` (or `.name`) after `headers`.
    HeaderAccessor,
    /// A field after `payload`.
    PayloadField,
    /// A name after `.`.
    Name,
    /// A `'literal'`, `headers['name']` or `payload.field` term.
    Term,
    /// This punctuation.
    Token(&'static str),
    /// The end of the text.
    End,
}

/// Why a text does not parse, with the byte position where it stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    /// The language it was parsed as.
    pub language: Language,
    /// The whole text.
    pub source: String,
    /// The byte position where parsing stopped.
    pub position: usize,
    /// What was expected there.
    pub expected: Expected,
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let condition = self.language == Language::Condition;
        let what = match &self.expected {
            Expected::Quoted if condition => "expected a 'quoted' value",
            Expected::Quoted => "expected a quoted name",
            Expected::ClosingQuote if condition => "unterminated 'quoted' value",
            Expected::ClosingQuote => "unterminated literal",
            Expected::Comparison => "expected `==` or `!=`",
            Expected::HeaderReference => "expected headers['name']",
            Expected::HeaderAccessor => "expected `['name']` after `headers`",
            Expected::PayloadField => "expected a field after `payload`",
            Expected::Name => "expected a name",
            Expected::Term => "expected a 'literal', headers['name'] or payload.field",
            Expected::Token(t) => {
                return write!(
                    f,
                    "{}expected `{t}` at position {}",
                    self.prefix(),
                    self.position
                );
            }
            Expected::End => "unexpected text",
        };
        write!(f, "{}{what} at position {}", self.prefix(), self.position)
    }
}

impl SyntaxError {
    fn prefix(&self) -> String {
        let noun = match self.language {
            Language::Condition => "condition",
            Language::Expression => "expression",
        };
        format!("invalid {noun} `{}`: ", self.source)
    }
}

impl std::error::Error for SyntaxError {}
