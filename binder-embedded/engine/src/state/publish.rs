//! Publishing: routing through exchanges and enqueueing with TTL, priority and limits.

use std::sync::Arc;

use tokio::time::Instant;

use crate::deadline::Deadline;

use super::route_cache::RouteCache;
use super::sessions::TxOp;
use super::{State, View, paging};
use crate::dead_letter::DeathReason;
use crate::envelope::Envelope;
use crate::error::{AmqpError, AmqpResult};
use crate::memory;
use crate::queue::Overflow;
use crate::storage::QueuedMessage;
use crate::store::StoredMessage;
use crate::types::{ChannelEvent, PublishOutcome, PublishStatus};

impl<E: Envelope> State<E> {
    // ---- publishing ---------------------------------------------------------------------

    pub(crate) fn confirm_select(&mut self, channel: u64) -> AmqpResult<()> {
        let ch = self.sessions.channel(channel)?;
        if ch.tx.is_some() {
            return Err(AmqpError::precondition(
                "cannot switch from tx to confirm mode",
            ));
        }
        ch.confirm = true;
        Ok(())
    }

    /// `basic.publish` of a message the caller already put in an `Arc` (so the message is
    /// copied once, not at every layer); its route is set here.
    pub(crate) fn publish(
        &mut self,
        channel: u64,
        exchange: &str,
        routing_key: &str,
        mandatory: bool,
        mut body: Arc<E::Record>,
    ) -> AmqpResult<PublishOutcome> {
        if !exchange.is_empty() {
            match self.registry.exchanges.get(exchange) {
                None => return Err(self.no_exchange(exchange)),
                Some(x) if x.internal => {
                    return Err(AmqpError::access_refused(format!(
                        "cannot publish to internal exchange '{exchange}' in vhost '{}'",
                        self.config.vhost
                    )));
                }
                Some(_) => {}
            }
        }
        let size = E::payload_len(&body);
        if size > crate::MAX_PAYLOAD {
            return Err(AmqpError::precondition(format!(
                "message size {size} is larger than max size {}",
                crate::MAX_PAYLOAD
            )));
        }
        let ch = self.sessions.channel(channel)?;
        let route = match &ch.last_route {
            Some(last) if E::is_route(last, exchange, routing_key) => {
                ch.route_repeated = true;
                last.clone()
            }
            _ => {
                ch.route_repeated = false;
                let name = self.registry.exchange_name(exchange);
                let route = E::new_route(name, Arc::from(routing_key));
                ch.last_route = Some(route.clone());
                route
            }
        };
        match Arc::get_mut(&mut body) {
            Some(b) => E::set_route(b, route),
            None => {
                let mut copy = E::Record::clone(&body);
                E::set_route(&mut copy, route);
                body = Arc::new(copy);
            }
        }
        if let Some(tx) = &mut ch.tx {
            ch.tx_publishes += 1;
            tx.push(TxOp::Publish {
                exchange: exchange.to_owned(),
                mandatory,
                body,
            });
            return Ok(PublishOutcome {
                seq: None,
                status: PublishStatus::Buffered,
            });
        }
        // A publish held by a transaction counts when it is committed, as RabbitMQ's.
        ch.published += 1;
        let seq = ch.confirm.then(|| {
            ch.next_seq += 1;
            ch.next_seq
        });
        let status = self.route_and_enqueue(channel, exchange, mandatory, body);
        Ok(PublishOutcome { seq, status })
    }

    pub(super) fn route_and_enqueue(
        &mut self,
        channel: u64,
        exchange: &str,
        mandatory: bool,
        body: Arc<E::Record>,
    ) -> PublishStatus {
        self.published += 1;
        let mut targets = std::mem::take(&mut self.work.route_scratch);
        targets.clear();
        self.route(channel, exchange, &body, &mut targets);
        if targets.is_empty() {
            if let Some(ch) = self.sessions.channels.get_mut(&channel) {
                if mandatory {
                    ch.counts.returned += 1;
                    ch.events.send(ChannelEvent::Return {
                        reply_code: 312,
                        reply_text: "NO_ROUTE".to_owned(),
                        body,
                    });
                } else {
                    ch.counts.dropped_unroutable += 1;
                }
            }
            self.work.route_scratch = targets;
            return PublishStatus::Unroutable;
        }
        let mut rejected = false;
        let count = targets.len();
        self.publication += 1;
        // The last queue is handed the publisher's reference: a message that reaches one
        // queue is held by it alone (which lets a deep queue keep it without its `Arc`).
        let mut body = Some(body);
        for (i, queue) in targets.drain(..).enumerate() {
            let record = if i + 1 == count {
                body.take()
            } else {
                body.clone()
            };
            let record = record.expect("taken by the last queue only");
            rejected |= !self.enqueue(&queue, record, false);
        }
        self.work.route_scratch = targets;
        if rejected {
            PublishStatus::Rejected
        } else {
            PublishStatus::Routed(count)
        }
    }

