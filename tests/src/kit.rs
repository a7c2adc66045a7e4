//! The harness: targets (binders under test), per-case environments, the runner and the
//! suite macro.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use binder_amqp::topology;
use binder_amqp::{AmqpBroker, SubscriptionSpec};
use binder_core::binder::{Backlog, Binder, BoundConsumer, Inbound, Producer, Subscription};
use binder_core::config::{ConfigLoader, StreamConfig};
use binder_core::runtime::{App, AppBuilder, RunningApp};

/// What a binder may legitimately not promise: cases it skips, each with the reason.
#[derive(Debug, Clone, Default)]
pub struct Capabilities {
    /// `(case name, reason)` of each case that does not apply to this binder.
    pub skips: Vec<(&'static str, &'static str)>,
}

/// A binder under test, and its broker-level AMQP side if it has one (the cases that declare
/// topology, consume queues directly or count a queue's messages need it; a target without
/// one skips them in its [`Capabilities`]).
#[derive(Debug)]
pub struct KitBinder {
    /// The binder, as the runtime uses it.
    pub binder: Arc<dyn Binder>,
    /// The same binder as an AMQP broker, if it is one.
    pub amqp: Option<Arc<dyn AmqpBroker>>,
    /// The broker the binder talks to, when the target runs one for the case (a
    /// `stream-broker` server): kept until the case has cleaned up.
    pub server: Option<stream_broker::Server>,
}

impl KitBinder {
    /// An AMQP binder: both sides are the same value.
    pub fn amqp<B: Binder + AmqpBroker + 'static>(binder: B) -> Self {
        let binder = Arc::new(binder);
        KitBinder {
            binder: binder.clone(),
            amqp: Some(binder),
            server: None,
        }
    }

    /// A binder with no AMQP side.
    pub fn plain(binder: impl Binder + 'static) -> Self {
        KitBinder {
            binder: Arc::new(binder),
            amqp: None,
            server: None,
        }
    }
}

/// A binder under test.
#[async_trait]
pub trait Target: Send + Sync {
    /// The binder type (`embedded`, `rabbit`).
    fn binder_type(&self) -> &'static str;
    /// What it promises.
    fn capabilities(&self) -> Capabilities;
    /// A fresh binder for one case, or why none can run here (then every case is skipped
    /// with that reason, or fails when the target is required, e.g. `REQUIRE_RABBIT=1`).
    async fn binder(&self) -> Result<KitBinder, String>;
    /// Whether an unavailable binder fails the run instead of skipping it.
    fn required(&self) -> bool {
        false
    }
}

/// How long a case waits for something that should happen.
pub const WAIT: Duration = Duration::from_secs(15);

/// The environment of one case: its binder and a unique name prefix.
pub struct Env {
    /// The binder under test.
    pub binder: Arc<dyn Binder>,
    amqp: Option<Arc<dyn AmqpBroker>>,
    /// Prefix making this case's destinations unique (`{p}` in YAML templates).
    pub p: String,
    binder_type: &'static str,
    configs: std::sync::Mutex<Vec<StreamConfig>>,
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Env").field("p", &self.p).finish()
    }
}

fn unique() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default();
    format!(
        "kit{:x}{n}",
        (t ^ (u64::from(std::process::id()) << 20)) & 0xffffff
    )
}

impl Env {
    /// The binder as an AMQP broker; a case that needs one fails on a target without one
    /// (which must skip it in its [`Capabilities`]).
    pub fn amqp(&self) -> &dyn AmqpBroker {
        self.amqp.as_deref().unwrap_or_else(|| {
            panic!(
                "this case needs an AMQP broker, which the `{}` target does not have: skip it in its Capabilities",
                self.binder_type
            )
        })
    }

    /// A configuration from a YAML template (`{p}` is the case's prefix), on this binder.
    pub fn config(&self, template: &str) -> StreamConfig {
        let yaml = template.replace("{p}", &self.p);
        let config = ConfigLoader::new()
            .env(Vec::<(String, String)>::new())
            .yaml_str(&yaml)
            .binder_type(self.binder_type)
            .set("spring.cloud.stream.binders.kit.type", self.binder_type)
            .set("spring.cloud.stream.defaultBinder", "kit")
            .load()
            .unwrap_or_else(|e| panic!("kit configuration: {e}\n{yaml}"));
        self.configs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(config.clone());
        config
    }

