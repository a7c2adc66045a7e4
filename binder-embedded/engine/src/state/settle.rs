//! Settling deliveries (ack, requeue, discard) and transactions.

use std::sync::Arc;

use super::State;
use super::sessions::{Settle, TxOp, Unacked};
use super::work::Few;
use crate::dead_letter::DeathReason;
use crate::envelope::Envelope;
use crate::error::{AmqpError, AmqpResult};
use crate::storage::QueuedMessage;
use crate::store::{Durability, Removal};

impl<E: Envelope> State<E> {
    // ---- settlement ---------------------------------------------------------------------

    pub(crate) fn settle_deliveries(
        &mut self,
        channel: u64,
        tag: u64,
        multiple: bool,
        outcome: Settle,
    ) -> AmqpResult<()> {
        let ch = self.sessions.channel(channel)?;
        if let Some(tx) = &mut ch.tx {
            if !multiple && !ch.unacked.contains(tag) {
                return Err(AmqpError::precondition(format!(
                    "unknown delivery tag {tag}"
                )));
            }
            // A `multiple` settlement covers the deliveries made so far, as RabbitMQ works
            // it out when the method arrives: not those made before the commit after it.
            let tag = if multiple && (tag == 0 || tag > ch.next_tag) {
                ch.next_tag
            } else {
                tag
            };
            if multiple && tag == 0 {
                // Nothing delivered yet: it covers nothing.
                return Ok(());
            }
            tx.push(TxOp::Settle {
                tag,
                multiple,
                outcome,
            });
            return Ok(());
        }
        self.apply_settle(channel, tag, multiple, outcome)
    }

    pub(super) fn apply_settle(
        &mut self,
        channel: u64,
        tag: u64,
        multiple: bool,
        outcome: Settle,
    ) -> AmqpResult<()> {
        let ch = self.sessions.channel(channel)?;
        let mut settled: Vec<Unacked<E>> = std::mem::take(&mut self.work.settle_scratch);
        if multiple {
            ch.unacked.remove_up_to_into(tag, &mut settled);
        } else {
            match ch.unacked.remove(tag) {
                Some(u) => settled.push(u),
                None => {
                    self.work.keep_settle_scratch(settled);
                    return Err(AmqpError::precondition(format!(
                        "unknown delivery tag {tag}"
                    )));
                }
            }
        }
        // Credit is returned per consumer once per batch, not once per message; the deliveries
        // of a batch nearly always share one consumer, which needs no allocation.
        let mut credit: Few<(u64, u32)> = Few::new();
        let mut counted = 0u32;
        if outcome == Settle::Ack {
            // One allocation for the batch rather than one per doubling.
            self.work.garbage.reserve(settled.len());
            ch.acknowledged += settled.len() as u64;
        }
        for mut u in settled.drain(..) {
            self.memory.undelivered(&mut u.message);
            if let Some(id) = u.consumer {
                match credit.iter_mut().find(|(c, _)| *c == id) {
                    Some((_, n)) => *n += 1,
                    None => credit.push((id, 1)),
                }
            }
            counted += u32::from(u.counted);
            self.memory.used -= u.message.footprint();
            match outcome {
                Settle::Ack => {
                    // A queue of the same name declared since is another queue: the store
                    // dropped this one's messages when it was deleted.
                    if u.message.stored() && self.is_current(&u.queue) {
                        self.store
                            .removed(&u.queue, u.message.seq(), Removal::Acked);
                    }
                    self.work.mark_dirty(u.queue);
                    if let Some(body) = u.message.body {
                        self.work.garbage.push(body);
                    }
                }
                Settle::Requeue => self.requeue(u.queue, u.message),
                // The deleted queue's dead-letter settings went with it.
                Settle::Discard if !self.is_current(&u.queue) => {}
                Settle::Discard => {
                    self.memory.used += u.message.footprint();
                    self.work
                        .dying
                        .push_back((u.message, u.queue.clone(), DeathReason::Rejected));
                    self.work.mark_dirty(u.queue);
                }
            }
        }
        self.work.keep_settle_scratch(settled);
        for (id, n) in credit {
            if let Some(c) = self.sessions.consumers.get_mut(&id) {
                c.unacked -= n;
            }
        }
        self.release_channel_credit(channel, counted);
        Ok(())
    }

