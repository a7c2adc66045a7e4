//! What the server is told: listen address, virtual hosts, users and their permissions,
//! limits. [`ServerConfig::from_toml`] reads the standalone server's TOML file, refusing
//! unknown keys by name.
//!
//! ```toml
//! listen = "127.0.0.1:5673"
//! vhosts = ["/"]
//! data_dir = "/var/lib/stream-broker"
//! durability = "sync"
//! disk_free_limit = 50000000
//! consumer_timeout = 1800000             # ms a delivery may wait for its ack; false: for ever
//! loopback_users = ["guest"]
//!
//! [limits]
//! frame_max = 131072
//! channel_max = 2047
//! heartbeat = 60
//!
//! [[users]]
//! name = "guest"
//! password = "guest"
//! tags = ["administrator"]
//! permissions = { "/" = { configure = ".*", write = ".*", read = ".*" } }
//!
//! [tls]                                  # a second listener, AMQP over TLS (amqps)
//! listen = "127.0.0.1:5671"
//! certfile = "/etc/stream-broker/server.pem"
//! keyfile = "/etc/stream-broker/server.key"
//! cacertfile = "/etc/stream-broker/ca.pem"
//! verify = "verify_peer"
//! fail_if_no_peer_cert = true
//! versions = ["tlsv1.3", "tlsv1.2"]
//!
//! [management]                           # the HTTP management API and page (off without it)
//! listen = "127.0.0.1:15672"
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use stream_store::SyncMode;

/// The smallest `frame_max` AMQP allows (RabbitMQ's `FRAME_MIN_SIZE`).
pub const FRAME_MIN_SIZE: u32 = 4096;

/// The server's configuration.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Where to listen. Default `127.0.0.1:5673` (5672 is usually RabbitMQ's).
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// The virtual hosts. Default `["/"]`.
    #[serde(default = "default_vhosts")]
    pub vhosts: Vec<String>,
    /// Users allowed to connect from loopback addresses only (RabbitMQ's `loopback_users`).
    /// Default `["guest"]`.
    #[serde(default = "default_loopback_users")]
    pub loopback_users: Vec<String>,
    /// The users. Default: `guest` with password `guest`, full permissions on `/`.
    #[serde(default = "default_users")]
    pub users: Vec<UserConfig>,
    /// Protocol and resource limits.
    #[serde(default)]
    pub limits: Limits,
    /// Memory high watermark in bytes for the brokers the standalone server creates (`None`:
    /// the engine's default, 400 MiB). A server given its brokers refuses this setting.
    #[serde(default)]
    pub memory_high_watermark: Option<usize>,
    /// Where the standalone server keeps durable exchanges, queues and bindings and the
    /// persistent messages of durable queues, one directory per virtual host under it (see
    /// [`vhost_dir`]). `None`: memory only, nothing survives a restart. A server given its
    /// brokers refuses this setting (give them their stores instead).
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
    /// When a persistent message's publisher confirm (and a `tx.commit`) is released:
    /// `sync` (after the `fdatasync` that covers it; the default), `interval:<ms>` (the
    /// store syncs every so often, confirms at once) or `none` (never syncs until a clean
    /// shutdown). Needs `data_dir`.
    #[serde(default, deserialize_with = "sync_mode")]
    pub durability: Option<SyncMode>,
    /// The free-disk watermark in bytes (RabbitMQ's `disk_free_limit.absolute`): while the
    /// file system holding `data_dir` has less free space, publishers are blocked
    /// (`connection.blocked`, reason `low on disk`). `None`: RabbitMQ's default, 50 MB
    /// ([`stream_store::DEFAULT_DISK_FREE_LIMIT`]). Needs `data_dir`.
    #[serde(default)]
    pub disk_free_limit: Option<u64>,
    /// Above this fraction of the memory high watermark, persistent messages entering
    /// durable queues keep only a stub in memory; their bodies are read back from `data_dir`
    /// when delivered (RabbitMQ's `vm_memory_high_watermark_paging_ratio`). `None`: the
    /// engine's default, 0.5. Above 0 and at most 1; needs `data_dir`.
    #[serde(default)]
    pub memory_paging_ratio: Option<f64>,
    /// A second listener speaking AMQP over TLS (RabbitMQ's `listeners.ssl.default` and
    /// `ssl_options.*`); `None`: plain AMQP only.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// The HTTP management API and page (a subset of RabbitMQ's management plugin, see
    /// the crate's README); `None`: off, as RabbitMQ's plugin is until enabled.
    #[serde(default)]
    pub management: Option<ManagementConfig>,
    /// A definitions file (RabbitMQ's JSON, as `GET /api/definitions` exports it) imported
    /// at every start, before the server listens (RabbitMQ's `load_definitions`): its
    /// policies, queues, exchanges and bindings are set and declared as
    /// `POST /api/definitions` would, and its users, virtual hosts and permissions must be
    /// the configured ones. A file that cannot be read or imported stops the start, naming
    /// the entry. Works without `[management]`.
    #[serde(default)]
    pub load_definitions: Option<PathBuf>,
    /// RabbitMQ's delivery acknowledgement timeout (`consumer_timeout`), in milliseconds: a
    /// channel holding a delivery unacknowledged for longer is closed with 406
    /// `PRECONDITION_FAILED` and its deliveries are requeued. `None`: RabbitMQ's default,
    /// 30 minutes ([`DEFAULT_CONSUMER_TIMEOUT`]); `false` never times a delivery out. For the
    /// brokers the standalone server creates.
    #[serde(default, deserialize_with = "consumer_timeout")]
    pub consumer_timeout: Option<ConsumerTimeout>,
}

