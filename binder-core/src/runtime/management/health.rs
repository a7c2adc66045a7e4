//! The health endpoint's documents, in Spring Boot's shape: `{"status": "UP", "components":
//! {...}}`, with the statuses `UP`, `DOWN`, `OUT_OF_SERVICE` and `UNKNOWN`.

use serde_json::{Map, Value, json};

use super::super::control::Control;
use super::super::health::HealthStatus;
use crate::binder::ConnectionState;

/// A Spring Boot health status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Up,
    Unknown,
    OutOfService,
    Down,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Up => "UP",
            Status::Unknown => "UNKNOWN",
            Status::OutOfService => "OUT_OF_SERVICE",
            Status::Down => "DOWN",
        }
    }

    /// Whether the endpoint answers 503 for it (Spring Boot's default mapping).
    pub(crate) fn unavailable(self) -> bool {
        matches!(self, Status::Down | Status::OutOfService)
    }

    /// Spring Boot's order, worst first: DOWN, OUT_OF_SERVICE, UP, UNKNOWN.
    fn severity(self) -> u8 {
        match self {
            Status::Down => 3,
            Status::OutOfService => 2,
            Status::Up => 1,
            Status::Unknown => 0,
        }
    }

    fn aggregate(all: impl IntoIterator<Item = Status>) -> Status {
        all.into_iter()
            .max_by_key(|s| s.severity())
            .unwrap_or(Status::Unknown)
    }
}

/// The bindings' component: the application's [`HealthStatus`].
fn bindings(status: &HealthStatus) -> (Status, Value) {
    match status {
        HealthStatus::Up => (Status::Up, json!({"status": "UP"})),
        HealthStatus::Starting { waiting } => (
            Status::OutOfService,
            json!({"status": "OUT_OF_SERVICE", "details": {"starting": true, "waiting": waiting}}),
        ),
        HealthStatus::Down { reason } => (
            Status::Down,
            json!({"status": "DOWN", "details": {"reason": reason}}),
        ),
    }
}

fn binder_status(state: &ConnectionState) -> Status {
    match state {
        ConnectionState::Up | ConnectionState::Idle => Status::Up,
        ConnectionState::Connecting | ConnectionState::Down { .. } => Status::Down,
        ConnectionState::Unknown => Status::Unknown,
    }
}

/// The binders' component: each binder's connection state.
fn binders(control: &Control) -> (Status, Value) {
    let mut components = Map::new();
    let mut statuses = Vec::new();
    for (name, binder) in &control.binders {
        let state = binder.connection_state();
        let status = binder_status(&state);
        statuses.push(status);
        let mut details = Map::new();
        details.insert("type".into(), binder.binder_type().into());
        details.insert("connection".into(), state.as_str().into());
        if let ConnectionState::Down { reason } = &state {
            details.insert("reason".into(), reason.as_str().into());
        }
        details.insert("describe".into(), binder.describe().into());
        components.insert(
            name.clone(),
            json!({"status": status.as_str(), "details": details}),
        );
    }
    let status = Status::aggregate(statuses);
    (
        status,
        json!({"status": status.as_str(), "components": components}),
    )
}

/// The overall health and its document; `details` adds the components.
pub(crate) fn overall(
    status: &HealthStatus,
    control: Option<&Control>,
    details: bool,
) -> (Status, Value) {
    let (bindings_status, bindings_doc) = bindings(status);
    let mut all = vec![bindings_status];
    let mut components = Map::new();
    components.insert("bindings".into(), bindings_doc);
    if let Some(control) = control {
        let (binders_status, binders_doc) = binders(control);
        all.push(binders_status);
        components.insert("binders".into(), binders_doc);
    }
    let (live, _) = liveness();
    components.insert("livenessState".into(), json!({"status": live.as_str()}));
    let (ready, _) = readiness(status);
    components.insert("readinessState".into(), json!({"status": ready.as_str()}));
    let overall = Status::aggregate(all);
    let doc = if details {
        json!({"status": overall.as_str(), "components": components})
    } else {
        json!({"status": overall.as_str()})
    };
    (overall, doc)
}

/// Liveness: up while the process serves (a broker outage is not cured by a restart).
pub(crate) fn liveness() -> (Status, Value) {
    (Status::Up, json!({"status": "UP"}))
}

/// Readiness: up only while the application is up (started, every input consuming).
pub(crate) fn readiness(status: &HealthStatus) -> (Status, Value) {
    let s = if *status == HealthStatus::Up {
        Status::Up
    } else {
        Status::OutOfService
    };
    (s, json!({"status": s.as_str()}))
}
