//! A started application: its bindings' states and their control (pause, resume, stop,
//! start), its senders, and the graceful shutdown.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{Mutex, watch};
use tokio::task::JoinHandle;

use super::binders::Binders;
use super::health::{Health, HealthTracker};
use super::inflight::Inflight;
use super::lifecycle::{BindingState, ControlError};
use super::observe::{BindingStateChanged, Observers};
use super::output::{Output, OutputInner, Publisher};

/// The control of an input binding: the state asked for, and the state each of its queue
/// loops has reached.
#[derive(Debug)]
pub(crate) struct InputControl {
    pub desired: watch::Sender<BindingState>,
    pub actual: Vec<watch::Receiver<BindingState>>,
}

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
    pub(crate) inputs: HashMap<String, InputControl>,
    pub(crate) outputs: Arc<HashMap<String, Arc<OutputInner>>>,
    pub(crate) publisher: Publisher,
    pub(crate) binders: Arc<Binders>,
    pub(crate) tasks: Mutex<Vec<JoinHandle<()>>>,
    pub(crate) inflight: Arc<Inflight>,
    pub(crate) shutdown_timeout: Duration,
    pub(crate) health: HealthTracker,
    pub(crate) observers: Observers,
}

impl RunningApp {
    /// The application's health (up until shutdown).
    pub fn health(&self) -> Health {
        self.health.health()
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
        if let Some(c) = self.inputs.get(binding) {
            let desired = *c.desired.borrow();
            let recovering = c
                .actual
                .iter()
                .any(|a| *a.borrow() == BindingState::Recovering);
            return Some(if desired == BindingState::Running && recovering {
                BindingState::Recovering
            } else {
                desired
            });
        }
        self.outputs.get(binding).map(|o| {
            if o.stopped.load(Ordering::Acquire) {
                BindingState::Stopped
            } else {
                BindingState::Running
            }
        })
    }

    /// Every binding with its state, by name.
    pub fn states(&self) -> Vec<(String, BindingState)> {
        let mut all: Vec<(String, BindingState)> = self
            .inputs
            .keys()
            .chain(self.outputs.keys())
            .filter_map(|n| self.state(n).map(|s| (n.clone(), s)))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Asks a binding for a state and waits until it is there: after `stop` returns, no new
    /// delivery is taken; after `start`, the binding takes deliveries again (the subscription
    /// is open, or, in `acknowledgeMode: NONE`, the deliveries it had already received are
    /// being handled first).
    async fn set(&self, binding: &str, state: BindingState) -> Result<(), ControlError> {
        if let Some(c) = self.inputs.get(binding) {
            c.desired.send_replace(state);
            for seen in &c.actual {
                let mut seen = seen.clone();
                // A loop that ended (shutdown) reports nothing more. A recovering loop runs:
                // it subscribes again by itself.
                let _ = seen
                    .wait_for(|s| {
                        *s == state
                            || (state == BindingState::Running && *s == BindingState::Recovering)
                    })
                    .await;
            }
            return Ok(());
        }
        match self.outputs.get(binding) {
            Some(_) if state == BindingState::Paused => {
                Err(ControlError::NotPausable(binding.to_owned()))
            }
            Some(o) => {
                let was = o
                    .stopped
                    .swap(state == BindingState::Stopped, Ordering::AcqRel);
                if was != (state == BindingState::Stopped) {
                    self.observers.emit(|ob| {
                        ob.binding_state(&BindingStateChanged {
                            binding,
                            queue: None,
                            state,
                        })
                    });
                }
                Ok(())
            }
            None => Err(ControlError::Unknown(binding.to_owned())),
        }
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
        for control in self.inputs.values() {
            control.desired.send_replace(BindingState::Stopped);
        }
        drop(self.inputs);
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
