//! A queue's in-memory index of its ready messages, in delivery order (FIFO, or by priority
//! for `x-max-priority` queues).
//!
//! This is not the store seam: it is synchronous, runs under the broker's lock and holds the
//! messages themselves (shared records, with their expiry as a `tokio` instant). What must
//! survive a restart goes through [`MessageStore`](crate::MessageStore), which every queue
//! keeps informed of what is enqueued and acknowledged; this index is what the broker serves
//! deliveries from, rebuilt from the store by [`MessageStore::recover`](crate::MessageStore::recover).

use std::borrow::Cow;
use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use tokio::time::Instant;

use crate::deadline::Deadline;
use crate::envelope::{Envelope, Native};
use crate::memory;

/// A message in a queue: 32 bytes, since every queued message has one. Its arrival position
/// and priority share one word, its delivery count and flags another with its footprint
/// (sizes as `u32`: the engine refuses payloads of more than
/// [`MAX_PAYLOAD`](crate::MAX_PAYLOAD) bytes), the expiry is a [`Deadline`], and the payload
/// size is read from the record (a stub keeps it in place of its footprint, which is always
/// the size of an entry).
///
/// Its record is held in one of three ways:
/// * shared ([`body`](QueuedMessage::body) is `Some`): the record's `Arc`, shared with the
///   other queues it was routed to and with deliveries;
/// * held by the queue (`body` is `None`, [`is_held`](QueuedMessage::is_held)): a queue
///   that already holds [`HOLD_AFTER`] ready messages keeps a record nobody else holds in a
///   ring of records of its own, without the `Arc` (its two counts) or the pointer to it; the
///   record is boxed again when it leaves the queue, and counted
///   [`memory::unheld`](crate::memory::unheld) more from then on;
/// * paged ([`is_paged`](QueuedMessage::is_paged)): only the message store holds it, and the
///   broker reads it back ([`MessageStore::read`](crate::MessageStore::read)) before it is
///   delivered.
#[derive(Debug, Clone)]
pub struct QueuedMessage<E: Envelope = Native> {
    /// Position in the queue's arrival order (requeued messages go back by it), shifted
    /// left by 8, and the effective priority (0 when the queue has none) in the low byte.
    order: u64,
    /// The record, when shared (see above).
    pub body: Option<Arc<E::Record>>,
    /// When it expires, from queue or message TTL.
    pub expires_at: Option<Deadline>,
    /// The memory this copy of the message is counted as against the memory high
    /// watermark (payload, headers, properties and the engine's bookkeeping; see
    /// [`BrokerConfig::memory_high_watermark`](super::BrokerConfig::memory_high_watermark));
    /// for a stub, which counts [`STUB`] (or [`RUN_SLOT`]), its payload size.
    weight: u32,
    /// Times it was delivered (for `x-delivery-limit`, saturating at [`MAX_DELIVERIES`]),
    /// then the `REDELIVERED`, `STORED` and `HELD` flags in the top bits.
    bits: u32,
}

/// What a stub (a paged message: no body) counts against the watermark: its queue entry.
pub(crate) const STUB: u32 = std::mem::size_of::<QueuedMessage<Native>>() as u32;

/// What a paged message in a queue's run counts against the watermark: its size, a `u32` in
/// the run (see [`FifoStorage`]).
pub(crate) const RUN_SLOT: u32 = std::mem::size_of::<u32>() as u32;

/// A queue that holds this many ready messages keeps the records that reach only it
/// without their `Arc` (see [`QueuedMessage`]): a consumer that keeps up is served shared
/// records as before, and a backlog costs 24 bytes less per message.
pub const HOLD_AFTER: usize = 1024;

/// The delivery count a queued message keeps: it saturates there (a delivery limit above it
/// is never reached).
pub const MAX_DELIVERIES: u32 = (1 << 28) - 1;

/// A stub that came out of a queue's run of paged messages (see [`FifoStorage`]): counted
/// [`RUN_SLOT`], not [`STUB`].
const RUN: u32 = 1 << 28;
const REDELIVERED: u32 = 1 << 29;
const STORED: u32 = 1 << 30;
const HELD: u32 = 1 << 31;

/// The largest arrival position a queued message keeps: positions are kept in 56 bits
/// (72 × 10^15 messages per queue). A message store must not recover a position the queue
/// could not number a next message after (`stream-store` refuses `MAX_SEQ` and above).
pub const MAX_SEQ: u64 = (1 << 56) - 1;

const SEQ_MASK: u64 = MAX_SEQ;

impl<E: Envelope> QueuedMessage<E> {
    /// A message entering a queue, shared (its record in `body`), not delivered before.
    pub fn new(
        seq: u64,
        priority: u8,
        body: Arc<E::Record>,
        footprint: u32,
        expires_at: Option<Deadline>,
    ) -> Self {
        QueuedMessage {
            order: ((seq & SEQ_MASK) << 8) | u64::from(priority),
            body: Some(body),
            expires_at,
            weight: footprint,
            bits: 0,
        }
    }

    /// Position in the queue's arrival order; requeued messages go back by it.
    #[inline]
    pub fn seq(&self) -> u64 {
        self.order >> 8
    }

