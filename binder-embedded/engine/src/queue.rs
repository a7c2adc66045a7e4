//! Queues: declared attributes, parsed `x-` arguments, storage and consumers.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use crate::field::{FieldTable, FieldValue};
use tokio::time::Instant;

use super::error::{AmqpError, AmqpResult};
use super::storage::{
    FifoStorage, HOLD_AFTER, PriorityStorage, QueueStorage, QueuedMessage, RUN_SLOT,
};
use super::types::QueueOptions;
use crate::dead_letter::DeathReason;
use crate::envelope::Envelope;
use crate::memory;

/// What a full queue does (`x-overflow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Overflow {
    #[default]
    DropHead,
    RejectPublish,
    RejectPublishDlx,
}

impl Overflow {
    /// Parses RabbitMQ's name (`drop-head`, `reject-publish`, `reject-publish-dlx`).
    pub(crate) fn from_name(name: &str) -> Option<Overflow> {
        Some(match name {
            "drop-head" => Overflow::DropHead,
            "reject-publish" => Overflow::RejectPublish,
            "reject-publish-dlx" => Overflow::RejectPublishDlx,
            _ => return None,
        })
    }
}

/// The queue arguments the engine acts on, validated at declaration.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct QueueArgs {
    pub message_ttl: Option<Duration>,
    pub expires: Option<Duration>,
    pub max_length: Option<usize>,
    pub max_length_bytes: Option<usize>,
    pub overflow: Overflow,
    pub dead_letter_exchange: Option<String>,
    pub dead_letter_routing_key: Option<String>,
    pub max_priority: Option<u8>,
    pub single_active_consumer: bool,
    pub delivery_limit: Option<u32>,
}

/// Arguments compared when a queue is redeclared (as RabbitMQ does).
const EQUIVALENCE_ARGS: &[&str] = &[
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-expires",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-priority",
    "x-message-ttl",
    "x-overflow",
    "x-queue-type",
    "x-single-active-consumer",
    "x-delivery-limit",
];

fn invalid(queue: &str, arg: &str, why: &str) -> AmqpError {
    AmqpError::precondition(format!("invalid arg '{arg}' for queue '{queue}': {why}"))
}

fn non_negative(queue: &str, arg: &str, v: &FieldValue) -> AmqpResult<u64> {
    v.as_i64()
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| {
            invalid(
                queue,
                arg,
                &format!("expected a non-negative integer, got {v}"),
            )
        })
}

fn text(queue: &str, arg: &str, v: &FieldValue) -> AmqpResult<String> {
    v.as_str().map(str::to_owned).ok_or_else(|| {
        invalid(
            queue,
            arg,
            &format!("expected a string, got {}", v.type_name()),
        )
    })
}

impl QueueArgs {
    pub(crate) fn parse(queue: &str, args: &FieldTable) -> AmqpResult<Self> {
        let mut out = QueueArgs::default();
        for (name, v) in args {
            let arg = name.as_str();
            match arg {
                "x-message-ttl" => {
                    out.message_ttl = Some(Duration::from_millis(non_negative(queue, arg, v)?))
                }
                "x-expires" => {
                    let ms = non_negative(queue, arg, v)?;
                    if ms == 0 {
                        return Err(invalid(queue, arg, "must be positive"));
                    }
                    out.expires = Some(Duration::from_millis(ms));
                }
                "x-max-length" => out.max_length = Some(non_negative(queue, arg, v)? as usize),
                "x-max-length-bytes" => {
                    out.max_length_bytes = Some(non_negative(queue, arg, v)? as usize)
                }
                "x-overflow" => {
                    let t = text(queue, arg, v)?;
                    out.overflow = Overflow::from_name(&t).ok_or_else(|| {
                        invalid(
                            queue,
                            arg,
                            &format!(
                                "'{t}' is not one of drop-head, reject-publish, reject-publish-dlx"
                            ),
                        )
                    })?;
                }
                "x-dead-letter-exchange" => out.dead_letter_exchange = Some(text(queue, arg, v)?),
                "x-dead-letter-routing-key" => {
                    out.dead_letter_routing_key = Some(text(queue, arg, v)?)
                }
                "x-max-priority" => {
                    let p = non_negative(queue, arg, v)?;
                    if p == 0 || p > 255 {
                        return Err(invalid(queue, arg, "must be from 1 to 255"));
                    }
                    out.max_priority = Some(p as u8);
                }
                "x-single-active-consumer" => match v {
                    FieldValue::Bool(b) => out.single_active_consumer = *b,
                    _ => return Err(invalid(queue, arg, "expected a boolean")),
                },
                "x-delivery-limit" => {
                    out.delivery_limit = Some(non_negative(queue, arg, v)? as u32)
                }
                "x-queue-type" => {
                    let t = text(queue, arg, v)?;
                    if t != "classic" && t != "quorum" {
                        return Err(invalid(
                            queue,
                            arg,
                            &format!("queue type '{t}' is not supported (classic, quorum)"),
                        ));
                    }
                }
                _ => {}
            }
        }
        if out.dead_letter_routing_key.is_some() && out.dead_letter_exchange.is_none() {
            return Err(invalid(
                queue,
                "x-dead-letter-routing-key",
                "requires x-dead-letter-exchange",
            ));
        }
        Ok(out)
    }
}

