//! Policies: queue and exchange options set by name pattern, without redeclaring anything
//! (RabbitMQ's `rabbitmqctl set_policy`, `PUT /api/policies/{vhost}/{name}`).
//!
//! A policy names a regular expression, what it applies to (queues, exchanges or both), a
//! priority and a definition. Each queue and exchange follows at most one policy: the one of
//! the highest priority whose pattern matches its name (by name when priorities tie). As in
//! RabbitMQ 3.10, a queue's own `x-` argument and the policy combine key by key:
//! `message-ttl`, `expires`, `max-length` and `max-length-bytes` take the smaller of the two;
//! `overflow`, `dead-letter-exchange` and `dead-letter-routing-key` take the argument when
//! there is one; an exchange's `alternate-exchange` argument likewise wins over the policy's.
//! Exclusive queues follow policies too.
//!
//! Only the keys the engine acts on are accepted, and `queue-mode`, which does nothing here
//! as the `x-queue-mode` argument does nothing (nor on RabbitMQ 3.12+); any other key
//! (`ha-mode`, federation's, ...) is refused by name rather than kept and ignored.

use std::fmt;
use std::time::Duration;

use fancy_regex::{Regex, RegexBuilder};

use crate::error::{AmqpError, AmqpResult};
use crate::field::{FieldTable, FieldValue};
use crate::queue::{Overflow, QueueArgs};

/// What a policy applies to (`apply-to`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum PolicyTarget {
    /// Queues and exchanges (`all`, RabbitMQ's default).
    #[default]
    All,
    /// Queues only (`queues`).
    Queues,
    /// Exchanges only (`exchanges`).
    Exchanges,
}

impl PolicyTarget {
    /// RabbitMQ's name: `all`, `queues` or `exchanges`.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyTarget::All => "all",
            PolicyTarget::Queues => "queues",
            PolicyTarget::Exchanges => "exchanges",
        }
    }

    /// Parses RabbitMQ's name.
    ///
    /// ```
    /// use stream_engine::PolicyTarget;
    /// assert_eq!(PolicyTarget::from_name("queues"), Some(PolicyTarget::Queues));
    /// assert_eq!(PolicyTarget::from_name("streams"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<PolicyTarget> {
        Some(match name {
            "all" => PolicyTarget::All,
            "queues" => PolicyTarget::Queues,
            "exchanges" => PolicyTarget::Exchanges,
            _ => return None,
        })
    }

    fn queues(self) -> bool {
        self != PolicyTarget::Exchanges
    }

    fn exchanges(self) -> bool {
        self != PolicyTarget::Queues
    }
}

impl fmt::Display for PolicyTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A policy as declared ([`Broker::set_policy`](crate::Broker::set_policy)).
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyDef {
    /// Its name, unique in the virtual host.
    pub name: String,
    /// A regular expression searched for in queue and exchange names (`^orders\.` for names
    /// starting with `orders.`; unanchored, as RabbitMQ's).
    pub pattern: String,
    /// What it applies to.
    pub apply_to: PolicyTarget,
    /// Among the policies matching a name, the highest priority applies.
    pub priority: i64,
    /// The keys it sets, RabbitMQ's names without `x-`: `message-ttl`, `expires`,
    /// `max-length`, `max-length-bytes`, `overflow`, `dead-letter-exchange`,
    /// `dead-letter-routing-key` (queues), `alternate-exchange` (exchanges), and `queue-mode`
    /// (`default` or `lazy`: without effect).
    pub definition: FieldTable,
}

impl PolicyDef {
    /// Checks the policy as [`Broker::set_policy`](crate::Broker::set_policy) would (its
    /// name, pattern, keys and values) without setting it.
    ///
    /// ```
    /// use stream_engine::{FieldTable, FieldValue, PolicyDef, PolicyTarget};
    /// let mut definition = FieldTable::new();
    /// definition.insert("ha-mode", FieldValue::from("all"));
    /// let mirrored = PolicyDef {
    ///     name: "ha".into(),
    ///     pattern: ".*".into(),
    ///     apply_to: PolicyTarget::All,
    ///     priority: 0,
    ///     definition,
    /// };
    /// assert!(mirrored.validate().unwrap_err().text.starts_with("unsupported key 'ha-mode'"));
    /// ```
    pub fn validate(&self) -> AmqpResult<()> {
        Policy::new(self.clone()).map(drop)
    }
}

