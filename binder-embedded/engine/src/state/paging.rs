//! Paging: above a share of the memory high watermark, persistent messages in durable queues
//! are kept as stubs (no body) and read back from the message store when they are needed
//! (see [`BrokerConfig::memory_paging_ratio`](crate::BrokerConfig::memory_paging_ratio)).
//!
//! A stub is a [`QueuedMessage`] without its record ([`QueuedMessage::is_paged`]): it keeps the message's place in the
//! queue, its size, priority, expiry and delivery count, and is counted at its entry's cost.
//! The body is read back in batches ([`State::page_in`]): a delivery burst reads the stubs at
//! the head of the queue with one store call, not one per message.

use std::fmt::Write as _;
use std::sync::Arc;

use super::State;
use crate::envelope::Envelope;
use crate::error::{AmqpError, ReplyCode};
use crate::memory;
use crate::storage::QueuedMessage;
use crate::store::StoreError;
use crate::types::BrokerConfig;

/// Ready messages at a queue's head that always keep their bodies: a consumer that keeps up
/// is served from memory and never waits for a read.
pub(crate) const HEAD: usize = 512;

/// Stubs read back with one store call.
pub(crate) const BATCH: usize = 256;

/// Whether a stored message entering a queue that holds `queue_len` ready messages is paged
/// now: the store pages, a watermark is set, the memory count is above its paging share, and
/// the message is not among the queue's first [`HEAD`] messages.
pub(crate) fn page_now(pages: bool, config: &BrokerConfig, used: usize, queue_len: usize) -> bool {
    pages
        && queue_len >= HEAD
        && config
            .memory_high_watermark
            .is_some_and(|high| used as f64 > high as f64 * config.memory_paging_ratio)
}

/// Checks `memory_paging_ratio`: above 0, at most 1.
pub(crate) fn check_ratio(config: &BrokerConfig) -> Result<(), StoreError> {
    let r = config.memory_paging_ratio;
    if r > 0.0 && r <= 1.0 {
        Ok(())
    } else {
        Err(StoreError::Failed {
            detail: format!(
                "memory_paging_ratio is {r}: it must be above 0 and at most 1 (a share of the memory high watermark)"
            ),
        })
    }
}

impl<E: Envelope> State<E> {
    /// Reads back the stubs among the first [`BATCH`] ready messages of `queue`, with one
    /// store call, and counts their bodies again.
    pub(super) fn page_in(&mut self, queue: &str) -> Result<(), StoreError> {
        let Some(q) = self.registry.queues.get_mut(queue) else {
            return Ok(());
        };
        // The first BATCH messages are entries (a run always follows more than that).
        let seqs: Vec<u64> = q
            .storage
            .iter_mut()
            .take(BATCH)
            .filter(|m| m.is_paged())
            .map(|m| m.seq())
            .collect();
        if seqs.is_empty() {
            return Ok(());
        }
        let read = self.store.read(&q.name, &seqs)?;
        if read.len() != seqs.len() {
            return Err(StoreError::Corrupt {
                detail: format!(
                    "asked the store for {} messages of queue '{queue}', got {}",
                    seqs.len(),
                    read.len()
                ),
            });
        }
        let mut bodies = read.into_iter();
        let mut added = 0;
        for m in q.storage.iter_mut().take(BATCH) {
            if !m.is_paged() {
                continue;
            }
            let Some(published) = bodies.next() else {
                break;
            };
            let body = Arc::new(E::from_native(published));
            let footprint = memory::entry_footprint::<E>(&body);
            added += footprint as usize - m.footprint();
            m.page_in(body, footprint);
        }
        self.memory.used += added;
        self.paged_in += seqs.len() as u64;
        Ok(())
    }

    /// Reads back one stub's body (not counted: the caller holds it only briefly or counts it).
    pub(super) fn read_back(
        &self,
        queue: &str,
        message: &QueuedMessage<E>,
    ) -> Result<Arc<E::Record>, StoreError> {
        if let Some(body) = &message.body {
            return Ok(body.clone());
        }
        let mut read = self.store.read(queue, &[message.seq()])?;
        match read.pop() {
            Some(published) if read.is_empty() => Ok(Arc::new(E::from_native(published))),
            _ => Err(StoreError::Corrupt {
                detail: format!(
                    "the store did not return message {} of queue '{queue}'",
                    message.seq()
                ),
            }),
        }
    }

    /// Notes a failed read-back and returns the error a client is given (541, naming the
    /// queue and the store's error).
    pub(super) fn read_failed(&mut self, queue: &str, error: &StoreError) -> AmqpError {
        self.read_failures += 1;
        let mut text = format!(
            "cannot read a paged message of queue '{queue}' in vhost '{}' back from the message store: {error}",
            self.config.vhost
        );
        let mut source = std::error::Error::source(error);
        while let Some(s) = source {
            let _ = write!(text, ": {s}");
            source = s.source();
        }
        AmqpError::new(ReplyCode::InternalError, text)
    }

    /// The head of `queue` could not be read back for a delivery: the channels of its
    /// consumers are closed with the error (their deliveries requeued); the messages stay in
    /// the queue, paged.
    pub(super) fn page_in_failed(&mut self, queue: &str, error: &StoreError) {
        let error = self.read_failed(queue, error);
        let channels: Vec<u64> = self
            .registry
            .queues
            .get(queue)
            .map(|q| {
                q.consumers
                    .iter()
                    .filter_map(|c| self.sessions.consumers.get(&c.id).map(|c| c.channel))
                    .collect()
            })
            .unwrap_or_default();
        for channel in channels {
            self.close_channel(channel, Some(error.clone()));
        }
    }

    /// Paged messages of a queue (stubs without a body), and read-backs so far.
    pub(crate) fn paging_counts(&self, queue: &str) -> Option<usize> {
        let q = self.registry.queues.get(queue)?;
        Some(q.storage.iter().filter(|(m, _)| m.is_paged()).count())
    }

    /// Messages read back from the store so far, and failed read-backs.
    pub(crate) fn paging_totals(&self) -> (u64, u64) {
        (self.paged_in, self.read_failures)
    }
}
