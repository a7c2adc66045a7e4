//! Every misuse of the macros fails to compile with a message a newcomer understands.
//! Expected messages live in `tests/ui/*.stderr`; after a deliberate change, regenerate them
//! with `TRYBUILD=overwrite cargo test -p stream-macros --test compile_fail` and review.

#[test]
fn misuses_fail_to_compile() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