/// The longest pattern taken, in bytes (names are at most 255).
pub const MAX_PATTERN: usize = 4096;

/// How many backtracking steps matching one name may take (names are at most 255 bytes:
/// a sane pattern needs a few hundred). Matching runs under the broker's lock.
const BACKTRACK_LIMIT: usize = 20_000;

/// The keys a policy may set.
pub const POLICY_KEYS: &[&str] = &[
    "alternate-exchange",
    "dead-letter-exchange",
    "dead-letter-routing-key",
    "expires",
    "max-length",
    "max-length-bytes",
    "message-ttl",
    "overflow",
    "queue-mode",
];

/// What a policy sets on the queues it applies to.
#[derive(Debug, Clone, Default, PartialEq)]
struct QueueEffects {
    message_ttl: Option<Duration>,
    expires: Option<Duration>,
    max_length: Option<usize>,
    max_length_bytes: Option<usize>,
    overflow: Option<Overflow>,
    dead_letter_exchange: Option<String>,
    dead_letter_routing_key: Option<String>,
}

/// A validated policy, its pattern compiled.
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    pub def: PolicyDef,
    regex: Regex,
    queue: QueueEffects,
    alternate_exchange: Option<String>,
}

fn invalid(policy: &str, key: &str, why: impl fmt::Display) -> AmqpError {
    AmqpError::precondition(format!(
        "invalid value for '{key}' in policy '{policy}': {why}"
    ))
}

fn non_negative(policy: &str, key: &str, v: &FieldValue) -> AmqpResult<u64> {
    v.as_i64()
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| {
            invalid(
                policy,
                key,
                format_args!("'{v}' is not a non-negative integer"),
            )
        })
}

fn text(policy: &str, key: &str, v: &FieldValue) -> AmqpResult<String> {
    v.as_str()
        .map(str::to_owned)
        .ok_or_else(|| invalid(policy, key, format_args!("'{v}' is not a string")))
}

impl Policy {
    /// Validates a definition: the name, the pattern, and every key and value.
    pub(crate) fn new(def: PolicyDef) -> AmqpResult<Policy> {
        let name = def.name.as_str();
        if name.is_empty() {
            return Err(AmqpError::precondition("a policy needs a name"));
        }
        if def.pattern.len() > MAX_PATTERN {
            return Err(AmqpError::precondition(format!(
                "the pattern of policy '{name}' is over {MAX_PATTERN} bytes"
            )));
        }
        let regex = RegexBuilder::new(&def.pattern)
            .backtrack_limit(BACKTRACK_LIMIT)
            .build()
            .map_err(|e| {
                AmqpError::precondition(format!(
                    "invalid pattern '{}' in policy '{name}': {e}",
                    def.pattern
                ))
            })?;
        if def.definition.is_empty() {
            return Err(AmqpError::precondition(format!(
                "policy '{name}' has an empty definition"
            )));
        }
        let mut queue = QueueEffects::default();
        let mut alternate_exchange = None;
        for (key, v) in def.definition.iter() {
            let key = key.as_str();
            match key {
                "message-ttl" => {
                    queue.message_ttl = Some(Duration::from_millis(non_negative(name, key, v)?))
                }
                "expires" => match non_negative(name, key, v)? {
                    0 => return Err(invalid(name, key, "'0' is not a positive integer")),
                    ms => queue.expires = Some(Duration::from_millis(ms)),
                },
                "max-length" => queue.max_length = Some(non_negative(name, key, v)? as usize),
                "max-length-bytes" => {
                    queue.max_length_bytes = Some(non_negative(name, key, v)? as usize)
                }
                "overflow" => {
                    let t = text(name, key, v)?;
                    queue.overflow = Some(Overflow::from_name(&t).ok_or_else(|| {
                        invalid(
                            name,
                            key,
                            format_args!(
                                "'{t}' is not one of drop-head, reject-publish, reject-publish-dlx"
                            ),
                        )
                    })?);
                }
                "dead-letter-exchange" => queue.dead_letter_exchange = Some(text(name, key, v)?),
                "dead-letter-routing-key" => {
                    queue.dead_letter_routing_key = Some(text(name, key, v)?)
                }
                "alternate-exchange" => alternate_exchange = Some(text(name, key, v)?),
                // Accepted and without effect, as the `x-queue-mode` argument (and as on
                // RabbitMQ 3.12+): the broker pages messages by memory use instead.
                "queue-mode" => match text(name, key, v)?.as_str() {
                    "default" | "lazy" => {}
                    other => {
                        return Err(invalid(
                            name,
                            key,
                            format_args!("'{other}' is not one of default, lazy"),
                        ));
                    }
                },
                other => {
                    return Err(AmqpError::precondition(format!(
                        "unsupported key '{other}' in policy '{name}' (this broker's policies set {})",
                        POLICY_KEYS.join(", ")
                    )));
                }
            }
        }
        Ok(Policy {
            def,
            regex,
            queue,
            alternate_exchange,
        })
    }

