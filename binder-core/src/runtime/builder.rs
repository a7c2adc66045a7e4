//! Building an application: configuration, binders, listeners, outputs, codecs, hooks and
//! observers. Nothing here connects; [`AppBuilder::start`] hands the result to startup.

use std::sync::Arc;
use std::time::Duration;

use super::blueprint::{Blueprint, Listener, ListenerHandler};
use super::declare::{self, ListenerDef};
use super::handler::Handler;
use super::health::Health;
use super::input::Failure;
use super::observe::Observer;
use super::running::RunningApp;
use super::start;
use super::startup::StartupError;
use crate::asyncapi::{Document, PayloadType};
use crate::binder::Binder;
use crate::codec::Codec;
use crate::config::StreamConfig;

/// Builds an application from a configuration and handlers.
///
/// ```no_run
/// use binder_core::config::ConfigLoader;
/// use binder_core::runtime::{handler, App, Reply};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let config = ConfigLoader::new().load()?;
/// let app = App::builder(config)
///     .processor("orders-in", "invoices-out", handler::payload(|id: u64| async move {
///         Reply(format!("invoice for order {id}"))
///     }))
///     .start()
///     .await?;
/// app.run_until_signal().await;
/// # Ok(()) }
/// ```
pub struct AppBuilder {
    parts: Blueprint,
}

impl std::fmt::Debug for AppBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppBuilder")
            .field(
                "listeners",
                &self
                    .parts
                    .listeners
                    .iter()
                    .map(|l| &l.input)
                    .collect::<Vec<_>>(),
            )
            .field("outputs", &self.parts.outputs)
            .finish_non_exhaustive()
    }
}

/// The application, before it starts.
#[derive(Debug)]
pub struct App;

impl App {
    /// Starts building an application on this configuration.
    pub fn builder(config: StreamConfig) -> AppBuilder {
        AppBuilder {
            parts: Blueprint::new(config),
        }
    }
}

impl AppBuilder {
    /// Uses this binder instance for a binder configuration name or type (instead of
    /// creating one from the configuration). The caller owns it: shutdown leaves it open, so
    /// several applications can share it.
    pub fn binder(mut self, name_or_type: impl Into<String>, binder: Arc<dyn Binder>) -> Self {
        self.parts.binders.insert(name_or_type.into(), binder);
        self
    }

    /// Handles messages of an input binding.
    pub fn listener(mut self, input: impl Into<String>, handler: impl Handler) -> Self {
        let input = input.into();
        self.parts.listeners.push(Listener {
            name: format!("listener of `{input}`"),
            input,
            output: None,
            condition: None,
            states: &[],
            handler: ListenerHandler::Ready(Arc::new(handler)),
            payload: None,
            batch_payload: None,
        });
        self
    }

    /// Handles the messages of an input binding whose headers meet `condition` (see
    /// [`Condition`](crate::runtime::Condition)). Several listeners can share a binding: a
    /// message goes to the one whose condition matches, else to the binding's listener
    /// without a condition; none or several matching is a failure (dead-letter path), never
    /// a silent drop.
    pub fn listener_when(
        mut self,
        input: impl Into<String>,
        condition: impl Into<String>,
        handler: impl Handler,
    ) -> Self {
        let (input, condition) = (input.into(), condition.into());
        self.parts.listeners.push(Listener {
            name: format!("listener of `{input}` when {condition}"),
            input,
            output: None,
            condition: Some(condition),
            states: &[],
            handler: ListenerHandler::Ready(Arc::new(handler)),
            payload: None,
            batch_payload: None,
        });
        self
    }

    /// Adds a listener declared with `#[stream_listener]` (its nameable value), for tests and
    /// for libraries whose `inventory` registrations the linker may drop.
    pub fn register(mut self, def: &ListenerDef) -> Self {
        for out in def.output.iter().chain(def.uses.iter()) {
            self.parts.add_output((*out).to_owned());
        }
        self.parts.listeners.push(Listener {
            name: def.name.to_owned(),
            input: def.input.to_owned(),
            output: def.output.map(str::to_owned),
            condition: def.condition.map(str::to_owned),
            states: def.states,
            handler: ListenerHandler::AtStart(def.handler),
            payload: def.payload.map(|payload| payload()),
            batch_payload: def.batch_payload.map(|payload| payload()),
        });
        if let (Some(output), Some(reply)) = (def.output, def.reply) {
            self.parts.payloads.push((output.to_owned(), reply()));
        }
        self
    }

    /// Adds every listener and output binding declared with the macros in this program.
    pub fn registered(mut self) -> Self {
        for def in declare::listeners() {
            self = self.register(def);
        }
        for output in declare::outputs() {
            self = self.output(output);
        }
        self
    }

    /// The configuration the application starts with.
    pub fn config(&self) -> &StreamConfig {
        &self.parts.config
    }

    /// The application's health, available before `start` so a service can report that it
    /// waits for its broker; `RunningApp::health` returns the same handle.
    pub fn health(&self) -> Health {
        self.parts.health.clone()
    }

