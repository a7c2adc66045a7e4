//! Connection settings: `spring.rabbitmq.*`, as Spring Boot spells them, or an AMQP URI.
//! Every key is checked (`keys.rs`), and every problem is reported at once.

use std::time::Duration;

use std::path::PathBuf;

use binder_core::binder::{BinderError, BinderResult};
use binder_core::config::Problem;
use config::{Value, ValueKind};
use lapin::uri::{AMQPScheme, AMQPUri};

use crate::keys;
use crate::tls::{self, KeyStore, TlsSettings, TlsVersion, TrustStore};
use binder_core::config::canonical;

/// Where and how to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RabbitSettings {
    /// AMQP URIs, tried in order (a cluster's nodes); `amqps://` ones use TLS.
    pub uris: Vec<String>,
    /// The connection name shown by the management UI and `rabbitmqctl`.
    pub connection_name: String,
    /// How long connecting to one address (TCP, TLS and the AMQP handshake) may take before
    /// the next one is tried (`connection-timeout`, 60 s by default as in the Java client;
    /// zero waits for ever, as there).
    pub connection_timeout: Duration,
    /// The heartbeat interval asked of the broker; the lower of it and the broker's wins, and
    /// zero takes the broker's (`requested-heartbeat`, 60 s by default, as in the Java
    /// client). A URI with its own `heartbeat` keeps it.
    pub requested_heartbeat: Duration,
    /// The most channels asked for on a connection; the lower of it and the broker's wins,
    /// and zero takes the broker's (`requested-channel-max`, 2047 by default, as in Spring
    /// Boot). A URI with its own `channel_max` keeps it.
    pub requested_channel_max: u16,
    /// How `amqps://` addresses are connected (`ssl.*`).
    pub tls: TlsSettings,
}

impl Default for RabbitSettings {
    fn default() -> Self {
        RabbitSettings {
            uris: vec!["amqp://guest:guest@localhost:5672/%2f".to_owned()],
            connection_name: "rust-stream".to_owned(),
            connection_timeout: Duration::from_secs(60),
            requested_heartbeat: Duration::from_secs(60),
            requested_channel_max: 2047,
            tls: TlsSettings::default(),
        }
    }
}

fn get<'a>(tree: &'a Value, path: &[&str]) -> Option<&'a Value> {
    binder_core::config::descend(tree, path)
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

/// Percent-encodes a URI component (user, password, virtual host; a management API path
/// segment): every byte but RFC 3986's unreserved ones as `%XX`.
///
/// ```
/// assert_eq!(binder_rabbit::uri_component("/"), "%2F");
/// assert_eq!(binder_rabbit::uri_component("a b~c"), "a%20b~c");
/// ```
pub fn uri_component(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// Reads values under `spring.rabbitmq`, collecting every problem.
struct Reader<'a> {
    tree: &'a Value,
    problems: Vec<Problem>,
}