    /// Effective priority (0 when the queue has none).
    #[inline]
    pub fn priority(&self) -> u8 {
        self.order as u8
    }

    /// Payload bytes, as counted against length limits (`x-max-length-bytes`), for a shared
    /// record or a stub (a held record's size is read from the record).
    pub fn size(&self) -> usize {
        match &self.body {
            Some(body) => E::payload_len(body),
            None if self.is_paged() => self.weight as usize,
            None => 0,
        }
    }

    /// Bytes counted against the memory high watermark.
    #[inline]
    pub fn footprint(&self) -> usize {
        if self.is_paged() {
            if self.bits & RUN != 0 {
                RUN_SLOT as usize
            } else {
                STUB as usize
            }
        } else {
            self.weight as usize
        }
    }

    /// Sets the bytes counted (not for a stub).
    #[inline]
    pub(crate) fn set_footprint(&mut self, footprint: u32) {
        debug_assert!(!self.is_paged());
        self.weight = footprint;
    }

    /// When it expires, if it does.
    pub fn expiry(&self) -> Option<Instant> {
        self.expires_at.map(Deadline::instant)
    }

    /// Times it was delivered.
    #[inline]
    pub fn deliveries(&self) -> u32 {
        self.bits & MAX_DELIVERIES
    }

    /// Sets the delivery count (saturating at [`MAX_DELIVERIES`]).
    #[inline]
    pub fn set_deliveries(&mut self, n: u32) {
        self.bits = (self.bits & !MAX_DELIVERIES) | n.min(MAX_DELIVERIES);
    }

    /// It was delivered before.
    #[inline]
    pub fn redelivered(&self) -> bool {
        self.bits & REDELIVERED != 0
    }

    /// Marks it delivered before (or not).
    #[inline]
    pub fn set_redelivered(&mut self, yes: bool) {
        self.flag(REDELIVERED, yes);
    }

    /// The message store was told of it (a persistent message in a durable queue, with a
    /// store that keeps messages): its delivery and removal are reported too.
    #[inline]
    pub fn stored(&self) -> bool {
        self.bits & STORED != 0
    }

    /// Marks it told to the message store.
    #[inline]
    pub fn set_stored(&mut self, yes: bool) {
        self.flag(STORED, yes);
    }

    /// Its record is held by its queue without an `Arc` (see above).
    #[inline]
    pub fn is_held(&self) -> bool {
        self.bits & HELD != 0
    }

    /// It is a stub: only the message store holds its record.
    #[inline]
    pub fn is_paged(&self) -> bool {
        self.body.is_none() && !self.is_held()
    }

    /// Drops its body, which the message store holds (a stub then), keeping its size.
    pub(crate) fn page_out(&mut self) {
        if let Some(body) = self.body.take() {
            self.weight = u32::try_from(E::payload_len(&body)).unwrap_or(u32::MAX);
        }
    }

    /// Gives a stub its body back, counted at `footprint`.
    pub(crate) fn page_in(&mut self, body: Arc<E::Record>, footprint: u32) {
        self.body = Some(body);
        self.weight = footprint;
        self.flag(RUN, false);
    }

    /// A paged message of a run, as a stub again: stored, never delivered, no expiry, no
    /// priority, counted [`RUN_SLOT`].
    fn from_run(seq: u64, slot: u32) -> Self {
        QueuedMessage {
            order: (seq & SEQ_MASK) << 8,
            body: None,
            expires_at: None,
            weight: slot & !AS_STUB,
            bits: if slot & AS_STUB != 0 {
                STORED
            } else {
                STORED | RUN
            },
        }
    }

    /// Whether this stub may be kept in a run: paged, stored, never delivered, without
    /// expiry or priority.
    fn fits_a_run(&self) -> bool {
        self.is_paged()
            && self.stored()
            && self.bits & !(STORED | RUN) == 0
            && self.expires_at.is_none()
            && self.priority() == 0
            && self.weight < AS_STUB
    }

    /// The record is no longer held by the queue (it was boxed when it left).
    pub(crate) fn unhold(&mut self) {
        self.flag(HELD, false);
    }

    fn flag(&mut self, flag: u32, yes: bool) {
        if yes {
            self.bits |= flag;
        } else {
            self.bits &= !flag;
        }
    }
}

/// A ready message, with its record when its queue holds it itself (see [`QueuedMessage`]).
/// A message of a run (see [`FifoStorage`]) comes as a stub made for the occasion.
pub type Ready<'a, E> = (
    Cow<'a, QueuedMessage<E>>,
    Option<&'a <E as Envelope>::Record>,
);

