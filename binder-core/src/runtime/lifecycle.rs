//! Binding states and their control.

use std::fmt;
use std::sync::Arc;

use futures::task::AtomicWaker;
use tokio::sync::watch;

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

/// The state asked of an input binding, as its control sets it for the binding's queue
/// loops: a watch channel, and a waker per loop. A loop waiting for its next delivery
/// watches for a change through its waker (registered once per task, an atomic swap after
/// that) instead of registering with the channel on every wait, which with many bindings
/// was a cold lock taken and released per message. Dropping it ends the loops.
#[derive(Debug)]
pub(crate) struct Desired {
    /// `None` once dropped (the loops see the channel closed before they are woken).
    tx: Option<watch::Sender<BindingState>>,
    loops: Vec<Arc<AtomicWaker>>,
}

/// A queue loop's side of [`Desired`].
#[derive(Debug)]
pub(crate) struct DesiredWatch {
    pub rx: watch::Receiver<BindingState>,
    /// Woken on every change, and when the control goes.
    pub waker: Arc<AtomicWaker>,
}

impl Desired {
    pub(crate) fn new(initial: BindingState) -> Self {
        Desired {
            tx: Some(watch::Sender::new(initial)),
            loops: Vec::new(),
        }
    }

    fn tx(&self) -> &watch::Sender<BindingState> {
        self.tx.as_ref().expect("set until dropped")
    }

    /// A new loop's side.
    pub(crate) fn watch(&mut self) -> DesiredWatch {
        let waker = Arc::new(AtomicWaker::new());
        self.loops.push(waker.clone());
        DesiredWatch {
            rx: self.tx().subscribe(),
            waker,
        }
    }

    /// The state asked for now.
    pub(crate) fn get(&self) -> BindingState {
        *self.tx().borrow()
    }

    /// Asks for `state` and wakes every loop.
    pub(crate) fn send_replace(&self, state: BindingState) {
        self.tx().send_replace(state);
        self.wake_loops();
    }

    fn wake_loops(&self) {
        for waker in &self.loops {
            waker.wake();
        }
    }
}

impl Drop for Desired {
    fn drop(&mut self) {
        // Closed first, so that a woken loop finds it closed.
        drop(self.tx.take());
        self.wake_loops();
    }
}
