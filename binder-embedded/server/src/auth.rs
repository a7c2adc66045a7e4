//! Who may connect and what they may do: SASL `PLAIN` and `AMQPLAIN`, RabbitMQ's salted
//! SHA-256 password hashes, per-vhost configure/write/read permissions and the loopback rule.

use std::collections::HashMap;
use std::net::IpAddr;

use amq_protocol::types::{AMQPValue, FieldTable};
use base64::Engine as _;
use regex::Regex;
use sha2::{Digest, Sha256};

use crate::config::{PermissionConfig, ServerConfig};

/// A `rabbit_password_hashing_sha256` hash: base64 of a 4-byte salt followed by
/// `sha256(salt ++ password)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasswordHash {
    salt: [u8; 4],
    digest: [u8; 32],
}

/// A password hash that is not in RabbitMQ's SHA-256 format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("password_hash is not a base64 salted SHA-256 hash (4-byte salt + 32-byte digest)")]
pub struct BadHash;

impl PasswordHash {
    /// Reads a hash as `rabbitmqctl hash_password` prints it.
    pub fn parse(text: &str) -> Result<Self, BadHash> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|_| BadHash)?;
        if bytes.len() != 36 {
            return Err(BadHash);
        }
        let mut salt = [0; 4];
        salt.copy_from_slice(&bytes[..4]);
        let mut digest = [0; 32];
        digest.copy_from_slice(&bytes[4..]);
        Ok(PasswordHash { salt, digest })
    }

    /// Hashes a password with this salt.
    pub fn new(salt: [u8; 4], password: &[u8]) -> Self {
        let digest: [u8; 32] = Sha256::new()
            .chain_update(salt)
            .chain_update(password)
            .finalize()
            .into();
        PasswordHash { salt, digest }
    }

    /// The hash in its base64 form.
    pub fn encode(&self) -> String {
        let mut bytes = self.salt.to_vec();
        bytes.extend_from_slice(&self.digest);
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    /// Whether `password` hashes to this (compared in constant time).
    pub fn verify(&self, password: &[u8]) -> bool {
        let other = PasswordHash::new(self.salt, password);
        other
            .digest
            .iter()
            .zip(self.digest.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

/// Compiled permissions on one virtual host.
#[derive(Debug, Clone)]
pub struct Permissions {
    configure: Option<Regex>,
    write: Option<Regex>,
    read: Option<Regex>,
}

/// What an operation needs on a resource (RabbitMQ's permission kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Declare, delete.
    Configure,
    /// Publish to, bind to.
    Write,
    /// Consume from, get from, purge, bind from.
    Read,
}

/// Which kind of resource is checked (for RabbitMQ's refusal text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// An exchange (the default exchange is `amq.default`).
    Exchange,
    /// A queue.
    Queue,
}

impl Permissions {
    /// Compiles the three regular expressions (unanchored, as RabbitMQ matches them; an
    /// empty one matches nothing).
    pub fn compile(config: &PermissionConfig) -> Result<Self, regex::Error> {
        let one = |re: &str| -> Result<Option<Regex>, regex::Error> {
            if re.is_empty() {
                Ok(None)
            } else {
                Regex::new(re).map(Some)
            }
        };
        Ok(Permissions {
            configure: one(&config.configure)?,
            write: one(&config.write)?,
            read: one(&config.read)?,
        })
    }

    /// The regular expressions as configured (configure, write, read; empty for none), as
    /// RabbitMQ's definitions write them.
    pub fn sources(&self) -> [&str; 3] {
        fn source(re: &Option<Regex>) -> &str {
            re.as_ref().map_or("", Regex::as_str)
        }
        [
            source(&self.configure),
            source(&self.write),
            source(&self.read),
        ]
    }

    /// Whether `access` to the resource called `name` is granted.
    pub fn allows(&self, access: Access, name: &str) -> bool {
        let re = match access {
            Access::Configure => &self.configure,
            Access::Write => &self.write,
            Access::Read => &self.read,
        };
        re.as_ref().is_some_and(|re| re.is_match(name))
    }
}

/// A user as the server checks it.
#[derive(Debug)]
pub struct User {
    /// The name.
    pub name: String,
    /// Tags from the configuration.
    pub tags: Vec<String>,
    secret: Secret,
    permissions: HashMap<String, Permissions>,
    loopback_only: bool,
}

#[derive(Debug)]
enum Secret {
    Plain(String),
    Hash(PasswordHash),
}

impl User {
    /// Whether one of the user's tags is `tag`.
    pub fn has_tag(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| t == tag)
    }

    /// Whether the password is this user's.
    pub fn password_matches(&self, password: &[u8]) -> bool {
        match &self.secret {
            Secret::Plain(p) => {
                p.len() == password.len()
                    && p.bytes()
                        .zip(password.iter())
                        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                        == 0
            }
            Secret::Hash(h) => h.verify(password),
        }
    }

    /// The user's permissions on a virtual host, if any.
    pub fn permissions(&self, vhost: &str) -> Option<&Permissions> {
        self.permissions.get(vhost)
    }

    /// The user's permissions on every virtual host it has some on, by virtual host.
    pub fn all_permissions(&self) -> impl Iterator<Item = (&str, &Permissions)> {
        self.permissions.iter().map(|(v, p)| (v.as_str(), p))
    }

    /// The configured plain password (`password`), if the user has one rather than a
    /// `password_hash`.
    pub fn plain_password(&self) -> Option<&str> {
        match &self.secret {
            Secret::Plain(p) => Some(p),
            Secret::Hash(_) => None,
        }
    }

    /// The password as a `rabbit_password_hashing_sha256` hash, for RabbitMQ's definitions:
    /// the configured `password_hash`, or a configured plain password hashed with a fresh
    /// salt (each export gives another hash of the same password).
    pub fn password_hash(&self) -> String {
        match &self.secret {
            Secret::Hash(h) => h.encode(),
            Secret::Plain(p) => PasswordHash::new(fresh_salt(), p.as_bytes()).encode(),
        }
    }

    /// Checks an access, with RabbitMQ's 403 text when refused.
    pub fn check(
        &self,
        vhost: &str,
        access: Access,
        resource: Resource,
        name: &str,
    ) -> Result<(), String> {
        let name = match (resource, name) {
            (Resource::Exchange, "") => "amq.default",
            (_, n) => n,
        };
        if self
            .permissions(vhost)
            .is_some_and(|p| p.allows(access, name))
        {
            return Ok(());
        }
        let kind = match resource {
            Resource::Exchange => "exchange",
            Resource::Queue => "queue",
        };
        Err(format!(
            "access to {kind} '{name}' in vhost '{vhost}' refused for user '{}'",
            self.name
        ))
    }

    /// RabbitMQ's checks of what a declaration's arguments send messages to: a queue with
    /// `x-dead-letter-exchange` needs read on the queue and write on that exchange, an
    /// exchange with `alternate-exchange` read on the exchange and write on the alternate
    /// (else a user could route messages into an exchange it may not publish to). Run, as
    /// in RabbitMQ, when the declaration creates the queue or exchange. An argument that is
    /// not a string is left to the declaration's own checks.
    pub fn check_declared_targets(
        &self,
        vhost: &str,
        resource: Resource,
        name: &str,
        arguments: &stream_engine::FieldTable,
    ) -> Result<(), String> {
        let key = match resource {
            Resource::Queue => "x-dead-letter-exchange",
            Resource::Exchange => "alternate-exchange",
        };
        let Some(target) = arguments.get_str(key) else {
            return Ok(());
        };
        self.check(vhost, Access::Read, resource, name)?;
        self.check(vhost, Access::Write, Resource::Exchange, target)
    }

    /// RabbitMQ's `loopback_users` rule: such a user may connect only from a loopback
    /// address.
    pub fn may_connect_from(&self, peer: IpAddr) -> bool {
        !self.loopback_only || is_loopback(peer)
    }
}

fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// The configured users, compiled.
#[derive(Debug)]
pub struct Users {
    by_name: HashMap<String, std::sync::Arc<User>>,
}

/// Why a login failed (the text goes to the log; the client sees RabbitMQ's generic one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The mechanism is not `PLAIN` or `AMQPLAIN`.
    #[error("unknown authentication mechanism '{0}'")]
    UnknownMechanism(String),
    /// The SASL response could not be read.
    #[error("malformed {0} response")]
    Malformed(&'static str),
    /// No such user, or the wrong password.
    #[error("user '{0}' - invalid credentials")]
    InvalidCredentials(String),
    /// A loopback-only user connected from elsewhere.
    #[error("user '{0}' can only connect via localhost")]
    LoopbackOnly(String),
}

/// Four bytes no other salt is likely to have: from the standard library's per-process
/// random hash keys, stirred with a counter (a salt needs to differ, not to be secret).
fn fresh_salt() -> [u8; 4] {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let bytes = h.finish().to_le_bytes();
    [bytes[0], bytes[1], bytes[2], bytes[3]]
}

impl Users {
    /// Every user, by name.
    pub fn all(&self) -> Vec<&User> {
        let mut users: Vec<&User> = self.by_name.values().map(|u| &**u).collect();
        users.sort_by(|a, b| a.name.cmp(&b.name));
        users
    }