    /// An application builder on this binder.
    pub fn builder(&self, template: &str) -> AppBuilder {
        App::builder(self.config(template)).binder("kit", self.binder.clone())
    }

    /// Starts an application with the given setup.
    pub async fn app(
        &self,
        template: &str,
        setup: impl FnOnce(AppBuilder) -> AppBuilder,
    ) -> RunningApp {
        setup(self.builder(template))
            .start()
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Subscribes to a queue directly through the SPI.
    pub async fn subscribe(&self, queue: &str, prefetch: u16) -> Box<dyn Subscription> {
        self.amqp()
            .subscribe(SubscriptionSpec::manual_ack(queue, prefetch))
            .await
            .unwrap_or_else(|e| panic!("subscribe {queue}: {e}"))
    }

    /// Declares the consumer topology of binding `in` in `template` and publishes `payloads`
    /// to its exchange through the SPI; returns the (first) queue to consume.
    pub async fn seeded_queue(&self, template: &str, payloads: &[&str]) -> String {
        let config = self.config(template);
        let consumer = topology::plan_consumer(&config.binding("in"), "x");
        self.amqp().provision(&consumer.plan).await.unwrap();
        let producer = self
            .amqp()
            .producer(binder_amqp::ProducerSpec {
                exchange: consumer.exchange.clone(),
                delivery_mode: binder_core::message::DeliveryMode::Persistent,
            })
            .await
            .unwrap();
        for payload in payloads {
            producer
                .publish("#", binder_core::message::Message::new(payload.to_string()))
                .await
                .unwrap();
        }
        consumer.queues[0].clone()
    }

    /// Binds binding `in` of `template` through the SPI, as a consumer and as a producer on
    /// its destination, and publishes `payloads` (the consumer's sources exist first, so its
    /// group keeps them). No application runs: the case subscribes and settles itself.
    pub async fn bound(
        &self,
        template: &str,
        payloads: &[&str],
    ) -> (Box<dyn BoundConsumer>, Box<dyn Producer>) {
        let binding = self.config(template).binding("in");
        let consumer = self
            .binder
            .bind_consumer(&binding)
            .await
            .unwrap_or_else(|e| panic!("bind consumer: {e}"));
        let producer = self
            .binder
            .bind_producer(&binding)
            .await
            .unwrap_or_else(|e| panic!("bind producer: {e}"));
        for payload in payloads {
            producer
                .publish(
                    binder_core::message::Message::new(payload.to_string()),
                    None,
                )
                .await
                .unwrap();
        }
        (consumer, producer)
    }

    /// Subscribes to a bound consumer's first source.
    pub async fn subscribe_bound(&self, consumer: &dyn BoundConsumer) -> Box<dyn Subscription> {
        consumer
            .subscribe(0)
            .await
            .unwrap_or_else(|e| panic!("subscribe {:?}: {e}", consumer.sources()))
    }

    /// Ready messages and consumers of a queue (the binder's backlog of a source).
    pub async fn inspect(&self, queue: &str) -> Backlog {
        self.binder
            .backlog(queue)
            .await
            .unwrap_or_else(|e| panic!("inspect {queue}: {e}"))
    }

    /// Removes what the case's configurations declared.
    async fn cleanup(&self) {
        let configs = std::mem::take(&mut *self.configs.lock().unwrap_or_else(|p| p.into_inner()));
        let Some(amqp) = &self.amqp else {
            self.binder.close().await;
            return;
        };
        for config in configs {
            let mut plans: Vec<topology::TopologyPlan> =
                topology::plan(&config).into_iter().collect();
            // Consumer topology (queues, DLQs), whatever role the plan inferred.
            plans.extend(
                config
                    .bindings
                    .values()
                    .map(|b| topology::plan_consumer(b, "x").plan),
            );
            for mut plan in plans {
                // Only what this case named: shared exchanges such as `DLX` stay, since other
                // cases running at the same time on the same broker use them.
                plan.exchanges.retain(|x| x.name.starts_with(&self.p));
                plan.queues.retain(|q| q.name.starts_with(&self.p));
                let _ = amqp.remove(&plan).await;
            }
        }
        self.binder.close().await;
    }
}

/// The next delivery of a subscription, within [`WAIT`].
pub async fn next(sub: &mut Box<dyn Subscription>) -> Inbound {
    tokio::time::timeout(WAIT, sub.next())
        .await
        .expect("no delivery within the wait")
        .expect("subscription ended")
}

/// Waits for a condition on a value that changes, checking after each event of `changes`.
pub async fn recv<T>(rx: &mut tokio::sync::mpsc::UnboundedReceiver<T>) -> T {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("nothing arrived within the wait")
        .expect("channel closed")
}

/// A case: an async function of the environment.
pub type Case = fn(&Env) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;

/// Runs one case on a target: skipped (with the reason printed) when the target is
/// unavailable, repeated `CONFORMANCE_STRESS` times in parallel when that variable is set.
pub async fn run(target: &dyn Target, name: &str, case: Case) {
    let caps = target.capabilities();
    if let Some((_, reason)) = caps.skips.iter().find(|(case, _)| *case == name) {
        eprintln!(
            "SKIPPED conformance case `{name}` on `{}`: {reason}",
            target.binder_type()
        );
        return;
    }
    let runs: usize = std::env::var("CONFORMANCE_STRESS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1);
    let mut envs = Vec::new();
    let mut servers = Vec::new();
    for _ in 0..runs {
        let binder = match target.binder().await {
            Ok(b) => b,
            Err(reason) if target.required() => {
                panic!(
                    "conformance case `{name}` on `{}`: {reason}",
                    target.binder_type()
                )
            }
            Err(reason) => {
                eprintln!(
                    "SKIPPED conformance case `{name}` on `{}`: {reason}",
                    target.binder_type()
                );
                return;
            }
        };
        servers.extend(binder.server);
        envs.push(Env {
            binder: binder.binder,
            amqp: binder.amqp,
            p: format!("{}-", unique()),
            binder_type: target.binder_type(),
            configs: std::sync::Mutex::new(Vec::new()),
        });
    }
    futures::future::join_all(envs.iter().map(case)).await;
    for env in &envs {
        env.cleanup().await;
    }
    drop(envs);
    for server in servers {
        server.shutdown().await;
    }
}

/// Instantiates every case for a target: `conformance_suite!(stream_tests::targets::Embedded);`
#[macro_export]
macro_rules! conformance_suite {
    ($target:expr) => {
        $crate::conformance_suite!(@cases $target;
            round_trip_durable_group,
            destinations_are_isolated,
            groups_each_get_all_and_members_compete,
            anonymous_consumers_each_get_all,
            binding_routing_keys_select,
            routing_key_expressions_route,
            ack_requeue_reject,
            settling_the_oldest_last_loses_nothing,
            republish_adds_diagnostic_headers,
            dead_letters_fit_beside_large_foreign_headers,
            dead_letters_of_large_payloads_keep_the_whole_trace,
            retries_are_counted_and_do_not_block,
            poison_messages_go_to_the_dlq,
            batches_are_assembled_in_order_and_dead_lettered_whole,
            a_batch_binding_whose_queue_goes_while_a_batch_fills_recovers,
            prefetch_bounds_unsettled_deliveries,
            order_is_kept_with_one_consumer,
            pipelined_sends_are_confirmed_in_order,
            sends_keep_their_order_while_the_channel_opens,
            unacked_messages_of_a_closed_consumer_are_redelivered,
            crashed_consumers_leave_the_binder_working,
            cancelled_auto_ack_subscriptions_hand_out_what_they_received,
            confirmed_messages_survive_the_producer,
            concurrent_bind_and_unbind_lose_nothing,
            pause_resume_stop_start,
            paused_auto_ack_bindings_leave_messages_queued,
            auto_ack_deliveries_survive_a_pause_with_busy_handlers,
            auto_ack_deliveries_received_are_handled_at_shutdown,
            graceful_shutdown_loses_nothing,
            topology_is_idempotent_and_conflicts_are_clear,
            one_yaml_runs_on_every_binder
        );
    };
    (@cases $target:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                $crate::kit::run(&$target, stringify!($case), |env| {
                    Box::pin($crate::cases::$case(env))
                })
                .await;
            }
        )*
    };
}
