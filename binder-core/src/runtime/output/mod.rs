//! Sending: output bindings ([`binding`]), many sends in flight from one task
//! ([`pipeline`]), how they choose partitions ([`partitioning`]),
//! and the dynamic publisher ([`publisher`], SCSt's `StreamBridge`).

pub(crate) mod binding;
pub(crate) mod error;
pub(crate) mod partitioning;
pub(crate) mod pipeline;
pub(crate) mod publisher;

pub use binding::Output;
pub use error::{OutputError, SendError};
pub use pipeline::{Confirm, Pipeline, SendAllError};
pub use publisher::Publisher;

pub(crate) use binding::OutputInner;
pub(crate) use partitioning::check;