/// Storage of a queue's ready messages.
pub trait QueueStorage<E: Envelope = Native>: fmt::Debug + Send {
    /// Appends a message.
    fn push(&mut self, message: QueuedMessage<E>);
    /// Appends a stub to the queue's run of paged messages if it can join one (see
    /// [`FifoStorage`]): then it is counted 4 bytes (its slot) from now on. Gives the message back
    /// otherwise (the default: no runs).
    fn try_push_run(&mut self, message: QueuedMessage<E>) -> Option<QueuedMessage<E>> {
        Some(message)
    }
    /// Appends a message whose record the queue holds itself, without its `Arc` (see
    /// [`QueuedMessage`]); the message is marked held, its `body` dropped, and its footprint
    /// lowered by [`memory::unheld`] (it was counted with the record in an `Arc`).
    fn push_held(&mut self, message: QueuedMessage<E>, record: E::Record);
    /// Puts a message back at its arrival position (near the head). It has its record
    /// (a delivered message does).
    fn requeue(&mut self, message: QueuedMessage<E>);
    /// Removes the next message to deliver. A record the queue held comes out boxed, in
    /// `body`, and the message still marked held, for the caller to count the `Arc` and
    /// clear the mark (`Queue::pop` does both).
    fn pop(&mut self) -> Option<QueuedMessage<E>>;
    /// The next message to deliver.
    fn peek(&self) -> Option<&QueuedMessage<E>>;
    /// Ready messages.
    fn len(&self) -> usize;
    /// Whether there are no ready messages.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Payload bytes of ready messages.
    fn bytes(&self) -> usize;
    /// Removes every ready message (the records the queue held are dropped: those messages
    /// come out without a body, still marked held).
    fn drain(&mut self) -> Vec<QueuedMessage<E>>;
    /// The ready messages in delivery order, each with its record when the queue holds it
    /// itself, without removing them.
    fn iter(&self) -> Box<dyn Iterator<Item = Ready<'_, E>> + '_>;
    /// Removes the ready message with this arrival position, if it is here (a record the
    /// queue held is dropped, as by [`QueueStorage::drain`]).
    fn remove(&mut self, seq: u64) -> Option<QueuedMessage<E>>;
    /// The ready messages in delivery order up to the first run of paged messages (at least
    /// the first [`RUN_REFILL`] when there is one), to change in place (paging a body back
    /// in).
    fn iter_mut(&mut self) -> Box<dyn Iterator<Item = &mut QueuedMessage<E>> + '_>;
}

const _: () = assert!(std::mem::size_of::<QueuedMessage<Native>>() == 32);

/// Messages in arrival order, and beside them, in the same order, the records the queue
/// holds itself.
#[derive(Debug)]
struct Ring<E: Envelope> {
    messages: VecDeque<QueuedMessage<E>>,
    held: VecDeque<E::Record>,
    bytes: usize,
}

/// Ring buffers of up to this many slots are kept whole; larger ones give back half their
/// capacity once three quarters of it is unused, so a queue that drained a backlog does not
/// keep its memory (the two rings of a drained 1 M backlog hold 88 MiB).
const KEEP_SLOTS: usize = 1024;

fn shrink<T>(ring: &mut VecDeque<T>) {
    let capacity = ring.capacity();
    if capacity > KEEP_SLOTS && ring.len() < capacity / 4 {
        ring.shrink_to(capacity / 2);
    }
}

impl<E: Envelope> Ring<E> {
    /// Gives back ring capacity after messages left (see [`KEEP_SLOTS`]).
    #[inline]
    fn left(&mut self) {
        shrink(&mut self.messages);
        shrink(&mut self.held);
    }
}

impl<E: Envelope> Default for Ring<E> {
    fn default() -> Self {
        Ring {
            messages: VecDeque::new(),
            held: VecDeque::new(),
            bytes: 0,
        }
    }
}

impl<E: Envelope> Ring<E> {
    fn push(&mut self, message: QueuedMessage<E>) {
        self.bytes += message.size();
        self.messages.push_back(message);
    }

    fn push_held(&mut self, mut message: QueuedMessage<E>, record: E::Record) {
        self.bytes += E::payload_len(&record);
        message.body = None;
        message.flag(HELD, true);
        message.weight -= memory::unheld::<E>() as u32;
        self.messages.push_back(message);
        self.held.push_back(record);
    }

    fn requeue(&mut self, message: QueuedMessage<E>) {
        debug_assert!(!message.is_held(), "a requeued message has its record");
        self.bytes += message.size();
        let seq = message.seq();
        let at = self.messages.partition_point(|m| m.seq() < seq);
        self.messages.insert(at, message);
    }

    fn pop(&mut self) -> Option<QueuedMessage<E>> {
        let mut m = self.messages.pop_front()?;
        if m.is_held() {
            let record = self
                .held
                .pop_front()
                .expect("a held record per held message");
            self.bytes -= E::payload_len(&record);
            m.body = Some(Arc::new(record));
        } else {
            self.bytes -= m.size();
        }
        self.left();
        Some(m)
    }

    fn peek(&self) -> Option<&QueuedMessage<E>> {
        self.messages.front()
    }

    fn len(&self) -> usize {
        self.messages.len()
    }

    fn bytes(&self) -> usize {
        self.bytes
    }

    fn drain(&mut self) -> Vec<QueuedMessage<E>> {
        self.bytes = 0;
        self.held.clear();
        let drained = self.messages.drain(..).collect();
        self.messages.shrink_to(KEEP_SLOTS);
        self.held.shrink_to(KEEP_SLOTS);
        drained
    }

    fn iter(&self) -> impl Iterator<Item = Ready<'_, E>> + '_ {
        let mut held = self.held.iter();
        self.messages.iter().map(move |m| {
            (
                Cow::Borrowed(m),
                if m.is_held() { held.next() } else { None },
            )
        })
    }

    fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// Removes the last message (not one whose record the ring holds).
    fn pop_back(&mut self) -> Option<QueuedMessage<E>> {
        let m = self.messages.pop_back()?;
        debug_assert!(!m.is_held());
        self.bytes -= m.size();
        Some(m)
    }

    /// Moves every message of `other` to the end of this ring.
    fn append(&mut self, other: &mut Ring<E>) {
        self.messages.append(&mut other.messages);
        self.held.append(&mut other.held);
        self.bytes += std::mem::take(&mut other.bytes);
    }

    fn remove(&mut self, seq: u64) -> Option<QueuedMessage<E>> {
        let at = self.messages.iter().position(|m| m.seq() == seq)?;
        let m = self.messages.remove(at)?;
        if m.is_held() {
            let nth = self
                .messages
                .iter()
                .take(at)
                .filter(|m| m.is_held())
                .count();
            let record = self
                .held
                .remove(nth)
                .expect("a held record per held message");
            self.bytes -= E::payload_len(&record);
        } else {
            self.bytes -= m.size();
        }
        self.left();
        Some(m)
    }
}

/// Paged messages kept without a queue entry each: consecutive arrival positions from
/// `first`, each with a slot: its payload size, [`AS_STUB`] if it is counted as a whole
/// stub, or [`GONE`] once removed.
#[derive(Debug, Default)]
struct Run {
    first: u64,
    slots: VecDeque<u32>,
    live: usize,
    bytes: usize,
}

/// A run's slot of a message that was removed.
const GONE: u32 = u32::MAX;
/// In a run's slot: the message is counted [`STUB`] (it was a stub when the run took it).
const AS_STUB: u32 = 1 << 31;

impl Run {
    fn next_seq(&self) -> u64 {
        self.first + self.slots.len() as u64
    }

    fn contains(&self, seq: u64) -> bool {
        (self.first..self.next_seq()).contains(&seq)
    }

    fn add(&mut self, slot: u32) {
        self.slots.push_back(slot);
        self.live += 1;
        self.bytes += (slot & !AS_STUB) as usize;
    }

    /// Drops removed messages at the front, and everything once nothing is live.
    fn trim(&mut self) {
        while self.slots.front() == Some(&GONE) {
            self.slots.pop_front();
            self.first += 1;
        }
        if self.live == 0 {
            self.slots = VecDeque::new();
        } else {
            shrink(&mut self.slots);
        }
    }

    fn pop<E: Envelope>(&mut self) -> Option<QueuedMessage<E>> {
        self.trim();
        let slot = self.slots.pop_front()?;
        let seq = self.first;
        self.first += 1;
        self.live -= 1;
        let m = QueuedMessage::from_run(seq, slot);
        self.bytes -= m.size();
        Some(m)
    }

    fn remove<E: Envelope>(&mut self, seq: u64) -> Option<QueuedMessage<E>> {
        if !self.contains(seq) {
            return None;
        }
        let slot = &mut self.slots[(seq - self.first) as usize];
        if *slot == GONE {
            return None;
        }
        let m = QueuedMessage::from_run(seq, std::mem::replace(slot, GONE));
        self.live -= 1;
        self.bytes -= m.size();
        self.trim();
        Some(m)
    }

    fn iter<E: Envelope>(&self) -> impl Iterator<Item = QueuedMessage<E>> + '_ {
        let first = self.first;
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| **s != GONE)
            .map(move |(i, s)| QueuedMessage::from_run(first + i as u64, *s))
    }
}

/// A run and the messages that came after it and could not join it.
#[derive(Debug)]
struct Tail<E: Envelope> {
    run: Run,
    after: Ring<E>,
    /// How many of the last messages of `after` are stubs that could make a run of their
    /// own (consecutive arrival positions).
    streak: usize,
}

/// Once a queue's head holds this many messages, a paged message that can (see
/// [`QueueStorage::try_push_run`]) joins a run instead of getting a queue entry.
pub const RUN_AFTER: usize = 2048;

/// While a run follows, the head is refilled from it once it holds fewer than this many
/// messages (up to [`RUN_AFTER`]): the reads of paged messages (in batches of 256 from the
/// head) always find their stubs there.
pub const RUN_REFILL: usize = 1024;

/// Stubs behind a run that could make one (consecutive, paged, stored, never delivered,
/// no expiry) become a run of their own once there are this many: a run costs about 200
/// bytes, so a queue that alternates kinds of messages keeps its stubs.
const STREAK: usize = 64;

/// First-in, first-out storage in memory: the messages in arrival order (with the records
/// the queue holds itself beside them, in the same order).
///
/// A backlog of paged messages costs almost nothing per message (RabbitMQ's "delta"): once
/// the head holds [`RUN_AFTER`] messages, consecutive paged messages (stored, never
/// delivered, without expiry) are kept as a *run*: the first arrival position and each
/// message's payload size (4 bytes, counted as such against the watermark), not a
/// 32-byte queue entry each. A message that cannot join (a transient one, one with an
/// expiry, a redelivered one recovered from the store) waits behind the run as an entry;
/// 64 stubs in a row behind it make a new run (still counted 32 bytes each, as when
/// they came). As the head drains, it is refilled from the first run with stubs, whose
/// bodies are read back from the message store as before.
#[derive(Debug)]
pub struct FifoStorage<E: Envelope = Native> {
    head: Ring<E>,
    tail: VecDeque<Tail<E>>,
    /// Messages and payload bytes in the tail.
    tail_len: usize,
    tail_bytes: usize,
}

