//! Handlers: plain async functions over a typed payload or the whole incoming message.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::error::HandlerError;
use crate::binder::{BinderResult, Settlement, Settler};
use crate::codec::{Codecs, DecodeError};
use crate::message::Message;

/// A boxed, sendable future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A message as a handler sees it.
#[derive(Debug)]
pub struct Incoming {
    /// The message.
    pub message: Message,
    /// The input binding it arrived on.
    pub binding: Arc<str>,
    /// This attempt's number, from 1.
    pub attempt: u32,
    /// The broker delivered it before.
    pub redelivered: bool,
    pub(crate) content_type: Arc<str>,
    pub(crate) codecs: Arc<Codecs>,
    pub(crate) settler: Option<Arc<Settler>>,
    pub(crate) context: Arc<super::bindings::Context>,
}

impl Incoming {
    /// The borrowed view of this delivery, which does the decoding for both.
    fn as_call(&self) -> Call<'_> {
        Call {
            message: &self.message,
            attempt: self.attempt,
            redelivered: self.redelivered,
            binding: &self.binding,
            content_type: &self.content_type,
            codecs: &self.codecs,
            settler: self.settler.as_ref(),
            context: &self.context,
        }
    }

    /// Decodes the payload by its content type (or the binding's).
    pub fn payload<T: DeserializeOwned>(&self) -> Result<T, DecodeError> {
        self.as_call().payload()
    }

    /// Decodes the payload; a payload that does not decode is a non-retryable failure whose
    /// reason is the decode error (what typed listener arguments use).
    pub fn decoded<T: DeserializeOwned>(&self) -> Result<T, HandlerError> {
        self.as_call().decoded()
    }

    /// Outputs and shared state of the application.
    pub fn context(&self) -> &super::bindings::Context {
        &self.context
    }

    /// Settles the delivery explicitly (`acknowledgeMode: MANUAL`; otherwise the runtime
    /// settles and this is an error).
    pub async fn settle(&self, settlement: Settlement) -> BinderResult<()> {
        match &self.settler {
            Some(s) => s.settle(settlement).await,
            None => Err(crate::binder::BinderError::not_manual()),
        }
    }
}

/// One call of a handler: the delivery being attempted, borrowed from the runtime, which
/// keeps the message for later attempts and for the failure pipeline. A payload handler
/// decodes straight from it; one that takes the whole message gets an owned [`Incoming`]
/// from [`Call::to_incoming`].
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The message.
    pub message: &'a Message,
    /// This attempt's number, from 1.
    pub attempt: u32,
    /// The broker delivered it before.
    pub redelivered: bool,
    pub(crate) binding: &'a Arc<str>,
    pub(crate) content_type: &'a Arc<str>,
    pub(crate) codecs: &'a Arc<Codecs>,
    pub(crate) settler: Option<&'a Arc<Settler>>,
    pub(crate) context: &'a Arc<super::bindings::Context>,
}

impl Call<'_> {
    /// The input binding the message arrived on.
    pub fn binding(&self) -> &str {
        self.binding
    }

    /// Outputs and shared state of the application, as [`Incoming::context`] gives them.
    pub fn context(&self) -> &super::bindings::Context {
        self.context
    }

    /// Decodes the payload by its content type (or the binding's).
    pub fn payload<T: DeserializeOwned>(&self) -> Result<T, DecodeError> {
        self.codecs.decode(self.message, self.content_type)
    }

    /// Decodes the payload; a payload that does not decode is a non-retryable failure whose
    /// reason is the decode error (what typed listener arguments use).
    pub fn decoded<T: DeserializeOwned>(&self) -> Result<T, HandlerError> {
        self.payload().map_err(HandlerError::decode)
    }

    /// An owned copy of the delivery, for a handler that keeps it beyond the call.
    pub fn to_incoming(&self) -> Incoming {
        Incoming {
            message: self.message.clone(),
            binding: self.binding.clone(),
            attempt: self.attempt,
            redelivered: self.redelivered,
            content_type: self.content_type.clone(),
            codecs: self.codecs.clone(),
            settler: self.settler.cloned(),
            context: self.context.clone(),
        }
    }
}