    /// Shares a value with every handler (`State<T>` arguments, `Context::state`).
    pub fn state<T: Send + Sync + 'static>(self, value: T) -> Self {
        self.shared_state(Arc::new(value))
    }

    /// Shares a value that other applications of the process share too.
    pub fn shared_state<T: Send + Sync + 'static>(mut self, value: Arc<T>) -> Self {
        self.parts.state.insert(std::any::TypeId::of::<T>(), value);
        self
    }

    /// Handles messages of an input binding and sends what the handler returns to an output
    /// binding (SCSt's `@StreamListener` with `@SendTo`).
    pub fn processor(
        mut self,
        input: impl Into<String>,
        output: impl Into<String>,
        handler: impl Handler,
    ) -> Self {
        let output = output.into();
        self.parts.add_output(output.clone());
        let input = input.into();
        self.parts.listeners.push(Listener {
            name: format!("processor of `{input}`"),
            input,
            output: Some(output),
            condition: None,
            states: &[],
            handler: ListenerHandler::Ready(Arc::new(handler)),
            payload: None,
            batch_payload: None,
        });
        self
    }

    /// Declares an output binding the application sends to.
    pub fn output(mut self, binding: impl Into<String>) -> Self {
        self.parts.add_output(binding.into());
        self
    }

    /// Records the payload type of a binding's messages for the AsyncAPI document, with its
    /// schema (`T: schemars::JsonSchema`): for an output, or an input whose listener was
    /// registered by hand (`#[stream_listener]` records its own).
    #[cfg(feature = "schemars")]
    pub fn payload<T: schemars::JsonSchema + 'static>(self, binding: impl Into<String>) -> Self {
        self.payload_type(binding, PayloadType::of::<T>())
    }

    /// Records the payload type of a binding's messages for the AsyncAPI document
    /// ([`PayloadType::of`] with the `schemars` feature, else
    /// [`PayloadType::without_schema`]).
    pub fn payload_type(mut self, binding: impl Into<String>, payload: PayloadType) -> Self {
        self.parts.payloads.push((binding.into(), payload));
        self
    }

    /// The application's AsyncAPI 3.0.0 document (see [`crate::asyncapi`]): a channel per
    /// destination, a `receive` operation per listener's input, a `send` operation per
    /// output, the payload types known so far, and the binders' protocol bindings.
    /// [`RunningApp::asyncapi`] and the management server's `/asyncapi.json` serve the same.
    pub fn asyncapi(&self) -> Document {
        self.parts.document_plan().document()
    }

    /// Registers a codec for a content type.
    pub fn codec(mut self, codec: impl Codec) -> Self {
        self.parts.codecs.register(codec);
        self
    }

    /// Observes failures (it cannot change what happens to the message).
    pub fn on_error(mut self, hook: impl Fn(&Failure) + Send + Sync + 'static) -> Self {
        self.parts.hook = Some(Arc::new(hook));
        self
    }

    /// Registers an observer of deliveries, settlements, retries, dead-lettering, sends and
    /// binding states (see [`Observer`]). Several can be registered; each hears every event,
    /// in registration order. With none registered, observing costs nothing.
    pub fn observer(mut self, observer: impl Observer) -> Self {
        self.parts.observers.push(Arc::new(observer));
        self
    }

    /// Serves the management endpoints (health, bindings, Prometheus metrics) as the
    /// configuration's `management.*` says, from before startup until shutdown ends;
    /// [`run_service`](super::run_service) does this. Without `management.server.port`
    /// nothing is started or registered; the metrics' observer is registered only when the
    /// `prometheus` endpoint is exposed. [`RunningApp::management_address`] tells where it
    /// listens.
    ///
    /// ```no_run
    /// use binder_core::config::ConfigLoader;
    /// use binder_core::runtime::App;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let config = ConfigLoader::new().set("management.server.port", 0).load()?;
    /// let app = App::builder(config).registered().management().start().await?;
    /// println!("management on {:?}", app.management_address());
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "management")]
    pub fn management(mut self) -> Self {
        if self.parts.management.is_some() {
            return self;
        }
        if let Some(pending) = super::management::Pending::of(&self.parts.config.management) {
            if let Some(metrics) = &pending.metrics {
                self.parts
                    .observers
                    .push(Arc::new(super::management::MetricsObserver::new(metrics)));
            }
            self.parts.management = Some(pending);
        }
        self
    }

    /// How long startup may wait for brokers that cannot be reached before it fails (default:
    /// `spring.cloud.stream.startupTimeout`, else for ever; zero is for ever too). A broker
    /// that answers and refuses fails startup at once whatever this says.
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.parts.startup_timeout = Some(timeout);
        self
    }

    /// How long shutdown waits for handlers in progress (default 30 s).
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.parts.shutdown_timeout = timeout;
        self
    }

    /// Checks everything, binds each output and input on its binder, subscribes, and starts
    /// consuming. Every problem is reported at once.
    pub async fn start(self) -> Result<RunningApp, StartupError> {
        start::start(self.parts).await
    }
}
