//! A point in time in eight bytes, for the expiry of every queued message.

use std::num::NonZeroI64;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::time::Instant;

/// The instant deadlines count from: the first one taken in the process.
static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();

const ONE_NANOSECOND: NonZeroI64 = NonZeroI64::new(1).unwrap();

/// When a queued message expires: a [`tokio::time::Instant`] stored as signed nanoseconds
/// from a process-wide epoch, so that `Option<Deadline>` takes 8 bytes where
/// `Option<Instant>` takes 16 (in every entry of every queue). It covers ±292 years around
/// the epoch, with a paused `tokio` clock too (its instants are `std` instants), and
/// converts back to the same instant, except that the epoch itself reads one nanosecond
/// later (the zero is the `None` of `Option<Deadline>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Deadline(NonZeroI64);

impl Deadline {
    /// The deadline `ttl` after `now`.
    pub fn after(now: Instant, ttl: Duration) -> Deadline {
        Deadline::from(now + ttl)
    }

    /// The instant it stands for.
    pub fn instant(self) -> Instant {
        let epoch = Instant::from_std(epoch());
        let nanos = self.0.get();
        if nanos >= 0 {
            epoch + Duration::from_nanos(nanos.unsigned_abs())
        } else {
            epoch - Duration::from_nanos(nanos.unsigned_abs())
        }
    }

    /// Whether it has passed at `now` (it is due at its own instant).
    pub fn is_due(self, now: Instant) -> bool {
        self <= Deadline::from(now)
    }
}

fn epoch() -> std::time::Instant {
    *EPOCH.get_or_init(std::time::Instant::now)
}

impl From<Instant> for Deadline {
    fn from(at: Instant) -> Deadline {
        let at = at.into_std();
        let epoch = epoch();
        let nanos = match at.checked_duration_since(epoch) {
            Some(after) => i64::try_from(after.as_nanos()).unwrap_or(i64::MAX),
            None => {
                let before = epoch.duration_since(at).as_nanos();
                i64::try_from(before).map_or(i64::MIN + 1, |n| -n)
            }
        };
        // The epoch itself reads one nanosecond later.
        Deadline(NonZeroI64::new(nanos).unwrap_or(ONE_NANOSECOND))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_is_eight_bytes_and_converts_back_to_its_instant() {
        assert_eq!(std::mem::size_of::<Option<Deadline>>(), 8);
        let now = Instant::now();
        for offset in [0, 1, 999, 3_600_000_000_000] {
            let later = now + Duration::from_nanos(offset);
            assert_eq!(Deadline::from(later).instant(), later);
        }
        let earlier = Instant::from_std(epoch()) - Duration::from_secs(5);
        assert_eq!(Deadline::from(earlier).instant(), earlier);
        let d = Deadline::after(now, Duration::from_millis(10));
        assert!(!d.is_due(now));
        assert!(d.is_due(now + Duration::from_millis(10)));
        assert!(d.is_due(now + Duration::from_millis(11)));
    }
}
