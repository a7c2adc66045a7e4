//! `streamctl`: operator tool for stream services.
//!
//! `streamctl plan --config FILE [--format text|json] [--profile P]…` prints the exchanges,
//! queues and bindings the configuration declares, without connecting to anything. An invalid
//! configuration prints every problem to stderr and exits with status 2.

use std::path::PathBuf;
use std::process::ExitCode;

use binder_core::config::ConfigLoader;
use binder_core::topology;
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Plan {
            config,
            format,
            profiles,
        } => {
            let mut loader = ConfigLoader::new().file(&config);
            if !profiles.is_empty() {
                loader = loader.profiles(profiles);
            }
            let cfg = match loader.load() {
                Ok(cfg) => cfg,
                Err(e) => {
                    eprintln!("streamctl: {e}");
                    return ExitCode::from(2);
                }
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