    /// The user of this name, if any.
    pub fn named(&self, name: &str) -> Option<&User> {
        self.by_name.get(name).map(|u| &**u)
    }

    /// Compiles the users of a configuration that [validated](ServerConfig::validate).
    pub fn from_config(config: &ServerConfig) -> Result<Self, crate::ConfigError> {
        config.validate()?;
        let mut by_name = HashMap::new();
        for u in &config.users {
            let secret =
                match (&u.password, &u.password_hash) {
                    (Some(p), _) => Secret::Plain(p.clone()),
                    (None, Some(h)) => Secret::Hash(PasswordHash::parse(h).map_err(|e| {
                        crate::ConfigError::Invalid(format!("user '{}': {e}", u.name))
                    })?),
                    (None, None) => {
                        return Err(crate::ConfigError::Invalid(format!(
                            "user '{}' has neither password nor password_hash",
                            u.name
                        )));
                    }
                };
            let mut permissions = HashMap::new();
            for (vhost, p) in &u.permissions {
                let compiled = Permissions::compile(p)
                    .map_err(|e| crate::ConfigError::Invalid(format!("user '{}': {e}", u.name)))?;
                permissions.insert(vhost.clone(), compiled);
            }
            by_name.insert(
                u.name.clone(),
                std::sync::Arc::new(User {
                    name: u.name.clone(),
                    tags: u.tags.clone(),
                    secret,
                    permissions,
                    loopback_only: config.loopback_users.contains(&u.name),
                }),
            );
        }
        Ok(Users { by_name })
    }

    /// Checks a user name and password from `peer` (HTTP basic authentication of the
    /// management API), with the loopback rule.
    pub fn login(
        &self,
        name: &str,
        password: &[u8],
        peer: IpAddr,
    ) -> Result<std::sync::Arc<User>, AuthError> {
        let user = self
            .by_name
            .get(name)
            .filter(|u| u.password_matches(password))
            .ok_or_else(|| AuthError::InvalidCredentials(name.to_owned()))?;
        if !user.may_connect_from(peer) {
            return Err(AuthError::LoopbackOnly(name.to_owned()));
        }
        Ok(user.clone())
    }

    /// Authenticates a SASL response from `peer`.
    pub fn authenticate(
        &self,
        mechanism: &str,
        response: &[u8],
        peer: IpAddr,
    ) -> Result<std::sync::Arc<User>, AuthError> {
        let (name, password) = match mechanism {
            "PLAIN" => parse_plain(response)?,
            "AMQPLAIN" => parse_amqplain(response)?,
            other => return Err(AuthError::UnknownMechanism(other.to_owned())),
        };
        self.login(&name, &password, peer)
    }
}

/// The mechanisms offered in `connection.start`, as RabbitMQ lists them.
pub const MECHANISMS: &str = "PLAIN AMQPLAIN";

/// `PLAIN`: `[authzid] NUL authcid NUL password`.
fn parse_plain(response: &[u8]) -> Result<(String, Vec<u8>), AuthError> {
    let mut parts = response.splitn(3, |b| *b == 0);
    let (Some(_authzid), Some(user), Some(password)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(AuthError::Malformed("PLAIN"));
    };
    let user = std::str::from_utf8(user).map_err(|_| AuthError::Malformed("PLAIN"))?;
    Ok((user.to_owned(), password.to_vec()))
}

