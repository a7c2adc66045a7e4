//! Publishing: routing through exchanges and enqueueing with TTL, priority and limits.

use super::*;

impl State {
    // ---- publishing ---------------------------------------------------------------------

    pub(crate) fn confirm_select(&mut self, channel: u64) -> AmqpResult<()> {
        let ch = self.channel(channel)?;
        if ch.tx.is_some() {
            return Err(AmqpError::precondition(
                "cannot switch from tx to confirm mode",
            ));
        }
        ch.confirm = true;
        Ok(())
    }

    pub(crate) fn publish(
        &mut self,
        channel: u64,
        exchange: &str,
        routing_key: &str,
        mandatory: bool,
        message: Message,
    ) -> AmqpResult<PublishOutcome> {
        if !exchange.is_empty() {
            match self.exchanges.get(exchange) {
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
        let ch = self.channel(channel)?;
        if let Some(tx) = &mut ch.tx {
            tx.push(TxOp::Publish {
                exchange: exchange.to_owned(),
                routing_key: routing_key.to_owned(),
                mandatory,
                message: Box::new(message),
            });
            return Ok(PublishOutcome {
                seq: None,
                status: PublishStatus::Buffered,
            });
        }
        let seq = ch.confirm.then(|| {
            ch.next_seq += 1;
            ch.next_seq
        });
        let status = self.route_and_enqueue(channel, exchange, routing_key, mandatory, message);
        Ok(PublishOutcome { seq, status })
    }

    pub(super) fn route_and_enqueue(
        &mut self,
        channel: u64,
        exchange: &str,
        routing_key: &str,
        mandatory: bool,
        message: Message,
    ) -> PublishStatus {
        let targets = self.route(exchange, routing_key, &message.headers);
        let body = Arc::new(Published {
            exchange: exchange.to_owned(),
            routing_key: routing_key.to_owned(),
            message,
        });
        if targets.is_empty() {
            if mandatory {
                if let Some(ch) = self.channels.get(&channel) {
                    let _ = ch.events.send(ChannelEvent::Return {
                        reply_code: 312,
                        reply_text: "NO_ROUTE".to_owned(),
                        body,
                    });
                }
            }
            return PublishStatus::Unroutable;
        }
        let mut rejected = false;
        let now = Instant::now();
        let count = targets.len();
        for queue in targets {
            rejected |= !self.enqueue(&queue, body.clone(), now, false);
        }
        if rejected {
            PublishStatus::Rejected
        } else {
            PublishStatus::Routed(count)
        }
    }

    /// The queues a message reaches, each once.
    pub(super) fn route(
        &self,
        exchange: &str,
        routing_key: &str,
        headers: &Headers,
    ) -> Vec<Arc<str>> {
        if exchange.is_empty() {
            return self
                .queues
                .get_key_value(routing_key)
                .map(|(k, _)| vec![k.clone()])
                .unwrap_or_default();
        }
        let mut queues = Vec::new();
        let mut visited = HashSet::new();
        self.route_exchange(exchange, routing_key, headers, &mut visited, &mut queues);
        let mut seen = HashSet::new();
        queues.retain(|q| seen.insert(q.clone()));
        queues
    }

    pub(super) fn route_exchange(
        &self,
        exchange: &str,
        routing_key: &str,
        headers: &Headers,
        visited: &mut HashSet<Arc<str>>,
        queues: &mut Vec<Arc<str>>,
    ) {
        let Some(x) = self.exchanges.get(exchange) else {
            return;
        };
        if !visited.insert(x.name.clone()) {
            return;
        }
        let before = queues.len();
        let mut targets = Vec::new();
        x.matching(routing_key, headers, &mut targets);
        for t in targets {
            match t {
                Target::Queue(q) => {
                    if self.queues.contains_key(&q) {
                        queues.push(q);
                    }
                }
                Target::Exchange(e) => {
                    self.route_exchange(&e, routing_key, headers, visited, queues)
                }
            }
        }
        if queues.len() == before {
            if let Some(alt) = &x.alternate {
                self.route_exchange(alt, routing_key, headers, visited, queues);
            }
        }
    }

    /// Adds a message to a queue, applying TTL, priority and length limits. Returns `false`
    /// when the queue refused it.
    pub(super) fn enqueue(
        &mut self,
        queue: &str,
        body: Arc<Published>,
        now: Instant,
        redead: bool,
    ) -> bool {
        let Some(q) = self.queues.get_mut(queue) else {
            return true;
        };
        let size = body.message.payload.len();
        let ttl = match (
            q.args.message_ttl,
            body.message.properties.expiration_duration(),
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let priority = match q.args.max_priority {
            Some(max) => body.message.properties.priority.unwrap_or(0).min(max),
            None => 0,
        };
        q.next_seq += 1;
        let message = QueuedMessage {
            seq: q.next_seq,
            body,
            redelivered: false,
            expires_at: ttl.map(|t| now + t),
            priority,
            deliveries: 0,
        };
        if message.expires_at.is_some() {
            self.timer_dirty = true;
        }
        if q.would_overflow(size) {
            match q.args.overflow {
                Overflow::DropHead => {}
                Overflow::RejectPublish => return false,
                Overflow::RejectPublishDlx => {
                    if !redead {
                        let name = q.name.clone();
                        self.memory += size;
                        self.dying.push((message, name, DeathReason::MaxLen));
                    }
                    return false;
                }
            }
        }
        q.storage.push(message);
        self.memory += size;
        while q.over_limits() {
            let Some(head) = q.storage.pop() else { break };
            self.dying.push((head, q.name.clone(), DeathReason::MaxLen));
        }
        mark_dirty(&mut self.dirty, q.name.clone());
        true
    }
}
