//! Declaring and deleting exchanges, queues and bindings.

use std::sync::Arc;

use tokio::time::Instant;

use super::State;
use crate::envelope::Envelope;
use crate::error::{AmqpError, AmqpResult, ReplyCode};
use crate::exchange::{Exchange, Target};
use crate::field::FieldTable;
use crate::policy;
use crate::queue::{Queue, QueueArgs};
use crate::storage::QueuedMessage;
use crate::store::{BindingDef, DestinationKind, ExchangeDef, QueueDef, Removal};
use crate::types::{ChannelEvent, ExchangeKind, ExchangeOptions, QueueDeclareOk, QueueOptions};

impl<E: Envelope> State<E> {
    // ---- exchanges ----------------------------------------------------------------------

    pub(super) fn check_exchange_name(name: &str) -> AmqpResult<()> {
        if name.is_empty() {
            return Err(AmqpError::access_refused(
                "operation not permitted on the default exchange",
            ));
        }
        if name.starts_with("amq.") {
            return Err(AmqpError::access_refused(format!(
                "exchange name '{name}' contains reserved prefix 'amq.*'"
            )));
        }
        Ok(())
    }

    pub(super) fn no_exchange(&self, name: &str) -> AmqpError {
        AmqpError::not_found(format!(
            "exchange '{name}' in vhost '{}'",
            self.config.vhost
        ))
    }

    pub(super) fn no_queue(&self, name: &str) -> AmqpError {
        AmqpError::not_found(format!("queue '{name}' in vhost '{}'", self.config.vhost))
    }

    pub(crate) fn exchange_declare(
        &mut self,
        name: &str,
        kind: ExchangeKind,
        options: ExchangeOptions,
        args: FieldTable,
    ) -> AmqpResult<()> {
        if let Some(existing) = self.registry.exchanges.get(name) {
            if options.passive {
                return Ok(());
            }
            Self::check_exchange_name(name)?;
            let vhost = &self.config.vhost;
            let mismatch = |what: &str, received: String, current: String| {
                AmqpError::precondition(format!(
                    "inequivalent arg '{what}' for exchange '{name}' in vhost '{vhost}': received '{received}' but current is '{current}'"
                ))
            };
            if existing.kind != kind {
                return Err(mismatch(
                    "type",
                    kind.to_string(),
                    existing.kind.to_string(),
                ));
            }
            if existing.durable != options.durable {
                return Err(mismatch(
                    "durable",
                    options.durable.to_string(),
                    existing.durable.to_string(),
                ));
            }
            if existing.auto_delete != options.auto_delete {
                return Err(mismatch(
                    "auto_delete",
                    options.auto_delete.to_string(),
                    existing.auto_delete.to_string(),
                ));
            }
            if existing.internal != options.internal {
                return Err(mismatch(
                    "internal",
                    options.internal.to_string(),
                    existing.internal.to_string(),
                ));
            }
            // Compared with its own argument: a policy's alternate exchange is not part of
            // the declaration.
            let alternate = args.get_str("alternate-exchange");
            let current = existing.arguments.get_str("alternate-exchange");
            if current != alternate {
                return Err(mismatch(
                    "alternate-exchange",
                    alternate.unwrap_or("none").to_owned(),
                    current.unwrap_or("none").to_owned(),
                ));
            }
            return Ok(());
        }
        if options.passive {
            return Err(self.no_exchange(name));
        }
        Self::check_exchange_name(name)?;
        if options.durable {
            self.store.exchange_declared(&ExchangeDef {
                name: name.to_owned(),
                kind,
                options,
                arguments: args.clone(),
            });
        }
        let name: Arc<str> = Arc::from(name);
        self.registry.routing_changed();
        let mut exchange = Exchange::new(
            name.clone(),
            kind,
            options.durable,
            options.auto_delete,
            options.internal,
            args,
        );
        if let Some(policy) = self.policies.for_exchange(&name) {
            exchange.policy = Some(Arc::from(policy.def.name.as_str()));
            exchange.alternate = policy::alternate_exchange(&exchange.arguments, Some(policy));
        }
        self.registry.exchanges.insert(name, exchange);
        Ok(())
    }

