//! Binding states and their control.

use std::fmt;

/// The state of a binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BindingState {
    /// Consuming (or, for outputs, sending).
    Running,
    /// Not taking new deliveries; the subscription (and its prefetched messages) stays.
    Paused,
    /// Subscription cancelled; unsettled deliveries went back to the queue.
    Stopped,
    /// Meant to run, but not consuming: the broker ended its subscription or refused a new
    /// one, and it subscribes again by itself (reported, never asked for).
    Recovering,
}

impl fmt::Display for BindingState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BindingState::Running => "running",
            BindingState::Paused => "paused",
            BindingState::Stopped => "stopped",
            BindingState::Recovering => "recovering",
        })
    }
}

/// A lifecycle request that does not apply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// No binding of that name.
    #[error("no binding `{0}`")]
    Unknown(String),
    /// Outputs can be stopped and started, not paused.
    #[error("binding `{0}` is an output: outputs can be stopped and started, not paused")]
    NotPausable(String),
    /// The application is shutting down.
    #[error("the application is shutting down")]
    ShuttingDown,
}
