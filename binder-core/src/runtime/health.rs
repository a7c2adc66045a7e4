//! The application's health: starting (and what it waits for), up, or down.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

/// Where the application is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthStatus {
    /// Starting; `waiting` says what it waits for (e.g. an unreachable broker).
    Starting {
        /// What startup waits for, if anything.
        waiting: Option<String>,
    },
    /// Started, and every input binding meant to run is consuming.
    Up,
    /// Stopped, failed to start, or (`reason` says which) an input binding is not consuming
    /// because its subscription was lost or refused; it is `Up` again once they all consume.
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

/// Keeps a running application's [`Health`] in step with its input bindings: `Down`, naming
/// each binding and why, while any of them is recovering a lost or refused subscription;
/// `Up` again once none is.
#[derive(Debug, Clone)]
pub(crate) struct HealthTracker {
    health: Health,
    state: Arc<Mutex<Tracked>>,
}

#[derive(Debug, Default)]
struct Tracked {
    /// Whether startup is over (before, `start` owns the status).
    started: bool,
    /// Whether the application shut down (the status stays `Down`).
    closed: bool,
    /// Bindings (and queues) not consuming, with why.
    recovering: BTreeMap<String, String>,
}

impl HealthTracker {
    pub(crate) fn new(health: Health) -> Self {
        HealthTracker {
            health,
            state: Arc::new(Mutex::new(Tracked::default())),
        }
    }

    /// The handle it keeps in step.
    pub(crate) fn health(&self) -> Health {
        self.health.clone()
    }

    fn update(&self, change: impl FnOnce(&mut Tracked)) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        change(&mut state);
        if !state.started || state.closed {
            return;
        }
        if state.recovering.is_empty() {
            self.health.set(HealthStatus::Up);
        } else {
            let reason = state
                .recovering
                .iter()
                .map(|(who, why)| format!("{who} is not consuming: {why}"))
                .collect::<Vec<_>>()
                .join("; ");
            self.health.set(HealthStatus::Down { reason });
        }
    }

    /// `who` (a binding and queue) is not consuming, because of `why`.
    pub(crate) fn recovering(&self, who: &str, why: &str) {
        self.update(|s| {
            s.recovering.insert(who.to_owned(), why.to_owned());
        });
    }

    /// `who` consumes again, or no longer means to (paused, stopped).
    pub(crate) fn settled(&self, who: &str) {
        self.update(|s| {
            s.recovering.remove(who);
        });
    }

    /// Startup is over: the status follows the bindings from now on.
    pub(crate) fn started(&self) {
        self.update(|s| s.started = true);
    }

    /// The application shut down, or failed to start: the status is `Down` for good.
    pub(crate) fn closed(&self, reason: String) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.closed = true;
        self.health.set(HealthStatus::Down { reason });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_follows_recovering_bindings_once_started() {
        let health = Health::default();
        let tracker = HealthTracker::new(health.clone());
        tracker.recovering("binding `a` (queue `a.g`)", "connection lost");
        assert_eq!(health.status(), HealthStatus::Starting { waiting: None });
        tracker.started();
        assert_eq!(
            health.status(),
            HealthStatus::Down {
                reason: "binding `a` (queue `a.g`) is not consuming: connection lost".into()
            }
        );
        tracker.recovering("binding `b` (queue `b.g`)", "refused");
        tracker.settled("binding `a` (queue `a.g`)");
        assert!(
            matches!(health.status(), HealthStatus::Down { reason } if reason.starts_with("binding `b`"))
        );
        tracker.settled("binding `b` (queue `b.g`)");
        assert_eq!(health.status(), HealthStatus::Up);
        tracker.closed("shut down".into());
        tracker.recovering("binding `a` (queue `a.g`)", "late");
        assert_eq!(
            health.status(),
            HealthStatus::Down {
                reason: "shut down".into()
            }
        );
    }
}