    pub(crate) fn exchange_delete(&mut self, name: &str, if_unused: bool) -> AmqpResult<()> {
        Self::check_exchange_name(name)?;
        let Some(x) = self.registry.exchanges.get(name) else {
            return Ok(());
        };
        if if_unused && !x.bindings.is_empty() {
            return Err(AmqpError::precondition(format!(
                "exchange '{name}' in vhost '{}' in use",
                self.config.vhost
            )));
        }
        self.remove_exchange(name);
        Ok(())
    }

    pub(super) fn remove_exchange(&mut self, name: &str) {
        let Some(x) = self.registry.exchanges.remove(name) else {
            return;
        };
        self.registry.routing_changed();
        if x.durable {
            self.store.exchange_deleted(name);
        }
        for b in &x.bindings {
            self.registry.remove_sources(&b.target, name, 1);
        }
        self.unbind_everywhere(Target::Exchange(Arc::from(name)));
    }

    /// Removes every binding to `target` (a queue or exchange going away) from the exchanges
    /// bound to it, deleting those that are auto-delete and left unbound.
    fn unbind_everywhere(&mut self, target: Target) {
        for source in self.registry.take_sources(&target) {
            self.unbind_where(&source, |x| x.unbind_target(&target) > 0);
        }
    }

    /// Applies an unbinding to `source` and deletes it if it is auto-delete and now unbound.
    pub(super) fn unbind_where(&mut self, source: &str, f: impl FnOnce(&mut Exchange) -> bool) {
        self.registry.routing_changed();
        let Some(x) = self.registry.exchanges.get_mut(source) else {
            return;
        };
        if f(x) && x.auto_delete && x.bindings.is_empty() {
            let name = x.name.clone();
            self.remove_exchange(&name);
        }
    }

    /// Adds a binding, telling the store when both ends are durable.
    fn bind(&mut self, source: &str, target: Target, key: &str, args: FieldTable) {
        let durable = self.durable_binding(source, &target, key, &args);
        let Some((name, _)) = self.registry.exchanges.get_key_value(source) else {
            return;
        };
        let name = name.clone();
        let target_bound = self.registry.binds(&name, &target);
        let x = self
            .registry
            .exchanges
            .get_mut(source)
            .expect("looked up above");
        if x.bind(target.clone(), key, args, target_bound) {
            self.registry.routing_changed();
            self.registry.add_sources(&target, &name, 1);
            if let Some(binding) = durable {
                self.store.binding_added(&binding);
            }
        }
    }

    /// Removes a binding, telling the store when both ends are durable.
    fn unbind(&mut self, source: &str, target: Target, key: &str, args: &FieldTable) {
        let durable = self.durable_binding(source, &target, key, args);
        let mut removed = false;
        self.unbind_where(source, |x| {
            removed = x.unbind(&target, key, args);
            removed
        });
        if removed {
            self.registry.remove_sources(&target, source, 1);
        }
        if let (true, Some(binding)) = (removed, durable) {
            self.store.binding_removed(&binding);
        }
    }

    /// The store's record of a binding, if both its ends are durable.
    fn durable_binding(
        &self,
        source: &str,
        target: &Target,
        key: &str,
        args: &FieldTable,
    ) -> Option<BindingDef> {
        if !self.registry.exchanges.get(source)?.durable {
            return None;
        }
        let (destination, destination_kind) = match target {
            Target::Queue(q) => {
                let queue = self.registry.queues.get(q)?;
                (queue.durable && queue.owner.is_none()).then_some((q, DestinationKind::Queue))?
            }
            Target::Exchange(e) => self
                .registry
                .exchanges
                .get(e)?
                .durable
                .then_some((e, DestinationKind::Exchange))?,
        };
        Some(BindingDef {
            source: source.to_owned(),
            destination: destination.to_string(),
            destination_kind,
            routing_key: key.to_owned(),
            arguments: args.clone(),
        })
    }

