//! What a binder says of its connection to its middleware ([`super::Binder::connection_state`]):
//! for health reports and metrics.

use std::fmt;

/// The state of a binder's connection to its middleware.
///
/// ```
/// use binder_core::binder::ConnectionState;
///
/// let lost = ConnectionState::Down { reason: "connection reset".into() };
/// assert!(!lost.is_up());
/// assert_eq!(lost.as_str(), "down");
/// assert_eq!(ConnectionState::worst([ConnectionState::Up, lost.clone()]), lost);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectionState {
    /// Connected (or, for an in-process broker, always there).
    Up,
    /// Nothing opened yet, or closed on purpose: the binder connects on next use.
    Idle,
    /// Connecting, or reconnecting after a loss, right now.
    Connecting,
    /// The connection failed or was lost, and is not open again yet.
    Down {
        /// Why.
        reason: String,
    },
    /// The binder does not tell (the default of [`super::Binder::connection_state`]).
    Unknown,
}

impl ConnectionState {
    /// Whether the binder can carry messages now (`Up` or `Idle`).
    pub fn is_up(&self) -> bool {
        matches!(self, ConnectionState::Up | ConnectionState::Idle)
    }

    /// A short lower-case name: `up`, `idle`, `connecting`, `down`, `unknown`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ConnectionState::Up => "up",
            ConnectionState::Idle => "idle",
            ConnectionState::Connecting => "connecting",
            ConnectionState::Down { .. } => "down",
            ConnectionState::Unknown => "unknown",
        }
    }

    /// Every name [`ConnectionState::as_str`] gives, in that order.
    pub const NAMES: [&'static str; 5] = ["up", "idle", "connecting", "down", "unknown"];

    fn rank(&self) -> u8 {
        match self {
            ConnectionState::Idle => 0,
            ConnectionState::Up => 1,
            ConnectionState::Unknown => 2,
            ConnectionState::Connecting => 3,
            ConnectionState::Down { .. } => 4,
        }
    }

    /// The worst of several states (of a binder's several connections): `Down` over
    /// `Connecting` over `Unknown` over `Up` over `Idle`; the reasons of several `Down`
    /// are joined. `Idle` when there are none.
    pub fn worst(states: impl IntoIterator<Item = ConnectionState>) -> ConnectionState {
        let mut worst = ConnectionState::Idle;
        for state in states {
            match (&mut worst, state) {
                (ConnectionState::Down { reason }, ConnectionState::Down { reason: more }) => {
                    reason.push_str("; ");
                    reason.push_str(&more);
                }
                (w, s) if s.rank() > w.rank() => *w = s,
                _ => {}
            }
        }
        worst
    }
}

impl fmt::Display for ConnectionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectionState::Down { reason } => write!(f, "down: {reason}"),
            other => f.write_str(other.as_str()),
        }
    }
}