/// RabbitMQ's default `consumer_timeout`: 30 minutes.
pub const DEFAULT_CONSUMER_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// The `consumer_timeout` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerTimeout {
    /// A delivery unacknowledged this long closes its channel.
    After(Duration),
    /// Deliveries wait for their acknowledgement for ever (`consumer_timeout = false`).
    Never,
}

impl ConsumerTimeout {
    /// The engine's setting for this one (`None`: RabbitMQ's default).
    pub fn for_engine(setting: Option<ConsumerTimeout>) -> Option<Duration> {
        match setting {
            None => Some(DEFAULT_CONSUMER_TIMEOUT),
            Some(ConsumerTimeout::After(d)) => Some(d),
            Some(ConsumerTimeout::Never) => None,
        }
    }
}

/// What `consumer_timeout` takes, for its refusals.
const CONSUMER_TIMEOUT_FORMS: &str = "give the milliseconds a delivery may wait for its \
     acknowledgement (above 0), or false to wait for ever";

/// `consumer_timeout`: milliseconds above 0, or `false`.
fn consumer_timeout<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<ConsumerTimeout>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Given {
        Millis(i64),
        Flag(bool),
    }
    let refused = |what: String| {
        serde::de::Error::custom(format!(
            "consumer_timeout is {what}: {CONSUMER_TIMEOUT_FORMS}"
        ))
    };
    match Given::deserialize(d) {
        Ok(Given::Millis(ms)) if ms > 0 => Ok(Some(ConsumerTimeout::After(Duration::from_millis(
            ms as u64,
        )))),
        Ok(Given::Millis(ms)) => Err(refused(ms.to_string())),
        Ok(Given::Flag(false)) => Ok(Some(ConsumerTimeout::Never)),
        Ok(Given::Flag(true)) => Err(refused("true".into())),
        Err(_) => Err(refused("neither a number nor false".into())),
    }
}

/// The HTTP management listener (`[management]`): RabbitMQ's `management.tcp.*`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ManagementConfig {
    /// Where it listens; default `127.0.0.1:15672` (RabbitMQ's port). Port 0 picks one
    /// ([`Server::management_addr`](crate::Server::management_addr) tells which).
    #[serde(default = "default_management_listen")]
    pub listen: SocketAddr,
    /// Must be `true` for a `listen` address that is not a loopback one: the API can purge
    /// queues and publish, so it is not exposed to the network by accident.
    #[serde(default)]
    pub allow_remote: bool,
    /// How often message rates are sampled, in milliseconds (RabbitMQ's
    /// `collect_statistics_interval`, default 5000); rates are over the last interval.
    #[serde(default = "default_sample_interval_ms")]
    pub sample_interval_ms: u64,
}