impl<E: Envelope> Default for FifoStorage<E> {
    fn default() -> Self {
        FifoStorage {
            head: Ring::default(),
            tail: VecDeque::new(),
            tail_len: 0,
            tail_bytes: 0,
        }
    }
}

impl<E: Envelope> FifoStorage<E> {
    /// Moves messages of the first run to the head once it runs low; a run that is over
    /// leaves the messages that waited behind it to the head (or to the run before it).
    fn refill(&mut self) {
        while let Some(first) = self.tail.front_mut() {
            if first.run.live > 0 {
                if self.head.len() >= RUN_REFILL {
                    return;
                }
                while self.head.len() < RUN_AFTER {
                    let Some(m) = first.run.pop() else {
                        break;
                    };
                    self.tail_len -= 1;
                    self.tail_bytes -= m.size();
                    self.head.push(m);
                }
                if first.run.live > 0 {
                    return;
                }
            }
            let mut over = self.tail.pop_front().expect("there");
            self.tail_len -= over.after.len();
            self.tail_bytes -= over.after.bytes();
            self.head.append(&mut over.after);
        }
    }

    /// The tail segment holding arrival position `seq`.
    fn tail_of(&self, seq: u64) -> Option<usize> {
        let at = self.tail.partition_point(|t| t.run.first <= seq);
        at.checked_sub(1)
    }

    /// The last [`STREAK`] stubs behind the last run become a run.
    fn split_streak(&mut self) {
        let last = self.tail.back_mut().expect("a tail");
        let mut taken = Vec::with_capacity(last.streak);
        for _ in 0..std::mem::take(&mut last.streak) {
            taken.push(last.after.pop_back().expect("a stub per streak"));
        }
        let mut run = Run {
            first: taken.last().map_or(0, QueuedMessage::seq),
            ..Run::default()
        };
        for m in taken.iter().rev() {
            let counted = if m.bits & RUN != 0 { 0 } else { AS_STUB };
            run.add(m.weight | counted);
        }
        self.tail.push_back(Tail {
            run,
            after: Ring::default(),
            streak: 0,
        });
    }

    /// Messages kept in runs (not as queue entries).
    pub fn in_runs(&self) -> usize {
        self.tail.iter().map(|t| t.run.live).sum()
    }
}

impl<E: Envelope> QueueStorage<E> for FifoStorage<E> {
    fn push(&mut self, message: QueuedMessage<E>) {
        let Some(last) = self.tail.back_mut() else {
            self.head.push(message);
            return;
        };
        self.tail_len += 1;
        self.tail_bytes += message.size();
        let follows = last
            .after
            .messages
            .back()
            .is_some_and(|b| b.seq() + 1 == message.seq());
        last.streak = match (message.fits_a_run(), last.streak > 0 && follows) {
            (false, _) => 0,
            (true, true) => last.streak + 1,
            (true, false) => 1,
        };
        last.after.push(message);
        if last.streak >= STREAK {
            self.split_streak();
        }
    }

    fn try_push_run(&mut self, message: QueuedMessage<E>) -> Option<QueuedMessage<E>> {
        if !message.fits_a_run() {
            return Some(message);
        }
        match self.tail.back_mut() {
            Some(last) if last.after.is_empty() && last.run.next_seq() == message.seq() => {
                last.run.add(message.weight);
            }
            Some(_) => return Some(message),
            None if self.head.len() >= RUN_AFTER => {
                let mut run = Run {
                    first: message.seq(),
                    ..Run::default()
                };
                run.add(message.weight);
                self.tail.push_back(Tail {
                    run,
                    after: Ring::default(),
                    streak: 0,
                });
            }
            None => return Some(message),
        }
        self.tail_len += 1;
        self.tail_bytes += message.size();
        None
    }

    fn push_held(&mut self, message: QueuedMessage<E>, record: E::Record) {
        match self.tail.back_mut() {
            None => self.head.push_held(message, record),
            Some(last) => {
                self.tail_len += 1;
                self.tail_bytes += E::payload_len(&record);
                last.streak = 0;
                last.after.push_held(message, record);
            }
        }
    }

    fn requeue(&mut self, message: QueuedMessage<E>) {
        // A delivered message came from the head, before any run.
        debug_assert!(
            self.tail
                .front()
                .is_none_or(|t| message.seq() < t.run.first)
        );
        self.head.requeue(message);
    }

    fn pop(&mut self) -> Option<QueuedMessage<E>> {
        let m = self.head.pop();
        self.refill();
        m
    }

    fn peek(&self) -> Option<&QueuedMessage<E>> {
        self.head.peek()
    }

    fn len(&self) -> usize {
        self.head.len() + self.tail_len
    }

    fn bytes(&self) -> usize {
        self.head.bytes() + self.tail_bytes
    }

    fn drain(&mut self) -> Vec<QueuedMessage<E>> {
        let mut out = self.head.drain();
        out.reserve(self.tail_len);
        for mut t in std::mem::take(&mut self.tail) {
            out.extend(t.run.iter());
            out.extend(t.after.drain());
        }
        (self.tail_len, self.tail_bytes) = (0, 0);
        out
    }