    pub(super) fn bindable_exchange(&self, name: &str) -> AmqpResult<()> {
        if name.is_empty() {
            return Err(AmqpError::access_refused(
                "operation not permitted on the default exchange",
            ));
        }
        if !self.registry.exchanges.contains_key(name) {
            return Err(self.no_exchange(name));
        }
        Ok(())
    }

    pub(crate) fn exchange_bind(
        &mut self,
        destination: &str,
        source: &str,
        key: &str,
        args: FieldTable,
    ) -> AmqpResult<()> {
        self.bindable_exchange(source)?;
        self.bindable_exchange(destination)?;
        let target = Target::Exchange(Arc::from(destination));
        self.bind(source, target, key, args);
        Ok(())
    }

    pub(crate) fn exchange_unbind(
        &mut self,
        destination: &str,
        source: &str,
        key: &str,
        args: &FieldTable,
    ) -> AmqpResult<()> {
        self.bindable_exchange(source)?;
        let target = Target::Exchange(Arc::from(destination));
        self.unbind(source, target, key, args);
        Ok(())
    }

    // ---- queues -------------------------------------------------------------------------

    pub(super) fn check_owner(&self, queue: &Queue<E>, connection: u64) -> AmqpResult<()> {
        match queue.owner {
            Some(owner) if owner != connection => Err(AmqpError::new(
                ReplyCode::ResourceLocked,
                format!(
                    "cannot obtain exclusive access to locked queue '{}' in vhost '{}'",
                    queue.name, self.config.vhost
                ),
            )),
            _ => Ok(()),
        }
    }

    pub(super) fn queue_for(&self, channel: u64, name: &str) -> AmqpResult<&Queue<E>> {
        let conn = self.sessions.connection_of(channel)?;
        let q = self
            .registry
            .queues
            .get(name)
            .ok_or_else(|| self.no_queue(name))?;
        self.check_owner(q, conn)?;
        Ok(q)
    }

    pub(crate) fn queue_declare(
        &mut self,
        channel: u64,
        name: &str,
        options: QueueOptions,
        args: FieldTable,
    ) -> AmqpResult<QueueDeclareOk> {
        let conn = self.sessions.connection_of(channel)?;
        let name = if name.is_empty() && !options.passive {
            crate::naming::server_name("amq.gen-")
        } else {
            name.to_owned()
        };
        let vhost = self.config.vhost.clone();
        if let Some(q) = self.registry.queues.get(name.as_str()) {
            self.check_owner(q, conn)?;
            if !options.passive {
                let owner = options.exclusive.then_some(conn);
                q.check_equivalent(options, owner, &args, &vhost)?;
            }
            let q = self
                .registry
                .queues
                .get_mut(name.as_str())
                .expect("checked above");
            q.last_used = Instant::now();
            return Ok(QueueDeclareOk {
                name,
                message_count: q.storage.len() as u32,
                consumer_count: q.consumers.len() as u32,
            });
        }
        if options.passive {
            return Err(self.no_queue(&name));
        }
        if name.starts_with("amq.") && !name.starts_with("amq.gen-") {
            return Err(AmqpError::access_refused(format!(
                "queue name '{name}' contains reserved prefix 'amq.*'"
            )));
        }
        let parsed = QueueArgs::parse(&name, &args)?;
        if options.durable && !options.exclusive {
            self.store.queue_declared(&QueueDef {
                name: name.clone(),
                options,
                arguments: args.clone(),
            });
        }
        let key: Arc<str> = Arc::from(name.as_str());
        let owner = options.exclusive.then_some(conn);
        self.registry.routing_changed();
        let mut queue = Queue::new(key.clone(), options, owner, args, parsed);
        let policy = self.policies.for_queue(&key);
        let operator = self.operator_policies.for_queue(&key);
        if policy.is_some() || operator.is_some() {
            queue.policy = policy.map(|p| Arc::from(p.def.name.as_str()));
            queue.operator_policy = operator.map(|p| Arc::from(p.def.name.as_str()));
            queue.args = policy::queue_args(&queue.declared, &queue.raw_args, policy, operator);
        }
        if queue.args.expires.is_some() {
            self.work.timer_dirty = true;
        }
        self.registry.queues.insert(key, queue);
        Ok(QueueDeclareOk {
            name,
            message_count: 0,
            consumer_count: 0,
        })
    }

