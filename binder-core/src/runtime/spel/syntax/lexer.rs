//! The lexer: the text as tokens, read one at a time as the parser asks for them (so the
//! first problem reported is the first one in the text).

use super::error::Expected;

/// What a token is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A string literal, its quotes removed and doubled quotes undone.
    Str(String),
    /// A name: letters, digits, `_` and `-` (`headers`, `payload`, `null`, a field).
    Ident(String),
    /// `[`
    LBracket,
    /// `]`
    RBracket,
    /// `(`
    LParen,
    /// `)`
    RParen,
    /// `.`
    Dot,
    /// `+`
    Plus,
    /// `==`
    EqEq,
    /// `!=`
    NotEq,
    /// `!`
    Bang,
    /// `&&`
    AndAnd,
    /// `||`
    OrOr,
    /// Any other character: the parser says what it expected instead.
    Other(char),
    /// The end of the text.
    End,
}

/// A token and the byte position where it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// What it is.
    pub kind: Kind,
    /// Where it starts.
    pub position: usize,
}

/// Why [`string_literal`] read no literal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiteralError {
    /// The text does not start with `'` or `"`.
    NotQuoted,
    /// The closing quote is missing.
    Unterminated,
}

/// Reads the SpEL string literal at the start of `src`: `'text'` or `"text"`. Inside, the
/// quote that opened it is written twice to stand for itself (`'it''s'`, `"say ""hi"""`),
/// and the other quote is plain text. Returns the text and the literal's length in `src`.
pub fn string_literal(src: &str) -> Result<(String, usize), LiteralError> {
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

/// The tokens of a text, with one token of look-ahead.
#[derive(Debug)]
pub struct Lexer<'a> {
    src: &'a str,
    pos: usize,
    peeked: Option<Token>,
}

impl<'a> Lexer<'a> {
    /// Tokens of `src`, from its start.
    pub fn new(src: &'a str) -> Self {
        Lexer {
            src,
            pos: 0,
            peeked: None,
        }
    }

    /// The next token, left in place. Fails on a literal without its closing quote.
    pub fn peek(&mut self) -> Result<&Token, (usize, Expected)> {
        if self.peeked.is_none() {
            self.peeked = Some(self.read()?);
        }
        Ok(self.peeked.as_ref().expect("just read"))
    }

    /// The next token, taken.
    pub fn next_token(&mut self) -> Result<Token, (usize, Expected)> {
        self.peek()?;
        Ok(self.peeked.take().expect("just peeked"))
    }

    /// Where the next token starts (after white space), or the end of the text.
    pub fn position(&mut self) -> usize {
        match &self.peeked {
            Some(t) => t.position,
            None => {
                self.skip_ws();
                self.pos
            }
        }
    }

    fn skip_ws(&mut self) {
        let rest = self.src[self.pos..].trim_start();
        self.pos = self.src.len() - rest.len();
    }

    fn read(&mut self) -> Result<Token, (usize, Expected)> {
        self.skip_ws();
        let position = self.pos;
        let rest = &self.src[position..];
        let Some(c) = rest.chars().next() else {
            return Ok(Token {
                kind: Kind::End,
                position,
            });
        };
        let (kind, len) = match c {
            '\'' | '"' => match string_literal(rest) {
                Ok((text, len)) => (Kind::Str(text), len),
                Err(_) => return Err((position, Expected::ClosingQuote)),
            },
            c if is_name_char(c) => {
                let len = rest.find(|c| !is_name_char(c)).unwrap_or(rest.len());
                (Kind::Ident(rest[..len].to_owned()), len)
            }
            _ => {
                let two = rest.get(..2);
                match (c, two) {
                    (_, Some("==")) => (Kind::EqEq, 2),
                    (_, Some("!=")) => (Kind::NotEq, 2),
                    (_, Some("&&")) => (Kind::AndAnd, 2),
                    (_, Some("||")) => (Kind::OrOr, 2),
                    ('!', _) => (Kind::Bang, 1),
                    ('[', _) => (Kind::LBracket, 1),
                    (']', _) => (Kind::RBracket, 1),
                    ('(', _) => (Kind::LParen, 1),
                    (')', _) => (Kind::RParen, 1),
                    ('.', _) => (Kind::Dot, 1),
                    ('+', _) => (Kind::Plus, 1),
                    (other, _) => (Kind::Other(other), other.len_utf8()),
                }
            }
        };
        self.pos += len;
        Ok(Token { kind, position })
    }
}

fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '-'
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn tokens_with_positions() {
        let src = " headers['a-b'] != null && !(x) || 'y' + p.q";
        let mut l = Lexer::new(src);
        let mut kinds = Vec::new();
        loop {
            let t = l.next_token().unwrap();
            if t.kind == Kind::End {
                assert_eq!(t.position, src.len());
                break;
            }
            kinds.push(t.kind);
        }
        assert_eq!(
            kinds,
            vec![
                Kind::Ident("headers".into()),
                Kind::LBracket,
                Kind::Str("a-b".into()),
                Kind::RBracket,
                Kind::NotEq,
                Kind::Ident("null".into()),
                Kind::AndAnd,
                Kind::Bang,
                Kind::LParen,
                Kind::Ident("x".into()),
                Kind::RParen,
                Kind::OrOr,
                Kind::Str("y".into()),
                Kind::Plus,
                Kind::Ident("p".into()),
                Kind::Dot,
                Kind::Ident("q".into()),
            ]
        );
        assert_eq!(Lexer::new("a = 'open").next_token().unwrap().position, 0);
        let mut l = Lexer::new("a = 'open");
        l.next_token().unwrap();
        assert_eq!(l.next_token().unwrap().kind, Kind::Other('='));
        assert_eq!(l.next_token(), Err((4, Expected::ClosingQuote)));
    }
}
