//! Connection settings: `spring.rabbitmq.*`, as Spring Boot spells them, or an AMQP URI.

use std::time::Duration;

use binder_core::binder::{BinderError, BinderResult};
use config::{Value, ValueKind};
use lapin::uri::AMQPUri;

/// Where and how to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RabbitSettings {
    /// AMQP URIs, tried in order (a cluster's nodes).
    pub uris: Vec<String>,
    /// The connection name shown by the management UI and `rabbitmqctl`.
    pub connection_name: String,
    /// How long connecting to one address (TCP and the AMQP handshake) may take before the
    /// next one is tried (`connection-timeout`, 60 s by default as in the Java client; zero
    /// waits for ever, as there).
    pub connection_timeout: Duration,
    /// The heartbeat interval asked of the broker; the lower of it and the broker's wins, and
    /// zero takes the broker's (`requested-heartbeat`, 60 s by default, as in the Java
    /// client). A URI with its own `heartbeat` keeps it.
    pub requested_heartbeat: Duration,
}

impl Default for RabbitSettings {
    fn default() -> Self {
        RabbitSettings {
            uris: vec!["amqp://guest:guest@localhost:5672/%2f".to_owned()],
            connection_name: "rust-stream".to_owned(),
            connection_timeout: Duration::from_secs(60),
            requested_heartbeat: Duration::from_secs(60),
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

/// A Spring Boot duration: a number with an optional unit (`ns`, `us`, `ms`, `s`, `m`, `h`,
/// `d`, in any case; `unit` when there is none), or ISO-8601 (`PT30S`, `PT1M30S`, `P1D`).
/// Negative durations mean nothing here and are refused.
fn parse_duration(text: &str, unit: Duration) -> Option<Duration> {
    let text = text.trim();
    let text = text.strip_prefix('+').unwrap_or(text).to_ascii_lowercase();
    if let Some(iso) = text.strip_prefix('p') {
        return parse_iso_duration(iso);
    }
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let n: u32 = text[..digits].parse().ok()?;
    let per = match &text[digits..] {
        "" => unit,
        "ns" => Duration::from_nanos(1),
        "us" => Duration::from_micros(1),
        "ms" => Duration::from_millis(1),
        "s" => Duration::from_secs(1),
        "m" => Duration::from_secs(60),
        "h" => Duration::from_secs(3600),
        "d" => Duration::from_secs(86_400),
        _ => return None,
    };
    per.checked_mul(n)
}

/// The part of an ISO-8601 duration after `P`, lower-cased: `[nd][t[nh][nm][n.ns]]`.
fn parse_iso_duration(iso: &str) -> Option<Duration> {
    let (days, time) = match iso.split_once('t') {
        Some((days, time)) if !time.is_empty() => (days, time),
        Some(_) => return None,
        None => (iso, ""),
    };
    if days.is_empty() && time.is_empty() {
        return None;
    }
    let mut total = Duration::ZERO;
    if !days.is_empty() {
        let n: u64 = days.strip_suffix('d')?.parse().ok()?;
        total += Duration::from_secs(n.checked_mul(86_400)?);
    }
    let mut number = String::new();
    let mut order = ['h', 'm', 's'].iter();
    for c in time.chars() {
        if c.is_ascii_digit() || c == '.' {
            number.push(c);
            continue;
        }
        // Components come in order, each at most once.
        order.find(|u| **u == c)?;
        let n: f64 = number.parse().ok()?;
        let seconds = match c {
            'h' => 3600.0,
            'm' => 60.0,
            _ => 1.0,
        };
        total += Duration::try_from_secs_f64(n * seconds).ok()?;
        number.clear();
    }
    number.is_empty().then_some(total)
}

/// The duration at `spring.rabbitmq.<key>`, if set; an error names the key.
fn duration(tree: &Value, key: &str, unit: Duration) -> BinderResult<Option<Duration>> {
    let Some(value) = text(tree, key) else {
        return Ok(None);
    };
    parse_duration(&value, unit).map(Some).ok_or_else(|| {
        BinderError::Config(format!(
            "`spring.rabbitmq.{key}` is `{value}`, which is not a duration (e.g. `30s`, \
             `500ms`, `PT1M`)"
        ))
    })
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
    /// uri, connection-name, connection-timeout, requested-heartbeat}` (Spring Boot's names
    /// and defaults). `addresses` is a comma-separated list of `host:port` or `amqp://`
    /// URIs, tried in order. A value that cannot be used is an error naming its key.
    pub fn from_config(tree: &Value) -> BinderResult<Self> {
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
        let source = if text(tree, "uri").is_some() {
            "`spring.rabbitmq.uri`"
        } else if text(tree, "addresses").is_some() {
            "`spring.rabbitmq.addresses`"
        } else {
            "`spring.rabbitmq.host` and `port`"
        };
        for uri in &uris {
            let refuse =
                |why: String| BinderError::Config(format!("{source}: `{}` {why}", redact(uri)));
            let parsed = uri
                .parse::<AMQPUri>()
                .map_err(|e| refuse(format!("is not an AMQP URI: {e}")))?;
            if parsed.scheme != lapin::uri::AMQPScheme::AMQP {
                return Err(refuse(
                    "uses TLS (`amqps://`), which this binder does not offer".to_owned(),
                ));
            }
        }
        let defaults = RabbitSettings::default();
        Ok(RabbitSettings {
            uris,
            connection_name,
            connection_timeout: duration(tree, "connection-timeout", Duration::from_millis(1))?
                .unwrap_or(defaults.connection_timeout),
            requested_heartbeat: duration(tree, "requested-heartbeat", Duration::from_secs(1))?
                .unwrap_or(defaults.requested_heartbeat),
        })
    }

    /// The URI to connect to, with the requested heartbeat unless the URI sets one.
    pub(crate) fn amqp_uri(&self, uri: &str) -> Result<AMQPUri, String> {
        let mut parsed: AMQPUri = uri.parse()?;
        if parsed.query.heartbeat.is_none() {
            let seconds = self.requested_heartbeat.as_secs();
            parsed.query.heartbeat = Some(u16::try_from(seconds).unwrap_or(u16::MAX));
        }
        Ok(parsed)
    }
}

/// A URI without its password, for logs and errors.
pub(crate) fn redact(uri: &str) -> String {
    match (uri.find("://"), uri.find('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &uri[s + 3..at];
            let user = creds.split(':').next().unwrap_or_default();
            format!("{}{user}:***{}", &uri[..s + 3], &uri[at..])
        }
        _ => uri.to_owned(),
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
        ))
        .unwrap();
        assert_eq!(s.uris, vec!["amqp://svc:p%40ss@mq:5673/%2Fprod"]);
        let s = RabbitSettings::from_config(&tree(
            "spring.rabbitmq.addresses: 'n1:5672, n2, amqp://x:y@n3/v'\nspring.application.name: billing\n",
        ))
        .unwrap();
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
            RabbitSettings::from_config(&tree("a: 1")).unwrap().uris,
            vec!["amqp://guest:guest@localhost:5672/%2F"]
        );
    }

