//! Listeners and bindings declared with the macros, collected with `inventory`.

use std::sync::Arc;

use super::bindings::Context;
use super::error::HandlerError;
use super::handler::Handler;
use crate::asyncapi::PayloadType;

/// Builds a declared listener's handler once, when the application starts, with what its
/// arguments need from the application: its `Out<...>` outputs and `State<T>` values are
/// resolved here, not per message.
pub type MakeHandler = fn(&Context) -> Result<Arc<dyn Handler>, HandlerError>;

/// A listener as the macros declare it: a nameable value that can also be registered by hand
/// with [`AppBuilder::register`](super::builder::AppBuilder::register).
#[derive(Debug)]
pub struct ListenerDef {
    /// The handler function's name (for messages).
    pub name: &'static str,
    /// The input binding.
    pub input: &'static str,
    /// The output binding of the return value, if any.
    pub output: Option<&'static str>,
    /// The header condition, if any.
    pub condition: Option<&'static str>,
    /// Output bindings the listener sends to through `Out<...>` arguments.
    pub uses: &'static [&'static str],
    /// The state types of its `State<T>` arguments, checked at startup.
    pub states: &'static [StateType],
    /// Builds the handler at startup (see [`MakeHandler`]).
    pub handler: MakeHandler,
    /// Its payload argument's type, for the AsyncAPI document (`None`: it takes no payload
    /// argument).
    pub payload: Option<fn() -> PayloadType>,
    /// For a listener that takes batches (its payload argument a `Vec<T>`), `T`: the payload
    /// of each message on a `consumer.batchMode` binding, for the AsyncAPI document.
    pub batch_payload: Option<fn() -> PayloadType>,
    /// Its return value's type, the payload of its `output` binding, for the AsyncAPI
    /// document (`None`: no output, or it returns a [`Message`](crate::message::Message)).
    pub reply: Option<fn() -> PayloadType>,
}

/// The type of a `State<T>` argument: a listener taking one cannot start unless a value of
/// that type is registered with
/// [`AppBuilder::state`](super::builder::AppBuilder::state).
#[derive(Clone, Copy)]
pub struct StateType {
    id: fn() -> std::any::TypeId,
    name: fn() -> &'static str,
}

impl StateType {
    /// The state type `T`.
    pub const fn of<T: Send + Sync + 'static>() -> Self {
        StateType {
            id: std::any::TypeId::of::<T>,
            name: std::any::type_name::<T>,
        }
    }

    /// Its `TypeId`.
    pub fn id(&self) -> std::any::TypeId {
        (self.id)()
    }

    /// Its type name, for messages.
    pub fn name(&self) -> &'static str {
        (self.name)()
    }
}

impl std::fmt::Debug for StateType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A listener registered for automatic collection.
#[derive(Debug)]
pub struct ListenerRegistration(pub &'static ListenerDef);

/// An output binding declared with `#[output]`, registered so the application opens it.
#[derive(Debug)]
pub struct OutputRegistration(pub &'static str);

inventory::collect!(ListenerRegistration);
inventory::collect!(OutputRegistration);

/// Every listener declared with the macros in this program, in a stable order (link order is
/// not declaration order).
pub(crate) fn listeners() -> Vec<&'static ListenerDef> {
    let mut defs: Vec<&'static ListenerDef> = inventory::iter::<ListenerRegistration>
        .into_iter()
        .map(|r| r.0)
        .collect();
    defs.sort_by_key(|d| (d.input, d.name));
    defs
}

/// Every output binding declared with `#[output]` in this program.
pub(crate) fn outputs() -> impl Iterator<Item = &'static str> {
    inventory::iter::<OutputRegistration>
        .into_iter()
        .map(|o| o.0)
}
