//! The binders' part of the AsyncAPI document: a binder type registers a describer (with
//! `inventory`, like its [`BinderRegistration`](crate::binder::BinderRegistration)) that
//! tells, for one binding, the protocol bindings of its channel, operation and message, the
//! channel a consumer really receives from when it is not the destination itself (an AMQP
//! queue), and further channels that carry the binding's messages (a dead-letter queue); and,
//! for a binder configuration, the servers its channels are on (a RabbitMQ node, the embedded
//! broker's listener). binder-core knows no protocol: what is in the bindings objects and the
//! servers is the binder's.

use std::fmt;

use serde_json::{Map, Value};

use crate::binder::BindingRole;
use crate::config::BindingConfig;

/// A channel a binder adds to the document for a binding (besides the destination's own).
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelDescription {
    /// The channel's address (an AMQP queue's name), or `None` when it is only known once the
    /// application runs (an anonymous queue): AsyncAPI's `address: null`.
    pub address: Option<String>,
    /// A short title.
    pub title: String,
    /// What the channel is.
    pub description: String,
    /// Its protocol bindings, keyed by protocol (`{"amqp": {...}}`).
    pub bindings: Map<String, Value>,
}

/// What a binder tells about one binding.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BindingDescription {
    /// The destination channel's address as the middleware names it, when it differs from
    /// the binding's destination (an AMQP exchange with a `prefix`).
    pub address: Option<String>,
    /// Protocol bindings of the destination's channel, keyed by protocol.
    pub channel: Map<String, Value>,
    /// Protocol bindings of the binding's operation (receive or send), keyed by protocol.
    pub operation: Map<String, Value>,
    /// Protocol bindings of the binding's message, keyed by protocol.
    pub message: Map<String, Value>,
    /// Where a consumer receives from when that is not the destination's channel: one channel
    /// each (an AMQP consumer group's queue, one per partition); each gets a receive
    /// operation. Empty: the consumer receives from the destination's channel.
    pub sources: Vec<ChannelDescription>,
    /// Further channels that carry the binding's messages without an operation of this
    /// application (a dead-letter queue, a required group's queue).
    pub related: Vec<ChannelDescription>,
    /// A sentence for the operation's description (how messages are routed, acknowledged).
    pub note: Option<String>,
}

/// What a describer is asked about.
#[derive(Debug, Clone, Copy)]
pub struct DescribeRequest<'a> {
    /// The binding, with every default applied.
    pub binding: &'a BindingConfig,
    /// Whether the application consumes or publishes on it.
    pub role: BindingRole,
    /// The binder configuration's name (`binders.<name>`, or the bare type).
    pub binder_name: &'a str,
    /// The configuration tree the binder sees (`StreamConfig::binder_environment`).
    pub environment: &'a config::Value,
}

/// A server a binder configuration's channels are on: AsyncAPI's Server object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerDescription {
    /// `host[:port]`, without credentials.
    pub host: String,
    /// The protocol (`amqp`, `amqps`).
    pub protocol: String,
    /// The protocol's version (`0.9.1`).
    pub protocol_version: Option<String>,
    /// The path on the server (an AMQP virtual host, `/%2F` for `/`, as in an AMQP URI).
    pub pathname: Option<String>,
    /// What the server is.
    pub description: String,
}

/// What a servers describer is asked about: one binder configuration.
#[derive(Debug, Clone, Copy)]
pub struct ServerRequest<'a> {
    /// The binder configuration's name (`binders.<name>`, or the bare type).
    pub binder_name: &'a str,
    /// The configuration tree the binder sees (`StreamConfig::binder_environment`).
    pub environment: &'a config::Value,
}

/// Describes a binder configuration's servers. None: its channels are on no server a client
/// could connect to (an in-process broker); an error (a setting that cannot be read) is
/// written into the document's description instead.
pub type DescribeServers = fn(&ServerRequest<'_>) -> Result<Vec<ServerDescription>, String>;

/// A binder type's describer, collected with `inventory`:
///
/// ```
/// use binder_core::asyncapi::{BindingDescription, DescribeRequest, DescriberRegistration};
///
/// fn describe(request: &DescribeRequest<'_>) -> Result<BindingDescription, String> {
///     let mut out = BindingDescription::default();
///     out.channel.insert(
///         "example".into(),
///         serde_json::json!({"topic": request.binding.destination}),
///     );
///     Ok(out)
/// }
///
/// inventory::submit! { DescriberRegistration::new("example", describe) }
///
/// assert!(binder_core::asyncapi::describer("example").is_some());
/// ```
pub struct DescriberRegistration {
    /// The binder type it describes.
    pub binder_type: &'static str,
    /// Describes one binding; an error (a binder setting that cannot be read) is written into
    /// the document's description of the binding instead of the bindings.
    pub describe: fn(&DescribeRequest<'_>) -> Result<BindingDescription, String>,
    /// Describes the servers of one binder configuration ([`DescriberRegistration::servers`]);
    /// none: the document names no server for its channels.
    pub servers: Option<DescribeServers>,
}

impl DescriberRegistration {
    /// A registration.
    pub const fn new(
        binder_type: &'static str,
        describe: fn(&DescribeRequest<'_>) -> Result<BindingDescription, String>,
    ) -> Self {
        DescriberRegistration {
            binder_type,
            describe,
            servers: None,
        }
    }

    /// The same registration, describing its binder configurations' servers with `servers`:
    ///
    /// ```
    /// use binder_core::asyncapi::{
    ///     BindingDescription, DescriberRegistration, ServerDescription, ServerRequest,
    /// };
    ///
    /// fn servers(_: &ServerRequest<'_>) -> Result<Vec<ServerDescription>, String> {
    ///     Ok(vec![ServerDescription {
    ///         host: "broker.example:5672".into(),
    ///         protocol: "amqp".into(),
    ///         protocol_version: Some("0.9.1".into()),
    ///         pathname: None,
    ///         description: "The example broker.".into(),
    ///     }])
    /// }
    ///
    /// inventory::submit! {
    ///     DescriberRegistration::new("example-servers", |_| Ok(BindingDescription::default()))
    ///         .servers(servers)
    /// }
    /// ```
    pub const fn servers(mut self, servers: DescribeServers) -> Self {
        self.servers = Some(servers);
        self
    }
}

impl fmt::Debug for DescriberRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DescriberRegistration")
            .field("binder_type", &self.binder_type)
            .finish_non_exhaustive()
    }
}

inventory::collect!(DescriberRegistration);

/// The describer registered for a binder type (the first, if several are).
pub fn describer(binder_type: &str) -> Option<&'static DescriberRegistration> {
    inventory::iter::<DescriberRegistration>
        .into_iter()
        .find(|r| r.binder_type == binder_type)
}