/// `AMQPLAIN`: a field table without its length prefix, with `LOGIN` and `PASSWORD`.
fn parse_amqplain(response: &[u8]) -> Result<(String, Vec<u8>), AuthError> {
    let malformed = || AuthError::Malformed("AMQPLAIN");
    let len = u32::try_from(response.len()).map_err(|_| malformed())?;
    let mut framed = Vec::with_capacity(response.len() + 4);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(response);
    let (rest, table): (&[u8], FieldTable) =
        amq_protocol::types::parsing::parse_field_table(&framed[..]).map_err(|_| malformed())?;
    if !rest.is_empty() {
        return Err(malformed());
    }
    let text = |key: &str| -> Result<Vec<u8>, AuthError> {
        match table.inner().get(key) {
            Some(AMQPValue::LongString(s)) => Ok(s.as_bytes().to_vec()),
            Some(AMQPValue::ShortString(s)) => Ok(s.as_str().as_bytes().to_vec()),
            _ => Err(malformed()),
        }
    };
    let user = String::from_utf8(text("LOGIN")?).map_err(|_| malformed())?;
    Ok((user, text("PASSWORD")?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::UserConfig;

    fn users() -> Users {
        let mut config = ServerConfig::default();
        config.users.push(UserConfig {
            name: "app".into(),
            password_hash: Some("kI3GCqG+cq65rBQ9tiUUCREygKhmilKrZEWKSz+H0FJ1fk4/".into()),
            password: None,
            tags: vec![],
            permissions: [(
                "/".to_owned(),
                PermissionConfig {
                    configure: "^app\\.".into(),
                    write: "".into(),
                    read: ".*".into(),
                },
            )]
            .into(),
        });
        Users::from_config(&config).unwrap()
    }

    const LOCAL: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
    const REMOTE: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 1, 2, 3));

    #[test]
    fn rabbitmq_sha256_hashes_verify() {
        let h = PasswordHash::parse("kI3GCqG+cq65rBQ9tiUUCREygKhmilKrZEWKSz+H0FJ1fk4/").unwrap();
        assert!(h.verify(b"secret"));
        assert!(!h.verify(b"secreT"));
        assert_eq!(
            h.encode(),
            "kI3GCqG+cq65rBQ9tiUUCREygKhmilKrZEWKSz+H0FJ1fk4/"
        );
        assert_eq!(PasswordHash::parse("c2hvcnQ="), Err(BadHash));
    }

    #[test]
    fn plain_and_amqplain_authenticate() {
        let u = users();
        assert_eq!(
            u.authenticate("PLAIN", b"\0app\0secret", REMOTE)
                .unwrap()
                .name,
            "app"
        );
        let amqplain = amq_protocol::auth::Credentials::new("app".into(), "secret".into())
            .sasl_auth_string(amq_protocol::auth::SASLMechanism::AMQPlain);
        assert_eq!(
            u.authenticate("AMQPLAIN", amqplain.as_bytes(), REMOTE)
                .unwrap()
                .name,
            "app"
        );
        assert_eq!(
            u.authenticate("PLAIN", b"\0app\0wrong", LOCAL).unwrap_err(),
            AuthError::InvalidCredentials("app".into())
        );
        assert_eq!(
            u.authenticate("PLAIN", b"\0nobody\0x", LOCAL).unwrap_err(),
            AuthError::InvalidCredentials("nobody".into())
        );
        assert_eq!(
            u.authenticate("PLAIN", b"garbage", LOCAL).unwrap_err(),
            AuthError::Malformed("PLAIN")
        );
        assert_eq!(
            u.authenticate("AMQPLAIN", b"\xff\xff", LOCAL).unwrap_err(),
            AuthError::Malformed("AMQPLAIN")
        );
        assert!(matches!(
            u.authenticate("EXTERNAL", b"", LOCAL),
            Err(AuthError::UnknownMechanism(_))
        ));
    }

    #[test]
    fn guest_connects_from_loopback_only() {
        let u = users();
        assert!(u.authenticate("PLAIN", b"\0guest\0guest", LOCAL).is_ok());
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        assert!(u.authenticate("PLAIN", b"\0guest\0guest", mapped).is_ok());
        assert!(
            u.authenticate("PLAIN", b"\0guest\0guest", "::1".parse().unwrap())
                .is_ok()
        );
        assert_eq!(
            u.authenticate("PLAIN", b"\0guest\0guest", REMOTE)
                .unwrap_err(),
            AuthError::LoopbackOnly("guest".into())
        );
    }

    #[test]
    fn permissions_match_unanchored_and_empty_matches_nothing() {
        let u = users();
        let app = u.authenticate("PLAIN", b"\0app\0secret", LOCAL).unwrap();
        assert!(
            app.check("/", Access::Configure, Resource::Queue, "app.q")
                .is_ok()
        );
        let refused = app
            .check("/", Access::Configure, Resource::Queue, "other")
            .unwrap_err();
        assert_eq!(
            refused,
            "access to queue 'other' in vhost '/' refused for user 'app'"
        );
        assert!(
            app.check("/", Access::Write, Resource::Exchange, "")
                .is_err()
        );
        assert!(app.check("/", Access::Read, Resource::Queue, "x").is_ok());
        assert!(
            app.check("other", Access::Read, Resource::Queue, "x")
                .is_err()
        );
    }
}
