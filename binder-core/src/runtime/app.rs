//! The application: configuration plus handlers, started on binders, run until shutdown.

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio::sync::{Mutex, Semaphore, watch};
use tokio::task::JoinHandle;

use super::consumer::{DeadLetterTarget, ErrorHook, Failure, InputRuntime, Route};
use super::error::StartupError;
use super::handler::Handler;
use super::inflight::Inflight;
use super::lifecycle::{BindingState, ControlError};
use super::output::{Output, OutputInner, Publisher};
use super::queue::run_queue;
use super::retry::BackOff;
use crate::binder::{Binder, ProducerSpec, SubscriptionSpec, registered};
use crate::codec::{Codec, Codecs};
use crate::config::{AcknowledgeMode, StreamConfig};
use crate::topology::{anonymous_suffix, plan_consumer};

/// How long, and with what report, startup waits for an unreachable broker.
#[derive(Debug, Clone, Default)]
pub(crate) struct Patience {
    /// Where to report what startup waits for.
    pub health: Option<super::health::Health>,
    /// When to give up (`spring.cloud.stream.startupTimeout`), and that limit.
    pub deadline: Option<(tokio::time::Instant, Duration)>,
}

/// Runs a binder operation, waiting (with back-off, up to 10 s between tries) while the
/// broker cannot be reached: a service started before its broker comes up when the broker
/// does, unless `patience` has a deadline and it passes. Other errors return at once.
pub(crate) async fn when_reachable<T, F, Fut>(
    what: &str,
    patience: &Patience,
    op: F,
) -> crate::binder::BinderResult<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = crate::binder::BinderResult<T>>,
{
    let mut wait = Duration::from_millis(250);
    let health = patience.health.as_ref();
    loop {
        // A try that outlives the deadline (a connect waiting for `connection-timeout`) is
        // given up with it.
        let attempt = match patience.deadline {
            Some((deadline, limit)) => match tokio::time::timeout_at(deadline, op()).await {
                Ok(result) => result,
                Err(_) => {
                    return Err(crate::binder::BinderError::unreachable(format!(
                        "no answer; gave up after spring.cloud.stream.startupTimeout ({limit:?})"
                    )));
                }
            },
            None => op().await,
        };
        match attempt {
            Err(e) if e.kind() == crate::binder::BinderErrorKind::Unreachable => {
                if let Some((deadline, limit)) = patience.deadline {
                    let now = tokio::time::Instant::now();
                    if now >= deadline {
                        return Err(e.with_note(format!(
                            "gave up after spring.cloud.stream.startupTimeout ({limit:?})"
                        )));
                    }
                    wait = wait.min(deadline - now);
                }
                tracing::warn!(%what, error = %e, ?wait, "broker unreachable; waiting for it");
                if let Some(h) = health {
                    h.set(super::health::HealthStatus::Starting {
                        waiting: Some(format!("{what}: {e}")),
                    });
                }
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(10));
            }
            other => {
                if let Some(h) = health {
                    h.set(super::health::HealthStatus::Starting { waiting: None });
                }
                return other;
            }
        }
    }
}

/// The binders of an application: instances given in code, and those created from the
/// configuration through their registration, one per binder configuration.
pub(crate) struct Binders {
    explicit: HashMap<String, Arc<dyn Binder>>,
    created: StdMutex<HashMap<String, Arc<dyn Binder>>>,
    /// Binder configurations whose environment an instance given in code has taken.
    configured: StdMutex<std::collections::HashSet<String>>,
}

