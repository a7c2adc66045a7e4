//! The HTTP management API (`[management]`): a subset of RabbitMQ's management plugin's
//! paths and JSON shapes over the broker's virtual hosts, with its users (HTTP basic) and
//! their tags and permissions, plus the broker's own extension under `/api/stream/` (dead
//! letters, the message stores' health), and a page at `/` (`page.html`, embedded). On a
//! listener of its own, loopback-only unless asked otherwise.
//!
//! Modules, one concept each: [`login`] (authentication, tags, visibility), [`api`]
//! (RabbitMQ's paths that read, purge, get and publish), [`topology`] (RabbitMQ's paths that
//! declare, delete, bind and unbind), [`binding_key`] (the `properties_key` naming a
//! binding in a path), [`definitions`] (RabbitMQ's definitions export and
//! import), [`health`] (health checks of the node: alarms, virtual
//! hosts, the message stores), [`listener_checks`] (health checks of the listeners and their
//! certificates), [`aliveness`] (RabbitMQ's aliveness test), [`nodes`] (the node's resource
//! figures), [`dlq`] (dead letters, in the
//! extension), [`json`] (values to and from JSON), [`rates`] (sampled message rates),
//! [`users`] (users and permissions, read-only), [`error`] (RabbitMQ's error answers).

mod aliveness;
mod api;
mod binding_key;
mod definitions;
mod dlq;
mod error;
mod health;
mod json;
mod listener_checks;
mod login;
mod nodes;
mod policies;
pub(crate) use definitions::load as load_definitions;
mod rates;
mod sessions;
mod topology;
mod users;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::routing::{delete, get, post};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use self::rates::Rates;
use crate::config::ManagementConfig;
use crate::envelope::WireEnvelope;
use crate::server::{Shared, stopped};
use crate::tls::ServedCertificates;

/// What every handler reads.
#[derive(Debug)]
pub(crate) struct Api<E: WireEnvelope> {
    shared: Arc<Shared<E>>,
    rates: Rates,
    /// When the management listener started (the node's uptime).
    started: std::time::Instant,
    /// The management listener's address.
    addr: SocketAddr,
    /// Every listener of the server: AMQP, AMQP over TLS, this one.
    listeners: Vec<Listener>,
}

/// One of the server's listeners, as the management API reports it (the overview, the
/// listener and certificate health checks).
#[derive(Debug, Clone)]
pub(crate) struct Listener {
    /// RabbitMQ's name for what it serves: `amqp`, `amqp/ssl`, `http`.
    pub protocol: &'static str,
    /// Where it listens (the port chosen for port 0).
    pub addr: SocketAddr,
    /// The certificates a TLS listener serves and checks clients against.
    pub certificates: Option<ServedCertificates>,
}

