//! `streamctl`: operator tool for stream services.
//!
//! * `streamctl plan --config FILE [--format text|json] [--profile P]…` prints the exchanges,
//!   queues and bindings the configuration declares, without connecting to anything.
//! * `streamctl provision --config FILE [--profile P]…` declares them on the configured broker
//!   (RabbitMQ: `spring.rabbitmq.*`) and exits, for operators who create topology ahead of the
//!   services (SCSt's `requiredGroups` use case).
//!
//! An invalid configuration prints every problem to stderr and exits with status 2; a broker
//! that refuses a declaration, with status 1.

use std::path::PathBuf;
use std::process::ExitCode;

use binder_amqp::{AmqpBroker, topology};
use binder_core::binder::Binder;
use binder_core::config::ConfigLoader;
use binder_rabbit::{RabbitBinder, RabbitSettings};
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "streamctl",
    version,
    about = "Operator tool for stream services"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the topology (exchanges, queues, bindings) a configuration declares.
    ///
    /// A binding's role is taken from its configuration: `consumer` or `producer` sections,
    /// then a `group` (consumer), then SCSt names (`input`, `*-in-0` consume; `output`,
    /// `*-out-0` publish); any other binding is planned as a producer.
    Plan {
        /// Configuration file (.yaml, .yml or .toml); profile files are looked for beside it.
        #[arg(long)]
        config: PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Active profile (repeatable); overrides spring.profiles.active.
        #[arg(long = "profile")]
        profiles: Vec<String>,
    },
    /// Declare the topology a configuration needs on its broker, then exit.
    Provision {
        /// Configuration file (.yaml, .yml or .toml).
        #[arg(long)]
        config: PathBuf,
        /// Active profile (repeatable); overrides spring.profiles.active.
        #[arg(long = "profile")]
        profiles: Vec<String>,
    },
}

fn load(
    config: &PathBuf,
    profiles: Vec<String>,
) -> Result<binder_core::config::StreamConfig, ExitCode> {
    let mut loader = ConfigLoader::new().file(config);
    if !profiles.is_empty() {
        loader = loader.profiles(profiles);
    }
    loader.load().map_err(|e| {
        eprintln!("streamctl: {e}");
        ExitCode::from(2)
    })
}

/// Declares each binder's share of the plan on it.
async fn provision(config: binder_core::config::StreamConfig) -> ExitCode {
    let mut by_binder: Vec<(String, Vec<&str>)> = Vec::new();
    for name in config.bindings.keys() {
        let binder = config.binder_for(name);
        match by_binder.iter_mut().find(|(b, _)| *b == binder) {
            Some((_, names)) => names.push(name),
            None => by_binder.push((binder, vec![name])),
        }
    }
    let mut status = ExitCode::SUCCESS;
    for (name, bindings) in by_binder {
        let binder_type = config.binder_type(&name);
        if binder_type == "embedded" {
            println!(
                "skipped {}: binder `{name}` is embedded, its broker lives inside the application",
                bindings.join(", ")
            );
            continue;
        }
        if binder_type != "rabbit" {
            eprintln!(
                "streamctl: binder `{name}` is of type `{binder_type}`; streamctl provisions AMQP brokers (`rabbit`) only"
            );
            return ExitCode::from(2);
        }
        let plan = match topology::plan(&config.select(&bindings)) {
            Ok(plan) => plan,
            Err(e) => {
                eprintln!("streamctl: {e}");
                return ExitCode::from(2);
            }
        };
        let binder = match RabbitSettings::from_config(&config.binder_environment(&name)) {
            Ok(settings) => RabbitBinder::new(settings),
            Err(e) => {
                eprintln!("streamctl: binder `{name}`: {e}");
                return ExitCode::FAILURE;
            }
        };
        match binder.provision(&plan).await {
            Ok(()) => println!(
                "provisioned on `{name}` ({binder_type}): {} exchanges, {} queues, {} bindings",
                plan.exchanges.len(),
                plan.queues.len(),
                plan.bindings.len()
            ),
            Err(e) => {
                eprintln!("streamctl: binder `{name}`: {e}");
                status = ExitCode::FAILURE;
            }
        }
        Binder::close(&binder).await;
    }
    status
}

fn main() -> ExitCode {
    binder_embedded::link();
    binder_rabbit::link();
    let cli = Cli::parse();
    match cli.command {
        Command::Provision { config, profiles } => {
            let config = match load(&config, profiles) {
                Ok(c) => c,
                Err(code) => return code,
            };
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("streamctl: {e}");
                    return ExitCode::FAILURE;
                }
            };
            runtime.block_on(provision(config))
        }
        Command::Plan {
            config,
            format,
            profiles,
        } => {
            let cfg = match load(&config, profiles) {
                Ok(cfg) => cfg,
                Err(code) => return code,
            };
            let plan = match topology::plan(&cfg) {
                Ok(plan) => plan,
                Err(e) => {
                    eprintln!("streamctl: {e}");
                    return ExitCode::from(2);
                }
            };
            match format {
                Format::Text => print!("{}", plan.to_text()),
                Format::Json => match serde_json::to_string_pretty(&plan) {
                    Ok(json) => println!("{json}"),
                    Err(e) => {
                        eprintln!("streamctl: {e}");
                        return ExitCode::FAILURE;
                    }
                },
            }
            ExitCode::SUCCESS
        }
    }
}
