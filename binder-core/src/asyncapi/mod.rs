//! An [AsyncAPI 3.0.0](https://www.asyncapi.com/docs/reference/specification/v3.0.0)
//! document of an application's bindings, built from its configuration: one channel per
//! destination (its address the destination), a `receive` operation per input (with its
//! group) and a `send` operation per output, a message per binding with its content type and
//! payload schema, and the binders' protocol bindings (the AMQP binders fill `bindings.amqp`
//! after the AMQP bindings 0.3.0: the exchange of a destination, the queue of a consumer
//! group as a channel of its own, the dead-letter queue). Each binder configuration whose
//! broker a client can reach is a server (`servers.<binder name>`: a RabbitMQ address, the
//! embedded broker's listener), and its channels name it; a binder with no such server (the
//! embedded broker without `spring.embedded.listen`) adds none, and its channels name none.
//!
//! A running application serves it at `/asyncapi.json` on the management server
//! ([`RunningApp::asyncapi`](crate::runtime::RunningApp::asyncapi)); `streamctl asyncapi
//! --config FILE` prints it without running anything, with the roles guessed from the
//! configuration as `streamctl plan` does ([`BindingRole::infer`]).
//!
//! Payload schemas come from `schemars` (binder-core's `schemars` feature):
//! `#[stream_listener]` records its payload type, with its schema when the type implements
//! `schemars::JsonSchema`; others are registered with [`DocumentBuilder::payload`] or
//! `AppBuilder::payload`. Without one, a message's payload is `{}` with a description that
//! says why; nothing is invented.
//!
//! ```
//! use binder_core::asyncapi::Document;
//! use binder_core::config::ConfigLoader;
//!
//! let cfg = ConfigLoader::new()
//!     .env(Vec::<(String, String)>::new())
//!     .yaml_str(r#"
//! spring.application.name: billing
//! spring.cloud.stream.bindings:
//!   orders-in: { destination: orders, group: billing }
//!   invoices-out: { destination: invoices }
//! "#)
//!     .load()
//!     .unwrap();
//! let doc = Document::builder(&cfg)
//!     .input("orders-in")
//!     .output("invoices-out")
//!     .build()
//!     .into_json();
//! assert_eq!(doc["asyncapi"], "3.0.0");
//! assert_eq!(doc["info"]["title"], "billing");
//! assert_eq!(doc["channels"]["orders"]["address"], "orders");
//! assert_eq!(doc["operations"]["orders-in"]["action"], "receive");
//! assert_eq!(doc["operations"]["orders-in"]["x-group"], "billing");
//! assert_eq!(doc["operations"]["invoices-out"]["action"], "send");
//! // No payload type registered: an empty schema that says why.
//! let payload = &doc["components"]["messages"]["invoices-out"]["payload"];
//! assert!(payload["description"].as_str().unwrap().contains("no payload type"));
//! ```

mod describe;
mod payload;

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value, json};

pub use describe::{
    BindingDescription, ChannelDescription, DescribeRequest, DescribeServers,
    DescriberRegistration, ServerDescription, ServerRequest, describer,
};
use payload::SchemaSink;
pub use payload::{NoSchema, PayloadType};

use crate::binder::BindingRole;
use crate::config::{BindingConfig, StreamConfig, descend};

/// The AsyncAPI version of the documents.
pub const ASYNCAPI_VERSION: &str = "3.0.0";

/// The title when `spring.application.name` is not set.
pub const DEFAULT_TITLE: &str = "stream service";

/// The version when `info.app.version` is not set.
pub const DEFAULT_VERSION: &str = "0.0.0";

/// Items the macros' generated code names; not part of the API.
#[doc(hidden)]
pub mod __probe {
    pub use super::payload::{Probe, ViaJsonSchema, ViaName};
}

/// An AsyncAPI 3.0.0 document (its JSON).
#[derive(Debug, Clone, PartialEq)]
pub struct Document(Value);

impl Document {
    /// The document of every configured binding, each in the role [`BindingRole::infer`]
    /// gives it (the configuration alone does not say which bindings a program consumes).
    pub fn from_config(config: &StreamConfig) -> Document {
        Document::builder(config).infer_roles().build()
    }

