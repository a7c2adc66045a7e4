//! Starting an application: the checks, the binders, then each output's producer and each
//! input's consumer bound on its binder (which prepares what its middleware needs), their
//! failure policies and queue loops; every problem found is reported at once.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tokio::sync::{Mutex, Semaphore, watch};
use tokio::task::JoinHandle;

use super::binders::Binders;
use super::bindings::Context;
use super::blueprint::{Blueprint, Listener};
use super::check;
use super::control::{BindingInfo, Control, InputControl};
use super::document::LazyDocument;
use super::health::HealthTracker;
use super::inflight::Inflight;
use super::input::delivery::InputRuntime;
use super::input::failure::FailurePolicy;
use super::input::queue_loop::run_queue;
use super::input::route::{Route, Routes};
use super::lifecycle::{BindingState, Desired};
use super::observe::Observers;
use super::output::{Output, OutputInner, Publisher};
use super::patience::{Patience, when_reachable};
use super::retry::BackOff;
use super::running::RunningApp;
use super::spel::syntax::ast::Condition;
use super::startup::{StartupError, StartupProblem};
use crate::binder::{Binder, BindingRole, BoundConsumer};
use crate::config::{AcknowledgeMode, BindingConfig};

/// Checks, binds each binding on its binder and subscribes; the application's health follows.
#[cfg_attr(not(feature = "management"), allow(unused_mut, unused_variables))]
pub(crate) async fn start(mut app: Blueprint) -> Result<RunningApp, StartupError> {
    let tracker = HealthTracker::new(app.health.clone());
    // Built when first asked for, from what it says as of now.
    let asyncapi = Arc::new(LazyDocument::new(app.document_plan()));
    // The management server listens first, so a probe sees the startup.
    #[cfg(feature = "management")]
    let management = match app.management.take() {
        Some(pending) => {
            match super::management::ManagementServer::start(
                pending,
                app.health.clone(),
                asyncapi.clone(),
            )
            .await
            {
                Ok(server) => Some(server),
                Err(e) => {
                    let e = StartupError::new(vec![StartupProblem::Management(e)]);
                    tracker.closed(e.to_string());
                    return Err(e);
                }
            }
        }
        None => None,
    };
    let mut result = launch(app, tracker.clone(), asyncapi).await;
    match &mut result {
        // Up, unless a binding is already recovering (a missing queue, a lost connection).
        Ok(running) => {
            #[cfg(feature = "management")]
            if let Some(server) = management {
                server.attach(running.control.clone());
                running.management = Some(server);
            }
            tracker.started()
        }
        Err(e) => {
            tracker.closed(e.to_string());
            #[cfg(feature = "management")]
            if let Some(server) = management {
                server.stop().await;
            }
        }
    }
    result
}

/// The binder a binding resolved to, with the configuration name (or bare type) that chose
/// it: looked up once per binding, then read by the log, the bindings endpoint and the list
/// of binders in use.
struct Resolved<'c> {
    /// Shared by every binding of the binder configuration.
    name: Arc<str>,
    binder: Arc<dyn Binder>,
    /// The binding's configuration, looked up once (borrowed when configured).
    config: Cow<'c, BindingConfig>,
}

/// How the startup log names a binding's binder: its configuration name, type and broker.
fn binder_line(resolved: &Resolved<'_>) -> String {
    let (name, binder) = (&*resolved.name, &resolved.binder);
    let binder_type = binder.binder_type();
    let name = if name == binder_type {
        format!("binder `{name}`")
    } else {
        format!("binder `{name}` (type {binder_type})")
    };
    format!("{name} on {}", binder.describe())
}

