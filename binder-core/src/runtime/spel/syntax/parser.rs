//! The parser of both languages, over one lexer and one set of term rules.
//!
//! ```text
//! cond   := and ('||' and)*
//! and    := unary ('&&' unary)*
//! unary  := '!' unary | '(' cond ')' | cmp
//! cmp    := header ('==' | '!=') ('literal' | null)
//!
//! expr   := term ('+' term)*
//! term   := 'literal' | header | payload
//!
//! header  := headers '[' 'literal' ']' | headers '.' name
//! payload := payload ('[' 'literal' ']' | '.' name)+
//! ```
//!
//! String literals are SpEL's: `'text'` or `"text"`, a doubled quote standing for one
//! (`'it''s'`, `"say ""hi"""`). In a condition a header is compared with a literal or
//! `null` (absent); in an expression terms are concatenated.

use super::ast::{Condition, Term};
use super::error::{Expected, Language, SyntaxError};
use super::lexer::{Kind, Lexer};

/// Parses a listener condition.
pub fn condition(src: &str) -> Result<Condition, SyntaxError> {
    let mut p = Parser::new(src, Language::Condition);
    let cond = p.or()?;
    p.end()?;
    Ok(cond)
}

/// Parses a routing-key expression into its terms (at least one).
pub fn expression(src: &str) -> Result<Vec<Term>, SyntaxError> {
    let mut p = Parser::new(src, Language::Expression);
    let mut terms = vec![p.term()?];
    while p.eat(&Kind::Plus)? {
        terms.push(p.term()?);
    }
    if !p.at_end()? {
        return p.fail(Expected::Token("+"));
    }
    Ok(terms)
}

fn syntax_error(language: Language, src: &str, position: usize, expected: Expected) -> SyntaxError {
    SyntaxError {
        language,
        source: src.to_owned(),
        position,
        expected,
    }
}

struct Parser<'a> {
    src: &'a str,
    language: Language,
    lexer: Lexer<'a>,
}

impl<'a> Parser<'a> {
    fn new(src: &'a str, language: Language) -> Self {
        Parser {
            src,
            language,
            lexer: Lexer::new(src),
        }
    }

    fn error(&self, position: usize, expected: Expected) -> SyntaxError {
        syntax_error(self.language, self.src, position, expected)
    }

    /// Fails where the next token starts.
    fn fail<T>(&mut self, expected: Expected) -> Result<T, SyntaxError> {
        let position = self.lexer.position();
        Err(self.error(position, expected))
    }

    fn peek(&mut self) -> Result<&Kind, SyntaxError> {
        let (language, src) = (self.language, self.src);
        match self.lexer.peek() {
            Ok(t) => Ok(&t.kind),
            Err((position, expected)) => Err(syntax_error(language, src, position, expected)),
        }
    }

    fn take(&mut self) -> Result<Kind, SyntaxError> {
        match self.lexer.next_token() {
            Ok(t) => Ok(t.kind),
            Err((position, expected)) => Err(self.error(position, expected)),
        }
    }

    /// Takes the next token if it is `kind`.
    fn eat(&mut self, kind: &Kind) -> Result<bool, SyntaxError> {
        if self.peek()? == kind {
            self.take()?;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// Takes the next token if it is the name `name`.
    fn eat_name(&mut self, name: &str) -> Result<bool, SyntaxError> {
        if matches!(self.peek()?, Kind::Ident(n) if n == name) {
            self.take()?;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    fn expect(&mut self, kind: &Kind, text: &'static str) -> Result<(), SyntaxError> {
        if self.eat(kind)? {
            Ok(())
        } else {
            self.fail(Expected::Token(text))
        }
    }

    fn at_end(&mut self) -> Result<bool, SyntaxError> {
        Ok(*self.peek()? == Kind::End)
    }

    fn end(&mut self) -> Result<(), SyntaxError> {
        if self.at_end()? {
            Ok(())
        } else {
            self.fail(Expected::End)
        }
    }

    fn literal(&mut self) -> Result<String, SyntaxError> {
        if let Kind::Str(_) = self.peek()? {
            let Kind::Str(text) = self.take()? else {
                unreachable!("peeked a literal")
            };
            return Ok(text);
        }
        self.fail(Expected::Quoted)
    }

    fn name(&mut self) -> Result<String, SyntaxError> {
        if let Kind::Ident(_) = self.peek()? {
            let Kind::Ident(name) = self.take()? else {
                unreachable!("peeked a name")
            };
            return Ok(name);
        }
        self.fail(Expected::Name)
    }

    /// `['name']` or `.name`, if there is one.
    fn accessor(&mut self) -> Result<Option<String>, SyntaxError> {
        if self.eat(&Kind::LBracket)? {
            let name = self.literal()?;
            self.expect(&Kind::RBracket, "]")?;
            Ok(Some(name))
        } else if self.eat(&Kind::Dot)? {
            self.name().map(Some)
        } else {
            Ok(None)
        }
    }

    /// What follows `headers`: the header's name.
    fn header_name(&mut self) -> Result<String, SyntaxError> {
        match self.accessor()? {
            Some(name) => Ok(name),
            None => self.fail(Expected::HeaderAccessor),
        }
    }

    fn term(&mut self) -> Result<Term, SyntaxError> {
        if let Kind::Str(_) = self.peek()? {
            return self.literal().map(Term::Literal);
        }
        if self.eat_name("headers")? {
            return self.header_name().map(Term::Header);
        }
        if self.eat_name("payload")? {
            let mut path = Vec::new();
            while let Some(field) = self.accessor()? {
                path.push(field);
            }
            if path.is_empty() {
                return self.fail(Expected::PayloadField);
            }
            return Ok(Term::Payload(path));
        }
        self.fail(Expected::Term)
    }

    fn or(&mut self) -> Result<Condition, SyntaxError> {
        let mut left = self.and()?;
        while self.eat(&Kind::OrOr)? {
            left = Condition::Or(Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Condition, SyntaxError> {
        let mut left = self.unary()?;
        while self.eat(&Kind::AndAnd)? {
            left = Condition::And(Box::new(left), Box::new(self.unary()?));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Condition, SyntaxError> {
        if self.eat(&Kind::Bang)? {
            return Ok(Condition::Not(Box::new(self.unary()?)));
        }
        if self.eat(&Kind::LParen)? {
            let inner = self.or()?;
            self.expect(&Kind::RParen, ")")?;
            return Ok(inner);
        }
        if !self.eat_name("headers")? {
            return self.fail(Expected::HeaderReference);
        }
        let name = self.header_name()?;
        let negate = if self.eat(&Kind::EqEq)? {
            false
        } else if self.eat(&Kind::NotEq)? {
            true
        } else {
            return self.fail(Expected::Comparison);
        };
        let value = if self.eat_name("null")? {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_languages_share_terms() {
        assert_eq!(
            condition("headers.type == 'a'").unwrap(),
            condition("headers['type'] == 'a'").unwrap()
        );
        assert_eq!(
            expression("'k.' + headers.type + payload['a'].b").unwrap(),
            vec![
                Term::Literal("k.".into()),
                Term::Header("type".into()),
                Term::Payload(vec!["a".into(), "b".into()]),
            ]
        );
    }

    #[test]
    fn errors_name_the_language_and_position() {
        let e = condition("headers['type'] = 'created'").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid condition `headers['type'] = 'created'`: expected `==` or `!=` at position 16"
        );
        let e = expression("'a' 'b'").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid expression `'a' 'b'`: expected `+` at position 4"
        );
        assert_eq!(
            expression("headers[").unwrap_err().expected,
            Expected::Quoted
        );
    }
}
