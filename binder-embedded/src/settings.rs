//! The embedded binder's settings: `spring.embedded.*` in the environment a binder
//! configuration sees (the whole configuration, or a binder's `environment` over it).

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

#[cfg(test)]
use binder_core::binder::BinderErrorKind;
use binder_core::binder::{BinderError, BinderResult};
use config::{Value, ValueKind};
use stream_store::SyncMode;

/// The prefix of every setting the embedded binder reads.
pub const PREFIX: &str = "spring.embedded";

const WATERMARK_KEY: &str = "memory-high-watermark";
const LISTEN_KEY: &str = "listen";
const SERVER_CONFIG_KEY: &str = "server-config";
const DATA_DIR_KEY: &str = "data-dir";
const DURABILITY_KEY: &str = "durability";
const DISK_FREE_LIMIT_KEY: &str = "disk-free-limit";
const PAGING_RATIO_KEY: &str = "memory-paging-ratio";

/// The embedded binder's settings, as written.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EmbeddedSettings {
    /// `spring.embedded.memory-high-watermark`, if set.
    pub memory_high_watermark: Option<MemoryWatermark>,
    /// `spring.embedded.listen`: serve the in-process broker on the network at this address
    /// (AMQP 0-9-1, as `stream-broker` does), so other processes reach it with the `rabbit`
    /// binder.
    pub listen: Option<SocketAddr>,
    /// `spring.embedded.server-config`: a `stream-broker` TOML file (users, permissions,
    /// limits) for the listener; `listen` overrides its address.
    pub server_config: Option<PathBuf>,
    /// `spring.embedded.data-dir`: keep durable exchanges, queues and bindings and the
    /// persistent messages of durable queues in this directory, so they survive a restart
    /// or a crash (none: memory only).
    pub data_dir: Option<PathBuf>,
    /// `spring.embedded.durability`: when a persistent message's confirm is released,
    /// `sync` (after the fsync that covers it; the default), `interval:<ms>` or `none`.
    /// Needs `data-dir`.
    pub durability: Option<SyncMode>,
    /// `spring.embedded.disk-free-limit`: publishers are blocked while the data directory's
    /// disk has fewer free bytes than this (RabbitMQ's `disk_free_limit`; default 50 MB).
    /// Needs `data-dir`.
    pub disk_free_limit: Option<u64>,
    /// `spring.embedded.memory-paging-ratio`: above this fraction of the memory high
    /// watermark, persistent messages entering durable queues keep only a stub in memory and
    /// their bodies are read back from the data directory when delivered (RabbitMQ's
    /// `vm_memory_high_watermark_paging_ratio`; default 0.5, above 0 and at most 1). Needs
    /// `data-dir`.
    pub memory_paging_ratio: Option<f64>,
}

/// The memory high watermark of the engine, in the spirit of RabbitMQ's
/// `vm_memory_high_watermark`: above it, publishers are blocked.
///
/// Written as a fraction of the machine's memory (`0.4`, or `{relative: 0.4}`), or as a size
/// (`{absolute: 64MiB}`, `{absolute: 67108864}`). Sizes take RabbitMQ's units: `k`/`KiB`,
/// `M`/`MiB`, `G`/`GiB`, `T`/`TiB` are powers of 1024; `kB`, `MB`, `GB`, `TB` powers of 1000;
/// no unit is bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MemoryWatermark {
    /// A fraction of the memory available to the process (more than 0, at most 1): the
    /// machine's, or the cgroup's limit when that is lower.
    Relative(f64),
    /// Bytes.
    Absolute(u64),
}

impl fmt::Display for MemoryWatermark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemoryWatermark::Relative(r) => write!(f, "{{relative: {r}}}"),
            MemoryWatermark::Absolute(b) => write!(f, "{{absolute: {b}}}"),
        }
    }
}

impl MemoryWatermark {
    /// The watermark in bytes; a relative one reads the memory available to the process.
    pub fn bytes(&self) -> BinderResult<usize> {
        match *self {
            MemoryWatermark::Absolute(b) => Ok(usize::try_from(b).unwrap_or(usize::MAX)),
            MemoryWatermark::Relative(r) => {
                let total = available_memory().ok_or_else(|| {
                    BinderError::config(format!(
                        "`{PREFIX}.{WATERMARK_KEY}` is {self}, but the memory available to \
                         this process cannot be read here (/proc/meminfo); give a size \
                         instead, e.g. `{{absolute: 64MiB}}`"
                    ))
                })?;
                Ok((total as f64 * r) as usize)
            }
        }
    }
}

