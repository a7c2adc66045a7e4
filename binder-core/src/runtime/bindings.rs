//! Typed binding declarations (what `#[input]` and `#[output]` generate), typed handles, and
//! the extractors a listener's arguments use.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::Serialize;

use super::error::HandlerError;
use super::output::{Output, SendError};
use crate::message::Message;

/// An input binding declared in code.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an input binding",
    label = "declare it with #[input(\"name\")]",
    note = "a listener's `input` must name a type declared with #[input(\"...\")], or the built-in `Sink`"
)]
pub trait InputBinding: 'static {
    /// The binding name, as configuration spells it.
    const NAME: &'static str;
}

/// An output binding declared in code.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an output binding",
    label = "declare it with #[output(\"name\")]",
    note = "a listener's `output` and `Out<...>` arguments must name a type declared with #[output(\"...\")], or the built-in `Source`"
)]
pub trait OutputBinding: 'static {
    /// The binding name, as configuration spells it.
    const NAME: &'static str;
}

/// SCSt's `Sink`: the input binding `input`.
#[derive(Debug, Clone, Copy)]
pub struct Sink;

impl InputBinding for Sink {
    const NAME: &'static str = "input";
}

/// SCSt's `Source`: the output binding `output`. A processor is a listener with
/// `input = Sink, output = Source`.
#[derive(Debug, Clone, Copy)]
pub struct Source;

impl OutputBinding for Source {
    const NAME: &'static str = "output";
}

/// SCSt's `Processor`: the `input` and `output` bindings together, for a listener that
/// transforms: `#[stream_listener(input = processor::Input, output = processor::Output)]`.
pub mod processor {
    /// The processor's input: [`super::Sink`] (binding `input`).
    pub type Input = super::Sink;
    /// The processor's output: [`super::Source`] (binding `output`).
    pub type Output = super::Source;
}

/// A typed handle on an output binding, as a listener argument (`out: Out<Invoices>`).
#[derive(Debug)]
pub struct Out<B: OutputBinding> {
    output: Output,
    _binding: PhantomData<fn() -> B>,
}

/// Cloning shares the output; the binding type itself need not be `Clone`.
impl<B: OutputBinding> Clone for Out<B> {
    fn clone(&self) -> Self {
        Out::new(self.output.clone())
    }
}

impl<B: OutputBinding> Out<B> {
    pub(crate) fn new(output: Output) -> Self {
        Out {
            output,
            _binding: PhantomData,
        }
    }

    /// Encodes and sends a payload (waits for the confirm).
    pub async fn send<T: Serialize + ?Sized>(&self, payload: &T) -> Result<(), SendError> {
        self.output.send(payload).await
    }

    /// Sends a ready message.
    pub async fn send_message(&self, message: Message) -> Result<(), SendError> {
        self.output.send_message(message).await
    }
}

/// Shared application state, as a listener argument (`db: State<Db>`); registered with
/// `AppBuilder::state`.
#[derive(Debug)]
pub struct State<T: ?Sized>(pub Arc<T>);

impl<T: ?Sized> Clone for State<T> {
    fn clone(&self) -> Self {
        State(self.0.clone())
    }
}

impl<T: ?Sized> std::ops::Deref for State<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// What handlers can reach besides their message: outputs and shared state.
#[derive(Debug, Default)]
pub struct Context {
    pub(crate) outputs: HashMap<String, Output>,
    pub(crate) state: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl Context {
    /// The output binding `B`; a listener declaring `Out<B>` gets an error if the binding is
    /// not part of the application.
    pub fn out<B: OutputBinding>(&self) -> Result<Out<B>, HandlerError> {
        self.outputs
            .get(B::NAME)
            .map(|o| Out::new(o.clone()))
            .ok_or_else(|| {
                HandlerError::fatal(format!(
                    "output binding `{}` is not part of the application",
                    B::NAME
                ))
            })
    }

    /// Shared state of type `T`.
    pub fn state<T: Send + Sync + 'static>(&self) -> Result<State<T>, HandlerError> {
        self.state
            .get(&TypeId::of::<T>())
            .and_then(|s| s.clone().downcast::<T>().ok())
            .map(State)
            .ok_or_else(|| {
                HandlerError::fatal(format!(
                    "no state of type `{}`: register it with AppBuilder::state",
                    std::any::type_name::<T>()
                ))
            })
    }
}
