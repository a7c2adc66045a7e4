//! The management server (the `management` feature): health, bindings, Prometheus and
//! AsyncAPI endpoints over HTTP, in Spring Boot's and Spring Cloud Stream's shapes, configured by
//! `management.*` ([`ManagementConfig`]). It listens before startup (so a probe sees
//! `OUT_OF_SERVICE` while the application waits for its broker) and stops last at
//! shutdown. Its metrics come through the observer seam, registered only when the
//! Prometheus endpoint is exposed.

mod bindings;
mod health;
mod histogram;
mod metrics;
mod padded;

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::control::Control;
use super::document::LazyDocument;
use super::health::Health;
use super::lifecycle::ControlError;
use crate::config::{ManagementConfig, ShowDetails};
pub(crate) use metrics::{Metrics, MetricsObserver};

/// Why the management server did not start.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ManagementError {
    /// Its address could not be bound.
    #[error("management server: cannot listen on {address}: {source}")]
    Bind {
        /// The address (`management.server.address` and `.port`).
        address: SocketAddr,
        /// Why.
        source: Arc<std::io::Error>,
    },
}

/// What the server reads: the health from the start, the bindings once started.
#[derive(Debug)]
struct Shared {
    config: ManagementConfig,
    health: Health,
    control: OnceLock<Arc<Control>>,
    metrics: Option<Arc<Metrics>>,
    asyncapi: Arc<LazyDocument>,
}

/// The management server of an application, prepared before it starts.
#[derive(Debug)]
pub(crate) struct Pending {
    pub config: ManagementConfig,
    pub metrics: Option<Arc<Metrics>>,
}

impl Pending {
    /// A server per `config` (`None` without a port); its metrics' observer, when the
    /// Prometheus endpoint is exposed, is the caller's to register.
    pub(crate) fn of(config: &ManagementConfig) -> Option<Pending> {
        config.enabled().then(|| Pending {
            config: config.clone(),
            metrics: config
                .exposed("prometheus")
                .then(|| Arc::new(Metrics::new())),
        })
    }
}

/// A running management server.
#[derive(Debug)]
pub(crate) struct ManagementServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl ManagementServer {
    /// Binds and serves.
    pub(crate) async fn start(
        pending: Pending,
        health: Health,
        asyncapi: Arc<LazyDocument>,
    ) -> Result<Self, ManagementError> {
        let address = SocketAddr::new(
            pending.config.address(),
            pending.config.server.port.unwrap_or(0),
        );
        let listener =
            tokio::net::TcpListener::bind(address)
                .await
                .map_err(|e| ManagementError::Bind {
                    address,
                    source: Arc::new(e),
                })?;
        let addr = listener.local_addr().map_err(|e| ManagementError::Bind {
            address,
            source: Arc::new(e),
        })?;
        let shared = Arc::new(Shared {
            config: pending.config,
            health,
            control: OnceLock::new(),
            metrics: pending.metrics,
            asyncapi,
        });
        let app = router(&shared);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async {
                let _ = stopped.await;
            });
            if let Err(e) = serve.await {
                tracing::error!(error = %e, "management server failed");
            }
        });
        let paths: Vec<String> = crate::config::ENDPOINT_IDS
            .iter()
            .filter(|id| shared.config.exposed(id))
            .map(|id| shared.config.path(id))
            .collect();
        tracing::info!(%addr, endpoints = %paths.join(", "), "management server listening");
        Ok(ManagementServer {
            addr,
            shared,
            stop,
            task,
        })
    }

    /// Where it listens.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves the started application's bindings (and their metrics from zero).
    pub(crate) fn attach(&self, control: Arc<Control>) {
        if let Some(m) = &self.shared.metrics {
            m.know(&control);
        }
        let _ = self.shared.control.set(control);
    }

    /// Stops: requests in progress get a second to finish.
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(());
        let mut task = self.task;
        if tokio::time::timeout(Duration::from_secs(1), &mut task)
            .await
            .is_err()
        {
            task.abort();
        }
    }
}

type Ctx = State<Arc<Shared>>;

