//! The store seam: what the broker tells a message store, and what it gets back at start.
//!
//! A [`MessageStore`] is given to the broker at construction ([`Broker::with_store`]). The
//! broker tells it of every durable declaration (exchanges, queues, bindings between durable
//! ends) and of every persistent message (AMQP delivery mode 2) in a durable queue: when it
//! is enqueued, first delivered, and removed (acknowledged, dead-lettered, expired, dropped,
//! purged). At start the broker asks the store to [`recover`](MessageStore::recover) what it
//! kept and rebuilds those exchanges, queues, bindings and messages.
//!
//! # The contract
//!
//! * **No I/O under the lock.** Every method but `recover` is called while the broker's lock
//!   is held, so it must only hand the work off (to a channel, a writer task or thread) and
//!   return: no blocking, no file or network I/O, no waiting on other locks that may be held
//!   for long. Calls arrive in the order the broker made the changes, on whichever thread ran
//!   the operation.
//! * **The durability point is asynchronous.** [`MessageStore::enqueued`] returns a
//!   [`Durability`]: [`Durability::Durable`] when nothing needs waiting for (the in-memory
//!   store: no allocation), a future that resolves once the message is safe, or
//!   [`Durability::Refused`] when the store does not take it at all. A publisher
//!   confirm waits for it ([`Channel::basic_publish`](crate::Channel::basic_publish) returns
//!   after it; [`Channel::try_basic_publish`](crate::Channel::try_basic_publish) hands it over
//!   as [`TryPublish::Pending`](crate::TryPublish::Pending)). The broker awaits it outside its
//!   lock. Dropping a `Durability` must not cancel the write: it only stops the wait.
//! * **`recover` runs once, before anything else,** from [`Broker::with_store`], outside any
//!   lock; it may do I/O.
//!
//! This seam is not the queue's in-memory index: each queue still serves deliveries from its
//! [`QueueStorage`](crate::QueueStorage), synchronously and under the lock. The store is kept
//! informed, and is what survives a restart.
//!
//! [`Broker::with_store`]: crate::Broker::with_store

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::field::FieldTable;
use crate::message::Published;
use crate::policy::PolicyDef;
use crate::types::{ExchangeKind, ExchangeOptions, QueueOptions};

/// A message store failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Reading or writing the store's medium failed.
    #[error("message store I/O failed")]
    Io(#[from] std::io::Error),
    /// What the store holds cannot be read back.
    #[error("message store is corrupt: {detail}")]
    Corrupt {
        /// What was found wrong.
        detail: String,
    },
    /// The store refused or could not complete the operation.
    #[error("message store failed: {detail}")]
    Failed {
        /// What went wrong.
        detail: String,
    },
}

/// When an enqueued message is safe: at once, or once a future resolves. Matches outside
/// this crate need a wildcard arm: later versions may add ways of answering.
#[must_use = "a publisher confirm waits for the durability point"]
#[non_exhaustive]
pub enum Durability {
    /// Safe already (nothing to wait for).
    Durable,
    /// Safe once this resolves (with an error if the store failed to keep it).
    Pending(Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + 'static>>),
    /// Not taken at all (the store has failed, is closed, has no message id left, or the
    /// message is over its record limit): the queue does not take it either, its publisher
    /// hears this error, and a dead letter's original stays in the store.
    Refused(Option<StoreError>),
}

impl Durability {
    /// A durability point that resolves with `future`.
    pub fn pending(future: impl Future<Output = Result<(), StoreError>> + Send + 'static) -> Self {
        Durability::Pending(Box::pin(future))
    }

    /// Not taken, for this reason.
    pub fn refused(error: StoreError) -> Self {
        Durability::Refused(Some(error))
    }

    /// Whether there is nothing to wait for.
    pub fn is_durable(&self) -> bool {
        matches!(self, Durability::Durable)
    }

    /// Whether the store did not take the message at all.
    pub fn is_refused(&self) -> bool {
        matches!(self, Durability::Refused(_))
    }
}

impl fmt::Debug for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Durability::Durable => "Durability::Durable",
            Durability::Pending(_) => "Durability::Pending",
            Durability::Refused(_) => "Durability::Refused",
        })
    }
}

impl Future for Durability {
    type Output = Result<(), StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Durability::Durable => Poll::Ready(Ok(())),
            Durability::Pending(future) => future.as_mut().poll(cx),
            Durability::Refused(error) => {
                Poll::Ready(Err(error.take().unwrap_or_else(|| StoreError::Failed {
                    detail: "the message store refused the message".to_owned(),
                })))
            }
        }
    }
}

/// A durable exchange.
#[derive(Debug, Clone, PartialEq)]
pub struct ExchangeDef {
    /// Its name.
    pub name: String,
    /// Its type.
    pub kind: ExchangeKind,
    /// Its flags (`durable` is set).
    pub options: ExchangeOptions,
    /// Its arguments.
    pub arguments: FieldTable,
}

