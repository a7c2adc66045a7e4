//! The binder conformance kit: one set of behavioural cases that every binder must pass.
//!
//! Cases are written once against the binder SPI and the runtime ([`cases`]), and
//! instantiated per binder with [`conformance_suite!`], one `#[test]` per case and binder.
//! A binder declares what it may legitimately not promise in its [`kit::Capabilities`]; a
//! case that does not apply is skipped with the reason printed, never deleted.
//! `tests/README.md` lists the cases.

pub mod cases;
pub mod channels;
pub mod kit;
pub mod targets;
