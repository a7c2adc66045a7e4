//! `streamctl`: operator tool for stream services.
//!
//! * `streamctl plan --config FILE [--format text|json] [--profile P]…` prints the exchanges,
//!   queues and bindings the configuration declares, without connecting to anything.
//! * `streamctl provision --config FILE [--profile P]…` declares them on the configured broker
//!   (RabbitMQ: `spring.rabbitmq.*`) and exits, for operators who create topology ahead of the
//!   services (SCSt's `requiredGroups` use case).
//! * `streamctl asyncapi --config FILE [--input B]… [--output B]…` prints the AsyncAPI 3.0.0
//!   document of the configuration's bindings (channels, operations, messages, AMQP
//!   bindings) without running the service; the roles are guessed as `plan` guesses them
//!   unless `--input`/`--output` say. Payload schemas come from the program: the running
//!   service serves them at `<base-path>/asyncapi.json`.
//!
//! * `streamctl list_queues [COLUMN…]`, `list_exchanges [COLUMN…]`, `list_bindings [COLUMN…]`
//!   and `purge_queue QUEUE` have `rabbitmqctl`'s names, columns and output. They read a
//!   management API (RabbitMQ's plugin or `stream-broker`'s `[management]` listener, same
//!   paths) when one answers; without one, `list_queues` and `list_exchanges` show the
//!   entities the `--config` file declares (a passive declare each: `messages` then counts
//!   ready messages only), `list_bindings` needs the API, and `purge_queue` is AMQP anyway.
//! * `streamctl export_definitions FILE` and `import_definitions FILE` (`-`: standard output
//!   or input) move a broker's definitions (users, virtual hosts, permissions, policies,
//!   operator policies, queues, exchanges, bindings) in RabbitMQ's format through the management API; they need
//!   one.
//! * `streamctl list_connections`, `list_channels`, `list_consumers`, `close_connection NAME
//!   EXPLANATION`, `set_policy NAME PATTERN DEFINITION [--priority N] [--apply-to T]`,
//!   `clear_policy NAME` and `list_policies`, and the same for operator policies
//!   (`set_operator_policy`, `clear_operator_policy`, `list_operator_policies`), with
//!   `rabbitmqctl`'s names, arguments and output, through the management API (they need one).
//! * `streamctl dlq list|replay|purge --binding B --config FILE` (or `--queue Q`) work on a
//!   binding's dead-letter queue over AMQP, on RabbitMQ and `stream-broker` alike: `list`
//!   shows each message's `x-exception-*` and `x-death` headers and origin and leaves it in
//!   place, `replay` republishes each to the exchange and routing key it was first published
//!   to and removes it only once confirmed and routed, `purge` empties the queue.
//!
//! The broker is the `--config` file's rabbit binder (`spring.rabbitmq.*`), or `--url`;
//! `--management URL` names the management API (default: port 15672 on the AMQP host, when it
//! answers), `-p VHOST` the virtual host, `-q` drops the informational lines.
//!
//! An invalid configuration or command line prints every problem to stderr and exits with
//! status 2; a broker that refuses, or a verb that could not do everything, with status 1.

use std::path::PathBuf;
use std::process::ExitCode;

use binder_amqp::{AmqpBroker, topology};
use binder_core::binder::Binder;
use binder_core::config::ConfigLoader;
use binder_rabbit::{RabbitBinder, RabbitSettings};
use clap::{Parser, Subcommand};

