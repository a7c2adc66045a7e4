//! The runtime: an application built from a configuration and handlers, consuming through
//! binders, with retries, dead-lettering, lifecycle control and graceful shutdown.
//!
//! The macros of `stream-macros` only generate calls to this API; it is public so handlers
//! can also be registered by hand.

mod app;
mod bindings;
mod condition;
mod consumer;
mod error;
mod expression;
pub mod handler;
mod health;
mod inflight;
mod lifecycle;
mod logging;
mod output;
mod panics;
mod partition;
mod queue;
mod registry;
mod retry;
mod trace;

pub use app::{App, AppBuilder, RunningApp, ShutdownReport};
pub use bindings::{Context, InputBinding, Out, OutputBinding, Sink, Source, State, processor};
pub use condition::{Condition, ConditionError};
pub use consumer::{ErrorHook, Failure, FailureAction};
pub use error::{HandlerError, SendError, StartupError};
pub use expression::{ExpressionError, RoutingKeyExpression};
pub use handler::{Call, Handler, Incoming, IntoOutcome, Outcome, Reply, ReplyBody};
pub use health::{Health, HealthStatus};
pub use lifecycle::{BindingState, ControlError};
pub use logging::{DEFAULT_LEVEL, init_logging, log_filter};
pub use output::{Output, Publisher};
pub use registry::{
    ListenerDef, ListenerRegistration, OutputRegistration, ServiceError, ServiceExit, StateType,
    run_service, run_service_with,
};
pub use retry::BackOff;
pub use trace::TRACEPARENT;
