//! Operations on single ready messages for a management front end: look at a queue's
//! messages in place, remove one, or publish a copy of one elsewhere and remove it.

use std::sync::Arc;

use crate::envelope::Envelope;
use crate::error::{AmqpError, AmqpResult, ReplyCode};
use crate::inspect::{PeekedMessage, Redrive};
use crate::store::Removal;
use crate::types::PublishStatus;

use super::State;

/// A failed read-back of a paged message, as a client sees it (541).
fn read_error(queue: &str, e: &crate::store::StoreError) -> AmqpError {
    AmqpError::new(
        ReplyCode::InternalError,
        format!("cannot read a paged message of queue '{queue}' back from the message store: {e}"),
    )
}

impl<E: Envelope> State<E> {
    /// Up to `max` ready messages of a queue in delivery order.
    pub(crate) fn peek(
        &self,
        queue: &str,
        max: usize,
    ) -> AmqpResult<Vec<PeekedMessage<E::Record>>> {
        let q = self
            .registry
            .queues
            .get(queue)
            .ok_or_else(|| self.no_queue(queue))?;
        let paged: Vec<u64> = q
            .storage
            .iter()
            .take(max)
            .filter(|(m, _)| m.is_paged())
            .map(|(m, _)| m.seq())
            .collect();
        let mut read = if paged.is_empty() {
            Vec::new()
        } else {
            self.store
                .read(&q.name, &paged)
                .map_err(|e| read_error(queue, &e))?
        }
        .into_iter();
        let mut peeked = Vec::with_capacity(max.min(q.storage.len()));
        for (m, held) in q.storage.iter().take(max) {
            let record = match (&m.body, held) {
                (Some(body), _) => body.clone(),
                (None, Some(held)) => Arc::new(held.clone()),
                (None, None) => match read.next() {
                    Some(p) => Arc::new(E::from_native(p)),
                    None => {
                        return Err(read_error(
                            queue,
                            &crate::store::StoreError::Corrupt {
                                detail: format!("message {} was not returned", m.seq()),
                            },
                        ));
                    }
                },
            };
            peeked.push(PeekedMessage {
                seq: m.seq(),
                redelivered: m.redelivered(),
                record,
            });
        }
        Ok(peeked)
    }

    /// Refuses an exclusive queue (its owner alone may take messages from it).
    fn unlocked(&self, queue: &str) -> AmqpResult<()> {
        let q = self
            .registry
            .queues
            .get(queue)
            .ok_or_else(|| self.no_queue(queue))?;
        if q.owner.is_some() {
            return Err(AmqpError::new(
                ReplyCode::ResourceLocked,
                format!(
                    "cannot obtain exclusive access to locked queue '{queue}' in vhost '{}'",
                    self.config.vhost
                ),
            ));
        }
        Ok(())
    }

    /// Removes one ready message as if acknowledged (no dead-lettering); whether it was
    /// there. `why` is what the store hears: [`Removal::Acked`] for a message discarded,
    /// [`Removal::Moved`] for the original of a re-drive.
    pub(crate) fn discard(&mut self, queue: &str, seq: u64, why: Removal) -> AmqpResult<bool> {
        self.unlocked(queue)?;
        let q = self.registry.queues.get_mut(queue).expect("checked above");
        let Some(message) = q.storage.remove(seq) else {
            return Ok(false);
        };
        if message.stored() {
            self.store.removed(&q.name, message.seq(), why);
        }
        self.memory.used -= message.footprint();
        Ok(true)
    }

    /// Removes the original of a re-drive, the ready message `seq` of the queue `queue`
    /// names, unless that queue has been deleted since (even if declared again under the
    /// same name): whether it was there.
    pub(crate) fn discard_moved(&mut self, queue: &Arc<str>, seq: u64) -> AmqpResult<bool> {
        if !self.is_current(queue) {
            return Ok(false);
        }
        self.discard(queue, seq, Removal::Moved)
    }

    /// Publishes a copy of one ready message to `exchange` with `routing_key` (properties,
    /// headers and payload unchanged); the original stays in its queue, for the caller to
    /// [discard](State::discard_moved) once the copy is safe. Returns the queue's name as
    /// the registry holds it, which tells it apart from a queue declared since under the
    /// same name.
    pub(crate) fn redrive_copy(
        &mut self,
        queue: &str,
        seq: u64,
        exchange: &str,
        routing_key: &str,
    ) -> AmqpResult<(Redrive, Arc<str>)> {
        self.unlocked(queue)?;
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
        let q = self.registry.queues.get(queue).expect("checked above");
        let source = q.name.clone();
        let Some((message, held)) = q.storage.iter().find(|(m, _)| m.seq() == seq) else {
            return Ok((Redrive::NotFound, source));
        };
        let body = match held {
            Some(held) => Arc::new(held.clone()),
            None => match self.read_back(queue, &message) {
                Ok(body) => body,
                Err(e) => return Err(self.read_failed(queue, &e)),
            },
        };
        let mut copy = E::Record::clone(&body);
        let name = self.registry.exchange_name(exchange);
        E::set_route(&mut copy, E::new_route(name, Arc::from(routing_key)));
        // Channel 0 is no channel: nothing is returned (not mandatory).
        let outcome = match self.route_and_enqueue(0, exchange, false, Arc::new(copy)) {
            PublishStatus::Routed(n) => Redrive::Moved(n),
            PublishStatus::Unroutable => Redrive::Unroutable,
            PublishStatus::Rejected => Redrive::Rejected,
            PublishStatus::Buffered => unreachable!("not in a transaction"),
        };
        Ok((outcome, source))
    }
}
