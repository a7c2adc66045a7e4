//! Expiry of messages and idle queues, dead-lettering, and the follow-up loop.

use std::sync::Arc;

use tokio::time::Instant;

use super::State;
use crate::dead_letter::{DeathReason, is_cycle, record_death};
use crate::envelope::Envelope;
use crate::message::Published;
use crate::storage::QueuedMessage;
use crate::store::Removal;

impl<E: Envelope> State<E> {
    // ---- expiry, dead letters, follow-up work -------------------------------------------

    /// Drops expired messages at the head of a queue (dead-lettering them). Reads the clock
    /// only when the head can expire.
    pub(super) fn expire_head(&mut self, queue: &str) {
        let Some(q) = self.registry.queues.get_mut(queue) else {
            return;
        };
        if q.storage.peek().and_then(|m| m.expires_at).is_none() {
            return;
        }
        let now = Instant::now();
        while q
            .storage
            .peek()
            .and_then(|m| m.expires_at)
            .is_some_and(|at| at.is_due(now))
        {
            let m = q.pop(&mut self.memory.used).expect("peeked");
            self.work
                .dying
                .push_back((m, q.name.clone(), DeathReason::Expired));
        }
    }

    /// Expires messages and idle queues due by `now`; returns the next deadline.
    pub(crate) fn run_timers(&mut self, now: Instant) -> Option<Instant> {
        // First: a channel closed for an acknowledgement timeout requeues its deliveries
        // (some dead-lettered into queues with a TTL) and cancels its consumers (an idle
        // queue's `x-expires` counts from then), which the deadlines below then include.
        let mut next: Option<Instant> = self.check_ack_timeouts(now);
        let names: Vec<Arc<str>> = self.registry.queues.keys().cloned().collect();
        let mut earliest = |t: Instant| next = Some(next.map_or(t, |n: Instant| n.min(t)));
        for name in names {
            self.expire_head(&name);
            let Some(q) = self.registry.queues.get(&name) else {
                continue;
            };
            if let Some(expires) = q.args.expires {
                if q.consumers.is_empty() {
                    let at = q.last_used + expires;
                    if at <= now {
                        self.delete_queue(&name);
                        continue;
                    }
                    earliest(at);
                }
            }
            if let Some(at) = q.storage.peek().and_then(|m| m.expiry()) {
                earliest(at);
            }
        }
        self.work.timer_dirty = false;
        self.settle();
        next
    }

    /// Runs follow-up work until none is left: dead letters are routed, queues that gained
    /// messages or credit are dispatched.
    pub(crate) fn settle(&mut self) {
        loop {
            if let Some((message, queue, reason)) = self.work.dying.pop_front() {
                self.memory.used -= message.footprint();
                self.dead_letter(message, &queue, reason);
                continue;
            }
            if let Some(queue) = self.work.dirty.pop() {
                self.dispatch(&queue);
                continue;
            }
            break;
        }
    }

    pub(super) fn dead_letter(
        &mut self,
        message: QueuedMessage<E>,
        queue: &str,
        reason: DeathReason,
    ) {
        let dlx = self.registry.queues.get(queue).and_then(|q| {
            let dlx = q.args.dead_letter_exchange.clone()?;
            Some((dlx, q.args.dead_letter_routing_key.clone()))
        });
        // A paged message is read back only when it is dead-lettered. If that fails it stays
        // in the store (it comes back at the next start) rather than being lost.
        let record = match (&dlx, message.body.clone()) {
            (None, _) => None,
            (Some(_), Some(body)) => Some(body),
            (Some(_), None) => match self.read_back(queue, &message) {
                Ok(body) => Some(body),
                Err(e) => {
                    self.read_failed(queue, &e);
                    return;
                }
            },
        };
        // The store hears of the removal only after the copies are enqueued: its writer keeps
        // the order of what it is told, so a crash in between leaves the message in both
        // queues (at least once) rather than in neither.
        let stored = message.stored().then(|| message.seq());
        drop(message);
        let why = if let (Some((dlx, routing_key)), Some(record)) = (dlx, record) {
            self.dead_letter_copy(record, queue, reason, &dlx, routing_key);
            Removal::DeadLettered
        } else {
            Removal::Dropped
        };
        // A copy the store refused (over its record limit with the death headers, or the
        // store failed) is in memory only: the store keeps the original, which comes back
        // after a restart (at least once) rather than neither.
        let copy_refused = std::mem::take(&mut self.work.copy_refused);
        if let Some(seq) = stored.filter(|_| !copy_refused) {
            self.store.removed(queue, seq, why);
        }
    }

    /// Publishes a dead letter's copy, with its death recorded, to the dead-letter exchange.
    fn dead_letter_copy(
        &mut self,
        record: Arc<E::Record>,
        queue: &str,
        reason: DeathReason,
        dlx: &str,
        routing_key: Option<String>,
    ) {
        // Dead-lettering rewrites the headers: the record is rebuilt in the engine's types
        // (a cold path) and handed back to the envelope.
        let mut body = E::into_native(record);
        let keys = vec![body.routing_key().to_string()];
        let exchange = body.exchange().clone();
        record_death(&mut body.message, queue, reason, &exchange, &keys);
        let key: Arc<str> = match routing_key {
            Some(k) => Arc::from(k),
            None => body.routing_key().clone(),
        };
        let mut targets = Vec::new();
        let exchange = self
            .registry
            .route(dlx, &key, &body.message.headers, &mut targets);
        let cycles: Vec<bool> = targets.iter().map(|t| is_cycle(&body.message, t)).collect();
        let body = Arc::new(E::from_native(Published::new(exchange, key, body.message)));
        self.publication += 1;
        for (target, cycle) in targets.into_iter().zip(cycles) {
            if cycle {
                continue;
            }
            self.enqueue(&target, body.clone(), true);
        }
    }
}
