//! Publishing: routing through exchanges and enqueueing with TTL, priority and limits.

use super::*;

impl<E: Envelope> State<E> {
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

    /// `basic.publish` of a message the caller already put in an `Arc` (so the message is
    /// copied once, not at every layer); its `exchange` field is filled in here.
    pub(crate) fn publish(
        &mut self,
        channel: u64,
        exchange: &str,
        routing_key: &str,
        mandatory: bool,
        mut body: Arc<E::Record>,
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
        let key = match &ch.last_routing_key {
            Some(last) if **last == *routing_key => last.clone(),
            _ => {
                let key: Arc<str> = Arc::from(routing_key);
                ch.last_routing_key = Some(key.clone());
                key
            }
        };
        match Arc::get_mut(&mut body) {
            Some(b) => E::set_routing_key(b, key),
            None => {
                let mut copy = E::Record::clone(&body);
                E::set_routing_key(&mut copy, key);
                body = Arc::new(copy);
            }
        }
        if let Some(tx) = &mut ch.tx {
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
        mut body: Arc<E::Record>,
    ) -> PublishStatus {
        let mut targets = std::mem::take(&mut self.route_scratch);
        targets.clear();
        let name = self.route_record(exchange, &body, &mut targets);
        match Arc::get_mut(&mut body) {
            Some(b) => E::set_exchange(b, name),
            None => {
                let mut copy = E::Record::clone(&body);
                E::set_exchange(&mut copy, name);
                body = Arc::new(copy);
            }
        }
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
            self.route_scratch = targets;
            return PublishStatus::Unroutable;
        }
        let mut rejected = false;
        let count = targets.len();
        for queue in targets.drain(..) {
            rejected |= !self.enqueue(&queue, body.clone(), false);
        }
        self.route_scratch = targets;
        if rejected {
            PublishStatus::Rejected
        } else {
            PublishStatus::Routed(count)
        }
    }

    /// [`State::route`] for a record: its headers are read (and converted, for an envelope
    /// that holds other types) only when a headers exchange is on the way.
    pub(super) fn route_record(
        &self,
        exchange: &str,
        body: &E::Record,
        queues: &mut Vec<Arc<str>>,
    ) -> Arc<str> {
        let key = E::routing_key(body);
        if self.reads_headers(exchange) {
            self.route(exchange, key, &E::headers(body), queues)
        } else {
            self.route(exchange, key, &FieldTable::new(), queues)
        }
    }

    /// Whether routing through `exchange` may look at message headers: it, or an exchange
    /// it routes on to, is a headers exchange.
    fn reads_headers(&self, exchange: &str) -> bool {
        let Some(x) = self.exchanges.get(exchange) else {
            return false;
        };
        if x.kind == ExchangeKind::Headers {
            return true;
        }
        if x.alternate.is_none() && !x.has_exchange_targets() {
            return false;
        }
        // Onward routing: look through every exchange reachable from here.
        let mut seen: Vec<&str> = Vec::new();
        let mut todo: Vec<&str> = vec![exchange];
        while let Some(name) = todo.pop() {
            let Some(x) = self.exchanges.get(name) else {
                continue;
            };
            if seen.contains(&name) {
                continue;
            }
            seen.push(name);
            if x.kind == ExchangeKind::Headers {
                return true;
            }
            todo.extend(x.bindings.iter().filter_map(|b| match &b.target {
                Target::Exchange(e) => Some(&**e),
                Target::Queue(_) => None,
            }));
            todo.extend(x.alternate.as_deref());
        }
        false
    }

    /// Adds the queues a message reaches, each once, to `queues`; returns the exchange's
    /// shared name (for the published message).
    pub(super) fn route(
        &self,
        exchange: &str,
        routing_key: &str,
        headers: &FieldTable,
        queues: &mut Vec<Arc<str>>,
    ) -> Arc<str> {
        if exchange.is_empty() {
            if let Some((name, _)) = self.queues.get_key_value(routing_key) {
                queues.push(name.clone());
            }
            return self.default_exchange.clone();
        }
        let Some((name, x)) = self.exchanges.get_key_value(exchange) else {
            return Arc::from(exchange);
        };
        if x.alternate.is_none() && !x.has_exchange_targets() {
            // The common case: no onward routing, so no loop detection is needed.
            let before = queues.len();
            x.matching_queues(routing_key, headers, queues);
            dedup_from(queues, before);
            return name.clone();
        }
        let mut visited = Vec::new();
        self.route_exchange(exchange, routing_key, headers, &mut visited, queues);
        name.clone()
    }

    /// Routes through one exchange, following exchange-to-exchange bindings and the alternate
    /// exchange. `visited` breaks loops; both lists are short, so linear scans beat hashing.
    pub(super) fn route_exchange(
        &self,
        exchange: &str,
        routing_key: &str,
        headers: &FieldTable,
        visited: &mut Vec<Arc<str>>,
        queues: &mut Vec<Arc<str>>,
    ) {
        let Some(x) = self.exchanges.get(exchange) else {
            return;
        };
        if visited.contains(&x.name) {
            return;
        }
        visited.push(x.name.clone());
        let before = queues.len();
        let mut targets = Vec::new();
        x.matching(routing_key, headers, &mut targets);
        for t in targets {
            match t {
                Target::Queue(q) => {
                    if !queues.contains(&q) {
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
    pub(super) fn enqueue(&mut self, queue: &str, body: Arc<E::Record>, redead: bool) -> bool {
        let Some(q) = self.queues.get_mut(queue) else {
            return true;
        };
        let size = E::payload_len(&body);
        let footprint = memory::footprint::<E>(&body);
        let ttl = match (q.args.message_ttl, E::expiration(&body)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let priority = match q.args.max_priority {
            Some(max) => E::priority(&body).unwrap_or(0).min(max),
            None => 0,
        };
        q.next_seq += 1;
        let message = QueuedMessage {
            seq: q.next_seq,
            size,
            footprint,
            body,
            redelivered: false,
            expires_at: ttl.map(|t| Instant::now() + t),
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
                        self.memory += footprint;
                        self.dying.push((message, name, DeathReason::MaxLen));
                    }
                    return false;
                }
            }
        }
        q.storage.push(message);
        self.memory += footprint;
        while q.over_limits() {
            let Some(head) = q.storage.pop() else { break };
            self.dying.push((head, q.name.clone(), DeathReason::MaxLen));
        }
        if q.parked > 0 {
            mark_dirty(&mut self.dirty, q.name.clone());
        }
        true
    }
}

/// Removes repeats from `queues[from..]`, keeping first occurrences (lists are short).
fn dedup_from(queues: &mut Vec<Arc<str>>, from: usize) {
    let mut i = from + 1;
    while i < queues.len() {
        if queues[from..i].contains(&queues[i]) {
            queues.remove(i);
        } else {
            i += 1;
        }
    }
}
