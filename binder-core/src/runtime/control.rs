//! The bindings of a started application as one shared handle: what each binding is (its
//! destination, group, binder), the state it is in, and the control of that state (pause,
//! resume, stop, start). [`super::running::RunningApp`] and the management server share it.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::lifecycle::{BindingState, ControlError, Desired};
use super::observe::{BindingStateChanged, Observers};
use super::output::OutputInner;
use crate::binder::Binder;

/// The control of an input binding: the state asked for, and the state each of its queue
/// loops has reached.
#[derive(Debug)]
pub(crate) struct InputControl {
    pub desired: Desired,
    pub actual: Vec<watch::Receiver<BindingState>>,
}

/// What a binding is, for the bindings endpoint.
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "management"), allow(dead_code))]
pub(crate) struct BindingInfo {
    pub name: String,
    pub destination: String,
    pub group: Option<String>,
    /// An input (else an output).
    pub input: bool,
    /// The binder configuration name (or bare type) it resolved to.
    pub binder: String,
    pub binder_type: String,
}

/// The bindings of a started application and their control.
pub(crate) struct Control {
    /// Taken by shutdown: the queue loops end once their desired-state senders are gone.
    inputs: Mutex<HashMap<String, InputControl>>,
    outputs: Arc<HashMap<String, Arc<OutputInner>>>,
    observers: Observers,
    /// Every binding, by name.
    pub bindings: Vec<BindingInfo>,
    /// The binders the bindings use, by configuration name (or bare type), each once.
    #[cfg_attr(not(feature = "management"), allow(dead_code))]
    pub binders: Vec<(String, Arc<dyn Binder>)>,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control")
            .field("bindings", &self.bindings)
            .finish_non_exhaustive()
    }
}

impl Control {
    pub(crate) fn new(
        inputs: HashMap<String, InputControl>,
        outputs: Arc<HashMap<String, Arc<OutputInner>>>,
        observers: Observers,
        mut bindings: Vec<BindingInfo>,
        binders: Vec<(String, Arc<dyn Binder>)>,
    ) -> Self {
        bindings.sort_by(|a, b| a.name.cmp(&b.name));
        Control {
            inputs: Mutex::new(inputs),
            outputs,
            observers,
            bindings,
            binders,
        }
    }

    fn inputs(&self) -> std::sync::MutexGuard<'_, HashMap<String, InputControl>> {
        self.inputs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the inputs' controls, for shutdown.
    pub(crate) fn take_inputs(&self) -> HashMap<String, InputControl> {
        std::mem::take(&mut *self.inputs())
    }

    /// The state of a binding.
    pub(crate) fn state(&self, binding: &str) -> Option<BindingState> {
        if let Some(c) = self.inputs().get(binding) {
            let desired = c.desired.get();
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
    pub(crate) fn states(&self) -> Vec<(String, BindingState)> {
        let mut names: Vec<String> = self.inputs().keys().cloned().collect();
        names.extend(self.outputs.keys().cloned());
        let mut all: Vec<(String, BindingState)> = names
            .into_iter()
            .filter_map(|n| self.state(&n).map(|s| (n, s)))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Asks a binding for a state and waits until it is there (see `RunningApp::stop`).
    pub(crate) async fn set(&self, binding: &str, state: BindingState) -> Result<(), ControlError> {
        let seen = {
            let inputs = self.inputs();
            match inputs.get(binding) {
                Some(c) => {
                    c.desired.send_replace(state);
                    Some(c.actual.clone())
                }
                None => None,
            }
        };
        if let Some(seen) = seen {
            for mut seen in seen {
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
            None if self.bindings.iter().any(|b| b.name == binding) => {
                Err(ControlError::ShuttingDown)
            }
            None => Err(ControlError::Unknown(binding.to_owned())),
        }
    }
}