impl Default for ManagementConfig {
    fn default() -> Self {
        ManagementConfig {
            listen: default_management_listen(),
            allow_remote: false,
            sample_interval_ms: default_sample_interval_ms(),
        }
    }
}

impl ManagementConfig {
    /// Checks the loopback rule and the sample interval.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.listen.ip().is_loopback() && !self.allow_remote {
            return Err(ConfigError::Invalid(format!(
                "management.listen {} is not a loopback address: set management.allow_remote = \
                 true to serve the management API to the network",
                self.listen
            )));
        }
        if self.sample_interval_ms < 10 {
            return Err(ConfigError::Invalid(format!(
                "management.sample_interval_ms {} is below 10",
                self.sample_interval_ms
            )));
        }
        Ok(())
    }

    /// The sample interval as a duration.
    pub fn sample_interval(&self) -> Duration {
        Duration::from_millis(self.sample_interval_ms)
    }
}

fn default_management_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 15672))
}

fn default_sample_interval_ms() -> u64 {
    5000
}

/// The TLS listener (`[tls]`): RabbitMQ's `listeners.ssl.default` and `ssl_options.*`.
/// Its files are read and checked when the server starts ([`Server::standalone`],
/// [`Server::bind_now`]), not when the configuration is parsed.
///
/// [`Server::standalone`]: crate::Server::standalone
/// [`Server::bind_now`]: crate::Server::bind_now
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// Where the TLS listener listens (`listeners.ssl.default`); required, since RabbitMQ's
    /// 5671 is usually taken on a machine running RabbitMQ.
    pub listen: SocketAddr,
    /// The server's certificate, then the intermediate CAs of its chain, PEM
    /// (`ssl_options.certfile`).
    pub certfile: PathBuf,
    /// The certificate's private key, PEM: PKCS#8, PKCS#1 (RSA) or SEC1 (EC), not encrypted
    /// (`ssl_options.keyfile`).
    pub keyfile: PathBuf,
    /// The CA certificates a client's certificate must chain to, PEM
    /// (`ssl_options.cacertfile`). Needed by, and only used with, `verify = "verify_peer"`.
    #[serde(default)]
    pub cacertfile: Option<PathBuf>,
    /// Whether clients' certificates are asked for and checked (`ssl_options.verify`);
    /// default `verify_none`, as in RabbitMQ.
    #[serde(default)]
    pub verify: TlsVerify,
    /// With `verify_peer`: refuse a client that presents no certificate
    /// (`ssl_options.fail_if_no_peer_cert`); default false, as in RabbitMQ.
    #[serde(default)]
    pub fail_if_no_peer_cert: bool,
    /// The TLS versions offered (`ssl_options.versions`): `tlsv1.2`, `tlsv1.3`; default
    /// both. Older versions are refused: rustls does not implement them.
    #[serde(default = "default_tls_versions", deserialize_with = "tls_versions")]
    pub versions: Vec<TlsVersion>,
}

/// `ssl_options.verify`.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
pub enum TlsVerify {
    /// Clients' certificates are not asked for.
    #[default]
    #[serde(rename = "verify_none")]
    VerifyNone,
    /// Clients are asked for a certificate, which must chain to `cacertfile`.
    #[serde(rename = "verify_peer")]
    VerifyPeer,
}

/// A TLS protocol version, as RabbitMQ's `ssl_options.versions` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    /// `tlsv1.2`.
    Tls12,
    /// `tlsv1.3`.
    Tls13,
}

impl std::fmt::Display for TlsVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TlsVersion::Tls12 => "tlsv1.2",
            TlsVersion::Tls13 => "tlsv1.3",
        })
    }
}

