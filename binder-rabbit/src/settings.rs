//! Connection settings: `spring.rabbitmq.*`, as Spring Boot spells them, or an AMQP URI.

use config::{Value, ValueKind};

/// Where and how to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RabbitSettings {
    /// AMQP URIs, tried in order (a cluster's nodes).
    pub uris: Vec<String>,
    /// The connection name shown by the management UI and `rabbitmqctl`.
    pub connection_name: String,
}

impl Default for RabbitSettings {
    fn default() -> Self {
        RabbitSettings {
            uris: vec!["amqp://guest:guest@localhost:5672/%2f".to_owned()],
            connection_name: "rust-stream".to_owned(),
        }
    }
}

fn get<'a>(tree: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut here = tree;
    for key in path {
        let ValueKind::Table(t) = &here.kind else {
            return None;
        };
        let want: String = key
            .chars()
            .filter(|c| *c != '-' && *c != '_')
            .collect::<String>()
            .to_lowercase();
        here = t
            .iter()
            .find(|(k, _)| {
                k.chars()
                    .filter(|c| *c != '-' && *c != '_')
                    .collect::<String>()
                    .to_lowercase()
                    == want
            })?
            .1;
    }
    Some(here)
}

fn text(tree: &Value, key: &str) -> Option<String> {
    get(tree, &["spring", "rabbitmq", key]).map(|v| v.to_string())
}

/// Percent-encodes a URI component (user, password, virtual host).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

impl RabbitSettings {
    /// Settings from one URI.
    pub fn from_uri(uri: &str) -> Self {
        RabbitSettings {
            uris: vec![uri.to_owned()],
            ..Default::default()
        }
    }

    /// Reads `spring.rabbitmq.{host, port, username, password, virtual-host, addresses,
    /// uri, connection-name}` (Spring Boot's names and defaults). `addresses` is a
    /// comma-separated list of `host:port` or `amqp://` URIs, tried in order.
    pub fn from_config(tree: &Value) -> Self {
        let user = text(tree, "username").unwrap_or_else(|| "guest".into());
        let pass = text(tree, "password").unwrap_or_else(|| "guest".into());
        let vhost = text(tree, "virtual-host").unwrap_or_else(|| "/".into());
        let host = text(tree, "host").unwrap_or_else(|| "localhost".into());
        let port = text(tree, "port").unwrap_or_else(|| "5672".into());
        let uri_of = |hostport: &str| {
            format!(
                "amqp://{}:{}@{hostport}/{}",
                encode(&user),
                encode(&pass),
                encode(&vhost)
            )
        };
        let uris = if let Some(uri) = text(tree, "uri") {
            vec![uri]
        } else if let Some(addresses) = text(tree, "addresses") {
            addresses
                .split(',')
                .map(str::trim)
                .filter(|a| !a.is_empty())
                .map(|a| {
                    if a.starts_with("amqp://") || a.starts_with("amqps://") {
                        a.to_owned()
                    } else if a.contains(':') {
                        uri_of(a)
                    } else {
                        uri_of(&format!("{a}:{port}"))
                    }
                })
                .collect()
        } else {
            vec![uri_of(&format!("{host}:{port}"))]
        };
        let connection_name = text(tree, "connection-name")
            .or_else(|| get(tree, &["spring", "application", "name"]).map(|v| v.to_string()))
            .unwrap_or_else(|| "rust-stream".into());
        RabbitSettings {
            uris,
            connection_name,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(yaml: &str) -> Value {
        config::Config::builder()
            .add_source(config::File::from_str(yaml, config::FileFormat::Yaml))
            .build()
            .unwrap()
            .cache
    }

    #[test]
    fn spring_boot_properties_build_uris() {
        let s = RabbitSettings::from_config(&tree(
            "spring:\n  rabbitmq:\n    host: mq\n    port: 5673\n    username: svc\n    password: 'p@ss'\n    virtual-host: /prod\n",
        ));
        assert_eq!(s.uris, vec!["amqp://svc:p%40ss@mq:5673/%2Fprod"]);
        let s = RabbitSettings::from_config(&tree(
            "spring.rabbitmq.addresses: 'n1:5672, n2, amqp://x:y@n3/v'\nspring.application.name: billing\n",
        ));
        assert_eq!(
            s.uris,
            vec![
                "amqp://guest:guest@n1:5672/%2F",
                "amqp://guest:guest@n2:5672/%2F",
                "amqp://x:y@n3/v"
            ]
        );
        assert_eq!(s.connection_name, "billing");
        assert_eq!(
            RabbitSettings::from_config(&tree("a: 1")).uris,
            vec!["amqp://guest:guest@localhost:5672/%2F"]
        );
    }
}