    /// A document of the bindings and payloads given to the builder.
    pub fn builder(config: &StreamConfig) -> DocumentBuilder<'_> {
        DocumentBuilder {
            config,
            title: None,
            version: None,
            roles: Vec::new(),
            roles_given: HashSet::new(),
            with_role: HashSet::new(),
            payloads: Vec::new(),
            types_given: HashSet::new(),
        }
    }

    /// The JSON.
    pub fn as_json(&self) -> &Value {
        &self.0
    }

    /// The JSON, owned.
    pub fn into_json(self) -> Value {
        self.0
    }
}

impl std::fmt::Display for Document {
    /// Pretty-printed JSON.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = serde_json::to_string_pretty(&self.0).map_err(|_| std::fmt::Error)?;
        f.write_str(&text)
    }
}

/// A payload of a binding, as given to the builder.
#[derive(Debug, Clone)]
enum Payload {
    Type(PayloadType),
    Schema { name: String, schema: Value },
}

/// Builds a [`Document`]: which bindings are inputs and outputs, their payloads, the title
/// and version.
#[derive(Debug, Clone)]
pub struct DocumentBuilder<'a> {
    config: &'a StreamConfig,
    title: Option<String>,
    version: Option<String>,
    /// The bindings' roles, in the order given (the order of the operations built).
    roles: Vec<(String, BindingRole)>,
    /// The same pairs, to keep `roles` free of repeats in constant time (an application may
    /// have thousands of bindings).
    roles_given: HashSet<(String, BindingRole)>,
    /// The bindings given a role, for [`DocumentBuilder::infer_roles`].
    with_role: HashSet<String>,
    payloads: Vec<(String, Payload)>,
    /// The payload types given per binding (by type name), to keep them free of repeats.
    types_given: HashSet<(String, &'static str)>,
}

impl DocumentBuilder<'_> {
    /// The binding is an input of the application (a `receive` operation).
    pub fn input(self, binding: impl Into<String>) -> Self {
        self.role(binding.into(), BindingRole::Consumer)
    }

    /// The binding is an output of the application (a `send` operation).
    pub fn output(self, binding: impl Into<String>) -> Self {
        self.role(binding.into(), BindingRole::Producer)
    }

    fn role(mut self, binding: String, role: BindingRole) -> Self {
        if self.roles_given.insert((binding.clone(), role)) {
            self.with_role.insert(binding.clone());
            self.roles.push((binding, role));
        }
        self
    }

    /// Every configured binding not given a role yet gets the one [`BindingRole::infer`]
    /// guesses from its configuration.
    pub fn infer_roles(mut self) -> Self {
        let config = self.config;
        for (name, binding) in &config.bindings {
            if !self.with_role.contains(name) {
                self = self.role(name.clone(), BindingRole::infer(binding));
            }
        }
        self
    }

    /// A payload type of a binding's messages (several for listeners of one input that take
    /// different types: a message each).
    pub fn payload(mut self, binding: impl Into<String>, payload: PayloadType) -> Self {
        let binding = binding.into();
        if self.types_given.insert((binding.clone(), payload.name())) {
            self.payloads.push((binding, Payload::Type(payload)));
        }
        self
    }

    /// A payload schema written by hand (JSON Schema draft 7, inlined in the message), named
    /// `name` in the document.
    pub fn payload_schema(
        mut self,
        binding: impl Into<String>,
        name: impl Into<String>,
        schema: Value,
    ) -> Self {
        self.payloads.push((
            binding.into(),
            Payload::Schema {
                name: name.into(),
                schema,
            },
        ));
        self
    }

    /// The document's title (default: `spring.application.name`, else [`DEFAULT_TITLE`]).
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// The application's version (default: `info.app.version`, else [`DEFAULT_VERSION`]).
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = Some(version.into());
        self
    }

    /// The document.
    pub fn build(self) -> Document {
        let mut out = Assembly {
            sink: SchemaSink::new(),
            channels: Map::new(),
            operations: Map::new(),
            messages: Map::new(),
            channel_ids: HashMap::new(),
            channel_keys: HashSet::new(),
            channel_binders: Vec::new(),
            environments: HashMap::new(),
            operation_ids: HashSet::new(),
            message_ids: HashSet::new(),
        };
        // Indexed once: an application may have thousands of bindings.
        let mut payloads: HashMap<&str, Vec<&Payload>> = HashMap::new();
        for (binding, payload) in &self.payloads {
            payloads.entry(binding.as_str()).or_default().push(payload);
        }
        for (name, role) in &self.roles {
            let of_binding = payloads.get(name.as_str()).map_or(&[][..], Vec::as_slice);
            // Borrowed when configured: cloning each binding's configuration shows with
            // thousands of them.
            let binding = self.config.binding_ref(name);
            out.binding(self.config, &binding, *role, of_binding);
        }
        let (servers, server_trouble) = out.servers(self.config);
        let raw = self.config.raw();
        let text = |path: &[&str]| descend(raw, path).and_then(|v| v.clone().into_string().ok());
        let title = self
            .title
            .or_else(|| text(&["spring", "application", "name"]))
            .unwrap_or_else(|| DEFAULT_TITLE.to_owned());
        let version = self
            .version
            .or_else(|| text(&["info", "app", "version"]))
            .unwrap_or_else(|| DEFAULT_VERSION.to_owned());
        let mut components = Map::new();
        let schemas = out.sink.definitions();
        if !schemas.is_empty() {
            components.insert("schemas".into(), Value::Object(schemas));
        }
        if !out.messages.is_empty() {
            components.insert("messages".into(), Value::Object(out.messages));
        }
        // Moved in, not through `json!`, which would copy them (serialising each value).
        let mut doc = Map::new();
        doc.insert("asyncapi".into(), json!(ASYNCAPI_VERSION));
        let description: Vec<String> = [format!(
            "The bindings of `{title}`: a channel per destination, a receive operation per input, a send operation per output (generated by binder-core from the stream configuration)."
        )]
        .into_iter()
        .chain(server_trouble)
        .collect();
        doc.insert(
            "info".into(),
            json!({
                "title": title,
                "version": version,
                "description": description.join(" "),
            }),
        );
        if !servers.is_empty() {
            doc.insert("servers".into(), Value::Object(servers));
        }
        doc.insert("channels".into(), Value::Object(out.channels));
        doc.insert("operations".into(), Value::Object(out.operations));
        if !components.is_empty() {
            doc.insert("components".into(), Value::Object(components));
        }
        Document(Value::Object(doc))
    }
}

