//! Consumers, `basic.get` and dispatch to consumers with credit.

use std::sync::Arc;

use tokio::time::Instant;

use super::State;
use super::sessions::{ChannelState, ConsumerState, Unacked};
use crate::dead_letter::DeathReason;
use crate::envelope::Envelope;
use crate::error::{AmqpError, AmqpResult, ReplyCode};
use crate::inbox::Inbox;
use crate::queue::QueueConsumer;
use crate::storage::QueuedMessage;
use crate::store::Removal;
use crate::types::{ConsumeOptions, Delivery};

impl<E: Envelope> State<E> {
    // ---- consuming ----------------------------------------------------------------------

    pub(crate) fn basic_qos(
        &mut self,
        channel: u64,
        prefetch: u16,
        global: bool,
    ) -> AmqpResult<()> {
        let ch = self
            .sessions
            .channels
            .get_mut(&channel)
            .ok_or_else(AmqpError::channel_closed)?;
        if global {
            ch.channel_prefetch = u32::from(prefetch);
            let consumers = &self.sessions.consumers;
            let queues = ch
                .consumers
                .values()
                .filter_map(|c| consumers.get(c).map(|c| c.queue.clone()));
            self.work.dirty.extend(queues);
        } else {
            ch.consumer_prefetch = u32::from(prefetch);
        }
        Ok(())
    }

    pub(crate) fn consume(
        &mut self,
        channel: u64,
        queue: &str,
        options: ConsumeOptions,
    ) -> AmqpResult<(u64, String, Arc<Inbox<E>>)> {
        let q = self.queue_for(channel, queue)?;
        let vhost = self.config.vhost.clone();
        if q.exclusive_consumer || (options.exclusive && !q.consumers.is_empty()) {
            return Err(AmqpError::access_refused(format!(
                "queue '{queue}' in vhost '{vhost}' in exclusive use"
            )));
        }
        let priority = match options.arguments.get("x-priority") {
            None => 0,
            Some(v) => v.as_i64().ok_or_else(|| {
                AmqpError::precondition(format!(
                    "invalid arg 'x-priority' for consumer: expected an integer, got {}",
                    v.type_name()
                ))
            })?,
        };
        let id = self.sessions.id();
        let inbox = Arc::new(if options.no_ack {
            Inbox::<E>::counted(self.memory.released.clone())
        } else {
            Inbox::<E>::new()
        });
        let tag: Arc<str> = match options.consumer_tag.filter(|t| !t.is_empty()) {
            Some(t) => Arc::from(t.as_str()),
            None => Arc::from(crate::naming::server_name("amq.ctag-").as_str()),
        };
        let ch = self.sessions.channel(channel)?;
        if ch.consumers.contains_key(&tag) {
            return Err(AmqpError::new(
                ReplyCode::NotAllowed,
                format!("attempt to reuse consumer tag '{tag}'"),
            ));
        }
        ch.consumers.insert(tag.clone(), id);
        let prefetch = ch.consumer_prefetch;
        let q = self.registry.queues.get_mut(queue).expect("checked above");
        q.consumers.push(QueueConsumer { id, priority });
        q.exclusive_consumer = options.exclusive;
        q.had_consumer = true;
        q.parked += 1;
        q.last_used = Instant::now();
        let queue_name = q.name.clone();
        self.sessions.consumers.insert(
            id,
            ConsumerState {
                tag: tag.clone(),
                channel,
                queue: queue_name.clone(),
                no_ack: options.no_ack,
                prefetch,
                unacked: 0,
                inbox: inbox.clone(),
                parked: true,
            },
        );
        self.work.mark_dirty(queue_name);
        Ok((id, tag.to_string(), inbox))
    }

    /// The consumer's handle found its inbox empty: move what is ready into it, and if
    /// nothing was, mark the consumer as waiting so publishes dispatch to it directly.
    /// `false` once the consumer is gone.
    pub(crate) fn park(&mut self, consumer: u64) -> bool {
        let Some(c) = self.sessions.consumers.get(&consumer) else {
            return false;
        };
        let queue = c.queue.clone();
        if !c.parked {
            if let Some(c) = self.sessions.consumers.get_mut(&consumer) {
                c.parked = true;
            }
            if let Some(q) = self.registry.queues.get_mut(&queue) {
                q.parked += 1;
            }
        }
        self.dispatch(&queue);
        true
    }