fn router<E: WireEnvelope>(api: Arc<Api<E>>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/api/overview", get(api::overview::<E>))
        .route("/api/vhosts", get(api::vhosts::<E>))
        .route("/api/queues", get(api::queues::<E>))
        .route("/api/queues/{vhost}", get(api::vhost_queues::<E>))
        .route(
            "/api/queues/{vhost}/{name}",
            get(api::queue::<E>)
                .put(topology::declare_queue::<E>)
                .delete(topology::delete_queue::<E>),
        )
        .route(
            "/api/queues/{vhost}/{name}/contents",
            delete(api::purge::<E>),
        )
        .route("/api/queues/{vhost}/{name}/get", post(api::get::<E>))
        .route(
            "/api/queues/{vhost}/{name}/bindings",
            get(api::queue_bindings::<E>),
        )
        .route(
            "/api/exchanges/{vhost}/{name}/bindings/source",
            get(api::exchange_source_bindings::<E>),
        )
        .route(
            "/api/exchanges/{vhost}/{name}/bindings/destination",
            get(api::exchange_destination_bindings::<E>),
        )
        .route("/api/exchanges", get(api::exchanges::<E>))
        .route("/api/exchanges/{vhost}", get(api::vhost_exchanges::<E>))
        .route(
            "/api/exchanges/{vhost}/{name}",
            get(api::exchange::<E>)
                .put(topology::declare_exchange::<E>)
                .delete(topology::delete_exchange::<E>),
        )
        .route(
            "/api/exchanges/{vhost}/{name}/publish",
            post(api::publish::<E>),
        )
        .route("/api/bindings", get(api::bindings::<E>))
        .route("/api/bindings/{vhost}", get(api::vhost_bindings::<E>))
        .route(
            "/api/bindings/{vhost}/e/{source}/{kind}/{destination}",
            get(topology::list_between::<E>).post(topology::bind::<E>),
        )
        .route(
            "/api/bindings/{vhost}/e/{source}/{kind}/{destination}/{props}",
            delete(topology::unbind::<E>),
        )
        .route("/api/whoami", get(api::whoami::<E>))
        .route("/api/nodes", get(nodes::nodes::<E>))
        .route("/api/users", get(users::users::<E>))
        .route(
            "/api/users/{name}",
            get(users::user::<E>)
                .put(users::configured_in_the_file::<E>)
                .delete(users::configured_in_the_file::<E>),
        )
        .route("/api/permissions", get(users::permissions::<E>))
        .route(
            "/api/permissions/{vhost}/{user}",
            get(users::permission::<E>)
                .put(users::configured_in_the_file::<E>)
                .delete(users::configured_in_the_file::<E>),
        )
        .route(
            "/api/vhosts/{name}",
            get(api::vhost::<E>)
                .put(users::configured_in_the_file::<E>)
                .delete(users::configured_in_the_file::<E>),
        )
        .route("/api/policies", get(policies::all::<E>))
        .route("/api/policies/{vhost}", get(policies::of_vhost::<E>))
        .route(
            "/api/policies/{vhost}/{name}",
            get(policies::one::<E>)
                .put(policies::put::<E>)
                .delete(policies::delete::<E>),
        )
        .route("/api/operator-policies", get(policies::operator_all::<E>))
        .route(
            "/api/operator-policies/{vhost}",
            get(policies::operator_of_vhost::<E>),
        )
        .route(
            "/api/operator-policies/{vhost}/{name}",
            get(policies::operator_one::<E>)
                .put(policies::operator_put::<E>)
                .delete(policies::operator_delete::<E>),
        )
        .route("/api/nodes/{name}", get(nodes::node::<E>))
        .route(
            "/api/definitions",
            get(definitions::export_all::<E>).post(definitions::import_all::<E>),
        )
        .route(
            "/api/definitions/{vhost}",
            get(definitions::export_vhost::<E>).post(definitions::import_vhost::<E>),
        )
        .route("/api/consumers", get(sessions::consumers::<E>))
        .route(
            "/api/consumers/{vhost}",
            get(sessions::vhost_consumers::<E>),
        )
        .route("/api/connections", get(sessions::connections::<E>))
        .route(
            "/api/connections/{name}",
            get(sessions::connection::<E>).delete(sessions::close_connection::<E>),
        )
        .route(
            "/api/connections/{name}/channels",
            get(sessions::connection_channels::<E>),
        )
        .route(
            "/api/vhosts/{vhost}/connections",
            get(sessions::vhost_connections::<E>),
        )
        .route("/api/channels", get(sessions::channels::<E>))
        .route("/api/channels/{name}", get(sessions::channel::<E>))
        .route(
            "/api/vhosts/{vhost}/channels",
            get(sessions::vhost_channels::<E>),
        )
        .route("/api/health/checks/alarms", get(health::alarms::<E>))
        .route(
            "/api/health/checks/local-alarms",
            get(health::local_alarms::<E>),
        )
        .route(
            "/api/health/checks/virtual-hosts",
            get(health::virtual_hosts::<E>),
        )
        .route(
            "/api/health/checks/port-listener/{port}",
            get(listener_checks::port_listener::<E>),
        )
        .route(
            "/api/health/checks/protocol-listener/{protocol}",
            get(listener_checks::protocol_listener::<E>),
        )
        .route(
            "/api/health/checks/certificate-expiration/{within}/{unit}",
            get(listener_checks::certificate_expiration::<E>),
        )
        .route(
            "/api/health/checks/node-is-quorum-critical",
            get(health::single_node::<E>),
        )
        .route(
            "/api/health/checks/node-is-mirror-sync-critical",
            get(health::single_node::<E>),
        )
        .route(
            "/api/aliveness-test/{vhost}",
            get(aliveness::aliveness_test::<E>),
        )
        .route("/api/stream/health/checks/stores", get(health::stores::<E>))
        .route(
            "/api/stream/queues/{vhost}/{name}/messages",
            get(dlq::messages::<E>),
        )
        .route(
            "/api/stream/queues/{vhost}/{name}/messages/{seq}",
            delete(dlq::discard::<E>),
        )
        .route(
            "/api/stream/queues/{vhost}/{name}/messages/{seq}/redrive",
            post(dlq::redrive::<E>),
        )
        .route(
            "/api/stream/queues/{vhost}/{name}/redrive",
            post(dlq::redrive_all::<E>),
        )
        .fallback(|| async { error::ApiError::not_found() })
        .with_state(api)
}