impl std::str::FromStr for TlsVersion {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "tlsv1.2" => Ok(TlsVersion::Tls12),
            "tlsv1.3" => Ok(TlsVersion::Tls13),
            "tlsv1.1" | "tlsv1" | "sslv3" => Err(format!(
                "'{text}' is not supported: rustls implements tlsv1.2 and tlsv1.3 only"
            )),
            _ => Err(format!(
                "'{text}' is not a TLS version (expected 'tlsv1.2' or 'tlsv1.3')"
            )),
        }
    }
}

fn default_tls_versions() -> Vec<TlsVersion> {
    vec![TlsVersion::Tls13, TlsVersion::Tls12]
}

fn tls_versions<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<TlsVersion>, D::Error> {
    let texts = Vec::<String>::deserialize(d)?;
    let mut versions = Vec::with_capacity(texts.len());
    for text in texts {
        let version: TlsVersion = text.parse().map_err(serde::de::Error::custom)?;
        if versions.contains(&version) {
            return Err(serde::de::Error::custom(format!(
                "'{text}' is listed twice"
            )));
        }
        versions.push(version);
    }
    Ok(versions)
}

impl TlsConfig {
    /// Checks the settings that can be checked without reading the files.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |s: &str| Err(ConfigError::Invalid(format!("tls.{s}")));
        if self.versions.is_empty() {
            return invalid("versions is empty: give 'tlsv1.2', 'tlsv1.3' or both");
        }
        match self.verify {
            TlsVerify::VerifyNone => {
                if self.fail_if_no_peer_cert {
                    return invalid(
                        "fail_if_no_peer_cert = true needs verify = \"verify_peer\": with \
                         verify_none no client certificate is asked for",
                    );
                }
                if self.cacertfile.is_some() {
                    return invalid(
                        "cacertfile is only used with verify = \"verify_peer\" (to check \
                         clients' certificates); with verify_none it would be ignored (put the \
                         server's intermediate CAs in certfile, after its certificate)",
                    );
                }
            }
            TlsVerify::VerifyPeer => {
                if self.cacertfile.is_none() {
                    return invalid(
                        "verify = \"verify_peer\" needs cacertfile: the CAs clients' \
                         certificates must chain to",
                    );
                }
            }
        }
        Ok(())
    }
}

fn sync_mode<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<SyncMode>, D::Error> {
    let text = String::deserialize(d)?;
    text.parse().map(Some).map_err(serde::de::Error::custom)
}

/// The directory under `data_dir` that holds a virtual host's store: its name with every
/// byte outside `[A-Za-z0-9._-]` written as `%XX` (the default vhost `/` is `%2F`).
pub fn vhost_dir(data_dir: &Path, vhost: &str) -> PathBuf {
    let mut name = String::with_capacity(vhost.len());
    for byte in vhost.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-') {
            name.push(char::from(byte));
        } else {
            name.push_str(&format!("%{byte:02X}"));
        }
    }
    // `.` and `..` would not be directories of their own.
    if name.bytes().all(|b| b == b'.') {
        name = name.replace('.', "%2E");
    }
    data_dir.join(name)
}

/// Protocol and resource limits; defaults are RabbitMQ's.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest frame in bytes, offered in `connection.tune` (RabbitMQ: 131072).
    pub frame_max: u32,
    /// Highest channel number, offered in `connection.tune` (RabbitMQ: 2047).
    pub channel_max: u16,
    /// Heartbeat interval in seconds offered in `connection.tune`; 0 disables (RabbitMQ: 60).
    pub heartbeat: u16,
    /// Time from the TCP accept to `connection.open-ok`, in milliseconds, a TLS handshake
    /// included (RabbitMQ: 10000).
    pub handshake_timeout_ms: u64,
    /// Most connections at once; further ones are refused at `connection.open` with 530
    /// (`None`: no limit).
    pub max_connections: Option<usize>,
    /// Largest message body in bytes; larger publishes fail with 406 (RabbitMQ: 128 MiB).
    pub max_message_size: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            frame_max: 131_072,
            channel_max: 2047,
            heartbeat: 60,
            handshake_timeout_ms: 10_000,
            max_connections: None,
            max_message_size: 128 * 1024 * 1024,
        }
    }
}