/// A key of `channels`, `operations` or `components.messages`: AsyncAPI allows
/// `[A-Za-z0-9_-]` only, so anything else becomes `_`.
fn key_of(raw: &str) -> String {
    let key: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if key.is_empty() { "_".to_owned() } else { key }
}

/// `base`, or `base-2`, `base-3`… when taken.
fn unique(used: &mut HashSet<String>, base: String) -> String {
    if used.insert(base.clone()) {
        return base;
    }
    (2..)
        .map(|n| format!("{base}-{n}"))
        .find(|k| used.insert(k.clone()))
        .unwrap_or(base)
}

/// The document's parts while they are put together.
struct Assembly {
    sink: SchemaSink,
    channels: Map<String, Value>,
    operations: Map<String, Value>,
    messages: Map<String, Value>,
    /// Each shared channel's key by its identity (binder, address).
    channel_ids: HashMap<(String, Option<String>), String>,
    /// Every channel key taken.
    channel_keys: HashSet<String>,
    /// Each channel's key and its binder configuration's name, in the order they came.
    channel_binders: Vec<(String, String)>,
    /// The configuration tree each binder sees, made once per binder.
    environments: HashMap<String, std::sync::Arc<config::Value>>,
    operation_ids: HashSet<String>,
    message_ids: HashSet<String>,
}

impl Assembly {
    /// The servers of the binder configurations met, by key, each binder's channels given
    /// their references; and a sentence for each binder whose servers could not be described.
    fn servers(&mut self, config: &StreamConfig) -> (Map<String, Value>, Vec<String>) {
        let mut servers = Map::new();
        let mut trouble = Vec::new();
        let mut keys = HashSet::new();
        let mut refs: HashMap<&str, Vec<Value>> = HashMap::new();
        let mut binders: Vec<&String> = self.environments.keys().collect();
        binders.sort();
        for name in binders {
            let binder_type = config.binder_type(name);
            let Some(describe) = describer(&binder_type).and_then(|r| r.servers) else {
                continue;
            };
            let request = ServerRequest {
                binder_name: name,
                environment: &self.environments[name],
            };
            match describe(&request) {
                Ok(list) => {
                    for (i, server) in list.into_iter().enumerate() {
                        let base = match i {
                            0 => key_of(name),
                            _ => format!("{}-{}", key_of(name), i + 1),
                        };
                        let key = unique(&mut keys, base);
                        refs.entry(name.as_str())
                            .or_default()
                            .push(json!({"$ref": format!("#/servers/{key}")}));
                        servers.insert(key, server_object(server, name, &binder_type));
                    }
                }
                Err(e) => trouble.push(format!(
                    "The servers of binder `{name}` (type `{binder_type}`) could not be described: {e}."
                )),
            }
        }
        for (key, binder) in &self.channel_binders {
            if let (Some(refs), Some(channel)) =
                (refs.get(binder.as_str()), self.channels.get_mut(key))
            {
                channel["servers"] = Value::Array(refs.clone());
            }
        }
        (servers, trouble)
    }

