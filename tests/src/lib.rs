//! Coming in a later issue.
