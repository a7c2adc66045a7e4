//! Core of the stream framework: the message model, codecs, the configuration model and loader,
//! the binder SPI and the runtime. No broker code lives here; binders build on these types.

pub mod asyncapi;
pub mod binder;
pub mod codec;
pub mod config;
pub mod message;
pub mod runtime;

pub use codec::{Codec, CodecFailure, Codecs, DEFAULT_CONTENT_TYPE, DecodeError, EncodeError};
pub use message::{
    Decimal, DeliveryMode, HeaderValue, Headers, Message, Properties, SharedProperties,
};

/// Items the macros' generated code names; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use crate::config::node::describe;
    pub use config;
    pub use inventory;
    pub use serde;
}

/// The README's examples, compiled as doctests so they cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
