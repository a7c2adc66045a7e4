//! Every property under `spring.rabbitmq`: the keys Spring Boot defines (`RabbitProperties`)
//! and our own, each either read by the binder or refused by name with the reason. Anything
//! else is refused as unknown, with the nearest key suggested. Nothing is silently ignored.

use binder_core::config::{Problem, canonical, did_you_mean, unknown_key_message};
use config::{Value, ValueKind};

/// What the binder does with a key.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Rule {
    /// Read by the binder (`settings.rs` checks its value).
    Read,
    /// Accepted only with this value, which says what the binder does anyway (compared
    /// ignoring case, `-` and `_`); any other value is refused with the reason.
    Only(&'static str, &'static str),
    /// Refused whatever its value, with the reason.
    Refused(&'static str),
}

use Rule::{Only, Read, Refused};

const CACHE: &str = "the binder has no connection or channel cache to size: it keeps two \
                     connections (consumers, publishers) and opens a channel per producer and \
                     per subscription";
const LISTENER: &str = "consumers are configured per binding: \
                        spring.cloud.stream.bindings.<b>.consumer.* and \
                        spring.cloud.stream.rabbit.bindings.<b>.consumer.* (or \
                        spring.cloud.stream.default.consumer / rabbit.default.consumer)";
const PREFETCH: &str = "use spring.cloud.stream.rabbit.bindings.<b>.consumer.prefetch";
const ACK: &str = "use spring.cloud.stream.rabbit.bindings.<b>.consumer.acknowledgeMode";
const REQUEUE: &str = "use spring.cloud.stream.rabbit.bindings.<b>.consumer.requeueRejected";
const CONCURRENCY: &str = "use spring.cloud.stream.bindings.<b>.consumer.concurrency";
const AUTO_STARTUP: &str = "use spring.cloud.stream.bindings.<b>.consumer.autoStartup";
const BATCH: &str = "batch consumption is not offered; each delivery is handled on its own";
const RETRY: &str = "retries are per binding: spring.cloud.stream.bindings.<b>.consumer.\
                     maxAttempts, backOffInitialInterval, backOffMultiplier, backOffMaxInterval";
const TEMPLATE: &str = "producers are configured per binding: \
                        spring.cloud.stream.bindings.<b>.destination and \
                        spring.cloud.stream.rabbit.bindings.<b>.producer.*; there is no \
                        RabbitTemplate";
const TEMPLATE_RETRY: &str = "a send is not retried: its error goes back to the caller";
const STREAM: &str = "RabbitMQ's stream protocol is not offered by this binder";
const JAVA_ONLY: &str = "a Java (Micrometer, Spring context) setting with no counterpart here";

