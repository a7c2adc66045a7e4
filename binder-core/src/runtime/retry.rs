//! Exponential back-off between handler attempts.

use std::time::Duration;

use crate::config::ConsumerProperties;

/// The back-off policy of a binding: `maxAttempts`, `backOffInitialInterval`,
/// `backOffMultiplier`, `backOffMaxInterval`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackOff {
    /// Attempts in all (1 = no retry).
    pub max_attempts: u32,
    /// Wait before the second attempt.
    pub initial: Duration,
    /// Growth factor of each wait.
    pub multiplier: f64,
    /// Longest wait.
    pub max: Duration,
}

impl BackOff {
    /// The policy of a binding's consumer properties.
    pub fn of(consumer: &ConsumerProperties) -> Self {
        BackOff {
            max_attempts: consumer.max_attempts.max(1),
            initial: Duration::from_millis(consumer.back_off_initial_interval),
            multiplier: consumer.back_off_multiplier,
            max: Duration::from_millis(consumer.back_off_max_interval),
        }
    }

    /// The wait after failed attempt `attempt` (1-based): `initial × multiplier^(attempt-1)`,
    /// capped at `max`.
    pub fn delay(&self, attempt: u32) -> Duration {
        let factor = self.multiplier.powi(attempt.saturating_sub(1) as i32);
        let ms = self.initial.as_millis() as f64 * factor;
        Duration::from_millis(ms.min(self.max.as_millis() as f64) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_wait_1_2_4_8_then_cap_at_10_seconds() {
        let b = BackOff::of(&ConsumerProperties::default());
        assert_eq!(b.max_attempts, 3);
        let waits: Vec<u64> = (1..=6).map(|a| b.delay(a).as_millis() as u64).collect();
        assert_eq!(waits, vec![1000, 2000, 4000, 8000, 10_000, 10_000]);
    }
}
