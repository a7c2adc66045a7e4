//! `streamctl` as an operator runs it, for the tests of its verbs.

use std::process::{Command, Output};

/// Runs the `streamctl` built for these tests with `args`, without the environment variables
/// that would give it another configuration than the one on its command line.
pub fn streamctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_streamctl"))
        .args(args)
        .env_remove("STREAM_CONFIG")
        .env_remove("SPRING_PROFILES_ACTIVE")
        .env_remove("SPRING_APPLICATION_JSON")
        .output()
        .unwrap()
}
