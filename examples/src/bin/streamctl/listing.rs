//! `list_queues`, `list_exchanges`, `list_bindings`, `list_connections`, `list_channels`,
//! `list_consumers` and `purge_queue`, with `rabbitmqctl`'s names, columns and output:
//! through the management API where there is one, else over AMQP for the queues and
//! exchanges the configuration declares (AMQP 0-9-1 cannot list a broker's entities).

use binder_amqp::AmqpBroker;
use binder_amqp::topology::{self, TopologyPlan};
use binder_core::binder::BinderErrorKind;
use serde_json::{Map, Value};

use crate::broker::{Broker, Target, TargetError};
use crate::management::Management;

/// What is listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entity {
    /// `list_queues`
    Queues,
    /// `list_exchanges`
    Exchanges,
    /// `list_bindings`
    Bindings,
    /// `list_connections`
    Connections,
    /// `list_channels`
    Channels,
    /// `list_consumers`
    Consumers,
}

impl Entity {
    fn plural(self) -> &'static str {
        match self {
            Entity::Queues => "queues",
            Entity::Exchanges => "exchanges",
            Entity::Bindings => "bindings",
            Entity::Connections => "connections",
            Entity::Channels => "channels",
            Entity::Consumers => "consumers",
        }
    }

    /// `rabbitmqctl`'s info items for this entity, in its order.
    fn columns(self) -> &'static [&'static str] {
        match self {
            Entity::Queues => &[
                "name",
                "durable",
                "auto_delete",
                "arguments",
                "policy",
                "exclusive",
                "exclusive_consumer_tag",
                "messages_ready",
                "messages_unacknowledged",
                "messages",
                "messages_ready_ram",
                "messages_unacknowledged_ram",
                "messages_ram",
                "messages_persistent",
                "message_bytes",
                "message_bytes_ready",
                "message_bytes_unacknowledged",
                "message_bytes_ram",
                "message_bytes_persistent",
                "head_message_timestamp",
                "disk_reads",
                "disk_writes",
                "consumers",
                "consumer_utilisation",
                "consumer_capacity",
                "memory",
                "state",
                "type",
                "leader",
                "members",
                "online",
            ],
            Entity::Exchanges => &[
                "name",
                "type",
                "durable",
                "auto_delete",
                "internal",
                "arguments",
                "policy",
            ],
            Entity::Bindings => &[
                "source_name",
                "source_kind",
                "destination_name",
                "destination_kind",
                "routing_key",
                "arguments",
            ],
            // rabbitmqctl's, less the Erlang process ids (`pid`) and the packet counters and
            // TLS details this broker does not keep; `name` is the connection's
            // `peer -> local`.
            Entity::Connections => &[
                "name",
                "port",
                "host",
                "peer_port",
                "peer_host",
                "ssl",
                "ssl_protocol",
                "state",
                "channels",
                "protocol",
                "auth_mechanism",
                "user",
                "vhost",
                "timeout",
                "frame_max",
                "channel_max",
                "client_properties",
                "connected_at",
                "recv_oct",
                "send_oct",
            ],
            // rabbitmqctl's, with the channel's `name` (`<connection> (<number>)`) for its
            // `pid`.
            Entity::Channels => &[
                "name",
                "connection",
                "number",
                "user",
                "vhost",
                "transactional",
                "confirm",
                "consumer_count",
                "messages_unacknowledged",
                "messages_uncommitted",
                "acks_uncommitted",
                "messages_unconfirmed",
                "prefetch_count",
                "global_prefetch_count",
            ],
            // rabbitmqctl's, with the channel's name (`channel_name`) for its `channel_pid`.
            Entity::Consumers => &[
                "queue_name",
                "channel_name",
                "consumer_tag",
                "ack_required",
                "exclusive",
                "prefetch_count",
                "active",
                "activity_status",
                "arguments",
            ],
        }
    }

    /// `rabbitmqctl`'s default columns.
    fn default_columns(self) -> &'static [&'static str] {
        match self {
            Entity::Queues => &["name", "messages"],
            Entity::Exchanges => &["name", "type"],
            Entity::Bindings => self.columns(),
            Entity::Connections => &["user", "peer_host", "peer_port", "state"],
            Entity::Channels => &["name", "user", "consumer_count", "messages_unacknowledged"],
            Entity::Consumers => &[
                "queue_name",
                "channel_name",
                "consumer_tag",
                "ack_required",
                "prefetch_count",
                "active",
                "arguments",
            ],
        }
    }

    /// Whether only a management API can list it.
    fn needs_management(self) -> bool {
        !matches!(self, Entity::Queues | Entity::Exchanges)
    }

    /// Where the management API has a column: a field, or a JSON pointer into one.
    fn field(self, column: &str) -> &str {
        match (self, column) {
            (Entity::Bindings, "source_name") => "source",
            (Entity::Bindings, "destination_name") => "destination",
            (Entity::Bindings, "destination_kind") => "destination_type",
            (Entity::Channels, "connection") => "/connection_details/name",
            (Entity::Consumers, "queue_name") => "/queue/name",
            (Entity::Consumers, "channel_name") => "/channel_details/name",
            _ => column,
        }
    }
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// rabbitmqctl's: a header line, then tab-separated rows.
    Text,
    /// A JSON array of objects with the chosen columns.
    Json,
}

