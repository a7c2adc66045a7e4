//! The syntax of the SpEL subset: a lexer, the syntax trees and one parser for both
//! languages built on it (listener conditions and routing-key expressions).
//!
//! This folder has no dependencies outside itself: the macros crate includes it (with
//! `#[path]`), so a condition that does not parse is a compile error, with the same parser
//! the runtime uses.

pub mod ast;
pub mod error;
pub mod lexer;
pub mod parser;
