//! What an application is made of before it starts: the configuration, the binders given in
//! code, the listeners and outputs, codecs, hooks, observers and limits. The builder fills it
//! in; startup consumes it.

use std::any::{Any, TypeId};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use super::bindings::Context;
use super::declare::{MakeHandler, StateType};
use super::document::DocumentPlan;
use super::error::HandlerError;
use super::handler::Handler;
use super::health::Health;
use super::input::ErrorHook;
use super::observe::Observer;
use crate::asyncapi::PayloadType;
use crate::binder::Binder;
use crate::codec::Codecs;
use crate::config::StreamConfig;

/// A listener as registered: its binding, optional reply output and condition, and handler.
pub(crate) struct Listener {
    /// How messages name it (the handler function's name, or how it was registered).
    pub name: String,
    pub input: String,
    pub output: Option<String>,
    pub condition: Option<String>,
    /// The types of its `State<T>` arguments, checked at startup.
    pub states: &'static [StateType],
    pub handler: ListenerHandler,
    /// Its payload type, when known (for the AsyncAPI document).
    pub payload: Option<PayloadType>,
    /// Each message's payload type on a `consumer.batchMode` binding, when known.
    pub batch_payload: Option<PayloadType>,
}

/// A listener's handler: given ready in code, or built at startup from the application's
/// context (a declared listener resolves its outputs and state once, there).
pub(crate) enum ListenerHandler {
    Ready(Arc<dyn Handler>),
    AtStart(MakeHandler),
}

impl ListenerHandler {
    /// The handler to run, built now if it is built at startup.
    pub(crate) fn build(self, context: &Context) -> Result<Arc<dyn Handler>, HandlerError> {
        match self {
            ListenerHandler::Ready(h) => Ok(h),
            ListenerHandler::AtStart(make) => make(context),
        }
    }
}

/// The parts of an application to start.
pub(crate) struct Blueprint {
    /// Shared with what the running application keeps (its AsyncAPI document's plan among
    /// them), never copied: with thousands of bindings a copy shows in the start time.
    pub config: Arc<StreamConfig>,
    /// Binder instances given in code, by configuration name or type.
    pub binders: HashMap<String, Arc<dyn Binder>>,
    pub listeners: Vec<Listener>,
    /// Output bindings, in the order declared, each once.
    pub outputs: Vec<String>,
    /// The same names, to keep `outputs` free of repeats in constant time.
    declared_outputs: HashSet<String>,
    pub codecs: Codecs,
    pub hook: Option<ErrorHook>,
    pub observers: Vec<Arc<dyn Observer>>,
    pub shutdown_timeout: Duration,
    pub startup_timeout: Option<Duration>,
    pub state: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
    pub health: Health,
    /// Payload types registered with `AppBuilder::payload`, by binding.
    pub payloads: Vec<(String, PayloadType)>,
    /// The management server to start with the application (`AppBuilder::management`).
    #[cfg(feature = "management")]
    pub management: Option<super::management::Pending>,
}

impl Blueprint {
    /// An application on this configuration with nothing in it yet.
    pub(crate) fn new(config: StreamConfig) -> Self {
        Blueprint {
            config: Arc::new(config),
            binders: HashMap::new(),
            listeners: Vec::new(),
            outputs: Vec::new(),
            declared_outputs: HashSet::new(),
            codecs: Codecs::default(),
            hook: None,
            observers: Vec::new(),
            shutdown_timeout: Duration::from_secs(30),
            startup_timeout: None,
            state: HashMap::new(),
            health: Health::default(),
            payloads: Vec::new(),
            #[cfg(feature = "management")]
            management: None,
        }
    }

    /// What the application's AsyncAPI document is made of (names and payload types; the
    /// configuration is shared, not copied).
    pub(crate) fn document_plan(&self) -> DocumentPlan {
        DocumentPlan::new(
            self.config.clone(),
            self.listeners
                .iter()
                .map(|l| {
                    let batches = self.config.binding_ref(&l.input).consumer.batch_mode;
                    let payload = if batches { l.batch_payload } else { l.payload };
                    (l.input.clone(), payload)
                })
                .collect(),
            self.outputs.clone(),
            self.payloads.clone(),
        )
    }

    /// Declares an output binding (once).
    pub(crate) fn add_output(&mut self, binding: String) {
        if self.declared_outputs.insert(binding.clone()) {
            self.outputs.push(binding);
        }
    }
}
