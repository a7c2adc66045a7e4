//! Logging a service gets without setting anything up: a `tracing` subscriber writing to
//! stderr, filtered by `RUST_LOG` or by Spring Boot's `logging.level.*` properties.

use std::io::IsTerminal;
use std::str::FromStr;

use config::{Value, ValueKind};
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::{ConfigError, Problem, StreamConfig};

/// The level when neither `RUST_LOG` nor `logging.level.root` says otherwise.
pub const DEFAULT_LEVEL: LevelFilter = LevelFilter::INFO;

/// Installs a subscriber that writes to stderr, unless the program has set one already.
/// Returns whether it installed one.
///
/// The filter comes from `RUST_LOG` when it is set (`info,binder_core=debug`: a default level
/// and `target=level` pairs; span and field filters are not supported), else from the
/// configuration's `logging.level` tree, as in Spring Boot:
///
/// ```yaml
/// logging.level:
///   root: warn                  # every target not named below (default: info)
///   binder_core: debug          # a crate, and the modules inside it
///   "[binder_core.runtime]": trace   # a module path, dots or `::`
/// ```
///
/// Levels are `trace`, `debug`, `info`, `warn`, `error` and `off`, in any case (Spring's
/// `fatal` is `error`). A value that is none of these, or an unparsable `RUST_LOG`, is a
/// configuration problem naming the key.
///
/// ```
/// let config = binder_core::config::ConfigLoader::new()
///     .yaml_str("logging.level: {root: warn, binder_core: debug}\n")
///     .load()
///     .unwrap();
/// let filter = binder_core::runtime::log_filter(&config, None).unwrap();
/// assert_eq!(filter.to_string(), "binder_core=debug,warn");
/// ```
pub fn init_logging(config: &StreamConfig) -> Result<bool, ConfigError> {
    // A program with a subscriber of its own keeps it, and reads RUST_LOG as it likes.
    if tracing::dispatcher::has_been_set() {
        return Ok(false);
    }
    let rust_log = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty());
    let filter = log_filter(config, rust_log.as_deref())?;
    let installed = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::stderr().is_terminal()),
        )
        .with(filter)
        .try_init()
        .is_ok();
    Ok(installed)
}

/// The filter [`init_logging`] installs: from `rust_log` (the value of `RUST_LOG`) when
/// given, else from `logging.level.*`, else [`DEFAULT_LEVEL`].
pub fn log_filter(config: &StreamConfig, rust_log: Option<&str>) -> Result<Targets, ConfigError> {
    if let Some(spec) = rust_log {
        return Targets::from_str(spec).map_err(|e| {
            invalid(
                Some("environment variable RUST_LOG"),
                "RUST_LOG",
                format!("expected `level` or `target=level` pairs separated by commas ({e}), found `{spec}`"),
            )
        });
    }
    let mut targets = Targets::new().with_default(DEFAULT_LEVEL);
    let Some(levels) = level_tree(config.raw()) else {
        return Ok(targets);
    };
    let mut problems = Vec::new();
    let mut entries = Vec::new();
    flatten(&levels, "", &mut entries);
    for (target, value) in entries {
        let path = format!("logging.level.{target}");
        match parse_level(&value) {
            Some(level) if target == "root" => targets = targets.with_default(level),
            Some(level) => targets = targets.with_target(target.replace('.', "::"), level),
            None => problems.push(Problem {
                origin: value.origin().map(str::to_owned),
                path,
                message: format!(
                    "expected one of trace, debug, info, warn, error, off; found `{}`",
                    render(&value)
                ),
            }),
        }
    }
    if problems.is_empty() {
        Ok(targets)
    } else {
        Err(ConfigError::Invalid(problems))
    }
}

fn invalid(origin: Option<&str>, path: &str, message: String) -> ConfigError {
    ConfigError::Invalid(vec![Problem {
        origin: origin.map(str::to_owned),
        path: path.to_owned(),
        message,
    }])
}

/// `logging.level`, if the tree has it.
fn level_tree(raw: &Value) -> Option<Value> {
    let ValueKind::Table(root) = &raw.kind else {
        return None;
    };
    let ValueKind::Table(logging) = &root.get("logging")?.kind else {
        return None;
    };
    logging.get("level").cloned()
}

/// Nested tables (`binder_core: {runtime: debug}`, as the loader splits dotted keys) become
/// one target per leaf (`binder_core.runtime`).
fn flatten(value: &Value, prefix: &str, out: &mut Vec<(String, Value)>) {
    match &value.kind {
        ValueKind::Table(table) => {
            for (key, child) in table {
                let key = key.trim_start_matches('[').trim_end_matches(']');
                let path = if prefix.is_empty() {
                    key.to_owned()
                } else {
                    format!("{prefix}.{key}")
                };
                flatten(child, &path, out);
            }
        }
        _ => out.push((prefix.to_owned(), value.clone())),
    }
}

fn parse_level(value: &Value) -> Option<LevelFilter> {
    let ValueKind::String(s) = &value.kind else {
        return None;
    };
    match s.trim().to_ascii_lowercase().as_str() {
        "trace" => Some(LevelFilter::TRACE),
        "debug" => Some(LevelFilter::DEBUG),
        "info" => Some(LevelFilter::INFO),
        "warn" | "warning" => Some(LevelFilter::WARN),
        "error" | "fatal" => Some(LevelFilter::ERROR),
        "off" | "false" => Some(LevelFilter::OFF),
        _ => None,
    }
}

fn render(value: &Value) -> String {
    match &value.kind {
        ValueKind::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigLoader;

    fn load(yaml: &str) -> StreamConfig {
        ConfigLoader::new().yaml_str(yaml).load().unwrap()
    }

    #[test]
    fn default_is_info() {
        let f = log_filter(&load("a: 1\n"), None).unwrap();
        assert_eq!(f.default_level(), Some(LevelFilter::INFO));
    }

    #[test]
    fn spring_levels_nested_dotted_and_bracketed() {
        let c = load(
            "logging.level:\n  root: WARN\n  binder_core.runtime: debug\n  \"[lapin.channel]\": error\n  binder_rabbit: TRACE\n",
        );
        let f = log_filter(&c, None).unwrap();
        assert_eq!(f.default_level(), Some(LevelFilter::WARN));
        assert!(f.would_enable("binder_core::runtime::app", &tracing::Level::DEBUG));
        assert!(!f.would_enable("binder_core::config", &tracing::Level::INFO));
        assert!(!f.would_enable("lapin::channel", &tracing::Level::WARN));
        assert!(f.would_enable("binder_rabbit", &tracing::Level::TRACE));
    }

    #[test]
    fn rust_log_wins_over_the_configuration() {
        let c = load("logging.level.root: error\n");
        let f = log_filter(&c, Some("debug,lapin=warn")).unwrap();
        assert_eq!(f.default_level(), Some(LevelFilter::DEBUG));
        assert!(!f.would_enable("lapin::io", &tracing::Level::INFO));
    }

    #[test]
    fn a_bad_level_names_its_key() {
        let c = load("logging.level:\n  root: loud\n  binder_core: 3\n");
        let e = log_filter(&c, None).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("logging.level.root: expected one of trace"),
            "{text}"
        );
        assert!(text.contains("found `loud`"), "{text}");
        assert!(text.contains("logging.level.binder_core:"), "{text}");
        assert_eq!(e.problems().len(), 2);
    }

    #[test]
    fn a_bad_rust_log_names_the_variable() {
        let e = log_filter(&load("a: 1\n"), Some("binder_core=loud")).unwrap_err();
        assert!(e.to_string().contains("RUST_LOG"), "{e}");
    }
}