/// The routes of the exposed endpoints, at their configured paths.
///
/// A further endpoint adds its id to [`crate::config::ENDPOINT_IDS`] and its routes here.
fn router(shared: &Arc<Shared>) -> Router {
    let config = &shared.config;
    let mut app = Router::new();
    if config.exposed("health") {
        let base = config.path("health");
        app = app
            .route(&base, get(health_all))
            .route(&format!("{base}/liveness"), get(health_liveness))
            .route(&format!("{base}/readiness"), get(health_readiness));
    }
    if config.exposed("bindings") {
        let base = config.path("bindings");
        app = app.route(&base, get(bindings_list)).route(
            &format!("{base}/{{name}}"),
            get(bindings_one).post(bindings_change),
        );
    }
    if config.exposed("prometheus") {
        app = app.route(&config.path("prometheus"), get(prometheus));
    }
    if config.exposed("asyncapi") {
        app = app.route(&config.path("asyncapi"), get(asyncapi));
    }
    app.with_state(shared.clone())
}

fn json(status: StatusCode, body: serde_json::Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn health_response((status, doc): (health::Status, serde_json::Value)) -> Response {
    let code = if status.unavailable() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    json(code, doc)
}

async fn health_all(State(shared): Ctx) -> Response {
    let details = shared.config.endpoint.health.show_details == ShowDetails::Always;
    health_response(health::overall(
        &shared.health.status(),
        shared.control.get().map(|c| c.as_ref()),
        details,
    ))
}

async fn health_liveness() -> Response {
    health_response(health::liveness())
}

async fn health_readiness(State(shared): Ctx) -> Response {
    health_response(health::readiness(&shared.health.status()))
}

fn not_started() -> Response {
    json(
        StatusCode::SERVICE_UNAVAILABLE,
        serde_json::json!({"error": "the application has not started yet"}),
    )
}

fn error(status: StatusCode, message: String) -> Response {
    json(status, serde_json::json!({"error": message}))
}

async fn bindings_list(State(shared): Ctx) -> Response {
    match shared.control.get() {
        Some(control) => json(StatusCode::OK, bindings::list(control)),
        None => not_started(),
    }
}

async fn bindings_one(State(shared): Ctx, Path(name): Path<String>) -> Response {
    let Some(control) = shared.control.get() else {
        return not_started();
    };
    match control.bindings.iter().find(|b| b.name == name) {
        Some(info) => json(
            StatusCode::OK,
            serde_json::Value::Array(vec![bindings::describe(control, info)]),
        ),
        None => error(StatusCode::NOT_FOUND, format!("no binding `{name}`")),
    }
}

async fn bindings_change(State(shared): Ctx, Path(name): Path<String>, body: Bytes) -> Response {
    let Some(control) = shared.control.get() else {
        return not_started();
    };
    if !control.bindings.iter().any(|b| b.name == name) {
        return error(StatusCode::NOT_FOUND, format!("no binding `{name}`"));
    }
    let state = match bindings::requested(&body) {
        Ok(state) => state,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    match control.set(&name, state).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e @ ControlError::Unknown(_)) => error(StatusCode::NOT_FOUND, e.to_string()),
        Err(e @ ControlError::NotPausable(_)) => error(StatusCode::BAD_REQUEST, e.to_string()),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

/// The document, built by the first request (off the runtime's workers: with thousands of
/// bindings that takes a while).
async fn asyncapi(State(shared): Ctx) -> Response {
    if let Some(doc) = shared.asyncapi.built() {
        return json(StatusCode::OK, doc.as_json().clone());
    }
    let shared = shared.clone();
    match tokio::task::spawn_blocking(move || shared.asyncapi.get().as_json().clone()).await {
        Ok(doc) => json(StatusCode::OK, doc),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the AsyncAPI document could not be built: {e}"),
        ),
    }
}

async fn prometheus(State(shared): Ctx) -> Response {
    let Some(metrics) = &shared.metrics else {
        // Routed only when exposed, and then the metrics exist.
        return StatusCode::NOT_FOUND.into_response();
    };
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics.scrape(shared.control.get().map(|c| c.as_ref())),
    )
        .into_response()
}