impl std::fmt::Debug for Binders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Binders")
            .field("explicit", &self.explicit.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Binders {
    /// The binder that carries a binding.
    pub(crate) fn for_binding(
        &self,
        config: &StreamConfig,
        binding: &str,
    ) -> Result<Arc<dyn Binder>, String> {
        let name = config.binder_for(binding);
        let binder_type = config.binder_type(&name);
        if let Some(b) = self
            .explicit
            .get(&name)
            .or_else(|| self.explicit.get(&binder_type))
        {
            // Once per binder configuration and application, not per binding or destination.
            let first = self
                .configured
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(name.clone());
            if first {
                if let Err(e) = b.configure(&config.binder_environment(&name)) {
                    return Err(format!(
                        "binding `{binding}`: binder `{name}` given in code: {e}"
                    ));
                }
            }
            return Ok(b.clone());
        }
        let mut created = self.created.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = created.get(&name) {
            return Ok(b.clone());
        }
        let Some(registration) = registered().find(|r| r.binder_type == binder_type) else {
            let mut available: Vec<&str> = registered().map(|r| r.binder_type).collect();
            available.extend(self.explicit.keys().map(String::as_str));
            available.sort_unstable();
            available.dedup();
            return Err(format!(
                "binding `{binding}` uses binder `{name}` (type `{binder_type}`), which is not available in this program (available: {}); add the binder crate as a dependency or give an instance with AppBuilder::binder",
                if available.is_empty() {
                    "none".to_owned()
                } else {
                    available.join(", ")
                }
            ));
        };
        let env = config.binder_environment(&name);
        let binder = (registration.create)(&env)
            .map_err(|e| format!("binding `{binding}`: cannot create binder `{name}`: {e}"))?;
        created.insert(name, binder.clone());
        Ok(binder)
    }

    /// The binders this application created (and so closes); instances given with
    /// `AppBuilder::binder` belong to the caller, who may share them between applications.
    fn owned(&self) -> Vec<Arc<dyn Binder>> {
        self.created
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }
}

/// How the startup log names a binding's binder: its configuration name, type and broker.
fn binder_line(config: &StreamConfig, binding: &str, binder: &Arc<dyn Binder>) -> String {
    let name = config.binder_for(binding);
    let binder_type = binder.binder_type();
    let name = if name == binder_type {
        format!("binder `{name}`")
    } else {
        format!("binder `{name}` (type {binder_type})")
    };
    format!("{name} on {}", binder.describe())
}

struct Listener {
    name: String,
    input: String,
    output: Option<String>,
    condition: Option<String>,
    states: &'static [super::registry::StateType],
    handler: Arc<dyn Handler>,
}

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
    config: StreamConfig,
    binders: HashMap<String, Arc<dyn Binder>>,
    listeners: Vec<Listener>,
    outputs: Vec<String>,
    codecs: Codecs,
    hook: Option<ErrorHook>,
    shutdown_timeout: Duration,
    startup_timeout: Option<Duration>,
    state: HashMap<std::any::TypeId, Arc<dyn std::any::Any + Send + Sync>>,
    health: super::health::Health,
}

impl std::fmt::Debug for AppBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppBuilder")
            .field(
                "listeners",
                &self.listeners.iter().map(|l| &l.input).collect::<Vec<_>>(),
            )
            .field("outputs", &self.outputs)
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
            config,
            binders: HashMap::new(),
            listeners: Vec::new(),
            outputs: Vec::new(),
            codecs: Codecs::default(),
            hook: None,
            shutdown_timeout: Duration::from_secs(30),
            startup_timeout: None,
            state: HashMap::new(),
            health: super::health::Health::default(),
        }
    }
}

impl AppBuilder {
    /// Uses this binder instance for a binder configuration name or type (instead of
    /// creating one from the configuration). The caller owns it: shutdown leaves it open, so
    /// several applications can share it.
    pub fn binder(mut self, name_or_type: impl Into<String>, binder: Arc<dyn Binder>) -> Self {
        self.binders.insert(name_or_type.into(), binder);
        self
    }

    /// Handles messages of an input binding.
    pub fn listener(mut self, input: impl Into<String>, handler: impl Handler) -> Self {
        let input = input.into();
        self.listeners.push(Listener {
            name: format!("listener of `{input}`"),
            input,
            output: None,
            condition: None,
            states: &[],
            handler: Arc::new(handler),
        });
        self
    }

    /// Handles the messages of an input binding whose headers meet `condition` (see
    /// [`super::Condition`]). Several listeners can share a binding: a message goes to the one
    /// whose condition matches, else to the binding's listener without a condition; none or
    /// several matching is a failure (dead-letter path), never a silent drop.
    pub fn listener_when(
        mut self,
        input: impl Into<String>,
        condition: impl Into<String>,
        handler: impl Handler,
    ) -> Self {
        let (input, condition) = (input.into(), condition.into());
        self.listeners.push(Listener {
            name: format!("listener of `{input}` when {condition}"),
            input,
            output: None,
            condition: Some(condition),
            states: &[],
            handler: Arc::new(handler),
        });
        self
    }

