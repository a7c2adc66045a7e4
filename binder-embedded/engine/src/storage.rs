//! A queue's in-memory index of its ready messages, in delivery order (FIFO, or by priority
//! for `x-max-priority` queues).
//!
//! This is not the store seam: it is synchronous, runs under the broker's lock and holds the
//! messages themselves (shared records, with their expiry as a `tokio` instant). What must
//! survive a restart goes through [`MessageStore`](crate::MessageStore), which every queue
//! keeps informed of what is enqueued and acknowledged; this index is what the broker serves
//! deliveries from, rebuilt from the store by [`MessageStore::recover`](crate::MessageStore::recover).

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
    /// for a stub, which counts [`STUB`], its payload size.
    weight: u32,
    /// Times it was delivered (for `x-delivery-limit`, saturating at [`MAX_DELIVERIES`]),
    /// then the `REDELIVERED`, `STORED` and `HELD` flags in the top bits.
    bits: u32,
}

/// What a stub (a paged message: no body) counts against the watermark: its queue entry.
pub(crate) const STUB: u32 = std::mem::size_of::<QueuedMessage<Native>>() as u32;

/// A queue that holds this many ready messages keeps the records that reach only it
/// without their `Arc` (see [`QueuedMessage`]): a consumer that keeps up is served shared
/// records as before, and a backlog costs 24 bytes less per message.
pub const HOLD_AFTER: usize = 1024;

/// The delivery count a queued message keeps: it saturates there (a delivery limit above it
/// is never reached).
pub const MAX_DELIVERIES: u32 = (1 << 29) - 1;

const REDELIVERED: u32 = 1 << 29;
const STORED: u32 = 1 << 30;
const HELD: u32 = 1 << 31;

/// Arrival positions are kept in 56 bits (72 × 10^15 messages per queue).
const SEQ_MASK: u64 = (1 << 56) - 1;

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
            STUB as usize
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
pub type Ready<'a, E> = (&'a QueuedMessage<E>, Option<&'a <E as Envelope>::Record>);

/// Storage of a queue's ready messages.
pub trait QueueStorage<E: Envelope = Native>: fmt::Debug + Send {
    /// Appends a message.
    fn push(&mut self, message: QueuedMessage<E>);
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
    /// The ready messages in delivery order, to change in place (paging a body back in).
    fn iter_mut(&mut self) -> Box<dyn Iterator<Item = &mut QueuedMessage<E>> + '_>;
}

const _: () = assert!(std::mem::size_of::<QueuedMessage<Native>>() == 32);

/// First-in, first-out storage in memory: the messages in arrival order, and beside them, in
/// the same order, the records the queue holds itself.
#[derive(Debug)]
pub struct FifoStorage<E: Envelope = Native> {
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

impl<E: Envelope> FifoStorage<E> {
    /// Gives back ring capacity after messages left (see [`KEEP_SLOTS`]).
    #[inline]
    fn left(&mut self) {
        shrink(&mut self.messages);
        shrink(&mut self.held);
    }
}

impl<E: Envelope> Default for FifoStorage<E> {
    fn default() -> Self {
        FifoStorage {
            messages: VecDeque::new(),
            held: VecDeque::new(),
            bytes: 0,
        }
    }
}

impl<E: Envelope> QueueStorage<E> for FifoStorage<E> {
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

    fn iter(&self) -> Box<dyn Iterator<Item = Ready<'_, E>> + '_> {
        let mut held = self.held.iter();
        Box::new(
            self.messages
                .iter()
                .map(move |m| (m, if m.is_held() { held.next() } else { None })),
        )
    }

    fn iter_mut(&mut self) -> Box<dyn Iterator<Item = &mut QueuedMessage<E>> + '_> {
        Box::new(self.messages.iter_mut())
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
                .flat_map(|l| l.messages.iter_mut()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;
    use crate::message::Published;

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
        assert!(s.messages.capacity() >= 100_000 && s.held.capacity() >= 100_000);
        while s.len() > 10 {
            s.pop();
        }
        assert!(
            s.messages.capacity() <= 4 * KEEP_SLOTS,
            "{}",
            s.messages.capacity()
        );
        assert!(s.held.capacity() <= 4 * KEEP_SLOTS, "{}", s.held.capacity());
        let order: Vec<u64> = std::iter::from_fn(|| s.pop()).map(|m| m.seq()).collect();
        assert_eq!(order, (99_990..100_000).collect::<Vec<u64>>(), "order kept");
    }
}