    /// The queues a message published on `channel` reaches: the channel's last result when
    /// the message has the same route and nothing that routes has changed since, otherwise
    /// routed afresh. A result is kept when the channel published the same route twice in a
    /// row (a channel whose routing key changes with every message would only pay for
    /// keeping it) and it depends on the routing key alone.
    fn route(&mut self, channel: u64, exchange: &str, body: &E::Record, out: &mut Vec<Arc<str>>) {
        debug_assert_eq!(
            &**E::exchange(body),
            exchange,
            "a record is routed through the exchange it was published to"
        );
        let version = self.registry.routing_version();
        let cached = self
            .sessions
            .channels
            .get(&channel)
            .and_then(|ch| ch.route_cache.as_ref())
            .and_then(|c| c.queues(version, E::exchange(body), E::routing_key(body)));
        if let Some(queues) = cached {
            out.extend_from_slice(queues);
            if cfg!(debug_assertions) {
                let mut fresh = Vec::new();
                self.registry.route_record(exchange, body, &mut fresh);
                assert_eq!(
                    *out, fresh,
                    "a kept route outlived a change of the registry"
                );
            }
            return;
        }
        self.registry.route_record(exchange, body, out);
        let Some(ch) = self.sessions.channels.get_mut(&channel) else {
            return;
        };
        if ch.route_repeated && self.registry.routes_by_key(exchange) {
            ch.route_cache = Some(RouteCache::new(
                version,
                E::exchange(body),
                E::routing_key(body),
                out,
            ));
        }
    }

    /// Adds a message to a queue, applying TTL, priority and length limits. Returns `false`
    /// when the queue refused it.
    pub(super) fn enqueue(&mut self, queue: &str, body: Arc<E::Record>, redead: bool) -> bool {
        let Some(q) = self.registry.queues.get_mut(queue) else {
            return true;
        };
        let size = E::payload_len(&body);
        // Sizes are kept as `u32` (publishes above `MAX_PAYLOAD` are refused).
        let footprint = memory::entry_footprint::<E>(&body);
        let ttl = match (q.args.message_ttl, E::expiration(&body)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let priority = match q.args.max_priority {
            Some(max) => E::priority(&body).unwrap_or(0).min(max),
            None => 0,
        };
        q.next_seq += 1;
        // An exclusive queue goes with its connection: the store never hears of it (nor of
        // its messages), durable or not.
        let persistent =
            self.keeps_messages && q.durable && q.owner.is_none() && E::persistent(&body);
        let expires_at = ttl.map(|t| Deadline::after(Instant::now(), t));
        let mut message = QueuedMessage::new(q.next_seq, priority, body, footprint, expires_at);
        if message.expires_at.is_some() {
            self.work.timer_dirty = true;
        }
        if q.would_overflow(size) {
            match q.args.overflow {
                Overflow::DropHead => {}
                Overflow::RejectPublish => return false,
                Overflow::RejectPublishDlx => {
                    if !redead {
                        let name = q.name.clone();
                        self.memory.used += footprint as usize;
                        self.work
                            .dying
                            .push_back((message, name, DeathReason::MaxLen));
                    }
                    return false;
                }
            }
        }
        let durability = match message.body.as_ref().filter(|_| persistent) {
            Some(record) => Some(self.store.enqueued(&StoredMessage {
                queue: &q.name,
                seq: message.seq(),
                publication: self.publication,
                record: &View::<E>(record),
            })),
            None => None,
        };
        if let Some(durability) = durability {
            if durability.is_refused() {
                // Not taken: the queue does not keep what the store refused. Its publisher
                // hears why; a dead letter's original stays in the store.
                if redead {
                    self.work.copy_refused = true;
                } else {
                    self.work.durability.push(durability);
                }
                return true;
            }
            message.set_stored(true);
            if paging::page_now(self.pages, &self.config, self.memory.used, q.storage.len()) {
                message.page_out();
            }
            // A dead-lettered copy has no publisher waiting: its write goes on regardless.
            if !redead && !durability.is_durable() {
                self.work.durability.push(durability);
            }
        }
        let counted = q.push(message);
        q.published += 1;
        self.memory.used += counted;
        q.drop_over_limits(&mut self.memory.used, &mut self.work.dying);
        if q.parked > 0 {
            self.work.mark_dirty(q.name.clone());
        }
        true
    }
}