    pub(crate) fn queue_bind(
        &mut self,
        channel: u64,
        queue: &str,
        exchange: &str,
        key: &str,
        args: FieldTable,
    ) -> AmqpResult<()> {
        self.queue_for(channel, queue)?;
        self.bindable_exchange(exchange)?;
        let target = Target::Queue(Arc::from(queue));
        self.bind(exchange, target, key, args);
        Ok(())
    }

    pub(crate) fn queue_unbind(
        &mut self,
        channel: u64,
        queue: &str,
        exchange: &str,
        key: &str,
        args: &FieldTable,
    ) -> AmqpResult<()> {
        self.queue_for(channel, queue)?;
        self.bindable_exchange(exchange)?;
        let target = Target::Queue(Arc::from(queue));
        self.unbind(exchange, target, key, args);
        Ok(())
    }

    pub(crate) fn queue_purge(&mut self, channel: u64, queue: &str) -> AmqpResult<u32> {
        self.queue_for(channel, queue)?;
        let q = self.registry.queues.get_mut(queue).expect("checked above");
        let purged = q.storage.drain();
        self.memory.used -= purged.iter().map(QueuedMessage::footprint).sum::<usize>();
        for m in purged.iter().filter(|m| m.stored()) {
            self.store.removed(queue, m.seq(), Removal::Purged);
        }
        Ok(purged.len() as u32)
    }

    pub(crate) fn queue_delete(
        &mut self,
        channel: u64,
        queue: &str,
        if_unused: bool,
        if_empty: bool,
    ) -> AmqpResult<u32> {
        let q = match self.queue_for(channel, queue) {
            Ok(q) => q,
            // Deleting a queue that does not exist succeeds, as on RabbitMQ.
            Err(e) if e.code == ReplyCode::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        if if_unused && !q.consumers.is_empty() {
            return Err(AmqpError::precondition(format!(
                "queue '{queue}' in vhost '{}' in use",
                self.config.vhost
            )));
        }
        if if_empty && !q.storage.is_empty() {
            return Err(AmqpError::precondition(format!(
                "queue '{queue}' in vhost '{}' not empty",
                self.config.vhost
            )));
        }
        Ok(self.delete_queue(queue))
    }

    /// Deletes a queue: consumers are cancelled (with notification), bindings removed.
    pub(super) fn delete_queue(&mut self, name: &str) -> u32 {
        let Some(mut q) = self.registry.queues.remove(name) else {
            return 0;
        };
        self.registry.routing_changed();
        if q.durable && q.owner.is_none() {
            self.store.queue_deleted(name);
        }
        let dropped = q.storage.drain();
        self.memory.used -= dropped.iter().map(QueuedMessage::footprint).sum::<usize>();
        for c in &q.consumers {
            if let Some(consumer) = self.sessions.consumers.remove(&c.id) {
                // Deliveries the handle never took go with the queue (it has left the
                // registry), as messages RabbitMQ had not yet sent: a no-ack consumer's too,
                // though a cancel leaves those to its handle. Their records leave the channel,
                // with the credit and memory they held. Those the handle took stay unacked on
                // the channel; settling them touches no queue, not even one declared again
                // under the same name (see `State::is_current`).
                self.close_inbox(&consumer, true);
                if let Some(ch) = self.sessions.channels.get_mut(&consumer.channel) {
                    ch.consumers.remove(&consumer.tag);
                    ch.events.send(ChannelEvent::ConsumerCancelled {
                        consumer_tag: consumer.tag.to_string(),
                    });
                }
            }
        }
        self.unbind_everywhere(Target::Queue(q.name.clone()));
        dropped.len() as u32
    }
}
