//! Rebuilding the broker from what its message store kept.

use std::sync::Arc;

use tokio::time::Instant;

use super::{State, paging};
use crate::deadline::Deadline;
use crate::envelope::Envelope;
use crate::error::AmqpResult;
use crate::events;
use crate::memory;
use crate::policy::{Policy, PolicyKind};
use crate::storage::QueuedMessage;
use crate::store::{DestinationKind, MemoryStore, MessageStore, Recovered};

impl<E: Envelope> State<E> {
    /// Declares what the store kept (policies and operator policies, exchanges, queues,
    /// bindings, in that order) and puts
    /// its messages back in their queues in their arrival order, marked redelivered when
    /// they were delivered before. Nothing of it is reported back to the store, which holds
    /// it already. A message's TTL counts again from now.
    ///
    /// A queue recovered over its length limits (messages requeued at the restart, or a trim
    /// the crash kept from the disk) then drops its oldest messages, dead-lettered as
    /// `maxlen` where it has a dead-letter exchange, as RabbitMQ's queues do at start; those
    /// changes reach the store.
    ///
    /// A kept policy this broker does not accept (its pattern or a key refused, as an older
    /// version refuses a newer one's key) is not applied, with a warning at each start; it
    /// stays in the store until a policy of the same kind and name is set or cleared, rather than
    /// keeping the broker from starting.
    pub(crate) fn recover(&mut self, recovered: Recovered) -> AmqpResult<()> {
        let store: Arc<dyn MessageStore> =
            std::mem::replace(&mut self.store, Arc::new(MemoryStore));
        let result = self.rebuild(recovered);
        self.store = store;
        result?;
        let over: Vec<Arc<str>> = self
            .registry
            .queues
            .values()
            .filter(|q| q.over_limits())
            .map(|q| q.name.clone())
            .collect();
        for queue in over {
            self.work.mark_dirty(queue);
        }
        self.settle();
        Ok(())
    }

    fn rebuild(&mut self, recovered: Recovered) -> AmqpResult<()> {
        let connection = self.open_connection();
        let (sender, _) = events::queue();
        let channel = self.open_channel(connection, None, sender)?;
        let policies = (recovered.policies.into_iter()).map(|def| (PolicyKind::Policy, def));
        let operator =
            (recovered.operator_policies.into_iter()).map(|def| (PolicyKind::Operator, def));
        for (kind, def) in policies.chain(operator) {
            let name = def.name.clone();
            match Policy::new(def, kind) {
                Ok(policy) => {
                    self.set_policy(policy);
                }
                Err(e) => {
                    tracing::warn!(vhost = %self.config.vhost, kind = kind.noun(), policy = %name, reason = %e.text, "a kept policy is refused: not applied, left in the store");
                    self.refused_policies.push((kind, name));
                }
            }
        }
        for x in recovered.exchanges {
            self.exchange_declare(&x.name, x.kind, x.options, x.arguments)?;
        }
        for q in recovered.queues {
            self.queue_declare(channel, &q.name, q.options, q.arguments)?;
        }
        for b in recovered.bindings {
            let ends = self.registry.exchanges.contains_key(b.source.as_str())
                && match b.destination_kind {
                    DestinationKind::Queue => {
                        self.registry.queues.contains_key(b.destination.as_str())
                    }
                    DestinationKind::Exchange => {
                        self.registry.exchanges.contains_key(b.destination.as_str())
                    }
                };
            if !ends {
                continue;
            }
            match b.destination_kind {
                DestinationKind::Queue => self.queue_bind(
                    channel,
                    &b.destination,
                    &b.source,
                    &b.routing_key,
                    b.arguments,
                )?,
                DestinationKind::Exchange => {
                    self.exchange_bind(&b.destination, &b.source, &b.routing_key, b.arguments)?
                }
            }
        }
        for (queue, position) in &recovered.positions {
            if let Some(q) = self.registry.queues.get_mut(queue.as_str()) {
                q.next_seq = q.next_seq.max(*position);
            }
        }
        let mut messages = recovered.messages;
        messages.sort_by(|a, b| a.queue.cmp(&b.queue).then(a.seq.cmp(&b.seq)));
        let now = Instant::now();
        for m in messages {
            let Some(q) = self.registry.queues.get_mut(m.queue.as_str()) else {
                continue;
            };
            let body = Arc::new(E::from_native(m.published));
            let footprint = memory::entry_footprint::<E>(&body);
            let ttl = match (q.args.message_ttl, E::expiration(&body)) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let priority = match q.args.max_priority {
                Some(max) => E::priority(&body).unwrap_or(0).min(max),
                None => 0,
            };
            q.next_seq = q.next_seq.max(m.seq);
            let expires_at = ttl.map(|t| Deadline::after(now, t));
            let mut message = QueuedMessage::new(m.seq, priority, body, footprint, expires_at);
            message.set_deliveries(u32::from(m.redelivered));
            message.set_redelivered(m.redelivered);
            message.set_stored(self.keeps_messages);
            if message.expires_at.is_some() {
                self.work.timer_dirty = true;
            }
            if paging::page_now(self.pages, &self.config, self.memory.used, q.storage.len()) {
                message.page_out();
            }
            self.memory.used += q.push(message);
        }
        self.close_connection(connection);
        Ok(())
    }
}
