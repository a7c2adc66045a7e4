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

/// A message in a queue: 40 bytes, since every queued message has one (sizes as `u32`, the
/// expiry as a [`Deadline`]; the engine refuses payloads of more than
/// [`MAX_PAYLOAD`](crate::MAX_PAYLOAD) bytes).
#[derive(Debug, Clone)]
pub struct QueuedMessage<E: Envelope = Native> {
    /// Position in the queue's arrival order; requeued messages go back by it.
    pub seq: u64,
    /// Payload bytes, kept here so length limits (`x-max-length-bytes`) do not touch the
    /// shared message.
    pub size: u32,
    /// The memory this copy of the message is counted as against the memory high watermark
    /// (payload, headers, properties and the engine's bookkeeping; see
    /// [`BrokerConfig::memory_high_watermark`](super::BrokerConfig::memory_high_watermark)).
    pub footprint: u32,
    /// The message (shared with other queues it was routed to), or `None` while it is
    /// paged: then only the message store holds it, and the broker reads it back
    /// ([`MessageStore::read`](crate::MessageStore::read)) before it is delivered.
    pub body: Option<Arc<E::Record>>,
    /// When it expires, from queue or message TTL.
    pub expires_at: Option<Deadline>,
    /// Times it was delivered (for `x-delivery-limit`).
    pub deliveries: u32,
    /// Effective priority (0 when the queue has none).
    pub priority: u8,
    /// It was delivered before.
    pub redelivered: bool,
    /// The message store was told of it (a persistent message in a durable queue, with a
    /// store that keeps messages): its delivery and removal are reported too.
    pub stored: bool,
}

impl<E: Envelope> QueuedMessage<E> {
    /// Payload bytes, as counted against length limits.
    pub fn size(&self) -> usize {
        self.size as usize
    }

    /// Bytes counted against the memory high watermark.
    pub fn footprint(&self) -> usize {
        self.footprint as usize
    }

    /// When it expires, if it does.
    pub fn expiry(&self) -> Option<Instant> {
        self.expires_at.map(Deadline::instant)
    }
}

/// Storage of a queue's ready messages.
pub trait QueueStorage<E: Envelope = Native>: fmt::Debug + Send {
    /// Appends a message.
    fn push(&mut self, message: QueuedMessage<E>);
    /// Puts a message back at its arrival position (near the head).
    fn requeue(&mut self, message: QueuedMessage<E>);
    /// Removes the next message to deliver.
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
    /// Removes every ready message.
    fn drain(&mut self) -> Vec<QueuedMessage<E>>;
    /// The ready messages in delivery order, without removing them.
    fn iter(&self) -> Box<dyn Iterator<Item = &QueuedMessage<E>> + '_>;
    /// Removes the ready message with this arrival position, if it is here.
    fn remove(&mut self, seq: u64) -> Option<QueuedMessage<E>>;
    /// The ready messages in delivery order, to change in place (paging a body back in).
    fn iter_mut(&mut self) -> Box<dyn Iterator<Item = &mut QueuedMessage<E>> + '_>;
}

const _: () = assert!(std::mem::size_of::<QueuedMessage<Native>>() == 40);

/// First-in, first-out storage in memory.
#[derive(Debug, Default)]
pub struct FifoStorage<E: Envelope = Native> {
    messages: VecDeque<QueuedMessage<E>>,
    bytes: usize,
}

impl<E: Envelope> QueueStorage<E> for FifoStorage<E> {
    fn push(&mut self, message: QueuedMessage<E>) {
        self.bytes += message.size();
        self.messages.push_back(message);
    }

    fn requeue(&mut self, message: QueuedMessage<E>) {
        self.bytes += message.size();
        let at = self.messages.partition_point(|m| m.seq < message.seq);
        self.messages.insert(at, message);
    }

    fn pop(&mut self) -> Option<QueuedMessage<E>> {
        let m = self.messages.pop_front()?;
        self.bytes -= m.size();
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
        self.messages.drain(..).collect()
    }

    fn iter(&self) -> Box<dyn Iterator<Item = &QueuedMessage<E>> + '_> {
        Box::new(self.messages.iter())
    }

    fn iter_mut(&mut self) -> Box<dyn Iterator<Item = &mut QueuedMessage<E>> + '_> {
        Box::new(self.messages.iter_mut())
    }

    fn remove(&mut self, seq: u64) -> Option<QueuedMessage<E>> {
        let at = self.messages.iter().position(|m| m.seq == seq)?;
        let m = self.messages.remove(at)?;
        self.bytes -= m.size();
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
        self.level(message.priority).push(message);
    }

    fn requeue(&mut self, message: QueuedMessage<E>) {
        self.level(message.priority).requeue(message);
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

    fn iter(&self) -> Box<dyn Iterator<Item = &QueuedMessage<E>> + '_> {
        Box::new(self.levels.iter().rev().flat_map(|l| l.messages.iter()))
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

    fn msg(seq: u64, priority: u8) -> QueuedMessage {
        QueuedMessage {
            seq,
            size: 10,
            footprint: 100,
            body: Some(Arc::new(Published::new(
                "",
                "",
                Message::new(vec![0u8; 10]),
            ))),
            expires_at: None,
            deliveries: 0,
            priority,
            redelivered: false,
            stored: false,
        }
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
        assert_eq!(s.remove(2).map(|m| m.seq), Some(2));
        assert!(s.remove(2).is_none(), "gone");
        assert_eq!(s.bytes(), 30);
        let order: Vec<u64> = s.drain().iter().map(|m| m.seq).collect();
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
        let peeked: Vec<u64> = s.iter().map(|m| m.seq).collect();
        assert_eq!(peeked, vec![1, 2, 0, 3], "iter is delivery order");
        let order: Vec<u64> = std::iter::from_fn(|| s.pop()).map(|m| m.seq).collect();
        assert_eq!(
            order,
            vec![1, 2, 0, 3],
            "9 is capped to 5 and keeps arrival order"
        );
    }
}
