//! `stream-broker`: the bundled broker as a standalone AMQP 0-9-1 server.
//!
//! `stream-broker [--config FILE] [--listen ADDR] [--tls-listen ADDR]
//! [--management-listen ADDR [--management-allow-remote]] [--data-dir DIR]
//! [--durability MODE] [--disk-free-limit BYTES] [--memory-paging-ratio FRACTION]
//! [--load-definitions FILE]`; ctrl-c or SIGTERM shuts it down
//! gracefully (connections, TLS ones included, are closed with 320 CONNECTION_FORCED).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use stream_broker::{Server, ServerConfig};
use stream_store::SyncMode;

/// The bundled broker on the network: an AMQP 0-9-1 server.
#[derive(Debug, Parser)]
#[command(name = "stream-broker", version)]
struct Args {
    /// A TOML configuration file (listen address, vhosts, users, limits).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Where to listen (overrides the file's `listen`; default 127.0.0.1:5673).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Where the TLS listener listens (overrides the file's `tls.listen`; needs a `[tls]`
    /// table in the configuration file, which names the certificate and key).
    #[arg(long)]
    tls_listen: Option<SocketAddr>,
    /// Serve the HTTP management API and page here (overrides the file's
    /// `management.listen`; without either, management is off). A non-loopback address also
    /// needs `--management-allow-remote` (or `management.allow_remote = true`).
    #[arg(long)]
    management_listen: Option<SocketAddr>,
    /// Allow a non-loopback `--management-listen` address.
    #[arg(long)]
    management_allow_remote: bool,
    /// Keep durable exchanges, queues, bindings and persistent messages in this directory
    /// (overrides the file's `data_dir`; default: memory only).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// When persistent messages are confirmed: `sync` (after their fsync, the default),
    /// `interval:<ms>` or `none` (overrides the file's `durability`; needs a data directory).
    #[arg(long, value_parser = parse_sync_mode)]
    durability: Option<SyncMode>,
    /// Block publishers while the data directory's disk has fewer free bytes than this
    /// (overrides the file's `disk_free_limit`; default 50000000, RabbitMQ's 50 MB).
    #[arg(long, value_name = "BYTES")]
    disk_free_limit: Option<u64>,
    /// Page message bodies to the data directory above this fraction of the memory high
    /// watermark (overrides the file's `memory_paging_ratio`; default 0.5, above 0 and at
    /// most 1; needs a data directory).
    #[arg(long, value_name = "FRACTION")]
    memory_paging_ratio: Option<f64>,
    /// Import this definitions file (RabbitMQ's JSON) at start, before listening (overrides
    /// the file's `load_definitions`).
    #[arg(long, value_name = "FILE")]
    load_definitions: Option<PathBuf>,
}

fn parse_sync_mode(text: &str) -> Result<SyncMode, String> {
    text.parse()
        .map_err(|e: stream_store::ConfigError| e.to_string())
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let args = Args::parse();
    let mut config = match &args.config {
        Some(path) => match ServerConfig::from_file(path) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("stream-broker: {e}");
                return ExitCode::FAILURE;
            }
        },
        None => ServerConfig::default(),
    };
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if let Some(tls_listen) = args.tls_listen {
        match &mut config.tls {
            Some(tls) => tls.listen = tls_listen,
            None => {
                eprintln!(
                    "stream-broker: --tls-listen needs a [tls] table in the configuration file \
                     (--config), with certfile and keyfile"
                );
                return ExitCode::FAILURE;
            }
        }
    }
    if let Some(listen) = args.management_listen {
        config
            .management
            .get_or_insert_with(Default::default)
            .listen = listen;
    }
    if args.management_allow_remote {
        match &mut config.management {
            Some(m) => m.allow_remote = true,
            None => {
                eprintln!(
                    "stream-broker: --management-allow-remote needs --management-listen or a \
                     [management] table"
                );
                return ExitCode::FAILURE;
            }
        }
    }
    if let Some(dir) = args.data_dir {
        config.data_dir = Some(dir);
    }
    if let Some(mode) = args.durability {
        config.durability = Some(mode);
    }
    if let Some(limit) = args.disk_free_limit {
        config.disk_free_limit = Some(limit);
    }
    if let Some(ratio) = args.memory_paging_ratio {
        config.memory_paging_ratio = Some(ratio);
    }
    if let Some(file) = args.load_definitions {
        config.load_definitions = Some(file);
    }
    if let Err(e) = config.validate() {
        eprintln!("stream-broker: {e}");
        return ExitCode::FAILURE;
    }
    if config.data_dir.is_none() {
        tracing::warn!(
            "no data directory (--data-dir): durable queues and persistent messages are kept in \
             memory only and lost when the broker stops"
        );
    }
    let server = match Server::standalone(config).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("stream-broker: {e}");
            return ExitCode::FAILURE;
        }
    };
    wait_for_signal().await;
    tracing::info!("shutting down");
    server.shutdown().await;
    ExitCode::SUCCESS
}

/// Ctrl-c, or SIGTERM on Unix.
async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
