//! `dlq list|replay|purge`: a binding's dead-letter queue, over AMQP (so the same on RabbitMQ
//! and `stream-broker`, with or without a management API).

use binder_amqp::topology::plan_consumer;
use binder_core::binder::Binder;
use binder_core::message::HeaderValue;
use binder_rabbit::PeekedMessage;
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::broker::{Target, TargetError};
use crate::listing::Format;

/// Which dead-letter queue.
#[derive(Debug, Args)]
pub struct Which {
    /// The consumer binding whose dead-letter queue it is (needs --config): its
    /// `<destination>.<group>.dlq`, or `deadLetterQueueName`.
    #[arg(long, required_unless_present = "queue", conflicts_with = "queue")]
    pub binding: Option<String>,
    /// The dead-letter queue by name, instead of a binding's.
    #[arg(long)]
    pub queue: Option<String>,
}

/// The `dlq` verbs.
#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// Show the messages of a dead-letter queue, with why they failed and where they came
    /// from; they stay in the queue, in their order (the broker marks them redelivered).
    List {
        #[command(flatten)]
        which: Which,
        #[command(flatten)]
        target: Target,
        /// Show at most this many.
        #[arg(long, default_value_t = 100)]
        count: u32,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Send dead-lettered messages back to the exchange and routing key they were first
    /// published to; each leaves the queue only once the broker confirmed the republish and
    /// routed it. Exits 1 when some stay (each is printed with the reason).
    Replay {
        #[command(flatten)]
        which: Which,
        #[command(flatten)]
        target: Target,
        /// Replay at most this many (default: every message ready when it starts).
        #[arg(long)]
        count: Option<u32>,
    },
    /// Remove every ready message of a dead-letter queue.
    Purge {
        #[command(flatten)]
        which: Which,
        #[command(flatten)]
        target: Target,
    },
}

/// Runs a `dlq` verb.
pub async fn run(command: DlqCommand) -> Result<(), TargetError> {
    match command {
        DlqCommand::List {
            which,
            target,
            count,
            format,
        } => {
            let (queue, binder) = open(&which, &target)?;
            let peeked = binder.peek(&queue, count).await;
            binder.close().await;
            let peeked = peeked.map_err(|e| TargetError::Failed(e.to_string()))?;
            match format {
                Format::Json => {
                    let items: Vec<Value> = peeked.iter().map(to_json).collect();
                    outln!("{}", Value::Array(items));
                }
                Format::Text => {
                    if !target.quiet {
                        outln!("Dead-letter queue {queue}: {} shown", peeked.len());
                    }
                    for (i, m) in peeked.iter().enumerate() {
                        out!("{}", to_text(i + 1, m));
                    }
                }
            }
            Ok(())
        }
        DlqCommand::Replay {
            which,
            target,
            count,
        } => {
            let (queue, binder) = open(&which, &target)?;
            let report = binder.replay(&queue, count.unwrap_or(u32::MAX)).await;
            binder.close().await;
            let report = report.map_err(|e| TargetError::Failed(e.to_string()))?;
            outln!("replayed {} messages from {queue}", report.replayed);
            for kept in &report.kept {
                outln!(
                    "kept a message (routing key `{}`): {}",
                    kept.routing_key,
                    kept.reason
                );
            }
            if report.kept.is_empty() {
                Ok(())
            } else {
                Err(TargetError::Failed(format!(
                    "{} messages stay in {queue}",
                    report.kept.len()
                )))
            }
        }
        DlqCommand::Purge { which, target } => {
            let (queue, binder) = open(&which, &target)?;
            let purged = binder.purge_queue(&queue).await;
            binder.close().await;
            let purged = purged.map_err(|e| TargetError::Failed(e.to_string()))?;
            outln!("purged {purged} messages from {queue}");
            Ok(())
        }
    }
}