/// A durable queue.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueDef {
    /// Its name.
    pub name: String,
    /// Its flags (`durable` is set; a durable queue is never exclusive).
    pub options: QueueOptions,
    /// Its arguments.
    pub arguments: FieldTable,
}

/// What a binding routes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DestinationKind {
    /// A queue (`queue.bind`).
    Queue,
    /// An exchange (`exchange.bind`).
    Exchange,
}

/// A binding from a durable exchange to a durable queue or exchange.
#[derive(Debug, Clone, PartialEq)]
pub struct BindingDef {
    /// The exchange it routes from.
    pub source: String,
    /// The queue or exchange it routes to.
    pub destination: String,
    /// Whether the destination is a queue or an exchange.
    pub destination_kind: DestinationKind,
    /// The binding key.
    pub routing_key: String,
    /// The binding arguments.
    pub arguments: FieldTable,
}

/// A persistent message in a durable queue, as the store sees it when it is enqueued.
pub struct StoredMessage<'a> {
    /// The queue.
    pub queue: &'a str,
    /// Its position in the queue's arrival order: with the queue name, its identity in
    /// later calls.
    pub seq: u64,
    /// The publication it came from: every queue one publish (or one dead-lettering)
    /// reaches is told the same number, in consecutive calls, so a store can write the
    /// message once and refer to it from each queue. Numbers grow for the broker's life
    /// and start again after a restart.
    pub publication: u64,
    pub(crate) record: &'a dyn RecordView,
}

impl StoredMessage<'_> {
    /// The message and where it was published, in the engine's types (converted from the
    /// broker's envelope on demand: call it when the store needs the contents).
    pub fn published(&self) -> Published {
        self.record.published()
    }
}

impl fmt::Debug for StoredMessage<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoredMessage")
            .field("queue", &self.queue)
            .field("seq", &self.seq)
            .field("publication", &self.publication)
            .finish_non_exhaustive()
    }
}

/// A record the store may read, whatever the broker's envelope.
pub(crate) trait RecordView {
    fn published(&self) -> Published;
}

/// Why a stored message left its queue. A store that delays writing removals must not let
/// a `DeadLettered` or `Moved` one reach the disk before the copy the broker stored before
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// Acknowledged, discarded, or delivered to a no-ack consumer.
    Acked,
    /// Rejected, expired, over a length or delivery limit, and published to its queue's
    /// dead-letter exchange first.
    DeadLettered,
    /// Rejected, expired, over a length or delivery limit, with no dead-letter exchange.
    Dropped,
    /// Re-driven ([`Broker::redrive`](crate::Broker::redrive)): its copy was stored first.
    Moved,
    /// Purged.
    Purged,
}

/// A message the store kept.
#[derive(Debug, Clone, PartialEq)]
pub struct RecoveredMessage {
    /// The durable queue it is in.
    pub queue: String,
    /// Its position in the queue's arrival order (messages are restored in this order).
    pub seq: u64,
    /// It was delivered before the restart (RabbitMQ marks such messages redelivered).
    pub redelivered: bool,
    /// The message and where it was published.
    pub published: Published,
}

/// What a store kept: the broker rebuilds it at start.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recovered {
    /// Durable exchanges.
    pub exchanges: Vec<ExchangeDef>,
    /// Durable queues.
    pub queues: Vec<QueueDef>,
    /// Bindings between durable exchanges and queues (exchanges and queues first: a binding
    /// whose ends are missing is skipped).
    pub bindings: Vec<BindingDef>,
    /// Policies (applied before the queues and exchanges are declared again).
    pub policies: Vec<PolicyDef>,
    /// Operator policies (likewise).
    pub operator_policies: Vec<PolicyDef>,
    /// Messages of durable queues.
    pub messages: Vec<RecoveredMessage>,
    /// Per durable queue, the highest position the store still holds anything under (a
    /// message, or an acknowledgement of one since removed): the broker numbers the queue's
    /// new messages after it, and after its messages' positions. A store that tells
    /// messages apart by queue and position needs it, since an acknowledgement it keeps
    /// would otherwise be taken for one of a new message under the same position.
    pub positions: Vec<(String, u64)>,
}

