//! The batches of a `consumer.batchMode` binding: deliveries the queue loop assembled (up to
//! the binder's batch size, a shorter batch when no further delivery came within its receive
//! timeout) go to the binding's one listener in one call, as Spring Cloud Stream's
//! `Consumer<List<T>>`. A failed batch is attempted again whole after the back-off, holding
//! its handler slot (as Spring's retry template holds its container thread); once its
//! attempts are exhausted, each of its deliveries goes down the failure pipeline with the
//! batch's error. After a success each is acknowledged (the binder coalesces the acks).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument;

use super::super::error::HandlerError;
use super::super::handler::{Batch, Outcome};
use super::super::observe::Received;
use super::delivery::{InputRuntime, Pending, caught};
use crate::binder::Inbound;
use crate::message::Message;

impl InputRuntime {
    /// Handles a batch holding a handler slot: its attempts, then each delivery's
    /// settlement. `queue` is the queue the deliveries came from.
    pub(crate) async fn handle_batch(
        self: Arc<Self>,
        inbounds: Vec<Inbound>,
        queue: Arc<str>,
        permit: OwnedSemaphorePermit,
    ) {
        let pendings: Vec<Pending> = inbounds
            .into_iter()
            .map(|inbound| self.pending(inbound, queue.clone()))
            .collect();
        if self.observers.any() {
            for p in &pendings {
                self.observers.emit(|o| {
                    o.received(&Received {
                        binding: &self.name,
                        binding_index: self.observers.binding_index(),
                        queue: &p.queue,
                        redelivered: p.redelivered,
                    })
                });
            }
        }
        let span = tracing::debug_span!(
            "batch",
            binding = %self.name,
            destination = %self.destination,
            size = pendings.len(),
        );
        let messages: Vec<&Message> = pendings.iter().map(|p| &p.content.message).collect();
        let mut attempt = 1;
        let result = loop {
            let started = self.observers.clock();
            let result = self
                .batch_attempt(&messages, attempt)
                .instrument(span.clone())
                .await;
            // Each message counts, as each received one did: an attempt handled (or
            // failed) per message, with the batch's duration.
            for _ in &pendings {
                self.observe_attempt(started, attempt, &result);
            }
            match result {
                Err(error) if self.retryable(&error, attempt) => {
                    let wait = self.backoff.delay(attempt);
                    tracing::debug!(parent: &span, %error, attempt, ?wait, "batch attempt failed, retrying the batch");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                    for _ in &pendings {
                        self.retried(attempt, wait);
                    }
                }
                result => break result,
            }
        };
        drop(permit);
        for pending in &pendings {
            self.conclude(pending, result.clone(), attempt).await;
        }
    }

    /// One attempt of a batch: its listener, then its reply; a panic is caught and fails the
    /// attempt, as a delivery's (see [`InputRuntime::attempt`]).
    async fn batch_attempt(&self, messages: &[&Message], attempt: u32) -> Result<(), HandlerError> {
        let unguarded = async {
            // A batch binding has one listener, without a condition (checked at startup).
            let route = self.routes.only();
            let batch = Batch {
                messages,
                attempt,
                binding: &self.name,
                content_type: &self.content_type,
                codecs: &self.codecs,
                context: &self.context,
            };
            match route.handler.call_batch(batch).await? {
                Outcome::Done => Ok(()),
                Outcome::Reply(body) => Box::pin(self.send_reply(route, body)).await,
            }
        };
        match AssertUnwindSafe(unguarded).catch_unwind().await {
            Ok(result) => result,
            Err(panic) => Err(caught(&*panic)),
        }
    }
}