/// Lists `entity` with `columns` (rabbitmqctl's defaults when empty).
pub async fn list(
    entity: Entity,
    target: &Target,
    columns: &[String],
    format: Format,
) -> Result<(), TargetError> {
    let columns: Vec<String> = if columns.is_empty() {
        entity
            .default_columns()
            .iter()
            .map(|c| (*c).to_owned())
            .collect()
    } else {
        columns.to_vec()
    };
    if let Some(bad) = columns
        .iter()
        .find(|c| !entity.columns().contains(&c.as_str()))
    {
        return Err(TargetError::Config(format!(
            "unknown column `{bad}` for list_{}; the columns are: {}",
            entity.plural(),
            entity.columns().join(" ")
        )));
    }
    let broker = target.resolve(None)?;
    // As rabbitmqctl: connections and channels of every virtual host, unless `-p` names one.
    let vhost = match entity {
        Entity::Connections | Entity::Channels => target.vhost.as_deref(),
        _ => Some(broker.vhost.as_str()),
    };
    let (rows, how) = match target.management(&broker)? {
        Some(api) => (
            from_management(entity, &api, vhost, &columns)?,
            format!("through {}", api.base()),
        ),
        None => (
            from_amqp(entity, target, &broker, &columns).await?,
            "over AMQP".to_owned(),
        ),
    };
    info(target, entity, vhost, &how);
    print(&columns, rows, format);
    Ok(())
}

fn info(target: &Target, entity: Entity, vhost: Option<&str>, how: &str) {
    if !target.quiet {
        match vhost {
            Some(vhost) => outln!("Listing {} for vhost {vhost} ({how}) ...", entity.plural()),
            None => outln!("Listing {} ({how}) ...", entity.plural()),
        }
    }
}

fn from_management(
    entity: Entity,
    api: &Management,
    vhost: Option<&str>,
    columns: &[String],
) -> Result<Vec<Vec<Value>>, TargetError> {
    let items = api
        .list(entity.plural(), vhost)
        .map_err(|e| TargetError::Failed(e.to_string()))?;
    Ok(items
        .iter()
        .map(|item| {
            columns
                .iter()
                .map(|c| match (entity, c.as_str()) {
                    (Entity::Bindings, "source_kind") => Value::String("exchange".into()),
                    _ => {
                        let field = entity.field(c);
                        let found = if field.starts_with('/') {
                            item.pointer(field)
                        } else {
                            item.get(field)
                        };
                        found.cloned().unwrap_or(Value::Null)
                    }
                })
                .collect()
        })
        .collect())
}

/// The columns AMQP can fill (from a passive declare and the configuration).
fn amqp_columns(entity: Entity) -> &'static [&'static str] {
    match entity {
        Entity::Queues => &["name", "messages", "messages_ready", "consumers"],
        Entity::Exchanges => &["name", "type", "durable", "auto_delete", "internal"],
        Entity::Bindings | Entity::Connections | Entity::Channels | Entity::Consumers => &[],
    }
}