/// The keys, as Spring Boot spells them, below `spring.rabbitmq`.
pub(crate) const KEYS: &[(&str, Rule)] = &[
    ("host", Read),
    ("port", Read),
    ("username", Read),
    ("password", Read),
    ("virtual-host", Read),
    ("addresses", Read),
    (
        "address-shuffle-mode",
        Only(
            "none",
            "only `none` is offered: the addresses are tried in the order given",
        ),
    ),
    ("requested-heartbeat", Read),
    ("requested-channel-max", Read),
    ("connection-timeout", Read),
    (
        "publisher-returns",
        Only(
            "false",
            "returned messages are not offered: producers publish without `mandatory`, so \
             RabbitMQ drops what no queue takes (use an alternate exchange: \
             spring.cloud.stream.rabbit.bindings.<b>.producer.alternateExchange)",
        ),
    ),
    (
        "publisher-confirm-type",
        Only(
            "correlated",
            "producers always use publisher confirms, each send waiting for its own \
             (`correlated`); `simple` and `none` are not offered",
        ),
    ),
    (
        "channel-rpc-timeout",
        Refused("lapin has no timeout for channel operations"),
    ),
    (
        "max-inbound-message-body-size",
        Refused(
            "lapin takes bodies of any size; limit them on the broker (`max_message_size` in \
             rabbitmq.conf)",
        ),
    ),
    (
        "dynamic",
        Only(
            "true",
            "the binder always declares what the bindings need; declarations are chosen per \
             binding (declareExchange, bindQueue, ...), and operators can declare ahead with \
             `streamctl provision`",
        ),
    ),
    // Our own.
    ("uri", Read),
    ("connection-name", Read),
    // TLS.
    ("ssl.enabled", Read),
    (
        "ssl.bundle",
        Refused(
            "Spring SSL bundles are not supported; use ssl.trust-store and ssl.key-store (or \
             ssl.certificate and ssl.private-key)",
        ),
    ),
    ("ssl.key-store", Read),
    ("ssl.key-store-type", Read),
    ("ssl.key-store-password", Read),
    (
        "ssl.key-store-algorithm",
        Refused("a Java KeyManagerFactory algorithm; OpenSSL has none to choose"),
    ),
    ("ssl.trust-store", Read),
    ("ssl.trust-store-type", Read),
    ("ssl.trust-store-password", Read),
    (
        "ssl.trust-store-algorithm",
        Refused("a Java TrustManagerFactory algorithm; OpenSSL has none to choose"),
    ),
    ("ssl.algorithm", Read),
    ("ssl.validate-server-certificate", Read),
    ("ssl.verify-hostname", Read),
    // Our own, for PEM files.
    ("ssl.certificate", Read),
    ("ssl.private-key", Read),
    // Spring AMQP's caching connection factory.
    ("cache.channel.size", Refused(CACHE)),
    ("cache.channel.checkout-timeout", Refused(CACHE)),
    ("cache.connection.mode", Refused(CACHE)),
    ("cache.connection.size", Refused(CACHE)),
    // Spring AMQP's listener containers.
    ("listener.type", Refused(LISTENER)),
    ("listener.simple.auto-startup", Refused(AUTO_STARTUP)),
    ("listener.simple.acknowledge-mode", Refused(ACK)),
    ("listener.simple.prefetch", Refused(PREFETCH)),
    ("listener.simple.default-requeue-rejected", Refused(REQUEUE)),
    ("listener.simple.idle-event-interval", Refused(LISTENER)),
    ("listener.simple.de-batching-enabled", Refused(BATCH)),
    ("listener.simple.force-stop", Refused(LISTENER)),
    ("listener.simple.observation-enabled", Refused(JAVA_ONLY)),
    ("listener.simple.missing-queues-fatal", Refused(LISTENER)),
    ("listener.simple.concurrency", Refused(CONCURRENCY)),
    ("listener.simple.max-concurrency", Refused(CONCURRENCY)),
    ("listener.simple.batch-size", Refused(BATCH)),
    ("listener.simple.consumer-batch-enabled", Refused(BATCH)),
    ("listener.simple.retry.enabled", Refused(RETRY)),
    ("listener.simple.retry.max-attempts", Refused(RETRY)),
    ("listener.simple.retry.initial-interval", Refused(RETRY)),
    ("listener.simple.retry.multiplier", Refused(RETRY)),
    ("listener.simple.retry.max-interval", Refused(RETRY)),
    ("listener.simple.retry.max-retries", Refused(RETRY)),
    ("listener.simple.retry.stateless", Refused(RETRY)),
    ("listener.direct.auto-startup", Refused(AUTO_STARTUP)),
    ("listener.direct.acknowledge-mode", Refused(ACK)),
    ("listener.direct.prefetch", Refused(PREFETCH)),
    ("listener.direct.default-requeue-rejected", Refused(REQUEUE)),
    ("listener.direct.idle-event-interval", Refused(LISTENER)),
    ("listener.direct.de-batching-enabled", Refused(BATCH)),
    ("listener.direct.force-stop", Refused(LISTENER)),
    ("listener.direct.observation-enabled", Refused(JAVA_ONLY)),
    ("listener.direct.missing-queues-fatal", Refused(LISTENER)),
    ("listener.direct.consumers-per-queue", Refused(CONCURRENCY)),
    ("listener.direct.retry.enabled", Refused(RETRY)),
    ("listener.direct.retry.max-attempts", Refused(RETRY)),
    ("listener.direct.retry.initial-interval", Refused(RETRY)),
    ("listener.direct.retry.multiplier", Refused(RETRY)),
    ("listener.direct.retry.max-interval", Refused(RETRY)),
    ("listener.direct.retry.max-retries", Refused(RETRY)),
    ("listener.direct.retry.stateless", Refused(RETRY)),
    ("listener.stream.auto-startup", Refused(STREAM)),
    ("listener.stream.native-listener", Refused(STREAM)),
    ("listener.stream.observation-enabled", Refused(STREAM)),
    // Spring AMQP's RabbitTemplate.
    ("template.mandatory", Refused(TEMPLATE)),
    ("template.receive-timeout", Refused(TEMPLATE)),
    ("template.reply-timeout", Refused(TEMPLATE)),
    ("template.exchange", Refused(TEMPLATE)),
    ("template.routing-key", Refused(TEMPLATE)),
    ("template.default-receive-queue", Refused(TEMPLATE)),
    ("template.observation-enabled", Refused(JAVA_ONLY)),
    ("template.allowed-list-patterns", Refused(TEMPLATE)),
    ("template.retry.enabled", Refused(TEMPLATE_RETRY)),
    ("template.retry.max-attempts", Refused(TEMPLATE_RETRY)),
    ("template.retry.initial-interval", Refused(TEMPLATE_RETRY)),
    ("template.retry.multiplier", Refused(TEMPLATE_RETRY)),
    ("template.retry.max-interval", Refused(TEMPLATE_RETRY)),
    ("template.retry.max-retries", Refused(TEMPLATE_RETRY)),
    // RabbitMQ streams.
    ("stream.host", Refused(STREAM)),
    ("stream.port", Refused(STREAM)),
    ("stream.virtual-host", Refused(STREAM)),
    ("stream.username", Refused(STREAM)),
    ("stream.password", Refused(STREAM)),
    ("stream.name", Refused(STREAM)),
];

