//! The service entry point: configuration, logging, the declared listeners, start, run
//! until a signal, and the exit status.

use super::builder::{App, AppBuilder};
use super::logging::init_logging;
use super::running::ShutdownReport;
use super::startup::StartupError;
use crate::config::{ConfigError, ConfigLoader};

/// Why a service stopped with an error.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The application could not start.
    #[error(transparent)]
    Startup(#[from] StartupError),
}

/// Shows the same text as `Display`, so a `main` returning `Result<_, ServiceError>` prints
/// the problems as a person reads them.
impl std::fmt::Debug for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// The entry point of a service: loads the configuration (files, profiles, environment),
/// installs logging to stderr unless the program has a `tracing` subscriber already (see
/// [`init_logging`]), adds every declared listener and output, starts,
/// and runs until Ctrl-C or SIGTERM.
///
/// It can be `main`'s whole body: the [`ServiceExit`] it returns prints what went wrong and
/// exits with status 2 for a configuration the loader refuses, 1 for any other failure
/// (problems found as the application starts included).
///
/// ```no_run
/// #[tokio::main]
/// async fn main() -> binder_core::runtime::ServiceExit {
///     binder_core::runtime::run_service().await
/// }
/// ```
pub async fn run_service() -> ServiceExit {
    run_service_with(|builder| builder).await
}

/// [`run_service`], with a hook that completes the application before it starts: shared
/// state for `State<T>` arguments, codecs, an error hook, listeners registered by hand. The
/// hook sees the loaded configuration through [`AppBuilder::config`].
///
/// ```no_run
/// struct Db { url: String }
///
/// #[tokio::main]
/// async fn main() -> binder_core::runtime::ServiceExit {
///     binder_core::runtime::run_service_with(|app| {
///         let url = std::env::var("DB_URL").unwrap_or_else(|_| "postgres://localhost".into());
///         app.state(Db { url })
///     })
///     .await
/// }
/// ```
pub async fn run_service_with(prepare: impl FnOnce(AppBuilder) -> AppBuilder) -> ServiceExit {
    let config = match ConfigLoader::new().load() {
        Ok(config) => config,
        Err(e) => return ServiceExit::from(ServiceError::Config(e)),
    };
    if let Err(e) = init_logging(&config) {
        return ServiceExit::from(ServiceError::Config(e));
    }
    let builder = prepare(App::builder(config).registered());
    #[cfg(feature = "management")]
    let builder = builder.management();
    match builder.start().await {
        Ok(app) => ServiceExit::from(Ok::<_, ServiceError>(app.run_until_signal().await)),
        Err(e) => ServiceExit::from(ServiceError::Startup(e)),
    }
}

/// How a service ended, as `main` returns it: on failure it prints the error (and its
/// causes) to stderr and exits with status 2 for a configuration problem
/// ([`ConfigError`]), 1 otherwise.
///
/// Any `Result` whose error converts into `Box<dyn Error>` converts into it, so a `main` that
/// does more than [`run_service`] keeps `?` and readable errors:
///
/// ```no_run
/// use binder_core::config::ConfigLoader;
/// use binder_core::runtime::{App, ServiceExit};
///
/// #[tokio::main]
/// async fn main() -> ServiceExit {
///     run().await.into()
/// }
///
/// async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
///     let config = ConfigLoader::new().load()?;
///     let app = App::builder(config).registered().start().await?;
///     app.run_until_signal().await;
///     Ok(())
/// }
/// ```
#[derive(Debug)]
pub struct ServiceExit {
    error: Option<Box<dyn std::error::Error + Send + Sync>>,
    report: Option<ShutdownReport>,
}

impl ServiceExit {
    /// The error the service stopped with, if any.
    pub fn error(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        self.error.as_deref()
    }

    /// How the shutdown went, when the service ran.
    pub fn shutdown_report(&self) -> Option<&ShutdownReport> {
        self.report.as_ref()
    }

    /// The exit status: 0, 2 for a configuration problem, 1 for any other failure.
    pub fn code(&self) -> u8 {
        match &self.error {
            None => 0,
            Some(e) if is_config_error(e.as_ref()) => 2,
            Some(_) => 1,
        }
    }