/// `println!` on standard output, except that output into a closed pipe
/// (`streamctl list_queues | head -3`) ends the program quietly, as it ends other
/// command-line tools (Rust ignores `SIGPIPE`: `println!` would panic).
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` on standard output, ending quietly on a closed pipe (see `outln!`).
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::write_out(format_args!($($arg)*))
    };
}

/// Writes to standard output. A closed pipe ends the program with status 0: whoever read
/// the output stopped wanting it. Any other write error ends it with status 1.
fn write_out(text: std::fmt::Arguments<'_>) {
    use std::io::Write;
    if let Err(e) = std::io::stdout().lock().write_fmt(text) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("streamctl: cannot write the output: {e}");
        std::process::exit(1);
    }
}

mod asyncapi;
mod broker;
mod connections;
mod definitions;
mod dlq;
mod listing;
mod management;
mod policies;

use broker::{Target, TargetError};
use listing::{Entity, Format};

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

/// What `set_policy` and `set_operator_policy` take besides the target.
#[derive(clap::Args, Debug)]
struct PolicyArgs {
    /// Among the policies (of its kind) matching a name, the highest priority applies.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i64,
    /// What it applies to: queues, exchanges or all.
    #[arg(long = "apply-to", default_value = "all", value_parser = ["queues", "exchanges", "all"])]
    apply_to: String,
    /// Its name.
    name: String,
    /// A regular expression searched for in queue and exchange names (one starting with `-`
    /// is taken as a pattern too).
    #[arg(allow_hyphen_values = true)]
    pattern: String,
    /// The keys it sets, as a JSON object: '{"max-length": 1000, "dead-letter-exchange":
    /// "dlx"}' (an operator policy sets limits only).
    definition: String,
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
    /// Print the AsyncAPI 3.0.0 document of a configuration's bindings, without running the
    /// service.
    ///
    /// A channel per destination (an AMQP exchange), one per consumer group's queue and
    /// dead-letter queue, a receive operation per input and a send operation per output,
    /// with AMQP bindings 0.3.0. Roles are guessed as `plan` guesses them unless --input or
    /// --output say. Payload types are the program's: the payloads here are `{}` with a
    /// description; the service's `/asyncapi.json` (management endpoint `asyncapi`) has
    /// their schemas.
    Asyncapi(asyncapi::AsyncApiArgs),
    /// Declare the topology a configuration needs on its broker, then exit.
    Provision {
        /// Configuration file (.yaml, .yml or .toml).
        #[arg(long)]
        config: PathBuf,
        /// Active profile (repeatable); overrides spring.profiles.active.
        #[arg(long = "profile")]
        profiles: Vec<String>,
    },
    /// List queues with rabbitmqctl's columns (default: name messages).
    #[command(name = "list_queues")]
    ListQueues {
        #[command(flatten)]
        target: Target,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Columns (rabbitmqctl's queue info items).
        columns: Vec<String>,
    },
    /// List exchanges with rabbitmqctl's columns (default: name type).
    #[command(name = "list_exchanges")]
    ListExchanges {
        #[command(flatten)]
        target: Target,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Columns (rabbitmqctl's exchange info items).
        columns: Vec<String>,
    },
    /// List bindings with rabbitmqctl's columns (needs a management API).
    #[command(name = "list_bindings")]
    ListBindings {
        #[command(flatten)]
        target: Target,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Columns (rabbitmqctl's binding info items).
        columns: Vec<String>,
    },
    /// List the broker's AMQP connections with rabbitmqctl's columns (default: user peer_host
    /// peer_port state; needs a management API).
    #[command(name = "list_connections")]
    ListConnections {
        #[command(flatten)]
        target: Target,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Columns (rabbitmqctl's connection info items; `name` is `peer -> local`).
        columns: Vec<String>,
    },
    /// List the connections' channels with rabbitmqctl's columns (default: name user
    /// consumer_count messages_unacknowledged; needs a management API).
    #[command(name = "list_channels")]
    ListChannels {
        #[command(flatten)]
        target: Target,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Columns (rabbitmqctl's channel info items; `name` stands for `pid`).
        columns: Vec<String>,
    },
    /// List consumers with rabbitmqctl's columns (needs a management API).
    #[command(name = "list_consumers")]
    ListConsumers {
        #[command(flatten)]
        target: Target,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Columns (rabbitmqctl's consumer info items; `channel_name` stands for
        /// `channel_pid`).
        columns: Vec<String>,
    },
    /// Close a client's connection: it gets 320 CONNECTION_FORCED with the explanation
    /// (needs a management API).
    #[command(name = "close_connection")]
    CloseConnection {
        #[command(flatten)]
        target: Target,
        /// The connection's name, as `list_connections name` prints it (`peer -> local`).
        name: String,
        /// What the client is told.
        explanation: String,
    },
    /// Set (or replace) a policy in the virtual host: queues and exchanges whose names match
    /// PATTERN take the definition's keys (needs a management API).
    #[command(name = "set_policy")]
    SetPolicy {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        policy: PolicyArgs,
    },
    /// Clear a policy (needs a management API).
    #[command(name = "clear_policy")]
    ClearPolicy {
        #[command(flatten)]
        target: Target,
        /// The policy's name.
        name: String,
    },
    /// List the virtual host's policies: vhost name pattern apply-to definition priority
    /// (needs a management API).
    #[command(name = "list_policies")]
    ListPolicies {
        #[command(flatten)]
        target: Target,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Set (or replace) an operator policy in the virtual host: its limits (expires,
    /// message-ttl, max-length, max-length-bytes) cap those of the policies and arguments of
    /// the queues whose names match PATTERN (needs a management API).
    #[command(name = "set_operator_policy")]
    SetOperatorPolicy {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        policy: PolicyArgs,
    },
    /// Clear an operator policy (needs a management API).
    #[command(name = "clear_operator_policy")]
    ClearOperatorPolicy {
        #[command(flatten)]
        target: Target,
        /// The operator policy's name.
        name: String,
    },
    /// List the virtual host's operator policies: vhost name pattern apply-to definition
    /// priority (needs a management API).
    #[command(name = "list_operator_policies")]
    ListOperatorPolicies {
        #[command(flatten)]
        target: Target,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Remove every ready message of a queue.
    #[command(name = "purge_queue")]
    PurgeQueue {
        #[command(flatten)]
        target: Target,
        /// The queue.
        queue: String,
    },
    /// Write the broker's definitions (users, virtual hosts, permissions, queues,
    /// exchanges, bindings) to a JSON file, `-` for standard output (needs a management API).
    #[command(name = "export_definitions")]
    ExportDefinitions {
        #[command(flatten)]
        target: Target,
        /// The file.
        path: PathBuf,
    },
    /// Declare the definitions of a JSON file (`-`: standard input) on the broker, as
    /// RabbitMQ's and stream-broker's management APIs import them (needs a management API).
    #[command(name = "import_definitions")]
    ImportDefinitions {
        #[command(flatten)]
        target: Target,
        /// The file.
        path: PathBuf,
    },
    /// A binding's dead-letter queue: list, replay or purge its messages.
    Dlq {
        #[command(subcommand)]
        command: dlq::DlqCommand,
    },
}

/// `set_policy` or `set_operator_policy`.
fn set_policy(target: Target, kind: policies::Kind, policy: PolicyArgs) -> ExitCode {
    operate(async move {
        let spec = policies::PolicySpec {
            pattern: &policy.pattern,
            definition: &policy.definition,
            priority: policy.priority,
            apply_to: &policy.apply_to,
        };
        policies::set(&target, kind, &policy.name, &spec)
    })
}

/// Runs an operator verb on a runtime of its own and turns its outcome into the exit status.
fn operate(verb: impl std::future::Future<Output = Result<(), TargetError>>) -> ExitCode {
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
    match runtime.block_on(verb) {
        Ok(()) => ExitCode::SUCCESS,
        Err(TargetError::Config(e)) => {
            eprintln!("streamctl: {e}");
            ExitCode::from(2)
        }
        Err(TargetError::Failed(e)) => {
            eprintln!("streamctl: {e}");
            ExitCode::FAILURE
        }
    }
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
            outln!(
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
            Ok(()) => outln!(
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
        Command::ListQueues {
            target,
            format,
            columns,
        } => operate(listing::list(Entity::Queues, &target, &columns, format)),
        Command::ListExchanges {
            target,
            format,
            columns,
        } => operate(listing::list(Entity::Exchanges, &target, &columns, format)),
        Command::ListBindings {
            target,
            format,
            columns,
        } => operate(listing::list(Entity::Bindings, &target, &columns, format)),
        Command::ListConnections {
            target,
            format,
            columns,
        } => operate(listing::list(
            Entity::Connections,
            &target,
            &columns,
            format,
        )),
        Command::ListChannels {
            target,
            format,
            columns,
        } => operate(listing::list(Entity::Channels, &target, &columns, format)),
        Command::ListConsumers {
            target,
            format,
            columns,
        } => operate(listing::list(Entity::Consumers, &target, &columns, format)),
        Command::CloseConnection {
            target,
            name,
            explanation,
        } => operate(async move { connections::close(&target, &name, &explanation) }),
        Command::SetPolicy { target, policy } => set_policy(target, policies::Kind::Policy, policy),
        Command::ClearPolicy { target, name } => {
            operate(async move { policies::clear(&target, policies::Kind::Policy, &name) })
        }
        Command::ListPolicies { target, format } => {
            operate(async move { policies::list(&target, policies::Kind::Policy, format) })
        }
        Command::SetOperatorPolicy { target, policy } => {
            set_policy(target, policies::Kind::Operator, policy)
        }
        Command::ClearOperatorPolicy { target, name } => {
            operate(async move { policies::clear(&target, policies::Kind::Operator, &name) })
        }
        Command::ListOperatorPolicies { target, format } => {
            operate(async move { policies::list(&target, policies::Kind::Operator, format) })
        }
        Command::PurgeQueue { target, queue } => operate(listing::purge(&target, &queue)),
        Command::ExportDefinitions { target, path } => {
            operate(async move { definitions::export(&target, &path) })
        }
        Command::ImportDefinitions { target, path } => {
            operate(async move { definitions::import(&target, &path) })
        }
        Command::Dlq { command } => operate(dlq::run(command)),
        Command::Asyncapi(args) => asyncapi::run(args),
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
                Format::Text => out!("{}", plan.to_text()),
                Format::Json => match serde_json::to_string_pretty(&plan) {
                    Ok(json) => outln!("{json}"),
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