/// The first origin (file, environment variable) of `value` or of a value below it.
pub(crate) fn origin_of(value: &Value) -> Option<String> {
    if let Some(origin) = value.origin() {
        return Some(origin.to_owned());
    }
    match &value.kind {
        ValueKind::Table(t) => {
            let mut keys: Vec<&String> = t.keys().collect();
            keys.sort();
            keys.into_iter().find_map(|k| origin_of(&t[k]))
        }
        ValueKind::Array(items) => items.iter().find_map(origin_of),
        _ => None,
    }
}

/// One problem at `spring.rabbitmq.<path>`, citing where the value came from.
pub(crate) fn problem(value: Option<&Value>, path: &str, message: impl Into<String>) -> Problem {
    Problem {
        origin: value.and_then(origin_of),
        path: format!("spring.rabbitmq.{path}"),
        message: message.into(),
    }
}

/// Checks every key under `spring.rabbitmq` against [`KEYS`]: refused keys and values are
/// reported with their reason, unknown keys with the nearest known one.
pub(crate) fn check(rabbitmq: &Value, problems: &mut Vec<Problem>) {
    let known: Vec<Vec<&str>> = KEYS.iter().map(|(k, _)| k.split('.').collect()).collect();
    walk(rabbitmq, &mut Vec::new(), &known, problems);
}