    /// Whether the pattern matches `name`. A match that gives up (a pattern backtracking
    /// beyond [`BACKTRACK_LIMIT`] on this name) counts as none, with a warning.
    fn matches(&self, name: &str) -> bool {
        self.regex.is_match(name).unwrap_or_else(|e| {
            tracing::warn!(policy = %self.def.name, %name, reason = %e, "a policy's pattern gave up on a name: taken as no match");
            false
        })
    }
}

/// The policies of one broker, the one that applies first.
#[derive(Debug, Default)]
pub(crate) struct Policies {
    /// By priority, highest first, then by name.
    list: Vec<Policy>,
}

impl Policies {
    /// Adds or replaces a policy (by name); whether it replaced one.
    pub fn set(&mut self, policy: Policy) -> bool {
        let replaced = self.clear(&policy.def.name);
        self.list.push(policy);
        self.list.sort_by(|a, b| {
            b.def
                .priority
                .cmp(&a.def.priority)
                .then_with(|| a.def.name.cmp(&b.def.name))
        });
        replaced
    }

    /// Removes a policy; whether there was one of that name.
    pub fn clear(&mut self, name: &str) -> bool {
        let before = self.list.len();
        self.list.retain(|p| p.def.name != name);
        self.list.len() != before
    }

    /// The definition of the policy `name`.
    pub fn definition(&self, name: &str) -> Option<&FieldTable> {
        self.list
            .iter()
            .find(|p| p.def.name == name)
            .map(|p| &p.def.definition)
    }