/// One call of a batch handler: the deliveries of a `consumer.batchMode` binding assembled
/// into one batch (see [`Handler::call_batch`]), borrowed from the runtime, which keeps them
/// for later attempts and for the failure pipeline.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    /// The messages, in delivery order.
    pub messages: &'a [&'a Message],
    /// This attempt's number, from 1 (a failed batch is attempted again whole).
    pub attempt: u32,
    pub(crate) binding: &'a Arc<str>,
    pub(crate) content_type: &'a Arc<str>,
    pub(crate) codecs: &'a Arc<Codecs>,
    pub(crate) context: &'a Arc<super::bindings::Context>,
}

impl Batch<'_> {
    /// The input binding the messages arrived on.
    pub fn binding(&self) -> &str {
        self.binding
    }

    /// Outputs and shared state of the application.
    pub fn context(&self) -> &super::bindings::Context {
        self.context
    }

    /// Decodes every payload by its content type (or the binding's), in delivery order. One
    /// that does not decode fails the batch, not retried, with the decode error and which
    /// message it was as its reason: the whole batch then goes down the failure pipeline.
    pub fn decoded<T: DeserializeOwned>(&self) -> Result<Vec<T>, HandlerError> {
        self.messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                self.codecs.decode(m, self.content_type).map_err(|e| {
                    let n = self.messages.len();
                    HandlerError::decode(format_args!("message {} of {n}: {e}", i + 1))
                })
            })
            .collect()
    }
}

/// What a handler returns to the runtime.
#[derive(Debug)]
pub enum Outcome {
    /// Success, nothing to send.
    Done,
    /// Success; send this to the output binding.
    Reply(ReplyBody),
}

/// A reply to encode (by the output binding's content type) or a ready message.
pub enum ReplyBody {
    /// A value encoded with the output's codec.
    Value(Box<dyn erased_serde::Serialize + Send + Sync>),
    /// A message sent as it is.
    Message(Box<Message>),
}

impl std::fmt::Debug for ReplyBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplyBody::Value(_) => f.write_str("ReplyBody::Value(..)"),
            ReplyBody::Message(m) => f.debug_tuple("ReplyBody::Message").field(m).finish(),
        }
    }
}

/// A value a handler returns for its output binding (SCSt's `@SendTo`).
#[derive(Debug, Clone, PartialEq)]
pub struct Reply<T>(pub T);

/// Return types of handlers: `()`, [`Reply`], a [`Message`], `Option` of those, and `Result`
/// of those with any error convertible to [`HandlerError`].
pub trait IntoOutcome {
    /// Converts the return value.
    fn into_outcome(self) -> Result<Outcome, HandlerError>;
}

impl IntoOutcome for Outcome {
    fn into_outcome(self) -> Result<Outcome, HandlerError> {
        Ok(self)
    }
}

impl IntoOutcome for () {
    fn into_outcome(self) -> Result<Outcome, HandlerError> {
        Ok(Outcome::Done)
    }
}

impl<T: Serialize + Send + Sync + 'static> IntoOutcome for Reply<T> {
    fn into_outcome(self) -> Result<Outcome, HandlerError> {
        Ok(Outcome::Reply(ReplyBody::Value(Box::new(self.0))))
    }
}

impl IntoOutcome for Message {
    fn into_outcome(self) -> Result<Outcome, HandlerError> {
        Ok(Outcome::Reply(ReplyBody::Message(Box::new(self))))
    }
}

impl<T: IntoOutcome> IntoOutcome for Option<T> {
    fn into_outcome(self) -> Result<Outcome, HandlerError> {
        self.map_or(Ok(Outcome::Done), IntoOutcome::into_outcome)
    }
}

impl<T: IntoOutcome, E: Into<HandlerError>> IntoOutcome for Result<T, E> {
    fn into_outcome(self) -> Result<Outcome, HandlerError> {
        self.map_err(Into::into).and_then(IntoOutcome::into_outcome)
    }
}