    fn binding(
        &mut self,
        config: &StreamConfig,
        binding: &BindingConfig,
        role: BindingRole,
        payloads: &[&Payload],
    ) {
        let binder_name = config.binder_for(&binding.name);
        let binder_type = config.binder_type(&binder_name);
        let environment = self
            .environments
            .entry(binder_name.clone())
            .or_insert_with(|| std::sync::Arc::new(config.binder_environment(&binder_name)))
            .clone();
        let binder = json!({"name": binder_name, "type": binder_type});
        let request = DescribeRequest {
            binding,
            role,
            binder_name: &binder_name,
            environment: &environment,
        };
        let (described, trouble) = match describer(&binder_type) {
            Some(r) => match (r.describe)(&request) {
                Ok(d) => (d, None),
                Err(e) => (
                    BindingDescription::default(),
                    Some(format!(
                        "The `{binder_type}` binder could not describe this binding: {e}."
                    )),
                ),
            },
            None => (
                BindingDescription::default(),
                Some(format!(
                    "The `{binder_type}` binder describes no protocol bindings."
                )),
            ),
        };

        let message_ids = self.messages_of(binding, role, payloads, &described.message);
        let address = described
            .address
            .clone()
            .unwrap_or_else(|| binding.destination.clone());
        let destination = self.channel(
            (binder_name.clone(), Some(address.clone())),
            ChannelParts {
                title: binding.destination.clone(),
                description: format!(
                    "Destination `{}` (binder `{binder_name}`, type `{binder_type}`).",
                    binding.destination
                ),
                bindings: described.channel.clone(),
                binder: binder.clone(),
            },
            &message_ids,
        );
        let receive_from: Vec<String> =
            if role == BindingRole::Consumer && !described.sources.is_empty() {
                described
                    .sources
                    .iter()
                    .map(|s| self.described_channel(&binder_name, s, &binder, &message_ids))
                    .collect()
            } else {
                vec![destination.clone()]
            };
        for related in &described.related {
            self.described_channel(&binder_name, related, &binder, &message_ids);
        }

        let (action, summary) = match (role, &binding.group) {
            (BindingRole::Consumer, Some(group)) => (
                "receive",
                format!(
                    "`{}` receives from destination `{}` as consumer group `{group}`.",
                    binding.name, binding.destination
                ),
            ),
            (BindingRole::Consumer, None) => (
                "receive",
                format!(
                    "`{}` receives from destination `{}` without a group (an anonymous subscription of its own).",
                    binding.name, binding.destination
                ),
            ),
            (BindingRole::Producer, _) => (
                "send",
                format!(
                    "`{}` sends to destination `{}`.",
                    binding.name, binding.destination
                ),
            ),
        };
        let description: Vec<&str> = [Some(summary.as_str()), described.note.as_deref()]
            .into_iter()
            .chain([trouble.as_deref()])
            .flatten()
            .collect();
        let several = receive_from.len() > 1;
        for (i, channel) in receive_from.iter().enumerate() {
            let base = if several {
                format!("{}-{i}", key_of(&binding.name))
            } else {
                key_of(&binding.name)
            };
            let id = unique(&mut self.operation_ids, base);
            let mut op = json!({
                "action": action,
                "channel": {"$ref": format!("#/channels/{channel}")},
                "title": binding.name,
                "summary": summary,
                "description": description.join(" "),
                "messages": message_ids
                    .iter()
                    .map(|m| json!({"$ref": format!("#/channels/{channel}/messages/{m}")}))
                    .collect::<Vec<_>>(),
                "x-binding": binding.name,
                "x-destination": binding.destination,
                "x-binder": binder,
            });
            if let Some(group) = &binding.group {
                if role == BindingRole::Consumer {
                    op["x-group"] = json!(group);
                }
            }
            if !described.operation.is_empty() {
                op["bindings"] = Value::Object(described.operation.clone());
            }
            self.operations.insert(id, op);
        }
    }