    pub(crate) fn cancel(&mut self, channel: u64, tag: &str) -> AmqpResult<()> {
        let ch = self.sessions.channel(channel)?;
        // Cancelling an unknown tag is not an error in AMQP.
        if let Some(id) = ch.consumers.remove(tag) {
            self.remove_consumer(id, true);
        }
        Ok(())
    }

    /// Removes a consumer from its queue; its unacknowledged deliveries stay on the channel
    /// (they can still be acked, and are requeued when the channel closes).
    pub(super) fn remove_consumer(&mut self, id: u64, detach_unacked: bool) {
        let Some(consumer) = self.sessions.consumers.remove(&id) else {
            return;
        };
        // Deliveries the handle never took go back as they were. Those sent without
        // acknowledgement are the client's already (as on RabbitMQ, where they sit in the
        // client's buffer): the handle can still take them.
        self.close_inbox(&consumer, !consumer.no_ack);
        if detach_unacked {
            if let Some(ch) = self.sessions.channels.get_mut(&consumer.channel) {
                for u in ch.unacked.iter_mut() {
                    if u.consumer == Some(id) {
                        u.consumer = None;
                    }
                }
            }
        }
        let Some(q) = self.registry.queues.get_mut(&consumer.queue) else {
            return;
        };
        q.consumers.retain(|c| c.id != id);
        if consumer.parked {
            q.parked -= 1;
        }
        q.exclusive_consumer = false;
        q.last_used = Instant::now();
        if q.consumers.is_empty() && q.args.expires.is_some() {
            self.work.timer_dirty = true;
        }
        if q.auto_delete && q.had_consumer && q.consumers.is_empty() {
            let name = q.name.clone();
            self.delete_queue(&name);
        } else {
            // Single active consumer: the next one takes over.
            let name = q.name.clone();
            self.work.mark_dirty(name);
        }
    }

    /// Closes a removed consumer's inbox, waking its handle. With `give_back`, what the
    /// handle never took leaves the channel's records, with the credit and memory they held:
    /// each message goes back to its queue as it was, or, when the queue is gone (deleted,
    /// even if declared again since), goes with it.
    pub(super) fn close_inbox(&mut self, consumer: &ConsumerState<E>, give_back: bool) {
        let mut counted = 0;
        let left = consumer.inbox.close(give_back, &mut self.work.wakes);
        // Last first: each requeue goes in front of the one before.
        for d in left.into_iter().rev() {
            let Some(ch) = self.sessions.channels.get_mut(&consumer.channel) else {
                continue;
            };
            let Some(u) = ch.unacked.remove(d.delivery_tag) else {
                continue;
            };
            // Never handed over: not a delivery after all, in the statistics.
            ch.given_back += 1;
            ch.counts.redelivered = ch.counts.redelivered.saturating_sub(d.redelivered.into());
            counted += u32::from(u.counted);
            let mut m = u.message;
            self.memory.undelivered(&mut m);
            let current = self.registry.queues.get_mut(&u.queue);
            if let Some(q) = current.filter(|q| Arc::ptr_eq(&q.name, &u.queue)) {
                q.delivered = q.delivered.saturating_sub(1);
                m.set_deliveries(m.deliveries() - 1);
                q.storage.requeue(m);
                self.work.mark_dirty(u.queue);
            } else {
                self.memory.used -= m.footprint();
            }
        }
        self.release_channel_credit(consumer.channel, counted);
    }