    /// Every policy, by name.
    pub fn defs(&self) -> Vec<PolicyDef> {
        let mut out: Vec<PolicyDef> = self.list.iter().map(|p| p.def.clone()).collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// The policy a queue follows.
    pub fn for_queue(&self, name: &str) -> Option<&Policy> {
        self.list
            .iter()
            .find(|p| p.def.apply_to.queues() && p.matches(name))
    }

    /// The policy an exchange follows.
    pub fn for_exchange(&self, name: &str) -> Option<&Policy> {
        self.list
            .iter()
            .find(|p| p.def.apply_to.exchanges() && p.matches(name))
    }
}

/// A queue's effective arguments: its own (`declared`, parsed from `raw`) combined with its
/// policy's, as RabbitMQ combines them.
pub(crate) fn queue_args(
    declared: &QueueArgs,
    raw: &FieldTable,
    policy: Option<&Policy>,
) -> QueueArgs {
    let mut args = declared.clone();
    let Some(p) = policy.map(|p| &p.queue) else {
        return args;
    };
    fn smaller<T: Ord + Copy>(arg: Option<T>, policy: Option<T>) -> Option<T> {
        match (arg, policy) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
    args.message_ttl = smaller(args.message_ttl, p.message_ttl);
    args.expires = smaller(args.expires, p.expires);
    args.max_length = smaller(args.max_length, p.max_length);
    args.max_length_bytes = smaller(args.max_length_bytes, p.max_length_bytes);
    if !raw.contains("x-overflow") {
        if let Some(overflow) = p.overflow {
            args.overflow = overflow;
        }
    }
    if args.dead_letter_exchange.is_none() {
        args.dead_letter_exchange = p.dead_letter_exchange.clone();
    }
    if args.dead_letter_routing_key.is_none() {
        args.dead_letter_routing_key = p.dead_letter_routing_key.clone();
    }
    args
}

/// An exchange's effective alternate exchange: its argument's, else its policy's.
pub(crate) fn alternate_exchange(declared: &FieldTable, policy: Option<&Policy>) -> Option<String> {
    declared
        .get_str("alternate-exchange")
        .map(str::to_owned)
        .or_else(|| policy.and_then(|p| p.alternate_exchange.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(name: &str, pattern: &str, priority: i64, keys: &[(&str, FieldValue)]) -> PolicyDef {
        let mut definition = FieldTable::new();
        for (k, v) in keys {
            definition.insert(*k, v.clone());
        }
        PolicyDef {
            name: name.to_owned(),
            pattern: pattern.to_owned(),
            apply_to: PolicyTarget::All,
            priority,
            definition,
        }
    }

    fn refusal(d: PolicyDef) -> String {
        Policy::new(d).unwrap_err().text
    }

    #[test]
    fn definitions_are_checked_key_by_key() {
        let int = |n: i64| FieldValue::I64(n);
        let s = |t: &str| FieldValue::String(t.to_owned());
        assert_eq!(
            refusal(def("p", "(", 0, &[("max-length", int(1))])),
            "invalid pattern '(' in policy 'p': Parsing error at position 1: Opening parenthesis without closing parenthesis"
        );
        let long = "a".repeat(MAX_PATTERN + 1);
        assert_eq!(
            refusal(def("p", &long, 0, &[("max-length", int(1))])),
            "the pattern of policy 'p' is over 4096 bytes"
        );
        assert_eq!(
            refusal(def("p", ".", 0, &[("ha-mode", s("all"))])),
            "unsupported key 'ha-mode' in policy 'p' (this broker's policies set alternate-exchange, dead-letter-exchange, dead-letter-routing-key, expires, max-length, max-length-bytes, message-ttl, overflow, queue-mode)"
        );
        assert_eq!(
            refusal(def("p", ".", 0, &[("max-length", s("x"))])),
            "invalid value for 'max-length' in policy 'p': 'x' is not a non-negative integer"
        );
        assert_eq!(
            refusal(def("p", ".", 0, &[("expires", int(0))])),
            "invalid value for 'expires' in policy 'p': '0' is not a positive integer"
        );
        assert_eq!(
            refusal(def("p", ".", 0, &[("overflow", s("drop-tail"))])),
            "invalid value for 'overflow' in policy 'p': 'drop-tail' is not one of drop-head, reject-publish, reject-publish-dlx"
        );
        assert_eq!(
            refusal(def("p", ".", 0, &[])),
            "policy 'p' has an empty definition"
        );
        assert!(Policy::new(def("p", "^a\\.", 0, &[("message-ttl", int(0))])).is_ok());
        assert!(Policy::new(def("p", ".", 0, &[("queue-mode", s("lazy"))])).is_ok());
        assert_eq!(
            refusal(def("p", ".", 0, &[("queue-mode", s("eager"))])),
            "invalid value for 'queue-mode' in policy 'p': 'eager' is not one of default, lazy"
        );
    }

    #[test]
    fn the_highest_priority_applies_then_the_first_name() {
        let one = |n: i64| [("max-length", FieldValue::I64(n))];
        let mut all = Policies::default();
        all.set(Policy::new(def("b", "^orders", 1, &one(1))).unwrap());
        all.set(Policy::new(def("a", "^orders", 1, &one(2))).unwrap());
        all.set(Policy::new(def("low", "orders", 0, &one(3))).unwrap());
        assert_eq!(all.for_queue("orders.dlq").unwrap().def.name, "a");
        assert_eq!(all.for_queue("my-orders").unwrap().def.name, "low");
        assert!(all.for_queue("payments").is_none());
        let mut queues_only = def("q", ".", 9, &one(4));
        queues_only.apply_to = PolicyTarget::Queues;
        all.set(Policy::new(queues_only).unwrap());
        assert_eq!(all.for_queue("x").unwrap().def.name, "q");
        assert!(all.for_exchange("x").is_none());
        assert_eq!(all.for_exchange("orders").unwrap().def.name, "a");
        assert!(all.clear("q") && !all.clear("q"));
        assert_eq!(
            all.defs()
                .iter()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>(),
            ["a", "b", "low"]
        );
    }

    #[test]
    fn patterns_are_searched_for_with_pcre_s_look_around_and_flags() {
        let one = [("max-length", FieldValue::I64(1))];
        let matches = |pattern: &str, name: &str| {
            Policy::new(def("p", pattern, 0, &one))
                .unwrap()
                .matches(name)
        };
        // RabbitMQ's documented pattern for "everything but the broker's own".
        assert!(matches("^(?!amq\\.).*", "orders"));
        assert!(!matches("^(?!amq\\.).*", "amq.gen-1"));
        assert!(matches("(?i)^ORDERS", "orders.dlq"));
        assert!(matches("dlq", "orders.dlq"), "unanchored");
        assert!(!matches("^dlq$", "orders.dlq"));
        assert!(matches("^\\p{L}+$", "zamówienia"));
        // A pattern that backtracks without end gives up on a name: no match, no stall.
        assert!(!matches("^(a|a?)+$", &format!("{}b", "a".repeat(200))));
    }

    #[test]
    fn limits_take_the_smaller_and_the_argument_wins_the_rest() {
        let s = |t: &str| FieldValue::String(t.to_owned());
        let policy = Policy::new(def(
            "p",
            ".",
            0,
            &[
                ("max-length", FieldValue::I64(3)),
                ("message-ttl", FieldValue::I64(60_000)),
                ("overflow", s("reject-publish")),
                ("dead-letter-exchange", s("policy-dlx")),
                ("alternate-exchange", s("policy-ae")),
            ],
        ))
        .unwrap();
        let mut raw = FieldTable::new();
        raw.insert("x-max-length", FieldValue::I64(10));
        raw.insert("x-message-ttl", FieldValue::I64(1_000));
        raw.insert("x-dead-letter-exchange", s("own-dlx"));
        let declared = QueueArgs::parse("q", &raw).unwrap();
        let args = queue_args(&declared, &raw, Some(&policy));
        assert_eq!(args.max_length, Some(3));
        assert_eq!(args.message_ttl, Some(Duration::from_secs(1)));
        assert_eq!(args.overflow, Overflow::RejectPublish);
        assert_eq!(args.dead_letter_exchange.as_deref(), Some("own-dlx"));
        assert_eq!(queue_args(&declared, &raw, None), declared);
        let bare = QueueArgs::default();
        let args = queue_args(&bare, &FieldTable::new(), Some(&policy));
        assert_eq!(args.dead_letter_exchange.as_deref(), Some("policy-dlx"));
        assert_eq!(
            alternate_exchange(&FieldTable::new(), Some(&policy)).as_deref(),
            Some("policy-ae")
        );
        let mut own = FieldTable::new();
        own.insert("alternate-exchange", s("own-ae"));
        assert_eq!(
            alternate_exchange(&own, Some(&policy)).as_deref(),
            Some("own-ae")
        );
    }
}
