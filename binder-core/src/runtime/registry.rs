//! Listeners and bindings declared with the macros, collected with `inventory`, and the
//! service entry point.

use std::sync::Arc;

use super::app::{App, AppBuilder, ShutdownReport};
use super::handler::Handler;

/// A listener as the macros declare it: a nameable value that can also be registered by hand
/// with [`AppBuilder::register`].
#[derive(Debug)]
pub struct ListenerDef {
    /// The handler function's name (for messages).
    pub name: &'static str,
    /// The input binding.
    pub input: &'static str,
    /// The output binding of the return value, if any.
    pub output: Option<&'static str>,
    /// The header condition, if any.
    pub condition: Option<&'static str>,
    /// Output bindings the listener sends to through `Out<...>` arguments.
    pub uses: &'static [&'static str],
    /// Builds the handler.
    pub handler: fn() -> Arc<dyn Handler>,
}

/// A listener registered for automatic collection.
#[derive(Debug)]
pub struct ListenerRegistration(pub &'static ListenerDef);

/// An output binding declared with `#[output]`, registered so the application opens it.
#[derive(Debug)]
pub struct OutputRegistration(pub &'static str);

inventory::collect!(ListenerRegistration);
inventory::collect!(OutputRegistration);

impl AppBuilder {
    /// Adds every listener and output binding declared with the macros in this program.
    pub fn registered(mut self) -> Self {
        let mut defs: Vec<&'static ListenerDef> = inventory::iter::<ListenerRegistration>
            .into_iter()
            .map(|r| r.0)
            .collect();
        // Link order is not declaration order; sort for a stable startup.
        defs.sort_by_key(|d| (d.input, d.name));
        for def in defs {
            self = self.register(def);
        }
        for output in inventory::iter::<OutputRegistration> {
            self = self.output(output.0);
        }
        self
    }
}

/// Why a service stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The application could not start.
    #[error(transparent)]
    Startup(#[from] super::error::StartupError),
}

/// The entry point of a service: loads the configuration (files, profiles, environment), adds
/// every declared listener and output, starts, and runs until Ctrl-C or SIGTERM.
///
/// ```no_run
/// #[tokio::main]
/// async fn main() -> Result<(), binder_core::runtime::ServiceError> {
///     binder_core::runtime::run_service().await.map(|_| ())
/// }
/// ```
pub async fn run_service() -> Result<ShutdownReport, ServiceError> {
    let config = crate::config::ConfigLoader::new().load()?;
    let app = App::builder(config).registered().start().await?;
    Ok(app.run_until_signal().await)
}