/// Where durable declarations and persistent messages go (see the [module docs](self) for
/// the contract: every method but `recover` runs under the broker's lock and must only hand
/// work off).
pub trait MessageStore: fmt::Debug + Send + Sync + 'static {
    /// Whether the store keeps messages at all. Asked once, at construction; when false the
    /// broker makes no per-message calls ([`enqueued`](Self::enqueued),
    /// [`delivered`](Self::delivered), [`removed`](Self::removed)), so a store that keeps
    /// nothing costs nothing per message.
    fn keeps_messages(&self) -> bool;

    /// What the store kept, to rebuild at start. Called once, outside the lock.
    fn recover(&self) -> Result<Recovered, StoreError>;

    /// A durable exchange was declared.
    fn exchange_declared(&self, exchange: &ExchangeDef);
    /// A durable exchange was deleted (with its bindings).
    fn exchange_deleted(&self, name: &str);
    /// A durable queue was declared.
    fn queue_declared(&self, queue: &QueueDef);
    /// A durable queue was deleted, with its messages and bindings.
    fn queue_deleted(&self, name: &str);
    /// A binding between durable ends was added.
    fn binding_added(&self, binding: &BindingDef);
    /// A binding between durable ends was removed (not called for the bindings of a deleted
    /// exchange or queue: those go with it).
    fn binding_removed(&self, binding: &BindingDef);
    /// A policy was set, or replaced by name ([`Broker::set_policy`](crate::Broker::set_policy)).
    fn policy_set(&self, policy: &PolicyDef);
    /// A policy was cleared.
    fn policy_cleared(&self, name: &str);
    /// An operator policy was set, or replaced by name
    /// ([`Broker::set_operator_policy`](crate::Broker::set_operator_policy)); operator
    /// policies are named apart from policies.
    fn operator_policy_set(&self, policy: &PolicyDef);
    /// An operator policy was cleared.
    fn operator_policy_cleared(&self, name: &str);

    /// A persistent message was enqueued in a durable queue; the publisher's confirm waits
    /// for the returned durability point.
    fn enqueued(&self, message: &StoredMessage<'_>) -> Durability;
    /// A stored message was delivered for the first time.
    fn delivered(&self, queue: &str, seq: u64);
    /// A stored message left its queue.
    fn removed(&self, queue: &str, seq: u64, why: Removal);

    /// Whether the broker may page: drop from memory the bodies of messages this store
    /// was told of ([`enqueued`](Self::enqueued)) and read them back with
    /// [`read`](Self::read) when they are delivered (RabbitMQ's lazy queues). Asked once,
    /// at construction. The default is `false`: every message stays in memory.
    ///
    /// A store that pages must be able to read back every message it took (any
    /// `enqueued` that did not return [`Durability::Refused`]) until it is told of its
    /// removal, even one whose write failed or came after the store itself failed: the
    /// broker may have paged it already, and the store then holds its only copy. Where its
    /// own limits stop it (memory for what it could not write), such a read fails: the
    /// broker reports it and never delivers a wrong body.
    fn pages(&self) -> bool {
        false
    }

    /// Why the store stopped keeping messages, once it has (a write or a sync failed: from
    /// then on it refuses every message, [`Durability::Refused`]), for health reports and
    /// logs; `None` while it works. Cheap: it never waits for the store's work. The default
    /// is `None`, for stores that cannot fail.
    fn failure(&self) -> Option<String> {
        None
    }

    /// Reads back stored messages of `queue` by their sequence numbers, in the order asked.
    /// Only called when [`pages`](Self::pages) is true, for messages the store was told of
    /// and not yet told were removed.
    ///
    /// **The one exception to "no I/O under the lock"**: it is called under the broker's
    /// lock (a delivery needs the body now), so it must be quick: read from the page cache
    /// or the disk directly (a `pread` per batch), never wait on a sync. The broker asks for
    /// a batch of consecutive messages at once (a read-ahead), so a store can serve it with
    /// few reads. A message that cannot be read (an I/O error, a bad checksum, a message the
    /// store does not have) fails the whole call: the broker reports it and keeps the
    /// message, it never delivers a wrong or empty body.
    fn read(&self, queue: &str, seqs: &[u64]) -> Result<Vec<Published>, StoreError> {
        let _ = seqs;
        Err(StoreError::Failed {
            detail: format!("this message store does not page (reading back from '{queue}')"),
        })
    }
}

/// The in-memory store: keeps nothing, so nothing survives the broker (the engine's
/// behaviour without a store). Every message is durable at once.
#[derive(Debug, Default, Clone, Copy)]
pub struct MemoryStore;

impl MessageStore for MemoryStore {
    fn keeps_messages(&self) -> bool {
        false
    }

    fn recover(&self) -> Result<Recovered, StoreError> {
        Ok(Recovered::default())
    }

    fn exchange_declared(&self, _: &ExchangeDef) {}
    fn exchange_deleted(&self, _: &str) {}
    fn queue_declared(&self, _: &QueueDef) {}
    fn queue_deleted(&self, _: &str) {}
    fn binding_added(&self, _: &BindingDef) {}
    fn binding_removed(&self, _: &BindingDef) {}
    fn policy_set(&self, _: &PolicyDef) {}
    fn policy_cleared(&self, _: &str) {}
    fn operator_policy_set(&self, _: &PolicyDef) {}
    fn operator_policy_cleared(&self, _: &str) {}

    fn enqueued(&self, _: &StoredMessage<'_>) -> Durability {
        Durability::Durable
    }

    fn delivered(&self, _: &str, _: u64) {}
    fn removed(&self, _: &str, _: u64, _: Removal) {}
}