    fn iter(&self) -> Box<dyn Iterator<Item = Ready<'_, E>> + '_> {
        Box::new(self.head.iter().chain(self.tail.iter().flat_map(|t| {
            t.run
                .iter()
                .map(|m| (Cow::Owned(m), None))
                .chain(t.after.iter())
        })))
    }

    fn iter_mut(&mut self) -> Box<dyn Iterator<Item = &mut QueuedMessage<E>> + '_> {
        Box::new(self.head.messages.iter_mut())
    }

    fn remove(&mut self, seq: u64) -> Option<QueuedMessage<E>> {
        let Some(i) = self.tail_of(seq) else {
            let m = self.head.remove(seq);
            self.refill();
            return m;
        };
        let t = &mut self.tail[i];
        let m = if t.run.contains(seq) {
            t.run.remove(seq)
        } else {
            // The streak counted the last messages: it starts again.
            t.streak = 0;
            t.after.remove(seq)
        }?;
        self.tail_len -= 1;
        self.tail_bytes -= m.size();
        if i > 0 && self.tail[i].run.live == 0 {
            // An emptied run in the middle: what waited behind it joins the run before.
            let mut gone = self.tail.remove(i).expect("there");
            let before = &mut self.tail[i - 1];
            before.after.append(&mut gone.after);
            before.streak = 0;
        }
        self.refill();
        Some(m)
    }
}

/// Priority storage (`x-max-priority`): one FIFO per priority, highest served first.
#[derive(Debug)]
pub struct PriorityStorage<E: Envelope = Native> {
    levels: Vec<FifoStorage<E>>,
}

impl<E: Envelope> PriorityStorage<E> {
    /// Storage for priorities `0..=max`.
    pub fn new(max: u8) -> Self {
        PriorityStorage {
            levels: (0..=max).map(|_| FifoStorage::default()).collect(),
        }
    }

    fn level(&mut self, priority: u8) -> &mut FifoStorage<E> {
        let i = usize::from(priority).min(self.levels.len() - 1);
        &mut self.levels[i]
    }
}

impl<E: Envelope> QueueStorage<E> for PriorityStorage<E> {
    fn push(&mut self, message: QueuedMessage<E>) {
        self.level(message.priority()).push(message);
    }

    fn push_held(&mut self, message: QueuedMessage<E>, record: E::Record) {
        self.level(message.priority()).push_held(message, record);
    }

    fn requeue(&mut self, message: QueuedMessage<E>) {
        self.level(message.priority()).requeue(message);
    }

    fn pop(&mut self) -> Option<QueuedMessage<E>> {
        self.levels.iter_mut().rev().find_map(FifoStorage::<E>::pop)
    }

    fn peek(&self) -> Option<&QueuedMessage<E>> {
        self.levels.iter().rev().find_map(|l| l.peek())
    }

    fn len(&self) -> usize {
        self.levels.iter().map(FifoStorage::<E>::len).sum()
    }

    fn bytes(&self) -> usize {
        self.levels.iter().map(FifoStorage::<E>::bytes).sum()
    }

    fn drain(&mut self) -> Vec<QueuedMessage<E>> {
        self.levels
            .iter_mut()
            .rev()
            .flat_map(FifoStorage::<E>::drain)
            .collect()
    }

    fn iter(&self) -> Box<dyn Iterator<Item = Ready<'_, E>> + '_> {
        Box::new(self.levels.iter().rev().flat_map(|l| l.iter()))
    }

    fn remove(&mut self, seq: u64) -> Option<QueuedMessage<E>> {
        self.levels.iter_mut().find_map(|l| l.remove(seq))
    }