fn walk(here: &Value, written: &mut Vec<String>, known: &[Vec<&str>], out: &mut Vec<Problem>) {
    // An empty group (`spring.rabbitmq:` with nothing under it) sets nothing.
    if matches!(here.kind, ValueKind::Nil) {
        return;
    }
    let ValueKind::Table(table) = &here.kind else {
        let path = written.join(".");
        let at = if path.is_empty() {
            "spring.rabbitmq".to_owned()
        } else {
            format!("spring.rabbitmq.{path}")
        };
        out.push(Problem {
            origin: origin_of(here),
            path: at,
            message: "expected a group of properties, found a single value".to_owned(),
        });
        return;
    };
    let depth = written.len();
    // The known keys below this group, and the names of the next level.
    let under: Vec<(usize, &Vec<&str>)> = known
        .iter()
        .enumerate()
        .filter(|(_, k)| {
            k.len() > depth
                && k[..depth]
                    .iter()
                    .zip(written.iter())
                    .all(|(a, b)| canonical(a) == canonical(b))
        })
        .collect();
    let mut next: Vec<&str> = Vec::new();
    for (_, k) in &under {
        if !next.contains(&k[depth]) {
            next.push(k[depth]);
        }
    }
    let mut keys: Vec<&String> = table.keys().collect();
    keys.sort();
    for key in keys {
        let value = &table[key];
        written.push(key.clone());
        let path = written.join(".");
        let matching: Vec<&(usize, &Vec<&str>)> = under
            .iter()
            .filter(|(_, k)| canonical(k[depth]) == canonical(key))
            .collect();
        if let Some((index, _)) = matching.iter().find(|(_, k)| k.len() == depth + 1) {
            match (&value.kind, KEYS[*index].1) {
                (ValueKind::Table(_), _) => {
                    out.push(problem(
                        Some(value),
                        &path,
                        "expected a single value, found a group of properties",
                    ));
                }
                (ValueKind::Array(_), _) if KEYS[*index].0 != "addresses" => {
                    out.push(problem(
                        Some(value),
                        &path,
                        "expected a single value, found a list",
                    ));
                }
                (_, Read) => {}
                (_, Only(wanted, reason)) => {
                    let given = value.to_string();
                    if canonical(&given) != canonical(wanted) {
                        out.push(problem(
                            Some(value),
                            &path,
                            format!("`{given}` is not offered: {reason}"),
                        ));
                    }
                }
                (_, Refused(reason)) => {
                    out.push(problem(
                        Some(value),
                        &path,
                        format!("not supported: {reason}"),
                    ));
                }
            }
        } else if !matching.is_empty() {
            walk(value, written, known, out);
        } else {
            let message = unknown(&written[..depth], key, value, &next);
            out.push(problem(Some(value), &path, message));
        }
        written.pop();
    }
}

/// `unknown property `key``, with the nearest key of this level, or the list of them.
/// `parent` is the path written above `key`.
fn unknown(parent: &[String], key: &str, value: &Value, next: &[&str]) -> String {
    if did_you_mean(key, next.iter().copied()).is_some() {
        return unknown_key_message("property", key, next);
    }
    if let Some(near) = split_words(key, value, next) {
        let mut variable = vec!["SPRING".to_owned(), "RABBITMQ".to_owned()];
        variable.extend(parent.iter().map(|p| canonical(p).to_uppercase()));
        variable.push(canonical(near).to_uppercase());
        return format!(
            "unknown property `{key}`; did you mean `{near}`? (an environment variable runs \
             a property's words together: `{}`)",
            variable.join("_")
        );
    }
    unknown_key_message("property", key, next)
}

/// A key of this level spelled by `key` and the keys below it run together: an
/// environment variable `SPRING_RABBITMQ_VIRTUAL_HOST` arrives as `virtual.host`.
fn split_words<'a>(key: &str, value: &Value, next: &[&'a str]) -> Option<&'a str> {
    let mut joined = canonical(key);
    let mut here = value;
    let mut best = None;
    while let ValueKind::Table(t) = &here.kind {
        let mut keys: Vec<&String> = t.keys().collect();
        keys.sort();
        let first = keys.first()?;
        joined.push_str(&canonical(first));
        here = &t[*first];
        if let Some(k) = next.iter().find(|k| canonical(k) == joined) {
            best = Some(*k);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_distinct_and_spelled_as_spring_boot_does() {
        let mut seen: Vec<String> = KEYS.iter().map(|(k, _)| canonical(k)).collect();
        seen.sort();
        let before = seen.len();
        seen.dedup();
        assert_eq!(before, seen.len(), "a key is listed twice");
        for (key, _) in KEYS {
            assert!(
                key.chars()
                    .all(|c| c.is_ascii_lowercase() || c == '-' || c == '.'),
                "{key}"
            );
        }
    }
}
