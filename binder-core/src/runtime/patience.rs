//! Waiting for brokers that cannot be reached yet: a service started before its broker comes
//! up when the broker does, within `spring.cloud.stream.startupTimeout`.

use std::time::Duration;

use super::health::{Health, HealthStatus};
use crate::binder::{BinderError, BinderErrorKind, BinderResult};

/// How long, and with what report, startup waits for an unreachable broker.
#[derive(Debug, Clone, Default)]
pub(crate) struct Patience {
    /// Where to report what startup waits for.
    pub health: Option<Health>,
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
) -> BinderResult<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = BinderResult<T>>,
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
                    return Err(BinderError::unreachable(format!(
                        "no answer; gave up after spring.cloud.stream.startupTimeout ({limit:?})"
                    )));
                }
            },
            None => op().await,
        };
        match attempt {
            Err(e) if e.kind() == BinderErrorKind::Unreachable => {
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
                    h.set(HealthStatus::Starting {
                        waiting: Some(format!("{what}: {e}")),
                    });
                }
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(10));
            }
            other => {
                if let Some(h) = health {
                    h.set(HealthStatus::Starting { waiting: None });
                }
                return other;
            }
        }
    }
}