/// A message handler, usually built with [`payload`] or [`incoming`].
pub trait Handler: Send + Sync + 'static {
    /// Handles one attempt of one message. The returned future owns what it needs: the
    /// call only borrows the delivery.
    fn call(&self, call: Call<'_>) -> BoxFuture<Result<Outcome, HandlerError>>;

    /// Whether it takes the batches of a `consumer.batchMode` binding
    /// ([`call_batch`](Self::call_batch)); a listener that does not is refused on such a
    /// binding at startup.
    fn takes_batches(&self) -> bool {
        false
    }

    /// Handles one attempt of one batch (a handler that [takes batches](Self::takes_batches)
    /// overrides it; the default fails the attempt, not retried).
    fn call_batch(&self, batch: Batch<'_>) -> BoxFuture<Result<Outcome, HandlerError>> {
        let binding = batch.binding.to_string();
        Box::pin(async move {
            Err(HandlerError::fatal(format!(
                "the handler of binding `{binding}` takes one message at a time, not batches"
            )))
        })
    }
}

/// A handler call's boxed future: the future `made` returned, run with its outcome
/// converted, or the error that failed the call before it ran.
fn boxed<Fut, R>(made: Result<Fut, HandlerError>) -> BoxFuture<Result<Outcome, HandlerError>>
where
    Fut: Future<Output = R> + Send + 'static,
    R: IntoOutcome,
{
    match made {
        Ok(fut) => Box::pin(async move { fut.await.into_outcome() }),
        Err(e) => Box::pin(async move { Err(e) }),
    }
}

struct PayloadHandler<F, T> {
    f: F,
    _payload: std::marker::PhantomData<fn() -> T>,
}

impl<F, T, Fut, R> Handler for PayloadHandler<F, T>
where
    F: Fn(T) -> Fut + Send + Sync + 'static,
    T: DeserializeOwned + Send + 'static,
    Fut: Future<Output = R> + Send + 'static,
    R: IntoOutcome,
{
    fn call(&self, call: Call<'_>) -> BoxFuture<Result<Outcome, HandlerError>> {
        boxed(call.decoded::<T>().map(&self.f))
    }
}

/// A handler taking the decoded payload. A payload that does not decode is a failure with
/// the decode error as its reason (not retried).
///
/// ```
/// use binder_core::runtime::{handler, Reply};
///
/// #[derive(serde::Deserialize)]
/// struct Order { id: u32 }
///
/// let h = handler::payload(|order: Order| async move { Reply(format!("order {}", order.id)) });
/// # let _ = h;
/// ```
pub fn payload<T, F, Fut, R>(f: F) -> impl Handler
where
    F: Fn(T) -> Fut + Send + Sync + 'static,
    T: DeserializeOwned + Send + 'static,
    Fut: Future<Output = R> + Send + 'static,
    R: IntoOutcome,
{
    PayloadHandler {
        f,
        _payload: std::marker::PhantomData,
    }
}

struct IncomingHandler<F>(F);

impl<F, Fut, R> Handler for IncomingHandler<F>
where
    F: Fn(Incoming) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = R> + Send + 'static,
    R: IntoOutcome,
{
    fn call(&self, call: Call<'_>) -> BoxFuture<Result<Outcome, HandlerError>> {
        let fut = (self.0)(call.to_incoming());
        Box::pin(async move { fut.await.into_outcome() })
    }
}

/// A handler taking the whole [`Incoming`] message (headers, properties, attempt number).
pub fn incoming<F, Fut, R>(f: F) -> impl Handler
where
    F: Fn(Incoming) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = R> + Send + 'static,
    R: IntoOutcome,
{
    IncomingHandler(f)
}

struct CallHandler<F>(F);