/// The management page: one static file (HTML, CSS and JavaScript, nothing fetched from
/// elsewhere) that logs in and calls the API above.
async fn page() -> axum::response::Html<&'static str> {
    axum::response::Html(include_str!("page.html"))
}

/// The running management listener and its rate sampler.
#[derive(Debug)]
pub(crate) struct Management {
    pub addr: SocketAddr,
    serve: JoinHandle<()>,
    sampler: JoinHandle<()>,
}

impl Management {
    /// Starts serving on an already bound listener, until `stop` is set.
    pub(crate) fn start<E: WireEnvelope>(
        config: &ManagementConfig,
        listener: TcpListener,
        addr: SocketAddr,
        listeners: Vec<Listener>,
        shared: Arc<Shared<E>>,
        stop: watch::Receiver<bool>,
    ) -> Self {
        let api = Arc::new(Api {
            shared,
            rates: Rates::default(),
            started: std::time::Instant::now(),
            addr,
            listeners,
        });
        let sampler = tokio::spawn(sample(api.clone(), config.sample_interval(), stop.clone()));
        let app = router(api).into_make_service_with_connect_info::<SocketAddr>();
        let mut stop_serving = stop;
        let serve = tokio::spawn(async move {
            let graceful = async move { stopped(&mut stop_serving).await };
            if let Err(e) = axum::serve(listener, app)
                .with_graceful_shutdown(graceful)
                .await
            {
                tracing::error!(error = %e, "management listener failed");
            }
        });
        tracing::info!(%addr, "management API listening");
        Management {
            addr,
            serve,
            sampler,
        }
    }

    /// Waits for the listener (told to stop) to finish its requests.
    pub(crate) async fn stopped(self) {
        let _ = self.serve.await;
        let _ = self.sampler.await;
    }
}

/// Samples every queue's counters each interval until stopped.
async fn sample<E: WireEnvelope>(
    api: Arc<Api<E>>,
    every: std::time::Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stopped(&mut stop) => return,
            _ = tick.tick() => {}
        }
        let mut queues = Vec::new();
        let mut vhosts = Vec::new();
        let mut channels = Vec::new();
        // The confirms each channel's connection sent, by (vhost, engine channel id).
        let mut confirmed = std::collections::HashMap::new();
        for listing in api.shared.listed.snapshot() {
            for (_, channel) in listing.channels() {
                let count = channel.confirmed.load(std::sync::atomic::Ordering::Relaxed);
                confirmed.insert((listing.info.vhost.clone(), channel.engine_id), count);
            }
        }
        for (vhost, broker) in api.shared.brokers() {
            for q in broker.queues() {
                queues.push(((vhost.clone(), q.name), (q.published, q.delivered)));
            }
            vhosts.push((vhost.clone(), broker.totals().published));
            for c in broker.channels() {
                let key = (vhost.clone(), c.id);
                let acked = confirmed.get(&key).copied().unwrap_or(0);
                channels.push((key, sessions::channel_counts(&c, acked)));
            }
        }
        let elapsed = api
            .rates
            .record(tokio::time::Instant::now(), queues, vhosts);
        api.rates.record_channels(channels, elapsed);
    }
}
