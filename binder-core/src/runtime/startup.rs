//! Why an application did not start: every problem found, each as text that names its
//! binding, with the typed cause behind it.

use std::fmt;

use super::binders::BinderLookupError;
use super::output::OutputError;
use crate::binder::BinderError;

/// One reason an application cannot start.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StartupProblem {
    /// A check made before anything connects (listeners, conditions, state, bindings in use,
    /// settings), as text that names the binding.
    #[error("{0}")]
    Check(String),
    /// No binder could be had for a binding.
    #[error(transparent)]
    Binder(#[from] BinderLookupError),
    /// An output binding could not open.
    #[error(transparent)]
    Output(#[from] OutputError),
    /// The management server could not start.
    #[cfg(feature = "management")]
    #[error(transparent)]
    Management(#[from] super::management::ManagementError),
    /// An input binding's topology or dead-letter producer could not be set up.
    #[error("binding `{binding}`: {source}")]
    Input {
        /// The input binding.
        binding: String,
        /// The binder's error.
        source: BinderError,
    },
}

/// Why an application did not start. Lists every problem found.
#[derive(Clone, thiserror::Error)]
#[error("the application cannot start:{}", self.problems.iter().map(|p| format!("\n  - {p}")).collect::<String>())]
pub struct StartupError {
    /// Each problem, naming the binding, as a person reads it.
    pub problems: Vec<String>,
    causes: Vec<StartupProblem>,
}

impl StartupError {
    /// An error with these problems.
    pub fn new(causes: Vec<StartupProblem>) -> Self {
        StartupError {
            problems: causes.iter().map(ToString::to_string).collect(),
            causes,
        }
    }

    /// Each problem with its typed cause, in the order of [`StartupError::problems`].
    pub fn causes(&self) -> &[StartupProblem] {
        &self.causes
    }
}

/// Shows the same text as `Display`, so `?` in a `main` returning `Result<_, Box<dyn Error>>`
/// prints the problems as a person reads them.
impl fmt::Debug for StartupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
