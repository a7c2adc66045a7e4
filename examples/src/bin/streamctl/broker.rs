//! Which broker an operator verb talks to, and how: over AMQP always (through the `rabbit`
//! binder), and through the management API when there is one.

use std::path::PathBuf;

use binder_core::config::{ConfigLoader, StreamConfig};
use binder_rabbit::{RabbitBinder, RabbitSettings, uri_component};
use clap::Args;
use lapin::uri::AMQPUri;

use crate::management::Management;

/// How to reach the broker (shared by the operator verbs).
#[derive(Debug, Args)]
pub struct Target {
    /// The service's configuration file: the broker is its rabbit binder's
    /// (`spring.rabbitmq.*`), and without a management API the queues it declares are the
    /// ones listed.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Active profile (repeatable); overrides spring.profiles.active.
    #[arg(long = "profile")]
    pub profiles: Vec<String>,
    /// The binder of the configuration to use (default: the default binder).
    #[arg(long)]
    pub binder: Option<String>,
    /// AMQP URI of the broker, instead of the configuration's (default without either:
    /// amqp://guest:guest@localhost:5672/%2f).
    #[arg(long)]
    pub url: Option<String>,
    /// Base URL of the management API (RabbitMQ's management plugin, or stream-broker's
    /// `[management]` listener), e.g. http://localhost:15672. Default: port 15672 on the AMQP
    /// host, used when it answers.
    #[arg(long)]
    pub management: Option<String>,
    /// Do not use a management API, even where one answers.
    #[arg(long, conflicts_with = "management")]
    pub no_management: bool,
    /// Virtual host (rabbitmqctl's `-p`; default: the AMQP URI's).
    #[arg(short = 'p', long = "vhost")]
    pub vhost: Option<String>,
    /// Print no informational lines, only the result (rabbitmqctl's `-q`).
    #[arg(short, long)]
    pub quiet: bool,
}

/// Why a verb could not run.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// The configuration could not be loaded (exit status 2).
    #[error("{0}")]
    Config(String),
    /// Anything else (exit status 1).
    #[error("{0}")]
    Failed(String),
}

/// A resolved target: the AMQP URI (vhost applied), the vhost, and the configuration if one
/// was given.
#[derive(Debug)]
pub struct Broker {
    /// How AMQP connects: the configuration's settings (TLS included), with the one URI
    /// chosen (never print it: it holds the password).
    settings: RabbitSettings,
    /// The virtual host.
    pub vhost: String,
    /// The configuration, when `--config` was given.
    pub config: Option<StreamConfig>,
    user: String,
    password: String,
    host: String,
}

impl Target {
    /// Loads the configuration (if any) and works out the AMQP URI and virtual host: those of
    /// `--binder`, else of `binding`'s binder, else of the default binder.
    pub fn resolve(&self, binding: Option<&str>) -> Result<Broker, TargetError> {
        let config = match &self.config {
            None => None,
            Some(path) => {
                let mut loader = ConfigLoader::new().file(path);
                if !self.profiles.is_empty() {
                    loader = loader.profiles(self.profiles.clone());
                }
                Some(
                    loader
                        .load()
                        .map_err(|e| TargetError::Config(e.to_string()))?,
                )
            }
        };
        let mut settings = match &config {
            Some(config) => {
                let name = match (&self.binder, binding) {
                    (Some(b), _) => b.clone(),
                    (None, Some(binding)) => config.binder_for(binding),
                    // No binding has that name: the default binder.
                    (None, None) => config.binder_for(""),
                };
                config_settings(config, &name)?
            }
            None => RabbitSettings::default(),
        };
        let uri = match &self.url {
            Some(url) => url.clone(),
            None => settings.uris.first().cloned().ok_or_else(|| {
                TargetError::Config("the binder has no address (spring.rabbitmq.*)".into())
            })?,
        };
        let mut parsed: AMQPUri = uri
            .parse()
            .map_err(|e| TargetError::Failed(format!("not an AMQP URI: {e}")))?;
        if let Some(vhost) = &self.vhost {
            parsed.vhost = vhost.clone();
        }
        let scheme = match parsed.scheme {
            lapin::uri::AMQPScheme::AMQP => "amqp",
            lapin::uri::AMQPScheme::AMQPS => "amqps",
        };
        let user = parsed.authority.userinfo.username.clone();
        let password = parsed.authority.userinfo.password.clone();
        let host = parsed.authority.host.clone();
        settings.uris = vec![format!(
            "{scheme}://{}:{}@{host}:{}/{}",
            uri_component(&user),
            uri_component(&password),
            parsed.authority.port,
            uri_component(&parsed.vhost)
        )];
        settings.connection_name = "streamctl".to_owned();
        Ok(Broker {
            settings,
            vhost: parsed.vhost,
            config,
            user,
            password,
            host,
        })
    }

    /// The management API to use, if any: `--management`, else port 15672 on the AMQP host
    /// when it answers (`None` when it does not, or with `--no-management`).
    pub fn management(&self, broker: &Broker) -> Result<Option<Management>, TargetError> {
        if self.no_management {
            return Ok(None);
        }
        match &self.management {
            Some(url) => Management::new(url, &broker.user, &broker.password)
                .map(Some)
                .map_err(|e| TargetError::Failed(e.to_string())),
            None => {
                let url = format!("http://{}:15672", broker.host);
                let candidate = Management::new(&url, &broker.user, &broker.password)
                    .map_err(|e| TargetError::Failed(e.to_string()))?;
                Ok(candidate.answers().then_some(candidate))
            }
        }
    }
}

impl Target {
    /// The management API a verb cannot do without, or why there is none: `lacks` says
    /// what AMQP 0-9-1 has no way to do.
    pub fn required_management(&self, verb: &str, lacks: &str) -> Result<Management, TargetError> {
        let broker = self.resolve(None)?;
        self.management(&broker)?.ok_or_else(|| {
            TargetError::Failed(format!(
                "{verb} needs a management API (--management http://host:15672): AMQP 0-9-1 \
                 has no way to {lacks}"
            ))
        })
    }
}

impl Broker {
    /// A `rabbit` binder on the target (it connects on first use).
    pub fn binder(&self) -> RabbitBinder {
        RabbitBinder::new(self.settings.clone())
    }
}

/// The connection settings of the configuration's binder `name`, which must be `rabbit`.
fn config_settings(config: &StreamConfig, name: &str) -> Result<RabbitSettings, TargetError> {
    let kind = config.binder_type(name);
    if kind != "rabbit" {
        return Err(TargetError::Failed(format!(
            "binder `{name}` is of type `{kind}`: streamctl reaches AMQP brokers (`rabbit`); for \
             an embedded broker that listens, give its address with --url"
        )));
    }
    RabbitSettings::from_config(&config.binder_environment(name))
        .map_err(|e| TargetError::Config(format!("binder `{name}`: {e}")))
}
