//! RabbitMQ's delivery acknowledgement timeout (`consumer_timeout`): a channel that holds a
//! delivery unacknowledged for longer is closed with `PRECONDITION_FAILED`, and its
//! deliveries are requeued, as RabbitMQ 3.10 does.
//!
//! Reading the clock at every delivery would cost the hot path a system call's worth of
//! time, so deliveries record an *epoch* instead: a counter the timer advances at each check,
//! every [`AckClock::interval`]. A delivery of epoch `d` was made after check `d` and at most
//! one interval before check `d + 1` (a delivery made while no check is scheduled schedules
//! one); from then on checks follow each other while it is outstanding. So at check `k` it
//! is at least `(k - d - 1)` intervals old, and a channel is closed once that reaches the
//! timeout: never early, and at most two intervals late (the interval is a tenth of the
//! timeout, at most a minute: RabbitMQ checks once a minute).

use std::collections::HashSet;
use std::time::Duration;

use tokio::time::Instant;

use super::State;
use super::sessions::{ChannelState, TxOp, Unacked};
use crate::envelope::Envelope;
use crate::error::AmqpError;

/// The longest wait between two checks (RabbitMQ's channel tick).
const MOST: Duration = Duration::from_secs(60);
/// The shortest (for timeouts of a few milliseconds, in tests).
const LEAST: Duration = Duration::from_millis(1);

/// The timeout, and the epochs deliveries are stamped with.
#[derive(Debug)]
pub(crate) struct AckClock {
    timeout: Option<Duration>,
    interval: Duration,
    /// Advanced by one at each check.
    pub epoch: u32,
    /// When the next check is due; `None` while no delivery is outstanding.
    next_check: Option<Instant>,
}

impl AckClock {
    pub(crate) fn new(timeout: Option<Duration>) -> Self {
        // Shorter than the shortest interval counts as it.
        let timeout = timeout.map(|t| t.max(LEAST));
        AckClock {
            timeout,
            interval: timeout.map_or(MOST, |t| (t / 10).clamp(LEAST, MOST)),
            epoch: 0,
            next_check: None,
        }
    }

    /// Whether a delivery just recorded needs the timer woken to schedule the checks.
    #[inline]
    pub(crate) fn idle(&self) -> bool {
        self.timeout.is_some() && self.next_check.is_none()
    }
}

/// The channel's oldest delivery still waited for: unacknowledged, and not settled by its
/// open transaction (an ack, nack or reject waiting for `tx.commit`: RabbitMQ stops waiting
/// for a delivery when its settlement arrives, committed or not).
fn oldest_waited_for<E: Envelope>(ch: &ChannelState<E>) -> Option<&Unacked<E>> {
    let Some(ops) = ch.tx.as_ref().filter(|ops| !ops.is_empty()) else {
        return ch.unacked.iter().next();
    };
    // Held `multiple` settlements cover every tag up to theirs (resolved when they came).
    let mut up_to = 0;
    let mut single = HashSet::new();
    for op in ops {
        if let TxOp::Settle { tag, multiple, .. } = op {
            if *multiple {
                up_to = up_to.max(*tag);
            } else {
                single.insert(*tag);
            }
        }
    }
    ch.unacked
        .iter_tagged()
        .find(|(tag, _)| *tag > up_to && !single.contains(tag))
        .map(|(_, u)| u)
}

impl<E: Envelope> State<E> {
    /// Runs a check when one is due (scheduling the first after a delivery made while none
    /// was): closes every channel whose oldest unacknowledged delivery is past the timeout.
    /// The next check, while any delivery is outstanding.
    pub(super) fn check_ack_timeouts(&mut self, now: Instant) -> Option<Instant> {
        let timeout = self.acks.timeout?;
        let interval = self.acks.interval;
        match self.acks.next_check {
            Some(at) if at > now => return Some(at),
            Some(_) => {
                self.acks.epoch = self.acks.epoch.wrapping_add(1);
                let epoch = self.acks.epoch;
                let late: Vec<(u64, u64)> = self
                    .sessions
                    .channels
                    .iter()
                    .filter_map(|(&id, ch)| {
                        let oldest = oldest_waited_for(ch)?;
                        let age = epoch.wrapping_sub(oldest.epoch).saturating_sub(1);
                        (interval * age >= timeout).then_some((id, ch.label))
                    })
                    .collect();
                for (id, label) in late {
                    tracing::warn!(
                        channel = label,
                        timeout_ms = timeout.as_millis() as u64,
                        "a consumer acknowledgement timed out: the channel is closed and its deliveries requeued"
                    );
                    let text = format!(
                        "delivery acknowledgement on channel {label} timed out. Timeout value used: {} ms. This timeout value can be configured, see consumers doc guide to learn more",
                        timeout.as_millis()
                    );
                    self.close_channel(id, Some(AmqpError::precondition(text)));
                }
            }
            None => {
                // Woken by a delivery made while no check was scheduled: the first check is
                // an interval away, whether or not it is still outstanding by then (checks
                // stop only at a check that finds none, so a busy channel whose deliveries
                // come and go wakes the timer at most once an interval for this).
                self.acks.next_check = Some(now + interval);
                return self.acks.next_check;
            }
        }
        let outstanding = self
            .sessions
            .channels
            .values()
            .any(|ch| ch.unacked.len() != 0);
        self.acks.next_check = outstanding.then(|| now + interval);
        self.acks.next_check
    }
}