    /// The binding's messages in `components.messages`, one per payload (one without a
    /// schema when none is known); returns their keys.
    fn messages_of(
        &mut self,
        binding: &BindingConfig,
        role: BindingRole,
        payloads: &[&Payload],
        bindings: &Map<String, Value>,
    ) -> Vec<String> {
        let mut entries: Vec<(Option<String>, Value, Option<&'static str>)> = Vec::new();
        for payload in payloads {
            match payload {
                Payload::Type(t) => {
                    let schema = match t.schema(&mut self.sink) {
                        Ok(schema) => schema,
                        Err(why) => json!({
                            "description": format!(
                                "No schema for the payload type `{}`: {why}.",
                                t.name()
                            )
                        }),
                    };
                    entries.push((Some(short_name(t.name())), schema, Some(t.name())));
                }
                Payload::Schema { name, schema } => {
                    entries.push((Some(name.clone()), schema.clone(), None));
                }
            }
        }
        if entries.is_empty() {
            let why = match role {
                BindingRole::Consumer => {
                    "no payload type is known for this input (a `#[stream_listener]` records its payload type; otherwise register one with `AppBuilder::payload`)"
                }
                BindingRole::Producer => {
                    "no payload type is known for this output (register one with `AppBuilder::payload`)"
                }
            };
            entries.push((
                None,
                json!({"description": format!("No schema: {why}.")}),
                None,
            ));
        }
        let several = entries.len() > 1;
        entries
            .into_iter()
            .map(|(name, payload, rust_type)| {
                let base = match (&name, several) {
                    (Some(n), true) => format!("{}-{}", key_of(&binding.name), key_of(n)),
                    _ => key_of(&binding.name),
                };
                let id = unique(&mut self.message_ids, base);
                let mut message = json!({
                    "name": name.clone().unwrap_or_else(|| binding.name.clone()),
                    "title": binding.name,
                    "contentType": binding.content_type,
                    "payload": payload,
                });
                if let Some(t) = rust_type {
                    message["x-rust-type"] = json!(t);
                }
                if !bindings.is_empty() {
                    message["bindings"] = Value::Object(bindings.clone());
                }
                self.messages.insert(id.clone(), message);
                id
            })
            .collect()
    }

    fn described_channel(
        &mut self,
        binder_name: &str,
        d: &ChannelDescription,
        binder: &Value,
        messages: &[String],
    ) -> String {
        self.channel(
            (binder_name.to_owned(), d.address.clone()),
            ChannelParts {
                title: d.title.clone(),
                description: d.description.clone(),
                bindings: d.bindings.clone(),
                binder: binder.clone(),
            },
            messages,
        )
    }

    /// The channel of `identity` (created with `parts` the first time), carrying `messages`
    /// too; returns its key.
    fn channel(
        &mut self,
        identity: (String, Option<String>),
        parts: ChannelParts,
        messages: &[String],
    ) -> String {
        // Channels without an address are never shared: each is its own anonymous queue.
        let existing = identity
            .1
            .as_ref()
            .and_then(|_| self.channel_ids.get(&identity).cloned());
        let key = match existing {
            Some(key) => key,
            None => {
                let key = unique(
                    &mut self.channel_keys,
                    key_of(identity.1.as_deref().unwrap_or(&parts.title)),
                );
                let mut channel = json!({
                    "address": identity.1,
                    "title": parts.title,
                    "description": parts.description,
                    "messages": {},
                    "x-binder": parts.binder,
                });
                if !parts.bindings.is_empty() {
                    channel["bindings"] = Value::Object(parts.bindings);
                }
                self.channels.insert(key.clone(), channel);
                self.channel_binders.push((key.clone(), identity.0.clone()));
                if identity.1.is_some() {
                    self.channel_ids.insert(identity, key.clone());
                }
                key
            }
        };
        if let Some(Value::Object(refs)) = self
            .channels
            .get_mut(&key)
            .and_then(|c| c.get_mut("messages"))
        {
            for m in messages {
                refs.insert(
                    m.clone(),
                    json!({"$ref": format!("#/components/messages/{m}")}),
                );
            }
        }
        key
    }
}

/// AsyncAPI's Server object of a binder configuration's server.
fn server_object(server: ServerDescription, binder_name: &str, binder_type: &str) -> Value {
    let mut object = json!({
        "host": server.host,
        "protocol": server.protocol,
        "title": binder_name,
        "description": server.description,
        "x-binder": {"name": binder_name, "type": binder_type},
    });
    if let Some(version) = server.protocol_version {
        object["protocolVersion"] = json!(version);
    }
    if let Some(path) = server.pathname {
        object["pathname"] = json!(path);
    }
    object
}

struct ChannelParts {
    title: String,
    description: String,
    bindings: Map<String, Value>,
    binder: Value,
}

/// A Rust type name without its module path (`app::Order` → `Order`,
/// `Vec<app::Order>` → `Vec<Order>`).
fn short_name(full: &str) -> String {
    let mut out = String::new();
    let mut word = String::new();
    for c in full.chars() {
        if c.is_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
        } else {
            out.push_str(word.rsplit("::").next().unwrap_or(&word));
            word.clear();
            out.push(c);
        }
    }
    out.push_str(word.rsplit("::").next().unwrap_or(&word));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_only_what_asyncapi_allows() {
        assert_eq!(key_of("orders.created"), "orders_created");
        assert_eq!(key_of("orders-in"), "orders-in");
        assert_eq!(key_of(""), "_");
        let mut used = HashSet::new();
        assert_eq!(unique(&mut used, "a".into()), "a");
        assert_eq!(unique(&mut used, "a".into()), "a-2");
        assert_eq!(unique(&mut used, "a".into()), "a-3");
    }