    pub(crate) fn get(
        &mut self,
        channel: u64,
        queue: &str,
        no_ack: bool,
    ) -> AmqpResult<Option<(Delivery<E>, u32)>> {
        self.queue_for(channel, queue)?;
        self.expire_head(queue);
        let q = self.registry.queues.get_mut(queue).expect("checked above");
        q.last_used = Instant::now();
        let Some(mut message) = q.pop(&mut self.memory.used) else {
            if let Some(ch) = self.sessions.channels.get_mut(&channel) {
                ch.counts.got_empty += 1;
            }
            return Ok(None);
        };
        if message.is_paged() {
            let queue_name = q.name.clone();
            q.storage.requeue(message);
            if let Err(e) = self.page_in(&queue_name) {
                return Err(self.read_failed(&queue_name, &e));
            }
            let q = self.registry.queues.get_mut(queue).expect("checked above");
            message = q.pop(&mut self.memory.used).expect("requeued above");
        }
        let q = self.registry.queues.get_mut(queue).expect("checked above");
        let Some(body) = message.body.clone() else {
            // page_in reads the head's stubs: the head has its body now.
            q.storage.requeue(message);
            return Err(AmqpError::new(
                ReplyCode::InternalError,
                format!("message of queue '{queue}' was not read back from the store"),
            ));
        };
        let remaining = q.storage.len() as u32;
        q.delivered += 1;
        let queue_name = q.name.clone();
        message.set_deliveries(message.deliveries() + 1);
        let ch = self
            .sessions
            .channels
            .get_mut(&channel)
            .expect("checked above");
        ch.next_tag += 1;
        ch.counts.redelivered += u64::from(message.redelivered());
        if no_ack {
            ch.counts.got_no_ack += 1;
        } else {
            ch.counts.got += 1;
        }
        let delivery = Delivery {
            consumer_tag: Arc::from(""),
            delivery_tag: ch.next_tag,
            redelivered: message.redelivered(),
            body,
        };
        if message.stored() {
            if no_ack {
                self.store
                    .removed(&queue_name, message.seq(), Removal::Acked);
            } else if !message.redelivered() {
                self.store.delivered(&queue_name, message.seq());
            }
        }
        if no_ack {
            self.memory.used -= message.footprint();
        } else {
            self.memory.delivered(&mut message);
            ch.unacked.insert(
                ch.next_tag,
                Unacked {
                    queue: queue_name,
                    message,
                    consumer: None,
                    counted: false,
                    epoch: self.acks.epoch,
                },
            );
            if self.acks.idle() {
                self.work.timer_dirty = true;
            }
        }
        Ok(Some((delivery, remaining)))
    }