    #[test]
    fn timeouts_and_heartbeat_read_as_spring_boot_does() {
        let defaults = RabbitSettings::from_config(&tree("a: 1")).unwrap();
        assert_eq!(defaults.connection_timeout, Duration::from_secs(60));
        assert_eq!(defaults.requested_heartbeat, Duration::from_secs(60));
        // Without a unit, connection-timeout counts milliseconds and requested-heartbeat
        // seconds, as in Spring Boot.
        let s = RabbitSettings::from_config(&tree(
            "spring.rabbitmq.connection-timeout: 5000\nspring.rabbitmq.requested-heartbeat: 30\n",
        ))
        .unwrap();
        assert_eq!(s.connection_timeout, Duration::from_secs(5));
        assert_eq!(s.requested_heartbeat, Duration::from_secs(30));
        let s = RabbitSettings::from_config(&tree(
            "spring.rabbitmq.connection-timeout: 2s\nspring.rabbitmq.requested-heartbeat: PT1M30S\n",
        ))
        .unwrap();
        assert_eq!(s.connection_timeout, Duration::from_secs(2));
        assert_eq!(s.requested_heartbeat, Duration::from_secs(90));
        for (text, expected) in [
            ("250ms", Some(Duration::from_millis(250))),
            ("2m", Some(Duration::from_secs(120))),
            ("1h", Some(Duration::from_secs(3600))),
            ("PT0.5S", Some(Duration::from_millis(500))),
            ("0", Some(Duration::ZERO)),
            ("soon", None),
            ("5 s", None),
            ("-1s", None),
            ("PT", None),
            ("PT5", None),
            ("30S", Some(Duration::from_secs(30))),
            ("500MS", Some(Duration::from_millis(500))),
            ("P1D", Some(Duration::from_secs(86_400))),
            ("P1DT1H", Some(Duration::from_secs(90_000))),
            ("pt2m", Some(Duration::from_secs(120))),
            ("+PT1S", Some(Duration::from_secs(1))),
            ("PT1S1M", None),
            ("P1DT", None),
        ] {
            assert_eq!(
                parse_duration(text, Duration::from_secs(1)),
                expected,
                "{text}"
            );
        }
    }

    #[test]
    fn unusable_values_name_their_key() {
        let err = RabbitSettings::from_config(&tree("spring.rabbitmq.connection-timeout: soon"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`spring.rabbitmq.connection-timeout` is `soon`"),
            "{err}"
        );
        let err = RabbitSettings::from_config(&tree("spring.rabbitmq.uri: 'http://u:secret@mq/'"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("`spring.rabbitmq.uri`"), "{err}");
        assert!(
            !err.contains("secret"),
            "the password stays out of errors: {err}"
        );
        let err = RabbitSettings::from_config(&tree("spring.rabbitmq.uri: 'amqps://u:p@mq/'"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("TLS"), "{err}");
        let err = RabbitSettings::from_config(&tree("spring.rabbitmq.port: 'x'"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("`spring.rabbitmq.host` and `port`"), "{err}");
    }

    #[test]
    fn the_requested_heartbeat_goes_into_the_uri_unless_it_has_one() {
        let s = RabbitSettings {
            requested_heartbeat: Duration::from_secs(7),
            ..RabbitSettings::default()
        };
        let uri = s.amqp_uri("amqp://guest:guest@localhost:5672/%2f").unwrap();
        assert_eq!(uri.query.heartbeat, Some(7));
        let uri = s
            .amqp_uri("amqp://guest:guest@localhost:5672/%2f?heartbeat=3")
            .unwrap();
        assert_eq!(uri.query.heartbeat, Some(3));
    }
}
