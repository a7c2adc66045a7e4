//! A started application: its bindings' states and their control (pause, resume, stop,
//! start), its senders, and the graceful shutdown.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use super::binders::Binders;
use super::control::Control;
use super::document::LazyDocument;
use super::health::{Health, HealthTracker};
use super::inflight::Inflight;
use super::lifecycle::{BindingState, ControlError};
use super::output::{Output, OutputInner, Publisher};
use crate::asyncapi::Document;

/// What shutdown did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Every handler in progress finished within the timeout.
    pub drained: bool,
    /// Handlers still running at the timeout, stopped; their messages return to the queue.
    pub abandoned: usize,
}

/// A started application.
#[derive(Debug)]
pub struct RunningApp {
    pub(crate) control: Arc<Control>,
    pub(crate) outputs: Arc<HashMap<String, Arc<OutputInner>>>,
    pub(crate) publisher: Publisher,
    pub(crate) binders: Arc<Binders>,
    pub(crate) tasks: Mutex<Vec<JoinHandle<()>>>,
    pub(crate) inflight: Arc<Inflight>,
    pub(crate) shutdown_timeout: Duration,
    pub(crate) health: HealthTracker,
    pub(crate) asyncapi: Arc<LazyDocument>,
    /// The management server, when one was started with the application.
    #[cfg(feature = "management")]
    pub(crate) management: Option<super::management::ManagementServer>,
}

impl RunningApp {
    /// The application's health (up until shutdown).
    pub fn health(&self) -> Health {
        self.health.health()
    }

    /// The application's AsyncAPI 3.0.0 document: what [`AppBuilder::asyncapi`] gave just
    /// before the start (the management server serves it at `/asyncapi.json`). It is built
    /// the first time it is asked for, here or there, and kept; starting does not build it.
    ///
    /// [`AppBuilder::asyncapi`]: super::AppBuilder::asyncapi
    pub fn asyncapi(&self) -> &Document {
        self.asyncapi.get()
    }

    /// The sender of an output binding.
    pub fn output(&self, binding: &str) -> Option<Output> {
        self.outputs.get(binding).map(|inner| Output {
            inner: inner.clone(),
        })
    }

    /// The dynamic publisher (any output binding or destination).
    pub fn publisher(&self) -> Publisher {
        self.publisher.clone()
    }

    /// The state of a binding.
    pub fn state(&self, binding: &str) -> Option<BindingState> {
        self.control.state(binding)
    }

    /// Every binding with its state, by name.
    pub fn states(&self) -> Vec<(String, BindingState)> {
        self.control.states()
    }

    /// Asks a binding for a state and waits until it is there: after `stop` returns, no new
    /// delivery is taken; after `start`, the binding takes deliveries again (the subscription
    /// is open, or, in `acknowledgeMode: NONE`, the deliveries it had already received are
    /// being handled first).
    async fn set(&self, binding: &str, state: BindingState) -> Result<(), ControlError> {
        self.control.set(binding, state).await
    }

    /// Where the management server listens, when one was started with the application
    /// (`management.server.port`; with port 0, the port the system chose).
    #[cfg(feature = "management")]
    pub fn management_address(&self) -> Option<std::net::SocketAddr> {
        self.management.as_ref().map(|m| m.local_addr())
    }

    /// Stops taking new deliveries; the subscription stays, except in `acknowledgeMode:
    /// NONE`, where it is cancelled (the broker ignores prefetch without acks) and what it
    /// had received is kept for [`RunningApp::resume`].
    pub async fn pause(&self, binding: &str) -> Result<(), ControlError> {
        self.set(binding, BindingState::Paused).await
    }

    /// Takes deliveries again after [`RunningApp::pause`].
    pub async fn resume(&self, binding: &str) -> Result<(), ControlError> {
        self.set(binding, BindingState::Running).await
    }

    /// Cancels the subscription (input; unsettled deliveries return to the queue, auto-ack
    /// ones already received are kept for [`RunningApp::start`]) or refuses sends (output).
    pub async fn stop(&self, binding: &str) -> Result<(), ControlError> {
        self.set(binding, BindingState::Stopped).await
    }

    /// Starts a stopped binding.
    pub async fn start(&self, binding: &str) -> Result<(), ControlError> {
        self.set(binding, BindingState::Running).await
    }

    /// Deliveries being handled right now.
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// Shuts down in order: stop intake → let handlers in progress finish (bounded by the
    /// shutdown timeout) → their settlements and replies complete with them (every send
    /// waits for its confirm, so nothing is left to flush) → close the binders it created.
    /// Subscriptions close with them, returning any delivery still unsettled to its queue.
    pub async fn shutdown(self) -> ShutdownReport {
        self.health.closed("shutting down".to_owned());
        let inputs = self.control.take_inputs();
        for control in inputs.values() {
            control.desired.send_replace(BindingState::Stopped);
        }
        drop(inputs);
        // The queue loops end once their handler in progress (concurrency 1) is done; the
        // other handlers run in tasks of their own. Both count in `inflight`.
        let mut loops: Vec<JoinHandle<()>> = self.tasks.lock().await.drain(..).collect();
        let finished = async {
            // Each loop leaves the list once it has ended, so the ones left can be aborted.
            while let Some(task) = loops.last_mut() {
                let _ = task.await;
                loops.pop();
            }
            self.inflight.idle().await;
        };
        let drained = tokio::time::timeout(self.shutdown_timeout, finished)
            .await
            .is_ok();
        let abandoned = self.inflight.len();
        if !drained {
            tracing::warn!(
                abandoned,
                "shutdown timeout: stopping handlers still running; their messages return to the queue"
            );
            for task in &loops {
                task.abort();
            }
            for task in loops {
                let _ = task.await;
            }
            self.inflight.abort_all().await;
        }
        for output in self.outputs.values() {
            output.stopped.store(true, Ordering::Release);
        }
        for binder in self.binders.owned() {
            binder.close().await;
        }
        self.health.closed("shut down".to_owned());
        #[cfg(feature = "management")]
        if let Some(server) = self.management {
            server.stop().await;
        }
        ShutdownReport { drained, abandoned }
    }

    /// Runs until Ctrl-C (or SIGTERM on Unix), then shuts down gracefully.
    pub async fn run_until_signal(self) -> ShutdownReport {
        wait_for_signal().await;
        tracing::info!("shutting down");
        self.shutdown().await
    }
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