/// Memory available to the process: the machine's (`MemTotal`), or its cgroup's limit when
/// lower (as RabbitMQ reads it in a container).
fn available_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let total_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    let total = total_kib * 1024;
    Some(cgroup_limit().map_or(total, |limit| limit.min(total)))
}

/// The memory limit of this process's cgroup (v2 `memory.max`, else v1
/// `memory.limit_in_bytes`), if it has one.
fn cgroup_limit() -> Option<u64> {
    let read =
        |path: &str| -> Option<u64> { std::fs::read_to_string(path).ok()?.trim().parse().ok() };
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("0::"))
                .map(|p| format!("/sys/fs/cgroup{}/memory.max", p.trim_end_matches('/')))
        });
    own.as_deref()
        .and_then(read)
        .or_else(|| read("/sys/fs/cgroup/memory.max"))
        .or_else(|| read("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
}

/// Spellings agree when case, `-` and `_` are ignored (Spring's relaxed binding).
fn relaxed(key: &str) -> String {
    key.chars()
        .filter(|c| *c != '-' && *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}

fn child<'a>(tree: &'a Value, key: &str) -> Option<&'a Value> {
    let ValueKind::Table(t) = &tree.kind else {
        return None;
    };
    let want = relaxed(key);
    t.iter().find(|(k, _)| relaxed(k) == want).map(|(_, v)| v)
}

fn config_error(key: &str, message: impl fmt::Display) -> BinderError {
    BinderError::config(format!("`{PREFIX}.{key}` {message}"))
}

/// A size with RabbitMQ's units (`64MiB`, `2GB`, `1024`).
fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let n: u64 = text[..digits].parse().ok()?;
    let unit = text[digits..].trim();
    let scale: u64 = match unit {
        "" => 1,
        "k" | "K" | "KiB" | "kiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "T" | "TiB" => 1 << 40,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        _ => return None,
    };
    n.checked_mul(scale)
}

/// A number given as one (integer or float) or as a string.
fn as_number(value: &Value) -> Option<f64> {
    match &value.kind {
        ValueKind::Float(f) => Some(*f),
        ValueKind::I64(i) => Some(*i as f64),
        ValueKind::U64(u) => Some(*u as f64),
        ValueKind::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    }
}

/// `memory-paging-ratio`: a fraction of the memory high watermark, above 0 and at most 1.
fn paging_ratio(key: &str, value: &Value) -> BinderResult<f64> {
    let fraction = as_number(value);
    match fraction {
        Some(f) if f > 0.0 && f <= 1.0 => Ok(f),
        _ => Err(config_error(
            key,
            format_args!(
                "is `{value}`; it is a fraction of the memory high watermark, above 0 and at \
                 most 1 (e.g. `0.5`)"
            ),
        )),
    }
}

fn relative(key: &str, value: &Value) -> BinderResult<MemoryWatermark> {
    let fraction = as_number(value);
    match fraction {
        Some(f) if f > 0.0 && f <= 1.0 => Ok(MemoryWatermark::Relative(f)),
        Some(f) if f > 1.0 => Err(config_error(
            key,
            format_args!(
                "is `{value}`, a fraction of memory above 1; for a size in bytes write \
                 `{{absolute: {f}}}`"
            ),
        )),
        _ => Err(config_error(
            key,
            format_args!(
                "is `{value}`, which is not a fraction of memory (more than 0, at most 1, \
                 e.g. `0.4`)"
            ),
        )),
    }
}

fn absolute(key: &str, value: &Value) -> BinderResult<MemoryWatermark> {
    size(key, value).map(MemoryWatermark::Absolute)
}

/// A size in bytes above zero: a number, or a string with a unit.
fn size(key: &str, value: &Value) -> BinderResult<u64> {
    let bytes = match &value.kind {
        ValueKind::I64(i) if *i > 0 => Some(*i as u64),
        ValueKind::U64(u) if *u > 0 => Some(*u),
        ValueKind::String(s) => parse_size(s).filter(|b| *b > 0),
        _ => None,
    };
    bytes.ok_or_else(|| {
        config_error(
            key,
            format_args!(
                "is `{value}`, which is not a size above zero (bytes, or with a unit: \
                 `64MiB`, `2GB`, `512k`)"
            ),
        )
    })
}