    /// Hands ready messages of a queue to consumers with credit: highest `x-priority` first,
    /// round-robin among equals, only the first consumer under single-active-consumer.
    pub(super) fn dispatch(&mut self, queue: &str) {
        loop {
            let Some(mut q) = self.registry.queues.get_mut(queue) else {
                return;
            };
            // Over its limits by requeued, given back or recovered messages, a `drop-head`
            // queue drops its oldest first, as RabbitMQ's does after a requeue and at start.
            q.drop_over_limits(&mut self.memory.used, &mut self.work.dying);
            // Looked up once when the head cannot expire (the common case).
            if q.storage.peek().is_some_and(|m| m.expires_at.is_some()) {
                self.expire_head(queue);
                let Some(again) = self.registry.queues.get_mut(queue) else {
                    return;
                };
                q = again;
            }
            if q.storage.is_empty() || q.consumers.is_empty() {
                return;
            }
            if q.storage.peek().is_some_and(QueuedMessage::is_paged) {
                // The head is paged: read a batch of it back, then look again.
                if let Err(e) = self.page_in(queue) {
                    self.page_in_failed(queue, &e);
                    return;
                }
                continue;
            }
            let candidates = if q.args.single_active_consumer {
                1
            } else {
                q.consumers.len()
            };
            let has_credit = |c: &ConsumerState<E>, ch: &ChannelState<E>| {
                c.no_ack
                    || ((c.prefetch == 0 || c.unacked < c.prefetch)
                        && (ch.channel_prefetch == 0 || ch.channel_unacked < ch.channel_prefetch))
            };
            // One candidate (the common case) is looked up once, not scanned and then again.
            let chosen = if candidates == 1 {
                Some((0, q.consumers[0].priority))
            } else {
                let mut chosen: Option<(usize, i64)> = None;
                for step in 0..candidates {
                    let idx = (q.cursor + step) % q.consumers.len();
                    let qc = &q.consumers[idx];
                    if chosen.is_some_and(|(_, p)| p >= qc.priority) {
                        continue;
                    }
                    let Some(c) = self.sessions.consumers.get(&qc.id) else {
                        continue;
                    };
                    let Some(ch) = self.sessions.channels.get(&c.channel) else {
                        continue;
                    };
                    if has_credit(c, ch) {
                        chosen = Some((idx, qc.priority));
                    }
                }
                chosen
            };
            let Some((idx, _)) = chosen else {
                return;
            };
            let consumer_id = q.consumers[idx].id;
            let Some(consumer) = self.sessions.consumers.get_mut(&consumer_id) else {
                return;
            };
            let Some(ch) = self.sessions.channels.get_mut(&consumer.channel) else {
                return;
            };
            if candidates == 1 && !has_credit(consumer, ch) {
                return;
            }
            q.cursor = idx + 1;
            // A lone (or single active) consumer takes all its credit allows in one burst,
            // handed over with one inbox lock; competing consumers go round-robin, one each.
            let lone = candidates == 1 || q.consumers.len() == 1;
            let burst = if lone {
                let window = |limit: u32, used: u32| {
                    if limit == 0 {
                        usize::MAX
                    } else {
                        limit.saturating_sub(used) as usize
                    }
                };
                if consumer.no_ack {
                    q.storage.len()
                } else {
                    window(consumer.prefetch, consumer.unacked)
                        .min(window(ch.channel_prefetch, ch.channel_unacked))
                        .min(q.storage.len())
                }
            } else {
                1
            };
            let mut now: Option<Instant> = None;
            let mut deliveries = std::mem::take(&mut self.work.deliver_scratch);
            // A no-ack consumer's deliveries stay counted until its handle takes them.
            let mut footprints = Vec::new();
            for _ in 0..burst {
                let Some(mut message) = q.pop(&mut self.memory.used) else {
                    break;
                };
                if let Some(at) = message.expires_at {
                    if at.is_due(*now.get_or_insert_with(Instant::now)) {
                        self.work
                            .dying
                            .push_back((message, q.name.clone(), DeathReason::Expired));
                        continue;
                    }
                }
                let Some(body) = message.body.clone() else {
                    // Past the batch read back: the next round reads more.
                    q.storage.requeue(message);
                    break;
                };
                message.set_deliveries(message.deliveries() + 1);
                ch.next_tag += 1;
                ch.counts.redelivered += u64::from(message.redelivered());
                deliveries.push(Delivery {
                    consumer_tag: consumer.tag.clone(),
                    delivery_tag: ch.next_tag,
                    redelivered: message.redelivered(),
                    body,
                });
                if message.stored() {
                    if consumer.no_ack {
                        self.store.removed(&q.name, message.seq(), Removal::Acked);
                    } else if !message.redelivered() {
                        self.store.delivered(&q.name, message.seq());
                    }
                }
                if consumer.no_ack {
                    footprints.push(message.footprint());
                } else {
                    consumer.unacked += 1;
                    ch.channel_unacked += 1;
                    self.memory.delivered(&mut message);
                    ch.unacked.insert(
                        ch.next_tag,
                        Unacked {
                            queue: q.name.clone(),
                            message,
                            consumer: Some(consumer_id),
                            counted: true,
                            epoch: self.acks.epoch,
                        },
                    );
                }
            }
            if !consumer.no_ack && self.acks.idle() {
                self.work.timer_dirty = true;
            }
            let delivered = deliveries.len();
            q.delivered += delivered as u64;
            if consumer.no_ack {
                ch.counts.no_ack += delivered as u64;
            }
            if let Some(waker) = consumer.inbox.push_many(&mut deliveries, footprints) {
                self.work.wakes.push(waker);
            }
            self.work.keep_deliver_scratch(deliveries);
            // Only deliveries end a wait. A burst that delivered nothing leaves the handle
            // waiting, so it stays parked (defensive: the head was checked for expiry and
            // read back above, so only a clock that moves in between gets here).
            if consumer.parked && delivered > 0 {
                consumer.parked = false;
                q.parked -= 1;
            }
            // A lone consumer given its whole burst has used its credit or emptied the queue:
            // another round would find nothing to do (it is the common case: at prefetch 1,
            // every ack dispatches one message). Expired or paged messages cut a burst short:
            // then the next round goes on.
            if lone && delivered == burst {
                return;
            }
        }
    }
}