impl Limits {
    /// The handshake timeout as a duration.
    pub fn handshake_timeout(&self) -> Duration {
        Duration::from_millis(self.handshake_timeout_ms)
    }
}

/// A user.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    /// The user name.
    pub name: String,
    /// A RabbitMQ-style password hash (`rabbit_password_hashing_sha256`: base64 of a 4-byte
    /// salt followed by SHA-256 of the salt and the password).
    #[serde(default)]
    pub password_hash: Option<String>,
    /// A plain password (for development); exactly one of `password` and `password_hash`.
    #[serde(default)]
    pub password: Option<String>,
    /// Tags (`administrator`, `monitoring`, `policymaker`, `management`, ...). As in
    /// RabbitMQ they grant nothing over AMQP (the server logs them with each connection);
    /// they open the management API (`[management]`) and decide what it shows.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Permissions per virtual host.
    #[serde(default)]
    pub permissions: BTreeMap<String, PermissionConfig>,
}

/// RabbitMQ permissions on one virtual host: regular expressions over resource names (an
/// empty one matches nothing).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PermissionConfig {
    /// Declare and delete.
    pub configure: String,
    /// Publish to an exchange, bind to a destination.
    pub write: String,
    /// Consume, get, purge, bind from a source.
    pub read: String,
}

impl PermissionConfig {
    /// Everything (`.*` for all three).
    pub fn all() -> Self {
        PermissionConfig {
            configure: ".*".into(),
            write: ".*".into(),
            read: ".*".into(),
        }
    }
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 5673))
}

fn default_vhosts() -> Vec<String> {
    vec!["/".to_owned()]
}

fn default_loopback_users() -> Vec<String> {
    vec!["guest".to_owned()]
}

fn default_users() -> Vec<UserConfig> {
    vec![UserConfig {
        name: "guest".into(),
        password_hash: None,
        password: Some("guest".into()),
        tags: vec!["administrator".into()],
        permissions: [("/".to_owned(), PermissionConfig::all())].into(),
    }]
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: default_listen(),
            vhosts: default_vhosts(),
            loopback_users: default_loopback_users(),
            users: default_users(),
            limits: Limits::default(),
            memory_high_watermark: None,
            data_dir: None,
            durability: None,
            disk_free_limit: None,
            memory_paging_ratio: None,
            tls: None,
            management: None,
            load_definitions: None,
            consumer_timeout: None,
        }
    }
}

