//! The SpEL subset the configuration and the macros speak: one lexer and parser
//! ([`syntax`]) for listener conditions ([`condition`]) and routing-key and partition-key
//! expressions ([`expression`]), which add their evaluation.

pub(crate) mod condition;
pub(crate) mod expression;
pub(crate) mod syntax;