fn watermark(value: &Value) -> BinderResult<MemoryWatermark> {
    let ValueKind::Table(table) = &value.kind else {
        return relative(WATERMARK_KEY, value);
    };
    let mut found = None;
    for (k, v) in table {
        let parsed = match relaxed(k).as_str() {
            "relative" => relative(&format!("{WATERMARK_KEY}.{k}"), v)?,
            "absolute" => absolute(&format!("{WATERMARK_KEY}.{k}"), v)?,
            _ => {
                return Err(config_error(
                    &format!("{WATERMARK_KEY}.{k}"),
                    "is not a setting: the watermark is `relative` (a fraction of memory) \
                     or `absolute` (a size)",
                ));
            }
        };
        if found.replace(parsed).is_some() {
            return Err(config_error(
                WATERMARK_KEY,
                "gives both `relative` and `absolute`; give one",
            ));
        }
    }
    found.ok_or_else(|| {
        config_error(
            WATERMARK_KEY,
            "is empty; give `relative` (e.g. `{relative: 0.4}`) or `absolute` (e.g. \
             `{absolute: 64MiB}`)",
        )
    })
}

impl EmbeddedSettings {
    /// Reads `spring.embedded.*` from a binder's environment. A key the binder does not know,
    /// or a value it cannot use, is an error naming the key.
    pub fn from_config(tree: &Value) -> BinderResult<Self> {
        let mut settings = EmbeddedSettings::default();
        let Some(section) = child(tree, "spring").and_then(|s| child(s, "embedded")) else {
            return Ok(settings);
        };
        let ValueKind::Table(table) = &section.kind else {
            return Err(BinderError::config(format!(
                "`{PREFIX}` is `{section}`; it holds settings (`{WATERMARK_KEY}`, \
                 `{LISTEN_KEY}`, `{SERVER_CONFIG_KEY}`, `{DATA_DIR_KEY}`, `{DURABILITY_KEY}`, \
                 `{DISK_FREE_LIMIT_KEY}`, `{PAGING_RATIO_KEY}`)"
            )));
        };
        for (k, v) in table {
            match relaxed(k).as_str() {
                "memoryhighwatermark" => settings.memory_high_watermark = Some(watermark(v)?),
                "listen" => settings.listen = Some(listen(k, v)?),
                "serverconfig" => {
                    settings.server_config = Some(PathBuf::from(text(k, v, "a file's path")?))
                }
                "datadir" => {
                    settings.data_dir = Some(PathBuf::from(text(k, v, "a directory's path")?))
                }
                "durability" => {
                    let written = text(k, v, "`sync`, `interval:<ms>` or `none`")?;
                    let mode = written
                        .parse()
                        .map_err(|e| config_error(k, format_args!("is `{written}`: {e}")))?;
                    settings.durability = Some(mode);
                }
                "diskfreelimit" => settings.disk_free_limit = Some(size(k, v)?),
                "memorypagingratio" => settings.memory_paging_ratio = Some(paging_ratio(k, v)?),
                _ => {
                    return Err(config_error(
                        k,
                        format_args!(
                            "is not a setting of the embedded binder (it has \
                             `{WATERMARK_KEY}`, `{LISTEN_KEY}`, `{SERVER_CONFIG_KEY}`, \
                             `{DATA_DIR_KEY}`, `{DURABILITY_KEY}`, `{DISK_FREE_LIMIT_KEY}`, \
                             `{PAGING_RATIO_KEY}`)"
                        ),
                    ));
                }
            }
        }
        if settings.durability.is_some() && settings.data_dir.is_none() {
            return Err(config_error(
                DURABILITY_KEY,
                format_args!(
                    "says when persistent messages are on disk, but `{PREFIX}.{DATA_DIR_KEY}` \
                     gives no directory: the broker keeps them in memory only"
                ),
            ));
        }
        if settings.disk_free_limit.is_some() && settings.data_dir.is_none() {
            return Err(config_error(
                DISK_FREE_LIMIT_KEY,
                format_args!(
                    "guards the disk the message store writes to, but `{PREFIX}.{DATA_DIR_KEY}` \
                     gives no directory: the broker writes nothing to disk"
                ),
            ));
        }
        if settings.memory_paging_ratio.is_some() && settings.data_dir.is_none() {
            return Err(config_error(
                PAGING_RATIO_KEY,
                format_args!(
                    "says when message bodies are paged to disk, but `{PREFIX}.{DATA_DIR_KEY}` \
                     gives no directory: the broker keeps every message in memory"
                ),
            ));
        }
        if settings.server_config.is_some() && settings.listen.is_none() {
            return Err(config_error(
                SERVER_CONFIG_KEY,
                format_args!(
                    "configures the network listener, which only runs when `{PREFIX}.{LISTEN_KEY}` \
                     gives its address"
                ),
            ));
        }
        Ok(settings)
    }
}