impl Reader<'_> {
    /// The value at `spring.rabbitmq.<key>` (`key` dotted, as in [`keys::KEYS`]).
    fn value(&self, key: &str) -> Option<&Value> {
        let mut path = vec!["spring", "rabbitmq"];
        path.extend(key.split('.'));
        get(self.tree, &path).filter(|v| !matches!(v.kind, ValueKind::Nil))
    }

    fn is_set(&self, key: &str) -> bool {
        self.value(key).is_some()
    }

    fn problem(&mut self, key: &str, message: impl Into<String>) {
        let problem = keys::problem(self.value(key), key, message);
        self.problems.push(problem);
    }

    /// The text at `key`, if it is a single value (a group is reported by `keys::check`).
    fn text(&self, key: &str) -> Option<String> {
        self.value(key)
            .filter(|v| !matches!(v.kind, ValueKind::Table(_) | ValueKind::Array(_)))
            .map(|v| v.to_string())
    }

    fn parse<T: std::str::FromStr>(&mut self, key: &str, what: &str) -> Option<T> {
        let text = self.text(key)?;
        match text.trim().parse() {
            Ok(v) => Some(v),
            Err(_) => {
                self.problem(key, format!("`{text}` is not {what}"));
                None
            }
        }
    }

    fn boolean(&mut self, key: &str) -> Option<bool> {
        let text = self.text(key)?;
        match text.trim().to_ascii_lowercase().as_str() {
            "true" => Some(true),
            "false" => Some(false),
            _ => {
                self.problem(key, format!("`{text}` is not `true` or `false`"));
                None
            }
        }
    }

    fn duration(&mut self, key: &str, unit: Duration) -> Option<Duration> {
        let text = self.text(key)?;
        let parsed = parse_duration(&text, unit);
        if parsed.is_none() {
            self.problem(
                key,
                format!("`{text}` is not a duration (e.g. `30s`, `500ms`, `PT1M`)"),
            );
        }
        parsed
    }

    /// The contents of the file named at `key` (Spring's `file:` prefix allowed).
    fn file(&mut self, key: &str) -> Option<(PathBuf, Vec<u8>)> {
        let text = self.text(key)?;
        if text.starts_with("classpath:") {
            self.problem(
                key,
                format!("`{text}`: there is no class path here; give a file's path"),
            );
            return None;
        }
        let path = PathBuf::from(text.strip_prefix("file:").unwrap_or(&text));
        match std::fs::read(&path) {
            Ok(bytes) => Some((path, bytes)),
            Err(e) => {
                self.problem(key, format!("cannot read `{}`: {e}", path.display()));
                None
            }
        }
    }

    /// The kind of key or trust store at `file_key`: `type_key` if set, else what the file
    /// holds. JKS is refused by name.
    fn store_kind(&mut self, type_key: &str, file_key: &str, bytes: &[u8]) -> Option<StoreKind> {
        const JKS: &str = "Java KeyStore (JKS) files cannot be read here; convert it with \
                           `keytool -importkeystore -srckeystore <file> -destkeystore \
                           <file>.p12 -deststoretype PKCS12`, or give PEM files";
        if let Some(given) = self.text(type_key) {
            return match canonical(&given).as_str() {
                "pkcs12" => Some(StoreKind::Pkcs12),
                "pem" => Some(StoreKind::Pem),
                "jks" | "jceks" => {
                    self.problem(type_key, format!("`{given}`: {JKS}"));
                    None
                }
                _ => {
                    self.problem(
                        type_key,
                        format!("`{given}` is not a store type offered (PKCS12 or PEM)"),
                    );
                    None
                }
            };
        }
        let start = bytes
            .iter()
            .position(|b| !b.is_ascii_whitespace())
            .unwrap_or(0);
        if bytes[start..].starts_with(b"-----BEGIN") {
            Some(StoreKind::Pem)
        } else if bytes.starts_with(&[0xFE, 0xED, 0xFE, 0xED]) {
            self.problem(file_key, format!("is a Java KeyStore (JKS): {JKS}"));
            None
        } else {
            Some(StoreKind::Pkcs12)
        }
    }
}

/// What a key or trust store file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StoreKind {
    Pkcs12,
    Pem,
}

/// The problems as one message, one a line, each with its origin and full key, indented one
/// level more than the runtime's own list, in which this one appears.
fn render(problems: &[Problem]) -> String {
    binder_core::config::render_problems("spring.rabbitmq", problems, 4)
}