async fn from_amqp(
    entity: Entity,
    target: &Target,
    broker: &Broker,
    columns: &[String],
) -> Result<Vec<Vec<Value>>, TargetError> {
    if entity == Entity::Bindings {
        return Err(TargetError::Failed(
            "listing bindings needs a management API (AMQP 0-9-1 cannot list them); give \
             --management URL, or use `streamctl plan` for the bindings a configuration declares"
                .into(),
        ));
    }
    if entity.needs_management() {
        return Err(TargetError::Failed(format!(
            "listing {} needs a management API (AMQP 0-9-1 cannot list them); give \
             --management URL",
            entity.plural()
        )));
    }
    let Some(config) = &broker.config else {
        return Err(TargetError::Failed(format!(
            "no management API answers, and AMQP 0-9-1 cannot list a broker's {}: give \
             --management URL, or --config FILE to list the {} that configuration declares",
            entity.plural(),
            entity.plural()
        )));
    };
    if let Some(c) = columns
        .iter()
        .find(|c| !amqp_columns(entity).contains(&c.as_str()))
    {
        return Err(TargetError::Failed(format!(
            "column `{c}` needs a management API; over AMQP list_{} has: {}",
            entity.plural(),
            amqp_columns(entity).join(" ")
        )));
    }
    let plan: TopologyPlan =
        topology::plan(config).map_err(|e| TargetError::Config(e.to_string()))?;
    if !target.quiet {
        let note = match entity {
            Entity::Queues => "; `messages` counts ready messages only (a passive declare)",
            Entity::Exchanges => "; types and flags as the configuration declares them",
            _ => "",
        };
        eprintln!(
            "streamctl: no management API: listing the {} the configuration declares that exist{note}",
            entity.plural()
        );
    }
    let binder = broker.binder();
    let mut rows = Vec::new();
    match entity {
        Entity::Queues => {
            for q in &plan.queues {
                match binder.inspect(&q.name).await {
                    Ok(info) => rows.push(
                        columns
                            .iter()
                            .map(|c| match c.as_str() {
                                "name" => Value::String(q.name.clone()),
                                "consumers" => info.consumers.into(),
                                _ => info.messages.into(),
                            })
                            .collect(),
                    ),
                    Err(e) if e.kind() == BinderErrorKind::NotFound => {}
                    Err(e) => return Err(TargetError::Failed(e.to_string())),
                }
            }
        }
        Entity::Exchanges => {
            for x in &plan.exchanges {
                match binder.exchange_exists(&x.name).await {
                    Ok(true) => rows.push(
                        columns
                            .iter()
                            .map(|c| match c.as_str() {
                                "name" => Value::String(x.name.clone()),
                                "type" => Value::String(x.kind.as_str().to_owned()),
                                "durable" => x.durable.into(),
                                "auto_delete" => x.auto_delete.into(),
                                _ => x.internal.into(),
                            })
                            .collect(),
                    ),
                    Ok(false) => {}
                    Err(e) => return Err(TargetError::Failed(e.to_string())),
                }
            }
        }
        Entity::Bindings | Entity::Connections | Entity::Channels | Entity::Consumers => {}
    }
    binder_core::binder::Binder::close(&binder).await;
    Ok(rows)
}

fn print(columns: &[String], rows: Vec<Vec<Value>>, format: Format) {
    match format {
        Format::Text => {
            outln!("{}", columns.join("\t"));
            for row in rows {
                let cells: Vec<String> = row.iter().map(render).collect();
                outln!("{}", cells.join("\t"));
            }
        }
        Format::Json => {
            let objects: Vec<Value> = rows
                .into_iter()
                .map(|row| {
                    let map: Map<String, Value> = columns.iter().cloned().zip(row).collect();
                    Value::Object(map)
                })
                .collect();
            outln!("{}", Value::Array(objects));
        }
    }
}

/// A value as rabbitmqctl prints it: strings bare, a table as `[{"key",value}]`.
pub fn render(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(render_nested).collect();
            format!("[{}]", inner.join(","))
        }
        Value::Object(map) => {
            let inner: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{{\"{k}\",{}}}", render_nested(v)))
                .collect();
            format!("[{}]", inner.join(","))
        }
    }
}

/// Inside a table, strings are quoted.
fn render_nested(value: &Value) -> String {
    match value {
        Value::String(s) => format!("\"{s}\""),
        other => render(other),
    }
}

/// `purge_queue QUEUE`, over AMQP.
pub async fn purge(target: &Target, queue: &str) -> Result<(), TargetError> {
    let broker = target.resolve(None)?;
    if !target.quiet {
        outln!("Purging queue '{queue}' in vhost '{}' ...", broker.vhost);
    }
    let binder = broker.binder();
    let purged = binder.purge_queue(queue).await;
    binder_core::binder::Binder::close(&binder).await;
    let purged = purged.map_err(|e| TargetError::Failed(e.to_string()))?;
    if !target.quiet {
        outln!("purged {purged} messages");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_print_as_rabbitmqctl_prints_them() {
        assert_eq!(render(&json!("orders.audit")), "orders.audit");
        assert_eq!(render(&json!(true)), "true");
        assert_eq!(render(&json!(12)), "12");
        assert_eq!(render(&Value::Null), "");
        assert_eq!(render(&json!({})), "[]");
        assert_eq!(
            render(&json!({"x-dead-letter-exchange": "DLX", "x-max-length": 10})),
            r#"[{"x-dead-letter-exchange","DLX"},{"x-max-length",10}]"#
        );
    }

    #[test]
    fn binding_columns_map_to_the_api_s_fields() {
        assert_eq!(Entity::Bindings.field("source_name"), "source");
        assert_eq!(
            Entity::Bindings.field("destination_kind"),
            "destination_type"
        );
        assert_eq!(Entity::Queues.field("messages_ready"), "messages_ready");
        assert_eq!(
            Entity::Channels.field("connection"),
            "/connection_details/name"
        );
        for entity in [Entity::Connections, Entity::Channels, Entity::Consumers] {
            for column in entity.default_columns() {
                assert!(entity.columns().contains(column), "{entity:?} {column}");
            }
        }
    }
}