/// A configuration the server refuses.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The system's error.
        source: std::io::Error,
    },
    /// The TOML is malformed or has an unknown key (named in the message).
    #[error("invalid configuration: {0}")]
    Parse(#[from] toml::de::Error),
    /// A value is out of range or inconsistent.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl ServerConfig {
    /// Parses a TOML configuration and checks it.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let config: ServerConfig = toml::from_str(text)?;
        config.validate()?;
        Ok(config)
    }

    /// Reads and checks a TOML configuration file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml(&text)
    }

    /// Checks ranges and consistency (users' passwords, permissions on known vhosts, regular
    /// expressions that compile).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |s: String| Err(ConfigError::Invalid(s));
        if self.limits.frame_max < FRAME_MIN_SIZE {
            return invalid(format!(
                "limits.frame_max {} is below the minimum {FRAME_MIN_SIZE}",
                self.limits.frame_max
            ));
        }
        if self.consumer_timeout == Some(ConsumerTimeout::After(Duration::ZERO)) {
            return invalid(format!("consumer_timeout is 0: {CONSUMER_TIMEOUT_FORMS}"));
        }
        if self.limits.max_message_size == 0 {
            return invalid("limits.max_message_size must be positive".into());
        }
        if self.durability.is_some() && self.data_dir.is_none() {
            return invalid(
                "durability is set but data_dir is not: without a data directory nothing is \
                 kept on disk"
                    .into(),
            );
        }
        if self.disk_free_limit.is_some() && self.data_dir.is_none() {
            return invalid(
                "disk_free_limit is set but data_dir is not: without a data directory the \
                 server writes nothing to disk"
                    .into(),
            );
        }
        if let Some(ratio) = self.memory_paging_ratio {
            if self.data_dir.is_none() {
                return invalid(
                    "memory_paging_ratio is set but data_dir is not: without a data directory \
                     every message stays in memory"
                        .into(),
                );
            }
            if !(ratio > 0.0 && ratio <= 1.0) {
                return invalid(format!(
                    "memory_paging_ratio is {ratio}: it is a fraction of the memory high \
                     watermark, above 0 and at most 1"
                ));
            }
        }
        if let Some(tls) = &self.tls {
            tls.validate()?;
        }
        if let Some(management) = &self.management {
            management.validate()?;
        }
        if self.vhosts.is_empty() {
            return invalid("vhosts is empty".into());
        }
        let mut seen = std::collections::BTreeSet::new();
        for vhost in &self.vhosts {
            if !seen.insert(vhost) {
                return invalid(format!("vhost '{vhost}' is listed twice"));
            }
        }
        let mut names = std::collections::BTreeSet::new();
        for user in &self.users {
            if !names.insert(&user.name) {
                return invalid(format!("user '{}' is listed twice", user.name));
            }
            match (&user.password, &user.password_hash) {
                (Some(_), Some(_)) => {
                    return invalid(format!(
                        "user '{}' has both password and password_hash",
                        user.name
                    ));
                }
                (None, None) => {
                    return invalid(format!(
                        "user '{}' has neither password nor password_hash",
                        user.name
                    ));
                }
                (None, Some(hash)) => {
                    crate::auth::PasswordHash::parse(hash)
                        .map_err(|e| ConfigError::Invalid(format!("user '{}': {e}", user.name)))?;
                }
                (Some(_), None) => {}
            }
            for (vhost, perms) in &user.permissions {
                if !self.vhosts.contains(vhost) {
                    return invalid(format!(
                        "user '{}' has permissions on unknown vhost '{vhost}'",
                        user.name
                    ));
                }
                crate::auth::Permissions::compile(perms).map_err(|e| {
                    ConfigError::Invalid(format!("user '{}' on vhost '{vhost}': {e}", user.name))
                })?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_rabbitmqs() {
        let c = ServerConfig::from_toml("").unwrap();
        assert_eq!(c.listen, "127.0.0.1:5673".parse().unwrap());
        assert_eq!(c.limits.frame_max, 131_072);
        assert_eq!(c.limits.channel_max, 2047);
        assert_eq!(c.limits.heartbeat, 60);
        assert_eq!(c.limits.handshake_timeout_ms, 10_000);
        assert_eq!(c.vhosts, vec!["/"]);
        assert_eq!(c.loopback_users, vec!["guest"]);
        assert_eq!(c.users[0].name, "guest");
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        let e = ServerConfig::from_toml("listen = \"127.0.0.1:1\"\nssl = true\n").unwrap_err();
        assert!(e.to_string().contains("unknown field `ssl`"), "{e}");
        let e = ServerConfig::from_toml("[limits]\nframe_maximum = 5\n").unwrap_err();
        assert!(e.to_string().contains("frame_maximum"), "{e}");
    }

    #[test]
    fn memory_paging_ratio_is_a_fraction_and_needs_a_data_dir() {
        let c = ServerConfig::from_toml("data_dir = \"d\"\nmemory_paging_ratio = 0.25\n").unwrap();
        assert_eq!(c.memory_paging_ratio, Some(0.25));
        for bad in ["0.0", "1.5", "-0.5"] {
            let e = ServerConfig::from_toml(&format!(
                "data_dir = \"d\"\nmemory_paging_ratio = {bad}\n"
            ))
            .unwrap_err();
            assert!(
                e.to_string().contains("memory_paging_ratio is"),
                "{bad}: {e}"
            );
        }
        let e = ServerConfig::from_toml("memory_paging_ratio = 0.5\n").unwrap_err();
        assert!(e.to_string().contains("but data_dir is not"), "{e}");
    }

    #[test]
    fn disk_free_limit_is_read_and_needs_a_data_dir() {
        let c =
            ServerConfig::from_toml("data_dir = \"d\"\ndisk_free_limit = 1000000000\n").unwrap();
        assert_eq!(c.disk_free_limit, Some(1_000_000_000));
        let e = ServerConfig::from_toml("disk_free_limit = 1000\n").unwrap_err();
        assert!(
            e.to_string()
                .contains("disk_free_limit is set but data_dir is not"),
            "{e}"
        );
        let e =
            ServerConfig::from_toml("data_dir = \"d\"\ndisk_free_limit = \"1GB\"\n").unwrap_err();
        assert!(e.to_string().contains("disk_free_limit"), "{e}");
    }

    #[test]
    fn durability_is_read_and_needs_a_data_dir() {
        let c =
            ServerConfig::from_toml("data_dir = \"/var/lib/sb\"\ndurability = \"interval:20\"\n")
                .unwrap();
        assert_eq!(c.data_dir, Some(PathBuf::from("/var/lib/sb")));
        assert_eq!(
            c.durability,
            Some(SyncMode::Interval(Duration::from_millis(20)))
        );
        let c = ServerConfig::from_toml("data_dir = \"d\"\n").unwrap();
        assert_eq!(c.durability, None, "sync is the store's default");
        let e = ServerConfig::from_toml("data_dir = \"d\"\ndurability = \"fast\"\n").unwrap_err();
        assert!(
            e.to_string().contains("durability") && e.to_string().contains("'fast'"),
            "{e}"
        );
        let e = ServerConfig::from_toml("durability = \"none\"\n").unwrap_err();
        assert!(e.to_string().contains("data_dir is not"), "{e}");
    }

    #[test]
    fn management_is_off_unless_configured_and_loopback_unless_asked() {
        assert_eq!(ServerConfig::from_toml("").unwrap().management, None);
        let c = ServerConfig::from_toml("[management]\n").unwrap();
        let m = c.management.unwrap();
        assert_eq!(m.listen, "127.0.0.1:15672".parse().unwrap());
        assert_eq!(m.sample_interval_ms, 5000);
        let e = ServerConfig::from_toml("[management]\nlisten = \"0.0.0.0:15672\"\n").unwrap_err();
        assert!(e.to_string().contains("allow_remote"), "{e}");
        let c =
            ServerConfig::from_toml("[management]\nlisten = \"0.0.0.0:0\"\nallow_remote = true\n")
                .unwrap();
        assert!(c.management.unwrap().allow_remote);
        let e = ServerConfig::from_toml("[management]\nport = 15672\n").unwrap_err();
        assert!(e.to_string().contains("unknown field `port`"), "{e}");
        let e = ServerConfig::from_toml("[management]\nsample_interval_ms = 1\n").unwrap_err();
        assert!(e.to_string().contains("sample_interval_ms"), "{e}");
    }

    #[test]
    fn each_vhost_has_a_directory_of_its_own() {
        let root = Path::new("/data");
        assert_eq!(vhost_dir(root, "/"), Path::new("/data/%2F"));
        assert_eq!(vhost_dir(root, "prod-1.eu"), Path::new("/data/prod-1.eu"));
        assert_eq!(vhost_dir(root, "a/b c"), Path::new("/data/a%2Fb%20c"));
        assert_eq!(vhost_dir(root, ".."), Path::new("/data/%2E%2E"));
        assert_eq!(vhost_dir(root, "é"), Path::new("/data/%C3%A9"));
    }

    #[test]
    fn a_full_file_parses() {
        let c = ServerConfig::from_toml(
            r#"
            listen = "0.0.0.0:5800"
            vhosts = ["/", "prod"]
            loopback_users = []
            [limits]
            frame_max = 8192
            channel_max = 16
            heartbeat = 5
            max_connections = 10
            [[users]]
            name = "app"
            password_hash = "kI3GCqG+cq65rBQ9tiUUCREygKhmilKrZEWKSz+H0FJ1fk4/"
            tags = ["management"]
            permissions = { prod = { configure = "^app\\.", write = ".*", read = ".*" } }
            "#,
        )
        .unwrap();
        assert_eq!(c.limits.frame_max, 8192);
        assert_eq!(c.limits.max_connections, Some(10));
        assert_eq!(c.users[0].permissions["prod"].configure, "^app\\.");
    }

    #[test]
    fn inconsistent_files_are_refused() {
        for (text, needle) in [
            ("[limits]\nframe_max = 100\n", "frame_max"),
            ("[[users]]\nname = \"a\"\n", "neither"),
            (
                "[[users]]\nname = \"a\"\npassword = \"x\"\npassword_hash = \"y\"\n",
                "both",
            ),
            (
                "[[users]]\nname = \"a\"\npassword = \"x\"\npermissions = { nope = { configure = \"\", write = \"\", read = \"\" } }\n",
                "unknown vhost",
            ),
            (
                "[[users]]\nname = \"a\"\npassword = \"x\"\npermissions = { \"/\" = { configure = \"(\", write = \"\", read = \"\" } }\n",
                "regex",
            ),
            ("[[users]]\nname = \"a\"\npassword_hash = \"!!\"\n", "hash"),
        ] {
            let e = ServerConfig::from_toml(text).unwrap_err().to_string();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }

    const TLS: &str =
        "[tls]\nlisten = \"127.0.0.1:5671\"\ncertfile = \"s.pem\"\nkeyfile = \"s.key\"\n";

    #[test]
    fn a_tls_table_reads_rabbitmqs_ssl_options() {
        let c = ServerConfig::from_toml(TLS).unwrap();
        let tls = c.tls.unwrap();
        assert_eq!(tls.listen, "127.0.0.1:5671".parse().unwrap());
        assert_eq!(tls.certfile, PathBuf::from("s.pem"));
        assert_eq!(tls.verify, TlsVerify::VerifyNone, "RabbitMQ's default");
        assert!(!tls.fail_if_no_peer_cert);
        assert_eq!(tls.versions, vec![TlsVersion::Tls13, TlsVersion::Tls12]);
        let c = ServerConfig::from_toml(&format!(
            "{TLS}cacertfile = \"ca.pem\"\nverify = \"verify_peer\"\nfail_if_no_peer_cert = true\nversions = [\"tlsv1.2\"]\n"
        ))
        .unwrap();
        let tls = c.tls.unwrap();
        assert_eq!(tls.verify, TlsVerify::VerifyPeer);
        assert!(tls.fail_if_no_peer_cert);
        assert_eq!(tls.versions, vec![TlsVersion::Tls12]);
        assert_eq!(ServerConfig::from_toml("").unwrap().tls, None);
    }

    #[test]
    fn tls_settings_that_cannot_be_honoured_are_refused_by_name() {
        for (extra, needle) in [
            ("fail_if_no_peer_cert = true\n", "tls.fail_if_no_peer_cert"),
            (
                "verify = \"verify_peer\"\n",
                "verify_peer\" needs cacertfile",
            ),
            ("cacertfile = \"ca.pem\"\n", "tls.cacertfile is only used"),
            ("versions = [\"tlsv1.1\"]\n", "'tlsv1.1' is not supported"),
            ("versions = [\"tls1.3\"]\n", "'tls1.3' is not a TLS version"),
            ("versions = []\n", "tls.versions is empty"),
            ("versions = [\"tlsv1.2\", \"tlsv1.2\"]\n", "listed twice"),
            ("verify = \"verify_always\"\n", "verify_always"),
            ("password = \"secret\"\n", "unknown field `password`"),
            ("ciphers = []\n", "unknown field `ciphers`"),
        ] {
            let e = ServerConfig::from_toml(&format!("{TLS}{extra}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(needle), "{extra}: {e}");
        }
        let e = ServerConfig::from_toml("[tls]\ncertfile = \"s.pem\"\nkeyfile = \"s.key\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing field `listen`"), "{e}");
        let e =
            ServerConfig::from_toml("[tls]\nlisten = \"127.0.0.1:5671\"\nkeyfile = \"s.key\"\n")
                .unwrap_err()
                .to_string();
        assert!(e.contains("missing field `certfile`"), "{e}");
    }
}