/// The dead-letter queue's name and a binder on its broker.
fn open(
    which: &Which,
    target: &Target,
) -> Result<(String, binder_rabbit::RabbitBinder), TargetError> {
    let broker = target.resolve(which.binding.as_deref())?;
    let queue = match (&which.queue, &which.binding) {
        (Some(q), _) => q.clone(),
        (None, Some(binding)) => {
            let Some(config) = &broker.config else {
                return Err(TargetError::Config(
                    "--binding needs --config (the file that configures the binding)".into(),
                ));
            };
            dead_letter_queue(config, binding)?
        }
        (None, None) => {
            return Err(TargetError::Config(
                "name the dead-letter queue: --binding B (with --config) or --queue Q".into(),
            ));
        }
    };
    Ok((queue, broker.binder()))
}

/// The dead-letter queue the configuration declares for `binding`.
fn dead_letter_queue(
    config: &binder_core::config::StreamConfig,
    binding: &str,
) -> Result<String, TargetError> {
    let Some(b) = config.bindings.get(binding) else {
        let known: Vec<&str> = config.bindings.keys().map(String::as_str).collect();
        return Err(TargetError::Config(format!(
            "no binding `{binding}` in the configuration (it has: {})",
            known.join(", ")
        )));
    };
    if b.group.is_none() {
        return Err(TargetError::Config(format!(
            "binding `{binding}` has no group, so no dead-letter queue (an anonymous consumer's \
             queue goes away with it)"
        )));
    }
    let topology = plan_consumer(b, "anonymous");
    topology
        .plan
        .queues
        .iter()
        .map(|q| &q.name)
        .find(|name| !topology.queues.contains(name))
        .cloned()
        .ok_or_else(|| {
            TargetError::Config(format!(
                "binding `{binding}` has no dead-letter queue: set \
                 spring.cloud.stream.rabbit.bindings.{binding}.consumer.autoBindDlq: true"
            ))
        })
}

fn header_text(value: &HeaderValue) -> String {
    match value {
        HeaderValue::String(s) => s.clone(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

/// The payload as text when it is UTF-8, else base64 (as the management API's `auto`).
fn payload(m: &PeekedMessage) -> (String, &'static str) {
    use base64::Engine as _;
    match std::str::from_utf8(&m.message.payload) {
        Ok(text) => (text.to_owned(), "string"),
        Err(_) => (
            base64::engine::general_purpose::STANDARD.encode(&m.message.payload),
            "base64",
        ),
    }
}

fn to_json(m: &PeekedMessage) -> Value {
    let (payload, encoding) = payload(m);
    let origin = m
        .origin()
        .map(|(exchange, routing_key)| json!({"exchange": exchange, "routing_key": routing_key}));
    json!({
        "exchange": m.exchange,
        "routing_key": m.routing_key,
        "redelivered": m.redelivered,
        "origin": origin,
        "headers": m.message.headers,
        "payload": payload,
        "payload_encoding": encoding,
    })
}

fn to_text(n: usize, m: &PeekedMessage) -> String {
    let mut out = format!("#{n} routing key `{}`", m.routing_key);
    match m.origin() {
        Some((exchange, key)) => {
            out.push_str(&format!(", from exchange `{exchange}` key `{key}`\n"))
        }
        None => out.push_str(", origin unknown (no x-original-exchange or x-death)\n"),
    }
    for (name, value) in m.message.headers.iter() {
        if name.starts_with("x-exception-") || name == "x-death" || name == "x-attempts" {
            let text = header_text(value);
            let first_line = text.lines().next().unwrap_or_default();
            out.push_str(&format!("   {name}: {first_line}\n"));
        }
    }
    let (payload, encoding) = payload(m);
    let shown: String = payload.chars().take(200).collect();
    let cut = if shown.len() < payload.len() {
        "…"
    } else {
        ""
    };
    out.push_str(&format!(
        "   payload ({} bytes, {encoding}): {shown}{cut}\n",
        m.message.payload.len()
    ));
    out
}