    fn two_servers(_: &ServerRequest<'_>) -> Result<Vec<ServerDescription>, String> {
        let server = |host: &str| ServerDescription {
            host: host.into(),
            protocol: "test".into(),
            protocol_version: None,
            pathname: None,
            description: "A test server.".into(),
        };
        Ok(vec![server("a:1"), server("b:2")])
    }

    inventory::submit! {
        DescriberRegistration::new("test-servers", |_| Ok(BindingDescription::default()))
            .servers(two_servers)
    }
    inventory::submit! {
        DescriberRegistration::new("test-broken-servers", |_| Ok(BindingDescription::default()))
            .servers(|_| Err("no host is set".into()))
    }

    fn document(yaml: &str) -> Value {
        let cfg = crate::config::ConfigLoader::new()
            .env(Vec::<(String, String)>::new())
            .binder_type("test-servers")
            .binder_type("test-broken-servers")
            .binder_type("no-describer")
            .yaml_str(yaml)
            .load()
            .unwrap();
        Document::from_config(&cfg).into_json()
    }

    #[test]
    fn a_binders_servers_are_named_by_its_channels_only() {
        let doc = document(
            r#"
spring.cloud.stream:
  binders: {net: {type: test-servers}, local: {type: no-describer}}
  bindings:
    a-out: {destination: a, binder: net}
    b-out: {destination: b, binder: local}
"#,
        );
        assert_eq!(doc["servers"]["net"]["host"], "a:1");
        assert_eq!(doc["servers"]["net-2"]["host"], "b:2");
        assert_eq!(doc["servers"]["net"]["x-binder"]["type"], "test-servers");
        assert!(doc["servers"]["net"].get("protocolVersion").is_none());
        assert_eq!(
            doc["channels"]["a"]["servers"],
            json!([{"$ref": "#/servers/net"}, {"$ref": "#/servers/net-2"}])
        );
        assert_eq!(doc["channels"]["b"]["address"], "b");
        assert!(doc["channels"]["b"].get("servers").is_none(), "{doc:#}");
    }

    #[test]
    fn servers_that_cannot_be_described_are_said_so() {
        let doc = document(
            r#"
spring.cloud.stream:
  binders: {net: {type: test-broken-servers}}
  bindings.a-out: {destination: a, binder: net}
"#,
        );
        assert!(doc.get("servers").is_none(), "{doc:#}");
        let description = doc["info"]["description"].as_str().unwrap();
        assert!(
            description.contains(
                "The servers of binder `net` (type `test-broken-servers`) could not be described: no host is set."
            ),
            "{description}"
        );
    }

    #[test]
    fn short_names_drop_module_paths() {
        assert_eq!(short_name("app::model::Order"), "Order");
        assert_eq!(short_name("alloc::vec::Vec<app::Order>"), "Vec<Order>");
        assert_eq!(short_name("u64"), "u64");
    }
}