/// A string setting (YAML may have typed it as something else).
fn text(key: &str, value: &Value, what: &str) -> BinderResult<String> {
    match &value.kind {
        ValueKind::String(s) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
        _ => Err(config_error(
            key,
            format_args!("is `{value}`; expected {what}"),
        )),
    }
}

/// `listen`: a socket address (`127.0.0.1:5673`, `[::1]:5673`, `0.0.0.0:5673`).
fn listen(key: &str, value: &Value) -> BinderResult<SocketAddr> {
    let written = text(key, value, "an address and port, e.g. `127.0.0.1:5673`")?;
    written.parse().map_err(|_| {
        config_error(
            key,
            format_args!(
                "is `{written}`, which is not an address and port (e.g. `127.0.0.1:5673`; \
                 port 5672 is usually RabbitMQ's)"
            ),
        )
    })
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

    fn read(yaml: &str) -> BinderResult<Option<MemoryWatermark>> {
        EmbeddedSettings::from_config(&tree(yaml)).map(|s| s.memory_high_watermark)
    }

    #[test]
    fn data_dir_durability_and_disk_free_limit_are_read_and_need_a_data_dir() {
        let s = EmbeddedSettings::from_config(&tree(
            "spring.embedded:\n  data-dir: /var/lib/orders\n  durability: interval:25\n",
        ))
        .unwrap();
        assert_eq!(s.data_dir, Some(PathBuf::from("/var/lib/orders")));
        assert_eq!(
            s.durability,
            Some(SyncMode::Interval(std::time::Duration::from_millis(25)))
        );
        let e = refused("spring.embedded:\n  data-dir: d\n  durability: fast\n");
        assert!(
            e.contains("spring.embedded.durability") && e.contains("fast"),
            "{e}"
        );
        let s = EmbeddedSettings::from_config(&tree(
            "spring.embedded:\n  data-dir: d\n  disk-free-limit: 2GB\n",
        ))
        .unwrap();
        assert_eq!(s.disk_free_limit, Some(2_000_000_000));
        let e = refused("spring.embedded:\n  data-dir: d\n  disk-free-limit: lots\n");
        assert!(
            e.contains("spring.embedded.disk-free-limit") && e.contains("lots"),
            "{e}"
        );
        let e = refused("spring.embedded.disk-free-limit: 1GB\n");
        assert!(e.contains("gives no directory"), "{e}");
        let e = refused("spring.embedded.durability: sync\n");
        assert!(e.contains("spring.embedded.data-dir"), "{e}");
    }

    #[test]
    fn the_paging_ratio_is_a_fraction_and_needs_a_data_dir() {
        let s = EmbeddedSettings::from_config(&tree(
            "spring.embedded:\n  data-dir: d\n  memory-paging-ratio: 0.25\n",
        ))
        .unwrap();
        assert_eq!(s.memory_paging_ratio, Some(0.25));
        for bad in ["0", "1.5", "-0.1", "half"] {
            let e = refused(&format!(
                "spring.embedded:\n  data-dir: d\n  memory-paging-ratio: {bad}\n"
            ));
            assert!(
                e.contains("spring.embedded.memory-paging-ratio") && e.contains("at most 1"),
                "{bad}: {e}"
            );
        }
        let e = refused("spring.embedded.memory-paging-ratio: 0.5\n");
        assert!(e.contains("gives no directory"), "{e}");
    }

    fn refused(yaml: &str) -> String {
        match read(yaml) {
            Err(e) if e.kind() == BinderErrorKind::Config => e
                .to_string()
                .strip_prefix("invalid configuration: ")
                .expect("a configuration error says so first")
                .to_owned(),
            other => panic!("{yaml}: expected a configuration error, got {other:?}"),
        }
    }

    #[test]
    fn the_listener_settings_read_an_address_and_a_file() {
        let s = EmbeddedSettings::from_config(&tree(
            "spring.embedded: {listen: '127.0.0.1:5673', server-config: broker.toml}",
        ))
        .unwrap();
        assert_eq!(s.listen, Some("127.0.0.1:5673".parse().unwrap()));
        assert_eq!(s.server_config, Some(PathBuf::from("broker.toml")));
        assert_eq!(
            refused("spring.embedded.listen: localhost"),
            "`spring.embedded.listen` is `localhost`, which is not an address and port (e.g. `127.0.0.1:5673`; port 5672 is usually RabbitMQ's)"
        );
        assert!(
            refused("spring.embedded.server-config: broker.toml")
                .starts_with("`spring.embedded.server-config` configures the network listener"),
        );
        assert!(refused("spring.embedded.listn: '127.0.0.1:5673'").contains("`listen`"));
    }

    #[test]
    fn the_watermark_reads_as_a_fraction_or_a_size() {
        use MemoryWatermark::*;
        assert_eq!(read("other: 1").unwrap(), None);
        let cases = [
            ("spring.embedded.memory-high-watermark: 0.4", Relative(0.4)),
            ("spring.embedded.memory-high-watermark: 1", Relative(1.0)),
            (
                "spring.embedded.memoryHighWatermark: '0.25'",
                Relative(0.25),
            ),
            (
                "spring.embedded.memory-high-watermark: {relative: 0.6}",
                Relative(0.6),
            ),
            (
                "spring.embedded.memory-high-watermark: {absolute: 64MiB}",
                Absolute(64 << 20),
            ),
            (
                "spring.embedded.memory-high-watermark: {absolute: 1024}",
                Absolute(1024),
            ),
            (
                "spring.embedded.memory-high-watermark: {absolute: 2GB}",
                Absolute(2_000_000_000),
            ),
            (
                "spring.embedded.memory-high-watermark: {absolute: 512k}",
                Absolute(512 << 10),
            ),
            (
                "spring:\n  embedded:\n    memory_high_watermark:\n      ABSOLUTE: 3G",
                Absolute(3 << 30),
            ),
        ];
        for (yaml, want) in cases {
            assert_eq!(read(yaml).unwrap(), Some(want), "{yaml}");
        }
    }

    #[test]
    fn unusable_values_and_unknown_keys_are_refused_by_name() {
        let key = "`spring.embedded.memory-high-watermark`";
        for yaml in [
            "spring.embedded.memory-high-watermark: lots",
            "spring.embedded.memory-high-watermark: 0",
            "spring.embedded.memory-high-watermark: -0.5",
            "spring.embedded.memory-high-watermark: 64MiB",
            "spring.embedded.memory-high-watermark: {}",
            "spring.embedded.memory-high-watermark: {relative: 0.4, absolute: 1024}",
        ] {
            assert!(refused(yaml).starts_with(key), "{yaml}: {}", refused(yaml));
        }
        let above_one = refused("spring.embedded.memory-high-watermark: 67108864");
        assert!(above_one.contains("{absolute: 67108864}"), "{above_one}");
        assert!(
            refused("spring.embedded.memory-high-watermark: {absolute: 64 parsecs}")
                .starts_with("`spring.embedded.memory-high-watermark.absolute`")
        );
        assert!(
            refused("spring.embedded.memory-high-watermark: {relative: 1.5}")
                .starts_with("`spring.embedded.memory-high-watermark.relative`")
        );
        assert!(
            refused("spring.embedded.memory-high-watermark: {percent: 40}")
                .starts_with("`spring.embedded.memory-high-watermark.percent` is not a setting")
        );
        assert!(
            refused("spring.embedded.memory-high-watermrk: 0.4")
                .starts_with("`spring.embedded.memory-high-watermrk` is not a setting")
        );
        assert!(refused("spring.embedded: 3").starts_with("`spring.embedded`"));
    }

    #[test]
    fn a_relative_watermark_is_a_share_of_available_memory() {
        let total = available_memory().expect("this test runs on Linux");
        let half = MemoryWatermark::Relative(0.5).bytes().unwrap() as u64;
        assert!(
            half.abs_diff(total / 2) <= 1,
            "{half} is not half of {total}"
        );
        assert_eq!(MemoryWatermark::Absolute(4096).bytes().unwrap(), 4096);
    }
}
