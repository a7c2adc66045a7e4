//! Many sends in flight from one task: [`Pipeline`] keeps up to a window of sends waiting for
//! their confirms and hands the confirms back one by one, in the order of the sends.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use futures::StreamExt;
use futures::stream::FuturesOrdered;
use serde::Serialize;

use super::binding::{Output, OutputInner};
use super::error::SendError;
use crate::message::Message;

type InFlight = Pin<Box<dyn Future<Output = Confirm> + Send>>;

/// How one send of a [`Pipeline`] ended.
#[derive(Debug, Clone)]
pub struct Confirm {
    /// The number [`Pipeline::send`] gave it (0 for the pipeline's first send).
    pub seq: u64,
    /// Confirmed by the broker, or why not.
    pub result: Result<(), SendError>,
}

/// A sender that keeps up to `window` sends of one output binding in flight, for a producer
/// that sends from one loop without waiting for each confirm (made by [`Output::pipeline`]).
///
/// [`Pipeline::send`] encodes a payload and starts its send, first waiting for the oldest
/// send to end when `window` are already in flight. The sends reach the binder in the order
/// of the calls; their outcomes come back in that order too, as [`Confirm`]s:
/// [`Pipeline::next_confirm`] waits for the next one, [`Pipeline::flush`] for all of them.
/// Sends progress while the pipeline is used (a `send`, `next_confirm` or `flush` call);
/// dropping it gives up on the confirms of the sends in flight, not on the sends.
///
/// ```no_run
/// # async fn demo(orders: binder_core::runtime::Output) -> Result<(), binder_core::runtime::SendError> {
/// let mut pipeline = orders.pipeline(256);
/// for id in 0..10_000u32 {
///     pipeline.send(&serde_json::json!({ "id": id })).await?;
///     // Confirms that came back meanwhile, without waiting.
///     for confirm in pipeline.confirmed() {
///         confirm.result?;
///     }
/// }
/// for confirm in pipeline.flush().await {
///     confirm.result?;
/// }
/// # Ok(()) }
/// ```
pub struct Pipeline {
    inner: Arc<OutputInner>,
    window: usize,
    next_seq: u64,
    in_flight: FuturesOrdered<InFlight>,
    done: VecDeque<Confirm>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("binding", &self.inner.binding)
            .field("window", &self.window)
            .field("in_flight", &self.in_flight.len())
            .field("confirmed", &self.done.len())
            .finish()
    }
}

impl Output {
    /// A [`Pipeline`] on this binding with at most `window` sends in flight (at least 1).
    pub fn pipeline(&self, window: usize) -> Pipeline {
        Pipeline {
            inner: self.inner.clone(),
            window: window.max(1),
            next_seq: 0,
            in_flight: FuturesOrdered::new(),
            done: VecDeque::new(),
        }
    }

    /// Sends every payload with up to `window` in flight and waits for all their confirms.
    /// After the first failure no further payload is sent; the sends already in flight are
    /// waited for. Returns how many were confirmed, or every failure with the payload's
    /// index.
    ///
    /// ```no_run
    /// # async fn demo(orders: binder_core::runtime::Output) {
    /// let ids: Vec<u32> = (0..10_000).collect();
    /// match orders.send_all(&ids, 256).await {
    ///     Ok(confirmed) => assert_eq!(confirmed, 10_000),
    ///     Err(e) => eprintln!("{e}"),
    /// }
    /// # }
    /// ```
    pub async fn send_all<I>(&self, payloads: I, window: usize) -> Result<u64, SendAllError>
    where
        I: IntoIterator,
        I::Item: Serialize,
    {
        let mut pipeline = self.pipeline(window);
        let mut confirmed = 0;
        let mut failures = Vec::new();
        let mut tally = |c: Confirm, failures: &mut Vec<(u64, SendError)>| match c.result {
            Ok(()) => confirmed += 1,
            Err(e) => failures.push((c.seq, e)),
        };
        for payload in payloads {
            let started = pipeline.send(&payload).await;
            for c in pipeline.confirmed() {
                tally(c, &mut failures);
            }
            if let Err(e) = started {
                // Not sent: its index is the number it would have had.
                failures.push((pipeline.next_seq, e));
            }
            if !failures.is_empty() {
                break;
            }
        }
        for c in pipeline.flush().await {
            tally(c, &mut failures);
        }
        if failures.is_empty() {
            Ok(confirmed)
        } else {
            failures.sort_by_key(|(seq, _)| *seq);
            Err(SendAllError {
                confirmed,
                failures,
            })
        }
    }
}

