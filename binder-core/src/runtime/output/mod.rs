//! Sending: output bindings ([`binding`]), how they choose partitions ([`partitioning`]),
//! and the dynamic publisher ([`publisher`], SCSt's `StreamBridge`).

pub(crate) mod binding;
pub(crate) mod error;
pub(crate) mod partitioning;
pub(crate) mod publisher;

pub use binding::Output;
pub use error::{OutputError, SendError};
pub use publisher::Publisher;

pub(crate) use binding::OutputInner;
pub(crate) use partitioning::check;