    /// What `main` prints for it: the error and each cause not already in its text.
    pub fn describe(&self) -> Option<String> {
        let error = self.error.as_deref()?;
        let mut text = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            let cause_text = cause.to_string();
            if !text.contains(&cause_text) {
                text.push_str("\n  caused by: ");
                text.push_str(&cause_text);
            }
            source = cause.source();
        }
        Some(text)
    }
}

fn is_config_error(error: &(dyn std::error::Error + 'static)) -> bool {
    error.is::<ConfigError>()
        || matches!(
            error.downcast_ref::<ServiceError>(),
            Some(ServiceError::Config(_))
        )
}

impl From<ServiceError> for ServiceExit {
    fn from(error: ServiceError) -> Self {
        ServiceExit {
            error: Some(Box::new(error)),
            report: None,
        }
    }
}

impl<E: Into<Box<dyn std::error::Error + Send + Sync>>> From<Result<(), E>> for ServiceExit {
    fn from(result: Result<(), E>) -> Self {
        ServiceExit {
            error: result.err().map(Into::into),
            report: None,
        }
    }
}

impl<E: Into<Box<dyn std::error::Error + Send + Sync>>> From<Result<ShutdownReport, E>>
    for ServiceExit
{
    fn from(result: Result<ShutdownReport, E>) -> Self {
        match result {
            Ok(report) => ServiceExit {
                error: None,
                report: Some(report),
            },
            Err(e) => ServiceExit {
                error: Some(e.into()),
                report: None,
            },
        }
    }
}

impl std::process::Termination for ServiceExit {
    fn report(self) -> std::process::ExitCode {
        if let Some(text) = self.describe() {
            eprintln!("error: {text}");
        }
        std::process::ExitCode::from(self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::startup::StartupProblem;

    fn config_error() -> ConfigError {
        ConfigLoader::new()
            .env(Vec::<(String, String)>::new())
            .yaml_str("spring.cloud.stream.bindings.in.gruop: g\n")
            .load()
            .unwrap_err()
    }

    #[test]
    fn a_configuration_problem_exits_with_2_and_reads_as_text() {
        let exit = ServiceExit::from(ServiceError::Config(config_error()));
        assert_eq!(exit.code(), 2);
        let text = exit.describe().unwrap();
        assert!(
            text.starts_with("invalid configuration (1 problem):\n  - "),
            "{text}"
        );
        assert!(text.contains("did you mean `group`?"), "{text}");
        // Through `?` into a boxed error, as an example's `run()` returns it.
        let boxed: Result<(), Box<dyn std::error::Error + Send + Sync>> =
            Err(config_error().into());
        assert_eq!(ServiceExit::from(boxed).code(), 2);
    }

    #[test]
    fn debug_of_user_facing_errors_is_their_text() {
        let e = config_error();
        assert_eq!(format!("{e:?}"), e.to_string());
        let s = ServiceError::Config(e);
        assert_eq!(format!("{s:?}"), s.to_string());
        assert!(!format!("{s:?}").contains("Problem {"));
    }

    #[test]
    fn other_failures_exit_with_1_with_their_causes() {
        let startup = StartupError::new(vec![StartupProblem::Check(
            "binding `x`: broker refused".into(),
        )]);
        let exit = ServiceExit::from(ServiceError::Startup(startup));
        assert_eq!(exit.code(), 1);
        assert_eq!(
            exit.describe().unwrap(),
            "the application cannot start:\n  - binding `x`: broker refused"
        );
        let io = std::io::Error::other(ServiceError::Config(config_error()));
        let exit = ServiceExit::from(Err::<(), _>(io));
        assert_eq!(
            exit.code(),
            1,
            "only a configuration error itself exits with 2"
        );
    }

    #[test]
    fn success_exits_with_0() {
        let exit = ServiceExit::from(Ok::<_, ServiceError>(ShutdownReport {
            drained: true,
            abandoned: 0,
        }));
        assert_eq!(exit.code(), 0);
        assert!(exit.describe().is_none());
        assert!(exit.shutdown_report().unwrap().drained);
    }
}
