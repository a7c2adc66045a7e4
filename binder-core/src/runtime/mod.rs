//! The runtime: an application built from a configuration and handlers, consuming through
//! binders, with retries, dead-lettering, lifecycle control, observers and graceful shutdown.
//!
//! The macros of `stream-macros` only generate calls to this API; it is public so handlers
//! can also be registered by hand.
//!
//! Its modules depend on each other in one direction (the test
//! `binder-core/tests/module_cycles.rs` reads the sources and fails on a cycle):
//!
//! ```text
//! service → builder → start → running → control → output/ → binders, patience → health
//!              │        │ ├─→ input/ (queue_loop → delivery → route, failure) → handler, output/
//!              │        │ ├─→ check → output/, spel/, startup
//!              │        │ └─→ startup (StartupError) → binders, output/
//!              └────────┴───→ blueprint → declare → handler → bindings → output/
//! management/ (feature `management`; start, running, startup and builder use it):
//!     mod (server, router) → bindings, health, metrics → control, health, observe
//! output/ (publisher → binding → routing → error) → partition → spel/
//! spel/ (condition, expression → syntax/: parser → lexer, ast, error)
//! leaves: observe → lifecycle, error; health, inflight, retry, trace, panics, logging
//! ```

mod binders;
mod bindings;
mod blueprint;
mod builder;
mod check;
mod control;
mod declare;
mod document;
mod error;
pub mod handler;
mod health;
mod inflight;
mod input;
mod lifecycle;
mod logging;
#[cfg(feature = "management")]
mod management;
mod observe;
mod output;
mod panics;
mod partition;
mod patience;
mod retry;
mod running;
mod service;
mod spel;
mod start;
mod startup;
mod trace;

pub use binders::BinderLookupError;
pub use bindings::{Context, InputBinding, Out, OutputBinding, Sink, Source, State, processor};
pub use builder::{App, AppBuilder};
pub use declare::{ListenerDef, ListenerRegistration, MakeHandler, OutputRegistration, StateType};
pub use error::HandlerError;
pub use handler::{Batch, Call, Handler, Incoming, IntoOutcome, Outcome, Reply, ReplyBody};
pub use health::{Health, HealthStatus};
pub use input::{ErrorHook, Failure, FailureAction};
pub use lifecycle::{BindingState, ControlError};
pub use logging::{DEFAULT_LEVEL, init_logging, log_filter};
#[cfg(feature = "management")]
pub use management::ManagementError;
pub use observe::{
    BindingStateChanged, DeadLetterRoute, DeadLettered, Failed, Handled, Observer, Received,
    Retried, Sent, Settle, Settled,
};
pub use output::{Confirm, Output, OutputError, Pipeline, Publisher, SendAllError, SendError};
pub use partition::UnhashableKey;
pub use retry::BackOff;
pub use running::{RunningApp, ShutdownReport};
pub use service::{ServiceError, ServiceExit, run_service, run_service_with};
pub use spel::condition::ConditionError;
pub use spel::expression::{ExpressionError, RoutingKeyExpression};
pub use spel::syntax::ast::Condition;
pub use spel::syntax::error::{Expected, Language, SyntaxError};
pub use startup::{StartupError, StartupProblem};
pub use trace::TRACEPARENT;