/// Refuses, key by key, the `spring.rabbitmq.*` settings in `tree` that a binder given in
/// code (with its own [`RabbitSettings`]) would ignore.
pub(crate) fn refuse_for_instance(tree: &Value) -> BinderResult<()> {
    let Some(ValueKind::Table(rabbitmq)) = get(tree, &["spring", "rabbitmq"]).map(|v| &v.kind)
    else {
        return Ok(());
    };
    let problems: Vec<Problem> = rabbitmq
        .iter()
        .filter(|(_, v)| !matches!(v.kind, ValueKind::Nil))
        .map(|(key, v)| {
            keys::problem(
                Some(v),
                key,
                "is set, but this rabbit binder was given in code (`AppBuilder::binder`) with \
                 settings of its own and would ignore it; remove the key, or let the \
                 configuration create the binder",
            )
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(BinderError::config(render(&problems)))
    }
}

impl RabbitSettings {
    /// Settings from one URI.
    pub fn from_uri(uri: &str) -> Self {
        RabbitSettings {
            uris: vec![uri.to_owned()],
            ..Default::default()
        }
    }

    /// Reads `spring.rabbitmq.*` with Spring Boot's names and defaults: where to connect
    /// (`host`, `port`, `username`, `password`, `virtual-host`, or `addresses`, a list of
    /// `host[:port]` or `amqp[s]://` URIs tried in order, or our `uri`), `connection-name`,
    /// `connection-timeout`, `requested-heartbeat`, `requested-channel-max` and TLS
    /// (`ssl.*`). Every key Spring Boot defines that the binder does not honour is refused
    /// by name with the reason, an unknown key with the nearest known one, and a value that
    /// cannot be used with its key; all problems come in one error, one a line.
    pub fn from_config(tree: &Value) -> BinderResult<Self> {
        let mut r = Reader {
            tree,
            problems: Vec::new(),
        };
        if let Some(rabbitmq) = get(tree, &["spring", "rabbitmq"]) {
            keys::check(rabbitmq, &mut r.problems);
        }
        let defaults = RabbitSettings::default();
        let ssl_enabled = r.boolean("ssl.enabled");
        let uris = r.uris(ssl_enabled);
        let tls_on = ssl_enabled == Some(true) || uris.iter().any(|u| u.starts_with("amqps://"));
        let tls = r.tls(tls_on);
        let connection_name = r
            .text("connection-name")
            .or_else(|| get(tree, &["spring", "application", "name"]).map(|v| v.to_string()))
            .unwrap_or(defaults.connection_name);
        let connection_timeout = r
            .duration("connection-timeout", Duration::from_millis(1))
            .unwrap_or(defaults.connection_timeout);
        let requested_heartbeat = r
            .duration("requested-heartbeat", Duration::from_secs(1))
            .unwrap_or(defaults.requested_heartbeat);
        let requested_channel_max = r
            .parse("requested-channel-max", "a channel count (0 to 65535)")
            .unwrap_or(defaults.requested_channel_max);
        if !r.problems.is_empty() {
            return Err(BinderError::config(render(&r.problems)));
        }
        Ok(RabbitSettings {
            uris,
            connection_name,
            connection_timeout,
            requested_heartbeat,
            requested_channel_max,
            tls,
        })
    }

    /// The URI to connect to, with the requested heartbeat and channel limit unless the URI
    /// sets its own.
    pub(crate) fn amqp_uri(&self, uri: &str) -> Result<AMQPUri, String> {
        let mut parsed: AMQPUri = uri.parse()?;
        if parsed.query.heartbeat.is_none() {
            let seconds = self.requested_heartbeat.as_secs();
            parsed.query.heartbeat = Some(u16::try_from(seconds).unwrap_or(u16::MAX));
        }
        if parsed.query.channel_max.is_none() {
            parsed.query.channel_max = Some(self.requested_channel_max);
        }
        Ok(parsed)
    }
}

impl Reader<'_> {
    /// The URIs to try: `uri`, else `addresses`, else `host` and `port`. `amqps://` when
    /// `tls` (`ssl.enabled: true`), whose default port is then 5671, as in Spring Boot.
    /// The addresses, with `ssl.enabled` as already read (`None`: unset or unusable).
    fn uris(&mut self, ssl_enabled: Option<bool>) -> Vec<String> {
        let tls = ssl_enabled == Some(true);
        let user = self.text("username").unwrap_or_else(|| "guest".into());
        let pass = self.text("password").unwrap_or_else(|| "guest".into());
        let vhost = self.text("virtual-host").unwrap_or_else(|| "/".into());
        let host = self.text("host").unwrap_or_else(|| "localhost".into());
        let port: u16 = self
            .parse("port", "a port number (1 to 65535)")
            .filter(|p| *p != 0)
            .unwrap_or(if tls { 5671 } else { 5672 });
        if self.text("port").is_some_and(|p| p.trim() == "0") {
            self.problem("port", "`0` is not a port number (1 to 65535)");
        }
        let scheme = if tls { "amqps" } else { "amqp" };
        let uri_of = |hostport: &str| {
            format!(
                "{scheme}://{}:{}@{hostport}/{}",
                uri_component(&user),
                uri_component(&pass),
                uri_component(&vhost)
            )
        };
        let addresses: Option<Vec<String>> = self.value("addresses").map(|v| match &v.kind {
            ValueKind::Array(items) => items.iter().map(|i| i.to_string()).collect(),
            _ => v.to_string().split(',').map(str::to_owned).collect(),
        });
        let (source, uris) = if let Some(uri) = self.text("uri") {
            for other in [
                "addresses",
                "host",
                "port",
                "username",
                "password",
                "virtual-host",
            ] {
                if self.is_set(other) {
                    self.problem(
                        other,
                        "not used with `spring.rabbitmq.uri`, which says where and as whom \
                         to connect; keep one of them",
                    );
                }
            }
            ("uri", vec![uri])
        } else if let Some(addresses) = addresses {
            if self.is_set("host") {
                self.problem(
                    "host",
                    "not used with `spring.rabbitmq.addresses`; keep one of them",
                );
            }
            let uris: Vec<String> = addresses
                .iter()
                .map(|a| a.trim())
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
                .collect();
            if uris.is_empty() {
                self.problem("addresses", "names no address");
            }
            ("addresses", uris)
        } else {
            ("host", vec![uri_of(&format!("{host}:{port}"))])
        };
        for uri in &uris {
            match uri.parse::<AMQPUri>() {
                Err(e) => {
                    self.problem(source, format!("`{}` is not an AMQP URI: {e}", redact(uri)))
                }
                Ok(parsed) if parsed.scheme == AMQPScheme::AMQP && tls && source != "host" => self
                    .problem(
                        "ssl.enabled",
                        format!(
                            "is true, but `{}` is plain AMQP; write `amqps://` for TLS",
                            redact(uri)
                        ),
                    ),
                Ok(_) => {}
            }
        }
        if ssl_enabled == Some(false) {
            if let Some(uri) = uris.iter().find(|u| u.starts_with("amqps://")) {
                self.problem(
                    "ssl.enabled",
                    format!("is false, but `{}` asks for TLS", redact(uri)),
                );
            }
        }
        uris
    }

    /// The TLS settings; with TLS off (`tls` false) every `ssl.*` key set is a problem.
    fn tls(&mut self, tls: bool) -> TlsSettings {
        let settings = TlsSettings::default();
        const TLS_KEYS: &[&str] = &[
            "ssl.key-store",
            "ssl.key-store-type",
            "ssl.key-store-password",
            "ssl.trust-store",
            "ssl.trust-store-type",
            "ssl.trust-store-password",
            "ssl.algorithm",
            "ssl.validate-server-certificate",
            "ssl.verify-hostname",
            "ssl.certificate",
            "ssl.private-key",
        ];
        if !tls {
            for key in TLS_KEYS {
                if self.is_set(key) {
                    self.problem(
                        key,
                        "TLS is off (no `amqps://` address and `ssl.enabled` is not true)",
                    );
                }
            }
            return settings;
        }
        let validate = self
            .boolean("ssl.validate-server-certificate")
            .unwrap_or(true);
        let verify_hostname = self.boolean("ssl.verify-hostname");
        if !validate {
            if verify_hostname == Some(true) {
                self.problem(
                    "ssl.verify-hostname",
                    "needs `ssl.validate-server-certificate`, which is false",
                );
            }
            if self.is_set("ssl.trust-store") {
                self.problem(
                    "ssl.trust-store",
                    "not used: `ssl.validate-server-certificate` is false, so any server \
                     certificate is taken",
                );
            }
        }
        let max_version = self.text("ssl.algorithm").and_then(|given| {
            match given.trim().to_ascii_uppercase().as_str() {
                "TLS" => None,
                "TLSV1.2" => Some(Some(TlsVersion::Tls12)),
                "TLSV1.3" => Some(Some(TlsVersion::Tls13)),
                _ => {
                    self.problem(
                        "ssl.algorithm",
                        format!("`{given}` is not offered (TLSv1.2, TLSv1.3 or TLS)"),
                    );
                    None
                }
            }
            .flatten()
        });
        TlsSettings {
            trust_store: self.trust_store(),
            key_store: self.key_store(),
            validate_server_certificate: validate,
            verify_hostname: validate && verify_hostname.unwrap_or(true),
            max_version,
        }
    }

    fn trust_store(&mut self) -> Option<TrustStore> {
        let password = self.text("ssl.trust-store-password");
        let Some((path, bytes)) = self.file("ssl.trust-store") else {
            for key in ["ssl.trust-store-type", "ssl.trust-store-password"] {
                if self.is_set(key) && !self.is_set("ssl.trust-store") {
                    self.problem(key, "there is no `ssl.trust-store` for it");
                }
            }
            return None;
        };
        let store = match self.store_kind("ssl.trust-store-type", "ssl.trust-store", &bytes)? {
            StoreKind::Pem => {
                if password.is_some() {
                    self.problem(
                        "ssl.trust-store-password",
                        "a PEM trust store has no password",
                    );
                }
                TrustStore::Pem { path, pem: bytes }
            }
            StoreKind::Pkcs12 => TrustStore::Pkcs12 {
                path,
                der: bytes,
                password: password.unwrap_or_default(),
            },
        };
        match tls::trusted(&store) {
            Ok(_) => Some(store),
            Err(e) => {
                self.problem("ssl.trust-store", e);
                None
            }
        }
    }

    fn key_store(&mut self) -> Option<KeyStore> {
        let password = self.text("ssl.key-store-password");
        let pem_pair = self.is_set("ssl.certificate") || self.is_set("ssl.private-key");
        let (key, store) = if pem_pair {
            if self.is_set("ssl.key-store") {
                self.problem(
                    "ssl.key-store",
                    "give either `ssl.key-store` or `ssl.certificate` and `ssl.private-key`",
                );
                return None;
            }
            if self.is_set("ssl.key-store-type") {
                self.problem(
                    "ssl.key-store-type",
                    "`ssl.certificate` and `ssl.private-key` are PEM files",
                );
            }
            for (given, other) in [
                ("ssl.certificate", "ssl.private-key"),
                ("ssl.private-key", "ssl.certificate"),
            ] {
                if self.is_set(given) && !self.is_set(other) {
                    self.problem(given, format!("needs `{other}` too"));
                }
            }
            let certificate = self.file("ssl.certificate");
            let private_key = self.file("ssl.private-key");
            let ((certificate_path, certificate), (key_path, key)) = (certificate?, private_key?);
            (
                "ssl.certificate",
                KeyStore::Pem {
                    certificate_path,
                    certificate,
                    key_path,
                    key,
                    password,
                },
            )
        } else {
            let Some((path, bytes)) = self.file("ssl.key-store") else {
                for key in ["ssl.key-store-type", "ssl.key-store-password"] {
                    if self.is_set(key) && !self.is_set("ssl.key-store") {
                        self.problem(key, "there is no `ssl.key-store` for it");
                    }
                }
                return None;
            };
            let store = match self.store_kind("ssl.key-store-type", "ssl.key-store", &bytes)? {
                StoreKind::Pem => KeyStore::Pem {
                    certificate_path: path.clone(),
                    certificate: bytes.clone(),
                    key_path: path,
                    key: bytes,
                    password,
                },
                StoreKind::Pkcs12 => KeyStore::Pkcs12 {
                    path,
                    der: bytes,
                    password: password.unwrap_or_default(),
                },
            };
            ("ssl.key-store", store)
        };
        match tls::identity(&store) {
            Ok(_) => Some(store),
            Err(e) => {
                self.problem(key, e);
                None
            }
        }
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

    /// The tree the `rabbit` binder sees for this configuration file.
    fn tree(yaml: &str) -> Value {
        binder_core::config::ConfigLoader::new()
            .env(Vec::<(String, String)>::new())
            .yaml_str(yaml)
            .load()
            .unwrap()
            .binder_environment("rabbit")
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

    /// The error's text for this configuration.
    fn refusal(yaml: &str) -> String {
        RabbitSettings::from_config(&tree(yaml))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn unusable_values_name_their_key() {
        let err = refusal("spring.rabbitmq.ssl.enabled: maybe");
        assert_eq!(
            err.matches("spring.rabbitmq.ssl.enabled: `maybe` is not `true` or `false`")
                .count(),
            1,
            "said once: {err}"
        );
        let err = refusal("spring.rabbitmq.connection-timeout: soon");
        assert!(
            err.contains("spring.rabbitmq.connection-timeout: `soon` is not a duration"),
            "{err}"
        );
        let err = refusal("spring.rabbitmq.uri: 'http://u:secret@mq/'");
        assert!(err.contains("spring.rabbitmq.uri: "), "{err}");
        assert!(
            !err.contains("secret"),
            "the password stays out of errors: {err}"
        );
        let err = refusal("spring.rabbitmq.port: 'x'");
        assert!(
            err.contains("spring.rabbitmq.port: `x` is not a port number"),
            "{err}"
        );
        let err = refusal("spring.rabbitmq.ssl.enabled: maybe");
        assert!(
            err.contains("spring.rabbitmq.ssl.enabled: `maybe` is not `true` or `false`"),
            "{err}"
        );
    }

    #[test]
    fn every_problem_is_reported_at_once_with_its_full_key() {
        let err = refusal(
            "spring.rabbitmq:\n  hots: mq\n  port: x\n  listener.simple.prefetch: 10\n  \
             ssl.bundle: corp\n  cache.channel.size: 5\n  publisher-confirm-type: simple\n  \
             template.retry.enabled: true\n  listener.simple.prefech: 3\n  stream.host: s\n",
        );
        let lines: Vec<&str> = err.lines().skip(1).collect();
        assert!(
            err.starts_with("invalid configuration: spring.rabbitmq (9 problems):"),
            "{err}"
        );
        for expected in [
            "spring.rabbitmq.hots: unknown property `hots`; did you mean `host`?",
            "spring.rabbitmq.port: `x` is not a port number",
            "spring.rabbitmq.listener.simple.prefetch: not supported: use \
             spring.cloud.stream.rabbit.bindings.<b>.consumer.prefetch",
            "spring.rabbitmq.listener.simple.prefech: unknown property `prefech`; did you mean \
             `prefetch`?",
            "spring.rabbitmq.ssl.bundle: not supported: Spring SSL bundles are not supported",
            "spring.rabbitmq.cache.channel.size: not supported: the binder has no connection",
            "spring.rabbitmq.publisher-confirm-type: `simple` is not offered: producers always \
             use publisher confirms",
            "spring.rabbitmq.template.retry.enabled: not supported: a send is not retried",
            "spring.rabbitmq.stream.host: not supported: RabbitMQ's stream protocol",
        ] {
            assert!(
                lines.iter().any(|l| l
                    .trim_start()
                    .trim_start_matches("- ")
                    .starts_with(expected)),
                "missing `{expected}` in:\n{err}"
            );
        }
        let err = refusal("spring.rabbitmq.listener: 3");
        assert!(
            err.contains("spring.rabbitmq.listener: expected a single value")
                || err.contains(
                    "spring.rabbitmq.listener: expected a group of properties, found a single value"
                ),
            "{err}"
        );
        let err = refusal("spring.rabbitmq.host: [a, b]");
        assert!(
            err.contains("spring.rabbitmq.host: expected a single value, found a list"),
            "{err}"
        );
        let err = refusal("spring.rabbitmq.host: {name: mq}");
        assert!(
            err.contains("spring.rabbitmq.host: expected a single value, found a group"),
            "{err}"
        );
        let err = refusal("spring.rabbitmq.colour: blue");
        assert!(
            err.contains("unknown property `colour`; expected one of: host, port, username"),
            "{err}"
        );
    }

    #[test]
    fn spring_values_that_say_what_the_binder_does_are_accepted() {
        let s = RabbitSettings::from_config(&tree(
            "spring.rabbitmq:\n  publisher-confirm-type: CORRELATED\n  publisher-returns: false\n  \
             dynamic: true\n  address-shuffle-mode: NONE\n  requested-channel-max: 100\n",
        ))
        .unwrap();
        assert_eq!(s.requested_channel_max, 100);
        assert_eq!(s.amqp_uri(&s.uris[0]).unwrap().query.channel_max, Some(100));
        let err = refusal(
            "spring.rabbitmq:\n  publisher-returns: true\n  address-shuffle-mode: random\n",
        );
        assert!(
            err.contains("spring.rabbitmq.publisher-returns: `true` is not offered"),
            "{err}"
        );
        assert!(
            err.contains("spring.rabbitmq.address-shuffle-mode: `random` is not offered"),
            "{err}"
        );
    }

    #[test]
    fn where_to_connect_is_said_once() {
        let err =
            refusal("spring.rabbitmq:\n  uri: amqp://u:p@mq/\n  host: other\n  username: x\n");
        assert!(
            err.contains("spring.rabbitmq.host: not used with `spring.rabbitmq.uri`"),
            "{err}"
        );
        assert!(
            err.contains("spring.rabbitmq.username: not used with"),
            "{err}"
        );
        let err = refusal("spring.rabbitmq:\n  addresses: a,b\n  host: other\n");
        assert!(
            err.contains("spring.rabbitmq.host: not used with `spring.rabbitmq.addresses`"),
            "{err}"
        );
        let s = RabbitSettings::from_config(&tree(
            "spring.rabbitmq:\n  addresses: [n1, 'n2:5673']\n  port: 5674\n",
        ))
        .unwrap();
        assert_eq!(
            s.uris,
            vec![
                "amqp://guest:guest@n1:5674/%2F",
                "amqp://guest:guest@n2:5673/%2F"
            ]
        );
    }

    #[test]
    fn environment_variables_are_checked_with_their_name() {
        let cfg = binder_core::config::ConfigLoader::new()
            .env([
                ("SPRING_RABBITMQ_HOTS", "mq"),
                ("SPRING_RABBITMQ_PASWORD", "secret"),
                ("SPRING_RABBITMQ_VIRTUAL_HOST", "/v"),
                ("SPRING_RABBITMQ_LISTENER_SIMPLE_PREFETCH", "5"),
            ])
            .yaml_str("spring.cloud.stream.bindings.in.destination: d\n")
            .load()
            .unwrap();
        let err = RabbitSettings::from_config(&cfg.binder_environment("rabbit"))
            .unwrap_err()
            .to_string();
        for expected in [
            "environment variable SPRING_RABBITMQ_HOTS: spring.rabbitmq.hots: unknown property \
             `hots`; did you mean `host`?",
            "environment variable SPRING_RABBITMQ_PASWORD: spring.rabbitmq.pasword: unknown \
             property `pasword`; did you mean `password`?",
            "environment variable SPRING_RABBITMQ_VIRTUAL_HOST: spring.rabbitmq.virtual: unknown \
             property `virtual`; did you mean `virtual-host`? (an environment variable runs a \
             property's words together: `SPRING_RABBITMQ_VIRTUALHOST`)",
            "environment variable SPRING_RABBITMQ_LISTENER_SIMPLE_PREFETCH: \
             spring.rabbitmq.listener.simple.prefetch: not supported: use \
             spring.cloud.stream.rabbit.bindings.<b>.consumer.prefetch",
        ] {
            assert!(err.contains(expected), "missing `{expected}` in:\n{err}");
        }
        assert!(!err.contains("secret"), "{err}");
        let cfg = binder_core::config::ConfigLoader::new()
            .env([
                ("SPRING_RABBITMQ_VIRTUALHOST", "/v"),
                ("SPRING_RABBITMQ_SSL_VERIFYHOSTNAME", "false"),
                ("SPRING_RABBITMQ_SSL_ENABLED", "true"),
            ])
            .yaml_str("spring.cloud.stream.bindings.in.destination: d\n")
            .load()
            .unwrap();
        let s = RabbitSettings::from_config(&cfg.binder_environment("rabbit")).unwrap();
        assert_eq!(s.uris, vec!["amqps://guest:guest@localhost:5671/%2Fv"]);
        assert!(!s.tls.verify_hostname);
    }

    #[test]
    fn tls_is_asked_for_by_the_scheme_or_ssl_enabled() {
        let s = RabbitSettings::from_config(&tree("spring.rabbitmq.ssl.enabled: true")).unwrap();
        assert_eq!(s.uris, vec!["amqps://guest:guest@localhost:5671/%2F"]);
        assert_eq!(s.tls, TlsSettings::default());
        let s = RabbitSettings::from_config(&tree(
            "spring.rabbitmq:\n  ssl: {enabled: true, validate-server-certificate: false, algorithm: TLSv1.2}\n  port: 5999\n",
        ))
        .unwrap();
        assert_eq!(s.uris, vec!["amqps://guest:guest@localhost:5999/%2F"]);
        assert!(!s.tls.validate_server_certificate);
        assert!(!s.tls.verify_hostname);
        assert_eq!(s.tls.max_version, Some(TlsVersion::Tls12));
        let s = RabbitSettings::from_config(&tree(
            "spring.rabbitmq:\n  uri: amqps://u:p@mq/v\n  ssl.verify-hostname: false\n",
        ))
        .unwrap();
        assert!(!s.tls.verify_hostname);

        let err = refusal("spring.rabbitmq:\n  uri: amqps://u:p@mq/v\n  ssl.enabled: false\n");
        assert!(
            err.contains(
                "spring.rabbitmq.ssl.enabled: is false, but `amqps://u:***@mq/v` asks for TLS"
            ),
            "{err}"
        );
        let err =
            refusal("spring.rabbitmq:\n  addresses: 'amqp://u:p@mq/v'\n  ssl.enabled: true\n");
        assert!(
            err.contains(
                "spring.rabbitmq.ssl.enabled: is true, but `amqp://u:***@mq/v` is plain AMQP"
            ),
            "{err}"
        );
        let err =
            refusal("spring.rabbitmq.ssl:\n  trust-store: /ca.pem\n  verify-hostname: false\n");
        assert!(
            err.contains("spring.rabbitmq.ssl.trust-store: TLS is off"),
            "{err}"
        );
        assert!(
            err.contains("spring.rabbitmq.ssl.verify-hostname: TLS is off"),
            "{err}"
        );
        let err = refusal(
            "spring.rabbitmq.ssl:\n  enabled: true\n  validate-server-certificate: false\n  verify-hostname: true\n  algorithm: SSLv3\n",
        );
        assert!(
            err.contains(
                "spring.rabbitmq.ssl.verify-hostname: needs `ssl.validate-server-certificate`"
            ),
            "{err}"
        );
        assert!(
            err.contains("spring.rabbitmq.ssl.algorithm: `SSLv3` is not offered"),
            "{err}"
        );
    }

    #[test]
    fn stores_that_cannot_be_read_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let jks = dir.path().join("trust.jks");
        std::fs::write(&jks, [0xFE, 0xED, 0xFE, 0xED, 0, 0, 0, 2]).unwrap();
        let missing = dir.path().join("missing.p12");
        let err = refusal(&format!(
            "spring.rabbitmq.ssl:\n  enabled: true\n  trust-store: '{}'\n  key-store: 'file:{}'\n  key-store-type: JKS\n  bundle: x\n",
            jks.display(),
            missing.display()
        ));
        assert!(
            err.contains("spring.rabbitmq.ssl.trust-store: is a Java KeyStore (JKS)"),
            "{err}"
        );
        assert!(
            err.contains("spring.rabbitmq.ssl.key-store: cannot read"),
            "{err}"
        );
        assert!(
            err.contains("spring.rabbitmq.ssl.bundle: not supported: Spring SSL bundles"),
            "{err}"
        );
        let err = refusal(&format!(
            "spring.rabbitmq.ssl:\n  enabled: true\n  trust-store: '{}'\n  trust-store-type: jks\n  key-store-password: x\n  certificate: classpath:client.pem\n",
            jks.display()
        ));
        assert!(err.contains("spring.rabbitmq.ssl.trust-store-type: `jks`: Java KeyStore (JKS) files cannot be read"), "{err}");
        assert!(err.contains("spring.rabbitmq.ssl.certificate: `classpath:client.pem`: there is no class path here"), "{err}");
        assert!(
            err.contains("spring.rabbitmq.ssl.certificate: needs `ssl.private-key` too")
                || err.contains("spring.rabbitmq.ssl.private-key"),
            "{err}"
        );
        let garbage = dir.path().join("ca.pem");
        std::fs::write(
            &garbage,
            "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let err = refusal(&format!(
            "spring.rabbitmq.ssl:\n  enabled: true\n  trust-store: '{}'\n  trust-store-password: x\n",
            garbage.display()
        ));
        assert!(
            err.contains("spring.rabbitmq.ssl.trust-store: not PEM certificates"),
            "{err}"
        );
        assert!(
            err.contains(
                "spring.rabbitmq.ssl.trust-store-password: a PEM trust store has no password"
            ),
            "{err}"
        );
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