/// Why [`Output::send_all`] did not send everything.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "{} sends failed (first, payload {}: {}); {confirmed} confirmed",
    failures.len(),
    failures[0].0,
    failures[0].1
)]
pub struct SendAllError {
    /// Payloads confirmed.
    pub confirmed: u64,
    /// The failed sends, by payload index (not empty).
    pub failures: Vec<(u64, SendError)>,
}

impl Pipeline {
    /// The output binding's name.
    pub fn binding(&self) -> &str {
        &self.inner.binding
    }

    /// Sends waiting for their confirms.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Encodes `payload` with the binding's content type and starts sending it; returns its
    /// number. Waits first for the oldest send to end if `window` are in flight (its
    /// [`Confirm`] is kept for [`Pipeline::confirmed`]). A payload that does not encode is
    /// refused here and nothing is sent (it takes no number).
    pub async fn send<T: Serialize + ?Sized>(&mut self, payload: &T) -> Result<u64, SendError> {
        let bytes = self.inner.encode(payload)?;
        // Without properties: the send gives it the output's shared ones (content type and
        // delivery mode).
        let message = Message::new(bytes);
        Ok(self.send_message(message).await)
    }

    /// Starts sending a ready message (its content type is set to the binding's if
    /// missing), as [`Pipeline::send`]; returns its number.
    pub async fn send_message(&mut self, message: Message) -> u64 {
        while self.in_flight.len() >= self.window {
            match self.in_flight.next().await {
                Some(confirm) => self.done.push_back(confirm),
                None => break,
            }
        }
        // A binder may confirm at once (the embedded one does): a loop of sends that never
        // fill the window must still let the task's other work run.
        tokio::task::coop::consume_budget().await;
        let seq = self.next_seq;
        self.next_seq += 1;
        let inner = self.inner.clone();
        // Unconstrained: a send held back by the task's cooperative budget would be woken
        // after later ones and overtaken by them; outside the budget each send reaches its
        // binder in order, on its first poll, as one task's sequential sends do.
        self.in_flight
            .push_back(Box::pin(tokio::task::unconstrained(async move {
                let result = inner.send_message(message).await;
                Confirm { seq, result }
            })));
        // Starts it now (and moves the others on), so the message goes out without waiting
        // for the pipeline's next use.
        self.poll_in_flight().await;
        seq
    }

    /// The confirms that came back and were not yet taken, oldest first, without waiting.
    pub fn confirmed(&mut self) -> impl Iterator<Item = Confirm> + '_ {
        self.done.drain(..)
    }

    /// The next confirm, oldest first: one already back, else the oldest send's, waited
    /// for. `None` when nothing is in flight or kept.
    pub async fn next_confirm(&mut self) -> Option<Confirm> {
        if let Some(c) = self.done.pop_front() {
            return Some(c);
        }
        self.in_flight.next().await
    }

    /// Waits for every send in flight and returns every confirm not yet taken, oldest
    /// first.
    pub async fn flush(&mut self) -> Vec<Confirm> {
        while let Some(c) = self.in_flight.next().await {
            self.done.push_back(c);
        }
        self.done.drain(..).collect()
    }

    /// Polls the sends in flight once, keeping the confirms of those that ended.
    async fn poll_in_flight(&mut self) {
        let in_flight = &mut self.in_flight;
        let done = &mut self.done;
        std::future::poll_fn(|cx| {
            while let Poll::Ready(Some(c)) = in_flight.poll_next_unpin(cx) {
                done.push_back(c);
            }
            Poll::Ready(())
        })
        .await
    }
}