impl<F, Fut, R> Handler for CallHandler<F>
where
    F: Fn(Call<'_>) -> Result<Fut, HandlerError> + Send + Sync + 'static,
    Fut: Future<Output = R> + Send + 'static,
    R: IntoOutcome,
{
    fn call(&self, call: Call<'_>) -> BoxFuture<Result<Outcome, HandlerError>> {
        boxed((self.0)(call))
    }
}

/// A handler that takes what it needs from the borrowed [`Call`] (decodes the payload,
/// clones only what it keeps) and returns the future to run, or the error that fails the
/// attempt at once (an undecodable payload). This is what `#[stream_listener]` generates:
/// no copy of the delivery per message.
///
/// ```
/// use binder_core::runtime::{handler, Call, HandlerError};
///
/// #[derive(serde::Deserialize)]
/// struct Order { id: u32 }
///
/// let h = handler::call(|call: Call<'_>| {
///     let order: Order = call.decoded()?;
///     let attempt = call.attempt;
///     Ok::<_, HandlerError>(async move { println!("order {} (attempt {attempt})", order.id) })
/// });
/// # let _ = h;
/// ```
pub fn call<F, Fut, R>(f: F) -> impl Handler
where
    F: Fn(Call<'_>) -> Result<Fut, HandlerError> + Send + Sync + 'static,
    Fut: Future<Output = R> + Send + 'static,
    R: IntoOutcome,
{
    CallHandler(f)
}

struct BatchPayloadHandler<F, T> {
    f: F,
    _item: std::marker::PhantomData<fn() -> T>,
}

impl<F, T, Fut, R> Handler for BatchPayloadHandler<F, T>
where
    F: Fn(Vec<T>) -> Fut + Send + Sync + 'static,
    T: DeserializeOwned + Send + 'static,
    Fut: Future<Output = R> + Send + 'static,
    R: IntoOutcome,
{
    /// Outside batch mode, one message whose payload is a list.
    fn call(&self, call: Call<'_>) -> BoxFuture<Result<Outcome, HandlerError>> {
        boxed(call.decoded::<Vec<T>>().map(&self.f))
    }

    fn takes_batches(&self) -> bool {
        true
    }

    fn call_batch(&self, batch: Batch<'_>) -> BoxFuture<Result<Outcome, HandlerError>> {
        boxed(batch.decoded::<T>().map(&self.f))
    }
}

/// A handler taking a list of decoded payloads: on a `consumer.batchMode` binding, one per
/// message of a batch (Spring Cloud Stream's `Consumer<List<T>>`); elsewhere, the list one
/// message's payload holds. A payload that does not decode fails the call, not retried.
///
/// ```
/// use binder_core::runtime::handler;
///
/// #[derive(serde::Deserialize)]
/// struct Order { id: u32 }
///
/// let h = handler::batch(|orders: Vec<Order>| async move {
///     println!("{} orders, the first {:?}", orders.len(), orders.first().map(|o| o.id));
/// });
/// # let _ = h;
/// ```
pub fn batch<T, F, Fut, R>(f: F) -> impl Handler
where
    F: Fn(Vec<T>) -> Fut + Send + Sync + 'static,
    T: DeserializeOwned + Send + 'static,
    Fut: Future<Output = R> + Send + 'static,
    R: IntoOutcome,
{
    BatchPayloadHandler {
        f,
        _item: std::marker::PhantomData,
    }
}

struct CallOrBatchHandler<F, G> {
    one: F,
    batch: G,
}

impl<F, G, Fut, GFut, R, GR> Handler for CallOrBatchHandler<F, G>
where
    F: Fn(Call<'_>) -> Result<Fut, HandlerError> + Send + Sync + 'static,
    Fut: Future<Output = R> + Send + 'static,
    R: IntoOutcome,
    G: Fn(Batch<'_>) -> Result<GFut, HandlerError> + Send + Sync + 'static,
    GFut: Future<Output = GR> + Send + 'static,
    GR: IntoOutcome,
{
    fn call(&self, call: Call<'_>) -> BoxFuture<Result<Outcome, HandlerError>> {
        boxed((self.one)(call))
    }

    fn takes_batches(&self) -> bool {
        true
    }

    fn call_batch(&self, batch: Batch<'_>) -> BoxFuture<Result<Outcome, HandlerError>> {
        boxed((self.batch)(batch))
    }
}

/// [`call`] for one message, and `batch` for the batches of a `consumer.batchMode`
/// binding: what `#[stream_listener]` generates for a listener whose payload argument is a
/// `Vec<...>` and whose other arguments are `Out<...>` or `State<...>`.
pub fn call_or_batch<F, Fut, R, G, GFut, GR>(one: F, batch: G) -> impl Handler
where
    F: Fn(Call<'_>) -> Result<Fut, HandlerError> + Send + Sync + 'static,
    Fut: Future<Output = R> + Send + 'static,
    R: IntoOutcome,
    G: Fn(Batch<'_>) -> Result<GFut, HandlerError> + Send + Sync + 'static,
    GFut: Future<Output = GR> + Send + 'static,
    GR: IntoOutcome,
{
    CallOrBatchHandler { one, batch }
}
