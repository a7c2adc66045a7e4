//! The store's settings: when a confirm is released (the durability mode), and how large a
//! segment grows.

use std::str::FromStr;
use std::time::Duration;

/// When a persistent message counts as safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// A confirm waits for the `fdatasync` that covers the message (group commit: the
    /// publishers of one batch share its sync). The default.
    #[default]
    Sync,
    /// The writer syncs every so often; confirms are released at once, so a crash may lose
    /// what was confirmed within the last interval. Acknowledgements are written with each
    /// sync, after the records they may depend on (so even a killed process may bring back
    /// what was acknowledged within the last interval, redelivered).
    Interval(Duration),
    /// The writer never syncs (until a clean close); confirms are released at once.
    None,
}

/// A setting could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// The durability mode is not one the store has.
    #[error("unknown durability mode '{0}': expected 'sync', 'interval:<ms>' or 'none'")]
    UnknownMode(String),
    /// The interval is not a positive number of milliseconds.
    #[error("bad sync interval '{0}': expected a positive number of milliseconds")]
    BadInterval(String),
    /// Segments this small cannot hold a record.
    #[error("segment size {0} is under the minimum of 4096 bytes")]
    SegmentTooSmall(u64),
    /// Segments this large would hold records at offsets the index does not keep.
    #[error("segment size {0} is over the maximum of 2 GiB")]
    SegmentTooLarge(u64),
}

impl FromStr for SyncMode {
    type Err = ConfigError;

    /// `sync`, `interval:<ms>` or `none`.
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s {
            "sync" => Ok(SyncMode::Sync),
            "none" => Ok(SyncMode::None),
            _ => match s.strip_prefix("interval:") {
                Some(ms) => match ms.parse::<u64>() {
                    Ok(ms) if ms > 0 => Ok(SyncMode::Interval(Duration::from_millis(ms))),
                    _ => Err(ConfigError::BadInterval(ms.to_owned())),
                },
                None => Err(ConfigError::UnknownMode(s.to_owned())),
            },
        }
    }
}

/// How a [`DiskStore`](crate::DiskStore) writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// When confirms are released.
    pub mode: SyncMode,
    /// A segment is closed and a new one started once it holds this many bytes (4096 to
    /// [`MAX_SEGMENT_BYTES`]).
    pub segment_bytes: u64,
    /// At most this many commands go into one batch (one sync).
    pub max_batch: usize,
}

/// The largest `segment_bytes`.
pub const MAX_SEGMENT_BYTES: u64 = 2 << 30;

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            mode: SyncMode::Sync,
            segment_bytes: 16 << 20,
            max_batch: 8192,
        }
    }
}

impl StoreConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.segment_bytes < 4096 {
            return Err(ConfigError::SegmentTooSmall(self.segment_bytes));
        }
        // A segment ends past this by at most one record (512 MiB), so every offset fits
        // the index's 32 bits.
        if self.segment_bytes > MAX_SEGMENT_BYTES {
            return Err(ConfigError::SegmentTooLarge(self.segment_bytes));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_unknown_ones_are_refused_by_name() {
        assert_eq!("sync".parse(), Ok(SyncMode::Sync));
        assert_eq!("none".parse(), Ok(SyncMode::None));
        assert_eq!(
            "interval:20".parse(),
            Ok(SyncMode::Interval(Duration::from_millis(20)))
        );
        assert_eq!(
            "fast".parse::<SyncMode>(),
            Err(ConfigError::UnknownMode("fast".into()))
        );
        assert_eq!(
            "interval:0".parse::<SyncMode>(),
            Err(ConfigError::BadInterval("0".into()))
        );
    }

    #[test]
    fn segment_sizes_out_of_range_are_refused() {
        let with = |segment_bytes| StoreConfig {
            segment_bytes,
            ..StoreConfig::default()
        };
        assert_eq!(
            with(4095).validate(),
            Err(ConfigError::SegmentTooSmall(4095))
        );
        assert_eq!(with(MAX_SEGMENT_BYTES).validate(), Ok(()));
        assert_eq!(
            with(MAX_SEGMENT_BYTES + 1).validate(),
            Err(ConfigError::SegmentTooLarge(MAX_SEGMENT_BYTES + 1))
        );
    }
}