async fn launch(
    app: Blueprint,
    tracker: HealthTracker,
    asyncapi: Arc<LazyDocument>,
) -> Result<RunningApp, StartupError> {
    // Zero means no limit, in code as in `spring.cloud.stream.startupTimeout: 0`.
    let limit = app
        .startup_timeout
        .or(app.config.startup_timeout)
        .filter(|l| !l.is_zero());
    let patience = Patience {
        health: Some(app.health.clone()),
        deadline: limit.map(|l| (tokio::time::Instant::now() + l, l)),
    };
    let mut problems = check::problems(&app);
    let binders = Arc::new(Binders::new(app.binders));
    let config = app.config;
    let codecs = Arc::new(app.codecs);
    let observers = Observers::new(app.observers);

    let mut resolved: HashMap<String, Resolved<'_>> = HashMap::new();
    // Each binder configuration is looked up once; a binding whose lookup failed is looked
    // up again, so that every binding of an unavailable binder is reported.
    // By binder configuration name (or bare type): the shared name and the binder.
    let mut found: HashMap<String, (Arc<str>, Arc<dyn Binder>)> = HashMap::new();
    for name in app
        .listeners
        .iter()
        .map(|l| &l.input)
        .chain(app.outputs.iter())
    {
        if resolved.contains_key(name) {
            continue;
        }
        let binder_name = config.binder_for(name);
        if let Some((shared, binder)) = found.get(&binder_name) {
            resolved.insert(
                name.clone(),
                Resolved {
                    name: shared.clone(),
                    binder: binder.clone(),
                    config: config.binding_ref(name),
                },
            );
            continue;
        }
        match binders.for_binding(&config, name) {
            Ok(binder) => {
                let shared: Arc<str> = Arc::from(binder_name.as_str());
                found.insert(binder_name, (shared.clone(), binder.clone()));
                resolved.insert(
                    name.clone(),
                    Resolved {
                        name: shared,
                        binder,
                        config: config.binding_ref(name),
                    },
                );
            }
            Err(e) => problems.push(e.into()),
        }
    }
    if !problems.is_empty() {
        return Err(StartupError::new(problems));
    }
    // Each binding's number in events (`Received::binding_index`): its place among the
    // bindings sorted by name, the order of `Control::bindings` too.
    // Sorted once: the bindings are bound, and listed for the bindings endpoint, in this order.
    let mut names: Vec<&str> = resolved.keys().map(String::as_str).collect();
    names.sort_unstable();
    let index_of_binding: HashMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, name)| (*name, i))
        .collect();
    let observers_of = |name: &str| observers.for_binding(index_of_binding[name]);

    // The startup log's lines, formatted only when they are logged.
    let log_ready = tracing::enabled!(tracing::Level::INFO);
    let mut ready: Vec<String> = Vec::new();
    let mut outputs: HashMap<String, Arc<OutputInner>> = HashMap::new();
    for name in &app.outputs {
        let binder = &resolved[name];
        let binding = &binder.config;
        match OutputInner::open(
            binding,
            &binder.binder,
            codecs.clone(),
            &patience,
            observers_of(name),
        )
        .await
        {
            Ok(o) => {
                if log_ready {
                    ready.push(format!(
                        "output binding `{name}`: {}, destination `{}`",
                        binder_line(binder),
                        binding.destination
                    ));
                }
                outputs.insert(name.clone(), Arc::new(o));
            }
            Err(e) => problems.push(e.into()),
        }
    }

    let output_failed = !problems.is_empty();
    let inflight = Arc::new(Inflight::default());
    let context = Arc::new(Context {
        outputs: outputs
            .iter()
            .map(|(k, v)| (k.clone(), Output { inner: v.clone() }))
            .collect(),
        state: app.state,
    });
    // One input runtime per binding, with a route per listener.
    let mut by_input: Vec<(String, Vec<Listener>)> = Vec::new();
    let mut index_of: HashMap<String, usize> = HashMap::new();
    for l in app.listeners {
        match index_of.get(&l.input) {
            Some(&i) => by_input[i].1.push(l),
            None => {
                index_of.insert(l.input.clone(), by_input.len());
                by_input.push((l.input.clone(), vec![l]));
            }
        }
    }
    let mut inputs = HashMap::new();
    let mut loops = Vec::new();
    for (input, listeners) in by_input {
        let resolution = &resolved[&input];
        let binding = &resolution.config;
        let binder = &resolution.binder;
        let what = format!("binding `{input}`");
        let consumer: Arc<dyn BoundConsumer> =
            match when_reachable(&what, &patience, || binder.bind_consumer(binding)).await {
                Ok(consumer) => Arc::from(consumer),
                Err(e) => {
                    problems.push(StartupProblem::Input {
                        binding: input.clone(),
                        source: e,
                    });
                    continue;
                }
            };
        let initial = if binding.consumer.auto_startup {
            BindingState::Running
        } else {
            BindingState::Stopped
        };
        let mut desired = Desired::new(initial);
        let mut actual = Vec::new();
        let name: Arc<str> = Arc::from(input.as_str());
        let mut routes = Vec::with_capacity(listeners.len());
        for l in listeners {
            let handler = match l.handler.build(&context) {
                Ok(h) => h,
                Err(e) => {
                    // Only an output that failed to open (already reported) can be missing.
                    if !output_failed {
                        problems.push(StartupProblem::Check(format!(
                            "listener `{}` of binding `{input}`: {e}",
                            l.name
                        )));
                    }
                    continue;
                }
            };
            routes.push(Route {
                // Checked before anything connected: a condition that does not parse
                // stopped the start.
                condition: l
                    .condition
                    .as_deref()
                    .and_then(|c| Condition::parse(c).ok()),
                output: l.output.as_ref().and_then(|o| outputs.get(o).cloned()),
                handler,
                name: l.name,
            });
        }
        let batch = if binding.consumer.batch_mode {
            match batch_problem(&input, &routes, consumer.as_ref()) {
                Some(problem) => {
                    problems.push(StartupProblem::Check(problem));
                    continue;
                }
                None => consumer.batching(),
            }
        } else {
            None
        };
        let runtime = Arc::new(InputRuntime {
            batch,
            name: name.clone(),
            routes: Routes::new(name.clone(), routes),
            context: context.clone(),
            failure: FailurePolicy::new(
                name.clone(),
                consumer.clone(),
                app.hook.clone(),
                observers_of(&input),
            ),
            codecs: codecs.clone(),
            backoff: BackOff::of(&binding.consumer),
            permits: Arc::new(Semaphore::new(binding.consumer.concurrency as usize)),
            inflight: inflight.clone(),
            health: tracker.clone(),
            content_type: Arc::from(binding.content_type.as_str()),
            observers: observers_of(&input),
            acknowledge_mode: consumer.acknowledge_mode(),
            destination: Arc::from(binding.destination.as_str()),
            concurrency: binding.consumer.concurrency,
            default_retryable: binding.consumer.default_retryable,
            retryable_exceptions: binding.consumer.retryable_exceptions.clone(),
        });
        for index in 0..consumer.sources().len() {
            let (reported, seen) = watch::channel(BindingState::Stopped);
            actual.push(seen);
            loops.push(run_queue(
                runtime.clone(),
                consumer.clone(),
                index,
                desired.watch(),
                reported,
            ));
        }
        if log_ready {
            ready.push(format!(
                "input binding `{input}`: {}, destination `{}`, {}, queue{} {}",
                binder_line(resolution),
                binding.destination,
                match &binding.group {
                    Some(g) => format!("group `{g}`"),
                    None => "no group (anonymous)".to_owned(),
                },
                if consumer.sources().len() == 1 {
                    ""
                } else {
                    "s"
                },
                consumer
                    .sources()
                    .iter()
                    .map(|q| format!("`{q}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        inputs.insert(input.clone(), InputControl { desired, actual });
    }
    if !problems.is_empty() {
        // No queue loop has started: dropping them leaves every queue unconsumed.
        drop(loops);
        for b in binders.owned() {
            b.close().await;
        }
        return Err(StartupError::new(problems));
    }
    let tasks = spawn_all(loops).await;
    for line in &ready {
        tracing::info!("{line}");
    }
    // Each binder hears of its bindings once everything is provisioned, so that what it
    // says about one (the embedded binder's durability warnings) sees the whole topology.
    // Every binding was bound (a failure returned above): each is an output or an input.
    for name in &names {
        let role = if outputs.contains_key(*name) {
            BindingRole::Producer
        } else {
            BindingRole::Consumer
        };
        let resolution = &resolved[*name];
        resolution.binder.bound(&resolution.config, role);
    }
    let outputs = Arc::new(outputs);
    let publisher = Publisher {
        outputs: outputs.clone(),
        dynamic: Arc::new(Mutex::new(HashMap::new())),
        config: config.clone(),
        binders: binders.clone(),
        codecs,
        observers: observers.clone(),
    };
    let control = Arc::new(Control::new(
        inputs,
        outputs.clone(),
        observers,
        binding_infos(&names, &resolved, &app.outputs),
        binders_in_use(&found),
    ));
    Ok(RunningApp {
        control,
        outputs,
        publisher,
        binders,
        tasks: Mutex::new(tasks),
        inflight,
        shutdown_timeout: app.shutdown_timeout,
        health: tracker,
        asyncapi,
        #[cfg(feature = "management")]
        management: None,
    })
}

/// What each binding is, for the bindings endpoint, sorted by name: a binding's place here
/// is its number in events.
fn binding_infos(
    sorted: &[&str],
    resolved: &HashMap<String, Resolved<'_>>,
    outputs: &[String],
) -> Vec<BindingInfo> {
    let outputs: HashSet<&str> = outputs.iter().map(String::as_str).collect();
    sorted
        .iter()
        .map(|name| {
            let resolution = &resolved[*name];
            let binding = &resolution.config;
            BindingInfo {
                name: (*name).to_owned(),
                destination: binding.destination.clone(),
                group: binding.group.clone(),
                input: !outputs.contains(name),
                binder: resolution.name.to_string(),
                binder_type: resolution.binder.binder_type().to_owned(),
            }
        })
        .collect()
}

/// Spawns the queue loops from a task of the runtime, where each spawn goes to its worker's
/// queue; spawned from outside the runtime (`start` awaited in `block_on`, as `#[tokio::main]`
/// does), each spawn would wake a parked worker, a system call per queue.
async fn spawn_all<F>(loops: Vec<F>) -> Vec<JoinHandle<()>>
where
    F: Future<Output = ()> + Send + 'static,
{
    let spawner = tokio::spawn(async move { loops.into_iter().map(tokio::spawn).collect() });
    match spawner.await {
        Ok(tasks) => tasks,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // The runtime is shutting down: the loops were dropped with the spawner.
        Err(_) => Vec::new(),
    }
}

/// The binders the bindings use, by configuration name (or bare type), each once, sorted.
fn binders_in_use(
    found: &HashMap<String, (Arc<str>, Arc<dyn Binder>)>,
) -> Vec<(String, Arc<dyn Binder>)> {
    let mut out: Vec<(String, Arc<dyn Binder>)> = found
        .iter()
        .map(|(name, (_, binder))| (name.clone(), binder.clone()))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Why a `consumer.batchMode` binding cannot run, if it cannot: its binder assembles no
/// batches, or its listeners are not one that takes batches.
fn batch_problem(input: &str, routes: &[Route], consumer: &dyn BoundConsumer) -> Option<String> {
    match consumer.batching() {
        None => {
            return Some(format!(
                "binding `{input}`: consumer.batchMode is set, but its binder assembles no batches"
            ));
        }
        Some(b) if b.size == 0 => {
            return Some(format!(
                "binding `{input}`: its binder gives a batch size of 0"
            ));
        }
        Some(_) => {}
    }
    if consumer.acknowledge_mode() == AcknowledgeMode::Manual {
        return Some(format!(
            "binding `{input}` (consumer.batchMode): acknowledgeMode MANUAL cannot go with batches, which the runtime settles after the listener"
        ));
    }
    if routes.len() > 1 || routes.iter().any(|r| r.condition.is_some()) {
        let names: Vec<&str> = routes.iter().map(|r| r.name.as_str()).collect();
        return Some(format!(
            "binding `{input}` (consumer.batchMode): a batch goes to one listener without a condition, but it has {}",
            names.join(", ")
        ));
    }
    routes.iter().find(|r| !r.handler.takes_batches()).map(|r| {
        // A builder's listener is named `listener of `<input>``, a macro's by its function.
        let listener = if r.name.contains('`') {
            r.name.clone()
        } else {
            format!("listener `{}`", r.name)
        };
        format!(
            "binding `{input}` (consumer.batchMode): its {listener} takes one message at a time: give it a `Vec<...>` payload argument, its other arguments `Out<...>` or `State<...>` (or build it with `handler::batch`)"
        )
    })
}