    fn iter_mut(&mut self) -> Box<dyn Iterator<Item = &mut QueuedMessage<E>> + '_> {
        Box::new(
            self.levels
                .iter_mut()
                .rev()
                .flat_map(|l| l.head.messages.iter_mut()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;
    use crate::message::Published;
    use crate::state::BATCH;

    fn record() -> Published {
        Published::new("", "", Message::new(vec![0u8; 10]))
    }

    fn msg(seq: u64, priority: u8) -> QueuedMessage {
        QueuedMessage::new(seq, priority, Arc::new(record()), 100, None)
    }

    #[test]
    fn requeue_restores_arrival_order() {
        let mut s = FifoStorage::default();
        for i in 0..4 {
            s.push(msg(i, 0));
        }
        let first = s.pop().unwrap();
        let second = s.pop().unwrap();
        s.requeue(second);
        s.requeue(first);
        assert_eq!(s.remove(2).map(|m| m.seq()), Some(2));
        assert!(s.remove(2).is_none(), "gone");
        assert_eq!(s.bytes(), 30);
        let order: Vec<u64> = s.drain().iter().map(QueuedMessage::seq).collect();
        assert_eq!(order, vec![0, 1, 3]);
        assert_eq!(s.bytes(), 0);
    }

    #[test]
    fn priorities_are_served_highest_first_and_capped() {
        let mut s = PriorityStorage::new(5);
        s.push(msg(0, 1));
        s.push(msg(1, 9));
        s.push(msg(2, 5));
        s.push(msg(3, 0));
        assert_eq!(s.len(), 4);
        assert_eq!(s.bytes(), 40);
        let peeked: Vec<u64> = s.iter().map(|(m, _)| m.seq()).collect();
        assert_eq!(peeked, vec![1, 2, 0, 3], "iter is delivery order");
        let order: Vec<u64> = std::iter::from_fn(|| s.pop()).map(|m| m.seq()).collect();
        assert_eq!(
            order,
            vec![1, 2, 0, 3],
            "9 is capped to 5 and keeps arrival order"
        );
    }

    #[test]
    fn the_fields_packed_into_an_entry_read_back() {
        let mut m = msg((1 << 56) - 1, 255);
        assert_eq!((m.seq(), m.priority()), ((1 << 56) - 1, 255));
        m.set_deliveries(3);
        m.set_redelivered(true);
        m.set_stored(true);
        assert_eq!(
            (m.deliveries(), m.redelivered(), m.stored()),
            (3, true, true)
        );
        m.set_deliveries(u32::MAX);
        assert_eq!(m.deliveries(), MAX_DELIVERIES, "saturates");
        assert!(m.redelivered() && m.stored() && !m.is_held(), "flags kept");
        m.set_redelivered(false);
        assert!(!m.redelivered() && m.stored());
        assert_eq!((m.size(), m.footprint()), (10, 100));
        m.page_out();
        assert!(m.is_paged());
        assert_eq!(
            (m.size(), m.footprint()),
            (10, STUB as usize),
            "a stub keeps its size"
        );
        m.page_in(Arc::new(record()), 90);
        assert!(!m.is_paged());
        assert_eq!((m.size(), m.footprint()), (10, 90));
    }

    #[test]
    fn held_records_keep_their_order_among_shared_ones() {
        let mut s = FifoStorage::<Native>::default();
        let shared = Arc::new(record());
        for i in 0..6 {
            let m = QueuedMessage::new(i, 0, shared.clone(), 100, None);
            if i % 2 == 0 {
                let mut own = record();
                own.message.payload = vec![i as u8; 10].into();
                s.push_held(m, own);
            } else {
                s.push(m);
            }
        }
        assert_eq!(s.bytes(), 60);
        let view: Vec<(u64, bool, Option<u8>)> = s
            .iter()
            .map(|(m, r)| {
                (
                    m.seq(),
                    m.is_held(),
                    r.map(|r: &Published| r.message.payload[0]),
                )
            })
            .collect();
        assert_eq!(
            view,
            vec![
                (0, true, Some(0)),
                (1, false, None),
                (2, true, Some(2)),
                (3, false, None),
                (4, true, Some(4)),
                (5, false, None)
            ]
        );
        assert!(!s.peek().unwrap().is_paged(), "held is not paged");
        let removed = s.remove(2).unwrap();
        assert!(removed.is_held() && removed.body.is_none());
        assert_eq!(s.bytes(), 50);
        let first = s.pop().unwrap();
        assert!(first.is_held(), "still marked, for Queue::pop to count");
        assert_eq!(first.body.as_ref().unwrap().message.payload[0], 0, "boxed");
        let second = s.pop().unwrap();
        assert!(!second.is_held() && Arc::ptr_eq(second.body.as_ref().unwrap(), &shared));
        s.requeue(second);
        let order: Vec<(u64, Option<u8>)> = s
            .iter()
            .map(|(m, r)| (m.seq(), r.map(|r: &Published| r.message.payload[0])))
            .collect();
        assert_eq!(order, vec![(1, None), (3, None), (4, Some(4)), (5, None)]);
        assert_eq!(s.bytes(), 40);
        let drained = s.drain();
        assert_eq!(drained.len(), 4);
        assert_eq!(s.bytes(), 0);
    }

    #[test]
    fn a_drained_ring_gives_back_its_capacity() {
        let mut s = FifoStorage::<Native>::default();
        for i in 0..100_000 {
            s.push_held(msg(i, 0), record());
        }
        assert!(s.head.messages.capacity() >= 100_000 && s.head.held.capacity() >= 100_000);
        while s.len() > 10 {
            s.pop();
        }
        assert!(
            s.head.messages.capacity() <= 4 * KEEP_SLOTS,
            "{}",
            s.head.messages.capacity()
        );
        assert!(
            s.head.held.capacity() <= 4 * KEEP_SLOTS,
            "{}",
            s.head.held.capacity()
        );
        let order: Vec<u64> = std::iter::from_fn(|| s.pop()).map(|m| m.seq()).collect();
        assert_eq!(order, (99_990..100_000).collect::<Vec<u64>>(), "order kept");
    }

    fn sized(seq: u64, size: usize) -> QueuedMessage {
        let record = Published::new("", "", Message::new(vec![0u8; size]));
        QueuedMessage::new(seq, 0, Arc::new(record), 100 + size as u32, None)
    }

    #[test]
    fn runs_of_paged_messages_follow_every_change_of_a_random_walk() {
        let mut next = crate::xorshift(0x9e37_79b9_7f4a_7c15);
        let mut s = FifoStorage::<Native>::default();
        // The model: (seq, size) in delivery order; what was taken, to requeue.
        let mut model: VecDeque<(u64, usize)> = VecDeque::new();
        let mut taken: Vec<QueuedMessage> = Vec::new();
        let (mut used, mut counted, mut seq, mut most_in_runs) = (0usize, 0usize, 0u64, 0);
        let mut most_runs = 0;
        for step in 0..30_000 {
            // Phases that grow the queue, and phases that drain it.
            let push_share = if (step / 6_000) % 3 == 2 { 30 } else { 75 };
            let op = if next(100) < push_share {
                0
            } else {
                55 + next(45)
            };
            match op {
                // A paged message (most of them fit a run), or one with its body.
                0..=54 => {
                    let size = next(300) as usize;
                    let mut m = sized(seq, size);
                    m.set_stored(true);
                    match next(100) {
                        0 => {}
                        1 => {
                            m.set_redelivered(true);
                            m.set_deliveries(1);
                            m.page_out();
                        }
                        2 => {
                            m.expires_at = Some(crate::deadline::Deadline::after(
                                Instant::now(),
                                std::time::Duration::from_secs(60),
                            ));
                            m.page_out();
                        }
                        _ => m.page_out(),
                    }
                    // As `Queue::push` does.
                    let before = m.footprint();
                    match s.try_push_run(m) {
                        None => used += RUN_SLOT as usize,
                        Some(m) => {
                            assert!(
                                s.tail.back().is_none_or(|t| !m.fits_a_run()
                                    || !t.after.is_empty()
                                    || m.seq() != t.run.next_seq()),
                                "step {step}: a fitting stub joins the last run"
                            );
                            used += before;
                            s.push(m);
                        }
                    }
                    model.push_back((seq, size));
                    // Sometimes a seq is skipped (a message of the queue that went elsewhere).
                    seq += 1 + u64::from(next(200) == 0);
                }
                55..=74 => {
                    let got = s.pop();
                    assert_eq!(
                        got.as_ref().map(|m| (m.seq(), m.size())),
                        model.pop_front(),
                        "step {step}"
                    );
                    if let Some(m) = got {
                        if m.is_paged() && next(3) == 0 {
                            // Read back, as `State::page_in` does.
                            let mut m = m;
                            let size = m.size();
                            let body = sized(m.seq(), size).body.unwrap();
                            used -= m.footprint();
                            m.page_in(body, 100 + size as u32);
                            used += m.footprint();
                            taken.push(m);
                        } else {
                            taken.push(m);
                        }
                    }
                }
                75..=82 => {
                    if let Some(m) = taken.pop() {
                        if m.is_paged() {
                            // Only delivered messages (with their bodies) are requeued.
                            used -= m.footprint();
                            continue;
                        }
                        let at = model.partition_point(|(q, _)| *q < m.seq());
                        model.insert(at, (m.seq(), m.size()));
                        s.requeue(m);
                    }
                }
                83..=92 => {
                    if model.is_empty() {
                        continue;
                    }
                    let (victim, size) = model[next(model.len() as u64) as usize];
                    let m = s.remove(victim).expect("there");
                    assert_eq!((m.seq(), m.size()), (victim, size), "step {step}");
                    assert!(s.remove(victim).is_none(), "gone");
                    used -= m.footprint();
                    model.retain(|(q, _)| *q != victim);
                }
                93 => {
                    for m in taken.drain(..) {
                        used -= m.footprint();
                    }
                }
                _ => {
                    if next(600) == 0 {
                        let drained = s.drain();
                        let got: Vec<(u64, usize)> =
                            drained.iter().map(|m| (m.seq(), m.size())).collect();
                        assert_eq!(got, Vec::from(std::mem::take(&mut model)), "step {step}");
                        for m in drained {
                            used -= m.footprint();
                        }
                    }
                }
            }
            most_in_runs = most_in_runs.max(s.in_runs());
            most_runs = most_runs.max(s.tail.len());
            assert_eq!(s.len(), model.len(), "step {step}");
            assert_eq!(
                s.bytes(),
                model.iter().map(|(_, b)| b).sum::<usize>(),
                "step {step}"
            );
            assert_eq!(s.peek().map(|m| m.seq()), model.front().map(|(q, _)| *q));
            if step % 100 == 0 {
                let listed: Vec<(u64, usize)> =
                    s.iter().map(|(m, _)| (m.seq(), m.size())).collect();
                assert_eq!(listed, Vec::from(model.clone()), "step {step}");
                let entries: Vec<u64> = s.iter_mut().take(BATCH).map(|m| m.seq()).collect();
                let first: Vec<u64> = model.iter().take(BATCH).map(|(q, _)| *q).collect();
                assert_eq!(entries, first, "step {step}: the head is made of entries");
                // The count follows: what every message left is counted as.
                counted = s.iter().map(|(m, _)| m.footprint()).sum::<usize>()
                    + taken.iter().map(QueuedMessage::footprint).sum::<usize>();
                assert_eq!(counted, used, "step {step}");
            }
        }
        assert!(most_in_runs > 1_000, "runs were built: {most_in_runs}");
        assert!(most_runs > 5, "several runs at once: {most_runs}");
        let _ = counted;
        for m in s.drain() {
            used -= m.footprint();
        }
        for m in taken {
            used -= m.footprint();
        }
        assert_eq!(used, 0, "every byte counted was taken off");
    }
}
