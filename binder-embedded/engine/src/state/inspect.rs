//! Snapshots of the registry and sessions for [`crate::inspect`].

use crate::envelope::Envelope;
use crate::exchange::Target;
use crate::field::FieldTable;
use crate::inspect::{BindingInfo, ChannelInfo, ConsumerInfo, ExchangeInfo, QueueInfo, Totals};
use crate::types::ExchangeKind;

use super::State;
use super::sessions::ChannelState;

impl<E: Envelope> State<E> {
    /// Every queue, sorted by name.
    pub(crate) fn queue_infos(&self) -> Vec<QueueInfo> {
        // By the queue's allocation, not its name: a queue deleted and declared again under
        // the same name does not count the old one's deliveries.
        let mut unacked: rustc_hash::FxHashMap<*const u8, u64> = Default::default();
        for u in self
            .sessions
            .channels
            .values()
            .flat_map(|c| c.unacked.iter())
        {
            *unacked.entry(u.queue.as_ptr()).or_default() += 1;
        }
        let mut out: Vec<QueueInfo> = self
            .registry
            .queues
            .values()
            .map(|q| QueueInfo {
                name: q.name.to_string(),
                durable: q.durable,
                auto_delete: q.auto_delete,
                exclusive: q.owner.is_some(),
                arguments: q.raw_args.clone(),
                policy: q.policy.as_deref().map(str::to_owned),
                operator_policy: q.operator_policy.as_deref().map(str::to_owned),
                policy_definition: crate::policy::effective_definition(
                    q.policy
                        .as_deref()
                        .and_then(|name| self.policies.definition(name)),
                    q.operator_policy
                        .as_deref()
                        .and_then(|name| self.operator_policies.definition(name)),
                ),
                messages_ready: q.storage.len() as u64,
                messages_unacknowledged: unacked.get(&q.name.as_ptr()).copied().unwrap_or(0),
                message_bytes_ready: q.storage.bytes() as u64,
                consumers: q.consumers.len() as u32,
                published: q.published,
                delivered: q.delivered,
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Every exchange, the default one (`""`) first, then by name.
    pub(crate) fn exchange_infos(&self) -> Vec<ExchangeInfo> {
        let mut out = vec![ExchangeInfo {
            name: String::new(),
            kind: ExchangeKind::Direct,
            durable: true,
            auto_delete: false,
            internal: false,
            alternate_exchange: None,
            arguments: FieldTable::new(),
            // Shown as RabbitMQ shows it, though the default exchange has no alternate.
            policy: self.policies.for_exchange("").map(|p| p.def.name.clone()),
        }];
        let mut named: Vec<ExchangeInfo> = self
            .registry
            .exchanges
            .values()
            .map(|x| ExchangeInfo {
                name: x.name.to_string(),
                kind: x.kind,
                durable: x.durable,
                auto_delete: x.auto_delete,
                internal: x.internal,
                alternate_exchange: x.alternate.clone(),
                arguments: x.arguments.clone(),
                policy: x.policy.as_deref().map(str::to_owned),
            })
            .collect();
        named.sort_by(|a, b| a.name.cmp(&b.name));
        out.extend(named);
        out
    }

    /// Every binding: the default exchange's implicit one per queue first (as RabbitMQ
    /// lists them), then each exchange's, by source name.
    pub(crate) fn binding_infos(&self) -> Vec<BindingInfo> {
        let mut queues: Vec<&str> = self.registry.queues.keys().map(|q| &**q).collect();
        queues.sort_unstable();
        let mut out: Vec<BindingInfo> = queues
            .into_iter()
            .map(|q| BindingInfo {
                source: String::new(),
                destination: q.to_owned(),
                destination_is_exchange: false,
                routing_key: q.to_owned(),
                arguments: FieldTable::new(),
            })
            .collect();
        let mut exchanges: Vec<_> = self.registry.exchanges.values().collect();
        exchanges.sort_by(|a, b| a.name.cmp(&b.name));
        for x in exchanges {
            for b in &x.bindings {
                let (destination, destination_is_exchange) = match &b.target {
                    Target::Queue(q) => (q.to_string(), false),
                    Target::Exchange(e) => (e.to_string(), true),
                };
                out.push(BindingInfo {
                    source: x.name.to_string(),
                    destination,
                    destination_is_exchange,
                    routing_key: b.key.clone(),
                    arguments: b.args.clone(),
                });
            }
        }
        out
    }

    /// Every consumer, by queue then tag.
    pub(crate) fn consumer_infos(&self) -> Vec<ConsumerInfo> {
        let mut out: Vec<ConsumerInfo> = self
            .sessions
            .consumers
            .values()
            .map(|c| ConsumerInfo {
                consumer_tag: c.tag.to_string(),
                queue: c.queue.to_string(),
                ack_required: !c.no_ack,
                exclusive: self
                    .registry
                    .queues
                    .get(&c.queue)
                    .is_some_and(|q| q.exclusive_consumer),
                prefetch_count: c.prefetch,
                unacknowledged: c.unacked,
                channel: c.channel,
            })
            .collect();
        out.sort_by(|a, b| (&a.queue, &a.consumer_tag).cmp(&(&b.queue, &b.consumer_tag)));
        out
    }

    /// Every open channel, by id (the order they were opened in).
    pub(crate) fn channel_infos(&self) -> Vec<ChannelInfo> {
        let mut out: Vec<ChannelInfo> = self
            .sessions
            .channels
            .iter()
            .map(|(&id, c)| Self::channel_info_of(id, c))
            .collect();
        out.sort_by_key(|c| c.id);
        out
    }

    /// One open channel.
    pub(crate) fn channel_info(&self, id: u64) -> Option<ChannelInfo> {
        let c = self.sessions.channels.get(&id)?;
        Some(Self::channel_info_of(id, c))
    }

    fn channel_info_of(id: u64, c: &ChannelState<E>) -> ChannelInfo {
        let held = c.tx.as_ref().map_or(0, Vec::len) as u32;
        ChannelInfo {
            id,
            prefetch_count: c.consumer_prefetch,
            global_prefetch_count: c.channel_prefetch,
            unacknowledged: c.unacked.len() as u32,
            consumers: c.consumers.len() as u32,
            confirm: c.confirm,
            transactional: c.tx.is_some(),
            uncommitted_publishes: c.tx_publishes,
            uncommitted_acks: held.saturating_sub(c.tx_publishes),
            published: c.published,
            // Delivery tags count from 1, one per delivery or get (and per delivery given
            // back by a cancelled consumer's handle, which counts as none).
            delivered: c.next_tag.saturating_sub(c.given_back),
            delivered_to_consumers: c.next_tag.saturating_sub(
                c.given_back + c.counts.no_ack + c.counts.got + c.counts.got_no_ack,
            ),
            counts: c.counts,
            acknowledged: c.acknowledged,
        }
    }

    /// Broker-wide counts.
    pub(crate) fn totals(&self) -> Totals {
        Totals {
            published: self.published,
            connections: self.sessions.connections.len() as u32,
            channels: self.sessions.channels.len() as u32,
            consumers: self.sessions.consumers.len() as u32,
        }
    }
}