    /// Returns `n` deliveries' worth of a channel's shared credit (`basic.qos` with
    /// `global`). Credit freed on a channel that had used it all up may serve a consumer of
    /// any queue on the channel, not only the queues the deliveries came from: those queues
    /// are dispatched too, starting from a queue that turns with each delivery (as RabbitMQ
    /// starts unblocking a channel's queues at a random one), so no queue always wins.
    pub(super) fn release_channel_credit(&mut self, channel: u64, n: u32) {
        let Some(ch) = self.sessions.channels.get_mut(&channel) else {
            return;
        };
        let was_full = ch.channel_prefetch != 0 && ch.channel_unacked >= ch.channel_prefetch;
        ch.channel_unacked -= n;
        if !was_full || n == 0 {
            return;
        }
        let consumers = &self.sessions.consumers;
        let mut queues: Vec<Arc<str>> = ch
            .consumers
            .values()
            .filter_map(|id| consumers.get(id).map(|c| c.queue.clone()))
            .collect();
        if !queues.is_empty() {
            // Dispatched last to first: the queue pushed last is served first.
            let turn = (ch.next_tag % queues.len() as u64) as usize;
            queues.rotate_left(turn);
        }
        for queue in queues {
            self.work.mark_dirty(queue);
        }
    }

    /// Puts a delivered message back, marked redelivered, unless it reached the queue's
    /// delivery limit (then it is dead-lettered). A message of a queue deleted since is
    /// dropped, even when a queue of the same name has been declared again.
    pub(super) fn requeue(&mut self, queue: Arc<str>, mut message: QueuedMessage<E>) {
        let Some(q) = self
            .registry
            .queues
            .get_mut(&queue)
            .filter(|q| Arc::ptr_eq(&q.name, &queue))
        else {
            return;
        };
        message.set_redelivered(true);
        self.memory.used += message.footprint();
        if q.args
            .delivery_limit
            .is_some_and(|limit| message.deliveries() > limit)
        {
            self.work
                .dying
                .push_back((message, queue, DeathReason::DeliveryLimit));
            return;
        }
        q.storage.requeue(message);
        self.work.mark_dirty(queue);
    }

    // ---- transactions -------------------------------------------------------------------

    pub(crate) fn tx_select(&mut self, channel: u64) -> AmqpResult<()> {
        let ch = self.sessions.channel(channel)?;
        if ch.confirm {
            return Err(AmqpError::precondition(
                "cannot switch from confirm to tx mode",
            ));
        }
        ch.tx.get_or_insert_with(Vec::new);
        Ok(())
    }

    pub(super) fn take_tx(&mut self, channel: u64) -> AmqpResult<Vec<TxOp<E>>> {
        let ch = self.sessions.channel(channel)?;
        ch.tx_publishes = 0;
        match &mut ch.tx {
            Some(ops) => Ok(std::mem::take(ops)),
            None => Err(AmqpError::precondition("channel is not transactional")),
        }
    }

    /// Applies the transaction; on success, the durability points of the persistent
    /// messages it enqueued (the broker answers `commit-ok` once they are reached).
    pub(crate) fn tx_commit(&mut self, channel: u64) -> AmqpResult<Vec<Durability>> {
        let committed = self.commit_ops(channel);
        // Taken whether or not every operation applied, so that no later publish (of any
        // channel) waits for this commit's writes. A failed commit's writes go on, nobody
        // waits for them.
        let durability = std::mem::take(&mut self.work.durability);
        committed.map(|()| durability)
    }

    /// Applies a transaction's operations in order, stopping at the first that fails.
    fn commit_ops(&mut self, channel: u64) -> AmqpResult<()> {
        for op in self.take_tx(channel)? {
            match op {
                TxOp::Publish {
                    exchange,
                    mandatory,
                    body,
                } => {
                    if let Some(ch) = self.sessions.channels.get_mut(&channel) {
                        ch.published += 1;
                    }
                    self.route_and_enqueue(channel, &exchange, mandatory, body);
                }
                TxOp::Settle {
                    tag,
                    multiple,
                    outcome,
                } => self.apply_settle(channel, tag, multiple, outcome)?,
            }
        }
        Ok(())
    }

    pub(crate) fn tx_rollback(&mut self, channel: u64) -> AmqpResult<()> {
        self.take_tx(channel).map(drop)
    }
}
