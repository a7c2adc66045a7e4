//! Sending: output bindings ([`binding`]), how they choose routing keys ([`routing`]), and
//! the dynamic publisher ([`publisher`], SCSt's `StreamBridge`).

pub(crate) mod binding;
pub(crate) mod error;
pub(crate) mod publisher;
pub(crate) mod routing;

pub use binding::Output;
pub use error::{OutputError, SendError};
pub use publisher::Publisher;

pub(crate) use binding::OutputInner;
pub(crate) use routing::check;