    /// Adds a listener declared with `#[stream_listener]` (its nameable value), for tests and
    /// for libraries whose `inventory` registrations the linker may drop.
    pub fn register(mut self, def: &super::registry::ListenerDef) -> Self {
        for out in def.output.iter().chain(def.uses.iter()) {
            if !self.outputs.iter().any(|o| o == out) {
                self.outputs.push((*out).to_owned());
            }
        }
        self.listeners.push(Listener {
            name: def.name.to_owned(),
            input: def.input.to_owned(),
            output: def.output.map(str::to_owned),
            condition: def.condition.map(str::to_owned),
            states: def.states,
            handler: (def.handler)(),
        });
        self
    }

    /// The configuration the application starts with.
    pub fn config(&self) -> &StreamConfig {
        &self.config
    }

    /// The application's health, available before `start` so a service can report that it
    /// waits for its broker; `RunningApp::health` returns the same handle.
    pub fn health(&self) -> super::health::Health {
        self.health.clone()
    }

    /// Shares a value with every handler (`State<T>` arguments, `Context::state`).
    pub fn state<T: Send + Sync + 'static>(self, value: T) -> Self {
        self.shared_state(Arc::new(value))
    }

    /// Shares a value that other applications of the process share too.
    pub fn shared_state<T: Send + Sync + 'static>(mut self, value: Arc<T>) -> Self {
        self.state.insert(std::any::TypeId::of::<T>(), value);
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
        if !self.outputs.contains(&output) {
            self.outputs.push(output.clone());
        }
        let input = input.into();
        self.listeners.push(Listener {
            name: format!("processor of `{input}`"),
            input,
            output: Some(output),
            condition: None,
            states: &[],
            handler: Arc::new(handler),
        });
        self
    }

    /// Declares an output binding the application sends to.
    pub fn output(mut self, binding: impl Into<String>) -> Self {
        let binding = binding.into();
        if !self.outputs.contains(&binding) {
            self.outputs.push(binding);
        }
        self
    }

    /// Registers a codec for a content type.
    pub fn codec(mut self, codec: impl Codec) -> Self {
        self.codecs.register(codec);
        self
    }

    /// Observes failures (it cannot change what happens to the message).
    pub fn on_error(mut self, hook: impl Fn(&Failure) + Send + Sync + 'static) -> Self {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// How long startup may wait for brokers that cannot be reached before it fails (default:
    /// `spring.cloud.stream.startupTimeout`, else for ever; zero is for ever too). A broker
    /// that answers and refuses fails startup at once whatever this says.
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = Some(timeout);
        self
    }

    /// How long shutdown waits for handlers in progress (default 30 s).
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// Problems found before anything connects.
    fn check(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut inputs: Vec<&str> = Vec::new();
        for l in &self.listeners {
            if let Some(c) = &l.condition {
                if let Err(e) = super::condition::Condition::parse(c) {
                    problems.push(format!("{} of binding `{}`: {e}", l.name, l.input));
                }
            }
            let unconditional = self
                .listeners
                .iter()
                .filter(|o| o.input == l.input && o.condition.is_none())
                .count();
            if unconditional > 1 && !inputs.contains(&l.input.as_str()) {
                problems.push(format!(
                    "binding `{}` has {unconditional} listeners without a condition; at most one can take what no condition matches",
                    l.input
                ));
            }
            if !inputs.contains(&l.input.as_str()) {
                inputs.push(&l.input);
            }
            for state in l.states {
                if !self.state.contains_key(&state.id()) {
                    problems.push(format!(
                        "listener `{}` of binding `{}` takes `State<{}>`, but no state of that type is registered; add it with AppBuilder::state (or in run_service_with's hook)",
                        l.name,
                        l.input,
                        state.name()
                    ));
                }
            }
            if self.outputs.contains(&l.input) {
                problems.push(format!(
                    "binding `{}` is used both as an input and as an output",
                    l.input
                ));
            }
        }
        for name in self.config.bindings.keys() {
            if !inputs.contains(&name.as_str()) && !self.outputs.contains(name) {
                problems.push(format!(
                    "binding `{name}` is configured but no listener or output uses it (bindings in use: {})",
                    inputs
                        .iter()
                        .copied()
                        .chain(self.outputs.iter().map(String::as_str))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        for input in &inputs {
            let b = self.config.binding(input);
            if b.consumer.batch_mode {
                problems.push(format!(
                    "binding `{input}`: consumer.batchMode is not supported yet"
                ));
            }
        }
        for output in &self.outputs {
            let b = self.config.binding(output);
            if let Err(e) = OutputInner::check(&b) {
                problems.push(e);
            }
        }
        problems
    }

    /// Checks everything, provisions topology, opens producers and subscriptions, and starts
    /// consuming. Every problem is reported at once.
    pub async fn start(self) -> Result<RunningApp, StartupError> {
        let tracker = super::health::HealthTracker::new(self.health.clone());
        let result = self.start_inner(tracker.clone()).await;
        match &result {
            // Up, unless a binding is already recovering (a missing queue, a lost connection).
            Ok(_) => tracker.started(),
            Err(e) => tracker.closed(e.to_string()),
        }
        result
    }

    async fn start_inner(
        self,
        tracker: super::health::HealthTracker,
    ) -> Result<RunningApp, StartupError> {
        let health = self.health.clone();
        // Zero means no limit, in code as in `spring.cloud.stream.startupTimeout: 0`.
        let limit = self
            .startup_timeout
            .or(self.config.startup_timeout)
            .filter(|l| !l.is_zero());
        let patience = Patience {
            health: Some(health.clone()),
            deadline: limit.map(|l| (tokio::time::Instant::now() + l, l)),
        };
        let mut problems = self.check();
        let binders = Arc::new(Binders {
            explicit: self.binders,
            created: StdMutex::new(HashMap::new()),
            configured: StdMutex::new(Default::default()),
        });
        let config = Arc::new(self.config);
        let codecs = Arc::new(self.codecs);

        let mut resolved: HashMap<String, Arc<dyn Binder>> = HashMap::new();
        for name in self
            .listeners
            .iter()
            .map(|l| &l.input)
            .chain(self.outputs.iter())
        {
            match binders.for_binding(&config, name) {
                Ok(b) => {
                    resolved.insert(name.clone(), b);
                }
                Err(e) => problems.push(e),
            }
        }
        if !problems.is_empty() {
            return Err(StartupError { problems });
        }

        let mut ready: Vec<String> = Vec::new();
        let mut outputs: HashMap<String, Arc<OutputInner>> = HashMap::new();
        for name in &self.outputs {
            let binding = config.binding(name);
            match OutputInner::open(&binding, &resolved[name], codecs.clone(), &patience).await {
                Ok(o) => {
                    ready.push(format!(
                        "output binding `{name}`: {}, destination `{}`",
                        binder_line(&config, name, &resolved[name]),
                        binding.destination
                    ));
                    outputs.insert(name.clone(), Arc::new(o));
                }
                Err(e) => problems.push(e),
            }
        }

        let inflight = Arc::new(Inflight::default());
        let context = Arc::new(super::bindings::Context {
            outputs: outputs
                .iter()
                .map(|(k, v)| (k.clone(), Output { inner: v.clone() }))
                .collect(),
            state: self.state,
        });
        // One input runtime per binding, with a route per listener.
        let mut by_input: Vec<(String, Vec<Listener>)> = Vec::new();
        for l in self.listeners {
            match by_input.iter_mut().find(|(i, _)| *i == l.input) {
                Some((_, ls)) => ls.push(l),
                None => by_input.push((l.input.clone(), vec![l])),
            }
        }
        let mut inputs = HashMap::new();
        let mut tasks = Vec::new();
        for (input, listeners) in by_input {
            let binding = config.binding(&input);
            let binder = resolved[&input].clone();
            let topology = plan_consumer(&binding, &anonymous_suffix());
            let what = format!("binding `{input}`");
            if let Err(e) =
                when_reachable(&what, &patience, || binder.provision(&topology.plan)).await
            {
                problems.push(format!("binding `{input}`: {e}"));
                continue;
            }
            let rabbit = &binding.rabbit_consumer;
            let dead_letter = match &topology.dead_letter {
                Some((exchange, routing_key))
                    if rabbit.republish_to_dlq && rabbit.common.auto_bind_dlq =>
                {
                    let spec = ProducerSpec {
                        exchange: exchange.clone(),
                        delivery_mode: rabbit.republish_delivery_mode,
                    };
                    match when_reachable(&what, &patience, || binder.producer(spec.clone())).await {
                        Ok(producer) => Some(DeadLetterTarget {
                            producer,
                            exchange: exchange.clone(),
                            routing_key: routing_key.clone(),
                        }),
                        Err(e) => {
                            problems.push(format!("binding `{input}`: {e}"));
                            continue;
                        }
                    }
                }
                _ => None,
            };
            let initial = if binding.consumer.auto_startup {
                BindingState::Running
            } else {
                BindingState::Stopped
            };
            let (desired, _) = watch::channel(initial);
            let mut actual = Vec::new();
            let routes = listeners
                .into_iter()
                .map(|l| Route {
                    condition: l
                        .condition
                        .as_deref()
                        .and_then(|c| super::condition::Condition::parse(c).ok()),
                    output: l.output.as_ref().and_then(|o| outputs.get(o).cloned()),
                    handler: l.handler,
                    name: l.name,
                })
                .collect();
            let runtime = Arc::new(InputRuntime {
                name: Arc::from(input.as_str()),
                routes,
                context: context.clone(),
                dead_letter,
                codecs: codecs.clone(),
                hook: self.hook.clone(),
                backoff: BackOff::of(&binding.consumer),
                permits: Arc::new(Semaphore::new(binding.consumer.concurrency as usize)),
                inflight: inflight.clone(),
                health: tracker.clone(),
                content_type: Arc::from(binding.content_type.as_str()),
                config: binding.clone(),
            });
            for (i, queue) in topology.queues.iter().enumerate() {
                let spec = SubscriptionSpec {
                    queue: queue.clone(),
                    prefetch: rabbit.prefetch,
                    auto_ack: rabbit.acknowledge_mode == AcknowledgeMode::None,
                    exclusive: rabbit.exclusive,
                    consumer_tag: rabbit
                        .consumer_tag_prefix
                        .as_ref()
                        .map(|p| format!("{p}#{i}")),
                };
                let (reported, seen) = watch::channel(BindingState::Stopped);
                actual.push(seen);
                tasks.push(tokio::spawn(run_queue(
                    runtime.clone(),
                    binder.clone(),
                    spec,
                    desired.subscribe(),
                    reported,
                )));
            }
            ready.push(format!(
                "input binding `{input}`: {}, destination `{}`, {}, queue{} {}",
                binder_line(&config, &input, &binder),
                binding.destination,
                match &binding.group {
                    Some(g) => format!("group `{g}`"),
                    None => "no group (anonymous)".to_owned(),
                },
                if topology.queues.len() == 1 { "" } else { "s" },
                topology
                    .queues
                    .iter()
                    .map(|q| format!("`{q}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            inputs.insert(input.clone(), InputControl { desired, actual });
        }
        if !problems.is_empty() {
            for t in &tasks {
                t.abort();
            }
            for b in binders.owned() {
                b.close().await;
            }
            return Err(StartupError { problems });
        }
        for line in &ready {
            tracing::info!("{line}");
        }
        // Each binder hears of its bindings once everything is provisioned, so that what it
        // says about one (the embedded binder's durability warnings) sees the whole topology.
        use crate::topology::BindingRole;
        let mut bound: Vec<(&String, BindingRole)> = outputs
            .keys()
            .map(|name| (name, BindingRole::Producer))
            .chain(inputs.keys().map(|name| (name, BindingRole::Consumer)))
            .collect();
        bound.sort_by(|a, b| a.0.cmp(b.0));
        for (name, role) in bound {
            resolved[name].bound(&config.binding(name), role);
        }
        let outputs = Arc::new(outputs);
        let publisher = Publisher {
            outputs: outputs.clone(),
            dynamic: Arc::new(Mutex::new(HashMap::new())),
            config: config.clone(),
            binders: binders.clone(),
            codecs,
        };
        Ok(RunningApp {
            inputs,
            outputs,
            publisher,
            binders,
            tasks: Mutex::new(tasks),
            inflight,
            shutdown_timeout: self.shutdown_timeout,
            health: tracker,
        })
    }
}

/// The control of an input binding: the state asked for, and the state each of its queue
/// loops has reached.
#[derive(Debug)]
struct InputControl {
    desired: watch::Sender<BindingState>,
    actual: Vec<watch::Receiver<BindingState>>,
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
    inputs: HashMap<String, InputControl>,
    outputs: Arc<HashMap<String, Arc<OutputInner>>>,
    publisher: Publisher,
    binders: Arc<Binders>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    inflight: Arc<Inflight>,
    shutdown_timeout: Duration,
    health: super::health::HealthTracker,
}

impl RunningApp {
    /// The application's health (up until shutdown).
    pub fn health(&self) -> super::health::Health {
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
            if o.stopped.load(std::sync::atomic::Ordering::Acquire) {
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
                o.stopped.store(
                    state == BindingState::Stopped,
                    std::sync::atomic::Ordering::Release,
                );
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
            output
                .stopped
                .store(true, std::sync::atomic::Ordering::Release);
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
