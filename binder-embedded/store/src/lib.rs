//! A durable message store on disk for `stream-engine`: it implements the engine's
//! [`MessageStore`](stream_engine::MessageStore) seam so that durable exchanges, queues, bindings and persistent messages
//! survive a restart (or a crash: a confirm is released only once its message is synced).
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use stream_engine::{Broker, BrokerConfig};
//! use stream_store::{DiskStore, StoreConfig};
//!
//! let store = DiskStore::open("/var/lib/app/broker", StoreConfig::default())?;
//! let broker: Broker = Broker::with_store(BrokerConfig::default(), store.clone())?;
//! // … use the broker; at the end:
//! drop(broker);
//! store.close()?;
//! # Ok(()) }
//! ```
//!
//! See the crate README for the layout on disk and why it was chosen.

mod clean;
mod codec;
mod config;
mod disk;
mod fault;
mod frame;
mod fs;
#[doc(hidden)]
pub mod fuzzing;
mod index;
mod layout;
mod meta;
mod read;
mod recovery;
mod store;
mod writer;

pub use config::{ConfigError, MAX_SEGMENT_BYTES, StoreConfig, SyncMode};
pub use disk::{DEFAULT_DISK_FREE_LIMIT, DISK_CHECK_INTERVAL, DiskAlarm, DiskMonitor, free_space};
pub use fault::FaultFs;
pub use fs::{FileSystem, RealFs, StoreFile};
pub use store::{DiskStore, OpenError};
pub use writer::StoreStats;
