//! The application's health: starting (and what it waits for), up, or down.

use std::fmt;
use std::sync::Arc;

use tokio::sync::watch;

/// Where the application is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthStatus {
    /// Starting; `waiting` says what it waits for (e.g. an unreachable broker).
    Starting {
        /// What startup waits for, if anything.
        waiting: Option<String>,
    },
    /// Started: bindings are open.
    Up,
    /// Stopped, or failed to start.
    Down {
        /// Why.
        reason: String,
    },
}

impl fmt::Display for HealthStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HealthStatus::Starting { waiting: None } => f.write_str("starting"),
            HealthStatus::Starting { waiting: Some(w) } => write!(f, "starting, waiting: {w}"),
            HealthStatus::Up => f.write_str("up"),
            HealthStatus::Down { reason } => write!(f, "down: {reason}"),
        }
    }
}

/// A handle on the application's health, available before it starts
/// ([`super::AppBuilder::health`]) so a service can report that it waits for its broker.
/// Cheap to clone.
///
/// ```
/// use binder_core::runtime::{Health, HealthStatus};
///
/// let health = Health::default();
/// assert_eq!(health.status(), HealthStatus::Starting { waiting: None });
/// assert!(!health.is_ready());
/// ```
#[derive(Debug, Clone)]
pub struct Health {
    status: Arc<watch::Sender<HealthStatus>>,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            status: Arc::new(watch::Sender::new(HealthStatus::Starting { waiting: None })),
        }
    }
}

impl Health {
    /// The current status.
    pub fn status(&self) -> HealthStatus {
        self.status.borrow().clone()
    }

    /// Whether the application is up (readiness).
    pub fn is_ready(&self) -> bool {
        *self.status.borrow() == HealthStatus::Up
    }

    /// Waits until the status satisfies `f`, and returns it.
    pub async fn wait_for(&self, f: impl Fn(&HealthStatus) -> bool) -> HealthStatus {
        let mut rx = self.status.subscribe();
        match rx.wait_for(|s| f(s)).await {
            Ok(s) => s.clone(),
            // The sender lives in `self`: it cannot be gone while we wait.
            Err(_) => self.status(),
        }
    }

    pub(crate) fn set(&self, status: HealthStatus) {
        self.status.send_replace(status);
    }
}