fn same_value(a: &FieldValue, b: &FieldValue) -> bool {
    match (a.as_i64(), b.as_i64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// A consumer registered on a queue, as the queue sees it.
#[derive(Debug, Clone)]
pub(crate) struct QueueConsumer {
    pub id: u64,
    pub priority: i64,
}

/// One queue.
#[derive(Debug)]
pub(crate) struct Queue<E: Envelope> {
    pub name: Arc<str>,
    pub durable: bool,
    pub auto_delete: bool,
    /// The owning connection of an exclusive queue.
    pub owner: Option<u64>,
    pub raw_args: FieldTable,
    /// Its own arguments, parsed from `raw_args`.
    pub declared: QueueArgs,
    /// What the engine acts on: `declared` combined with its policy's keys.
    pub args: QueueArgs,
    /// The policy it follows, if any.
    pub policy: Option<Arc<str>>,
    /// The operator policy it follows, if any.
    pub operator_policy: Option<Arc<str>>,
    pub storage: Box<dyn QueueStorage<E>>,
    /// Consumers in registration order; dispatch rotates through them.
    pub consumers: Vec<QueueConsumer>,
    pub cursor: usize,
    pub exclusive_consumer: bool,
    /// Consumers whose handle is waiting (see `ConsumerState::parked`).
    pub parked: usize,
    pub had_consumer: bool,
    pub last_used: Instant,
    pub next_seq: u64,
    /// Messages enqueued since the queue was declared (management's `publish` count).
    pub published: u64,
    /// Messages handed to consumers or `basic.get` since the queue was declared
    /// (management's `deliver_get` count; redeliveries count again).
    pub delivered: u64,
}

impl<E: Envelope> Queue<E> {
    pub(crate) fn new(
        name: Arc<str>,
        options: QueueOptions,
        owner: Option<u64>,
        raw_args: FieldTable,
        args: QueueArgs,
    ) -> Self {
        let storage: Box<dyn QueueStorage<E>> = match args.max_priority {
            Some(max) => Box::new(PriorityStorage::new(max)),
            None => Box::<FifoStorage<E>>::default(),
        };
        Queue {
            name,
            durable: options.durable,
            auto_delete: options.auto_delete,
            owner,
            raw_args,
            declared: args.clone(),
            args,
            policy: None,
            operator_policy: None,
            storage,
            consumers: Vec::new(),
            cursor: 0,
            exclusive_consumer: false,
            parked: 0,
            had_consumer: false,
            last_used: Instant::now(),
            next_seq: 0,
            published: 0,
            delivered: 0,
        }
    }

    /// Checks a redeclaration against this queue, as RabbitMQ does.
    pub(crate) fn check_equivalent(
        &self,
        options: QueueOptions,
        exclusive_owner: Option<u64>,
        args: &FieldTable,
        vhost: &str,
    ) -> AmqpResult<()> {
        let name = &self.name;
        let field = |what: &str, current: bool, received: bool| {
            AmqpError::precondition(format!(
                "inequivalent arg '{what}' for queue '{name}' in vhost '{vhost}': received '{received}' but current is '{current}'"
            ))
        };
        if self.durable != options.durable {
            return Err(field("durable", self.durable, options.durable));
        }
        if self.auto_delete != options.auto_delete {
            return Err(field("auto_delete", self.auto_delete, options.auto_delete));
        }
        if self.owner.is_some() != exclusive_owner.is_some() {
            return Err(field(
                "exclusive",
                self.owner.is_some(),
                exclusive_owner.is_some(),
            ));
        }
        for arg in EQUIVALENCE_ARGS {
            let ok = match (self.raw_args.get(arg), args.get(arg)) {
                (None, None) => true,
                (Some(a), Some(b)) => same_value(a, b),
                _ => false,
            };
            if !ok {
                let show = |v: Option<&FieldValue>| match v {
                    Some(v) => format!("the value '{v}' of type '{}'", v.type_name()),
                    None => "none".to_owned(),
                };
                return Err(AmqpError::precondition(format!(
                    "inequivalent arg '{arg}' for queue '{name}' in vhost '{vhost}': received {} but current is {}",
                    show(args.get(arg)),
                    show(self.raw_args.get(arg))
                )));
            }
        }
        Ok(())
    }

    /// Appends a message; returns the bytes it is counted as. A stub that joins the queue's
    /// run of paged messages is counted [`RUN_SLOT`]. Once the queue holds [`HOLD_AFTER`]
    /// ready messages, a record that reaches no one else is kept by the queue
    /// without its `Arc` (see [`QueuedMessage`]), and counted [`memory::unheld`] less.
    pub(crate) fn push(&mut self, mut message: QueuedMessage<E>) -> usize {
        if message.is_paged() {
            match self.storage.try_push_run(message) {
                None => return RUN_SLOT as usize,
                Some(m) => message = m,
            }
        }
        let footprint = message.footprint();
        if self.storage.len() >= HOLD_AFTER {
            if let Some(body) = message.body.take() {
                match Arc::try_unwrap(body) {
                    Ok(record) => {
                        let footprint = footprint - memory::unheld::<E>();
                        self.storage.push_held(message, record);
                        return footprint;
                    }
                    Err(body) => message.body = Some(body),
                }
            }
        }
        self.storage.push(message);
        footprint
    }

    /// Removes the next message to deliver, with its record shared: a record the queue held
    /// is boxed, and the message is counted [`memory::unheld`] more from now on (added to
    /// `used`).
    pub(crate) fn pop(&mut self, used: &mut usize) -> Option<QueuedMessage<E>> {
        let mut message = self.storage.pop()?;
        if message.is_held() {
            message.unhold();
            let more = memory::unheld::<E>();
            message.set_footprint((message.footprint() + more) as u32);
            *used += more;
        }
        Some(message)
    }

    /// Whether length or byte limits are exceeded with `extra` more bytes in one more message.
    pub(crate) fn would_overflow(&self, extra_bytes: usize) -> bool {
        let len = self.storage.len();
        self.args.max_length.is_some_and(|max| len + 1 > max)
            || self
                .args
                .max_length_bytes
                .is_some_and(|max| self.storage.bytes() + extra_bytes > max)
    }

    /// With `drop-head` overflow, takes the oldest messages off while the queue is over its
    /// limits, for `dying` to drop or dead-letter them (`maxlen`); `used` counts what they
    /// hold as [`Self::pop`] does. With `reject-publish(-dlx)` a queue over its limits (by
    /// requeued or recovered messages) keeps them, as RabbitMQ's does: only publishes are
    /// refused.
    pub(crate) fn drop_over_limits(
        &mut self,
        used: &mut usize,
        dying: &mut VecDeque<(QueuedMessage<E>, Arc<str>, DeathReason)>,
    ) {
        if self.args.overflow != Overflow::DropHead {
            return;
        }
        while self.over_limits() {
            let Some(head) = self.pop(used) else {
                break;
            };
            dying.push_back((head, self.name.clone(), DeathReason::MaxLen));
        }
    }

    /// Whether the queue is over its limits right now.
    pub(crate) fn over_limits(&self) -> bool {
        self.args
            .max_length
            .is_some_and(|max| self.storage.len() > max)
            || self
                .args
                .max_length_bytes
                .is_some_and(|max| self.storage.bytes() > max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::Native;
    use crate::message::{Message, Published};

    fn queue() -> Queue<Native> {
        Queue::new(
            Arc::from("q"),
            QueueOptions::default(),
            None,
            FieldTable::new(),
            QueueArgs::default(),
        )
    }

    fn record(payload: usize) -> Arc<Published> {
        Arc::new(Published::new("", "q", Message::new(vec![0u8; payload])))
    }

    #[test]
    fn a_deep_queue_holds_lone_records_and_the_count_follows_them_exactly() {
        let mut q = queue();
        let shared = record(7);
        let mut used = 0;
        let n = HOLD_AFTER as u64 + 3;
        for seq in 0..n {
            let body = if seq == n - 1 {
                shared.clone()
            } else {
                record(100)
            };
            let footprint = memory::entry_footprint::<Native>(&body) as usize;
            let counted = q.push(QueuedMessage::new(seq, 0, body, footprint as u32, None));
            used += counted;
            if (HOLD_AFTER as u64..n - 1).contains(&seq) {
                assert_eq!(counted, footprint - 24, "held: no Arc");
            } else {
                assert_eq!(counted, footprint, "shallow, or shared with another holder");
            }
        }
        let held = q.storage.iter().filter(|(m, r)| m.is_held() && r.is_some());
        assert_eq!(held.count(), 2);
        assert_eq!(q.storage.bytes(), (n as usize - 1) * 100 + 7);
        let mut popped = 0;
        while let Some(m) = q.pop(&mut used) {
            assert!(!m.is_held() && m.body.is_some(), "boxed when it leaves");
            assert_eq!(
                m.footprint(),
                memory::entry_footprint::<Native>(m.body.as_ref().unwrap()) as usize,
                "counted as a shared record again"
            );
            used -= m.footprint();
            popped += 1;
        }
        assert_eq!(popped, n);
        assert_eq!(used, 0, "every byte added was taken off");
        assert_eq!(q.storage.bytes(), 0);
    }
}
