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
//!
//! *Operator policies* (RabbitMQ's `rabbitmqctl set_operator_policy`,
//! `/api/operator-policies`) are a second set, kept apart from the first (a name may be in
//! both), meant for an operator to cap what users' policies and arguments ask for. Each
//! queue follows at most one of each, chosen the same way. An operator policy sets only
//! limits ([`OPERATOR_POLICY_KEYS`]), and a limit in force is the smallest of the queue's
//! argument, its policy's value and its operator policy's value.

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

/// Which of a virtual host's two sets of policies a policy is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PolicyKind {
    /// A policy ([`Broker::set_policy`](crate::Broker::set_policy)): any of
    /// [`POLICY_KEYS`].
    Policy,
    /// An operator policy
    /// ([`Broker::set_operator_policy`](crate::Broker::set_operator_policy)): only the
    /// limits of [`OPERATOR_POLICY_KEYS`].
    Operator,
}

impl PolicyKind {
    /// How messages name it: `policy` or `operator policy`.
    pub fn noun(self) -> &'static str {
        match self {
            PolicyKind::Policy => "policy",
            PolicyKind::Operator => "operator policy",
        }
    }

    fn plural(self) -> &'static str {
        match self {
            PolicyKind::Policy => "policies",
            PolicyKind::Operator => "operator policies",
        }
    }

    /// The keys a policy of this kind may set.
    pub fn keys(self) -> &'static [&'static str] {
        match self {
            PolicyKind::Policy => POLICY_KEYS,
            PolicyKind::Operator => OPERATOR_POLICY_KEYS,
        }
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
        self.validate_as(PolicyKind::Policy)
    }

    /// Checks the policy as a policy of `kind` would be checked when set.
    ///
    /// ```
    /// use stream_engine::{FieldTable, FieldValue, PolicyDef, PolicyKind, PolicyTarget};
    /// let mut definition = FieldTable::new();
    /// definition.insert("dead-letter-exchange", FieldValue::from("dlx"));
    /// let dlx = PolicyDef {
    ///     name: "dlx".into(),
    ///     pattern: ".*".into(),
    ///     apply_to: PolicyTarget::Queues,
    ///     priority: 0,
    ///     definition,
    /// };
    /// assert!(dlx.validate_as(PolicyKind::Policy).is_ok());
    /// let refused = dlx.validate_as(PolicyKind::Operator).unwrap_err();
    /// assert!(refused.text.starts_with("unsupported key 'dead-letter-exchange' in operator policy 'dlx'"));
    /// ```
    pub fn validate_as(&self, kind: PolicyKind) -> AmqpResult<()> {
        Policy::new(self.clone(), kind).map(drop)
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

/// The keys an operator policy may set: the limits RabbitMQ's operator policies set on
/// classic queues (its `max-in-memory-*` and `delivery-limit` are quorum queues' and
/// refused here).
pub const OPERATOR_POLICY_KEYS: &[&str] =
    &["expires", "max-length", "max-length-bytes", "message-ttl"];

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
    pub kind: PolicyKind,
    regex: Regex,
    queue: QueueEffects,
    alternate_exchange: Option<String>,
}

/// The policy being checked, for the messages that refuse it: `policy 'name'`.
struct Named<'a>(PolicyKind, &'a str);

impl fmt::Display for Named<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} '{}'", self.0.noun(), self.1)
    }
}

fn invalid(policy: &Named<'_>, key: &str, why: impl fmt::Display) -> AmqpError {
    AmqpError::precondition(format!("invalid value for '{key}' in {policy}: {why}"))
}

fn non_negative(policy: &Named<'_>, key: &str, v: &FieldValue) -> AmqpResult<u64> {
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

fn text(policy: &Named<'_>, key: &str, v: &FieldValue) -> AmqpResult<String> {
    v.as_str()
        .map(str::to_owned)
        .ok_or_else(|| invalid(policy, key, format_args!("'{v}' is not a string")))
}

impl Policy {
    /// Validates a definition as a policy of `kind`: the name, the pattern, and every key
    /// and value.
    pub(crate) fn new(def: PolicyDef, kind: PolicyKind) -> AmqpResult<Policy> {
        if def.name.is_empty() {
            return Err(AmqpError::precondition(format!(
                "a{} {} needs a name",
                if kind == PolicyKind::Operator {
                    "n"
                } else {
                    ""
                },
                kind.noun()
            )));
        }
        let name = &Named(kind, def.name.as_str());
        if def.pattern.len() > MAX_PATTERN {
            return Err(AmqpError::precondition(format!(
                "the pattern of {name} is over {MAX_PATTERN} bytes"
            )));
        }
        let regex = RegexBuilder::new(&def.pattern)
            .backtrack_limit(BACKTRACK_LIMIT)
            .build()
            .map_err(|e| {
                AmqpError::precondition(format!("invalid pattern '{}' in {name}: {e}", def.pattern))
            })?;
        if def.definition.is_empty() {
            return Err(AmqpError::precondition(format!(
                "{name} has an empty definition"
            )));
        }
        let mut queue = QueueEffects::default();
        let mut alternate_exchange = None;
        let unsupported = |key: &str| {
            AmqpError::precondition(format!(
                "unsupported key '{key}' in {name} (this broker's {} set {})",
                kind.plural(),
                kind.keys().join(", ")
            ))
        };
        for (key, v) in def.definition.iter() {
            let key = key.as_str();
            if !kind.keys().contains(&key) {
                return Err(unsupported(key));
            }
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
                other => return Err(unsupported(other)),
            }
        }
        Ok(Policy {
            def,
            kind,
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
/// policy's and its operator policy's, as RabbitMQ combines them.
pub(crate) fn queue_args(
    declared: &QueueArgs,
    raw: &FieldTable,
    policy: Option<&Policy>,
    operator: Option<&Policy>,
) -> QueueArgs {
    fn smaller<T: Ord + Copy>(arg: Option<T>, policy: Option<T>) -> Option<T> {
        match (arg, policy) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
    /// The limits: each the smallest of those set.
    fn cap(args: &mut QueueArgs, p: &QueueEffects) {
        args.message_ttl = smaller(args.message_ttl, p.message_ttl);
        args.expires = smaller(args.expires, p.expires);
        args.max_length = smaller(args.max_length, p.max_length);
        args.max_length_bytes = smaller(args.max_length_bytes, p.max_length_bytes);
    }
    let mut args = declared.clone();
    if let Some(p) = policy.map(|p| &p.queue) {
        cap(&mut args, p);
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
    }
    if let Some(op) = operator.map(|p| &p.queue) {
        cap(&mut args, op);
    }
    args
}

/// The definition a queue follows (RabbitMQ's `effective_policy_definition`): its policy's,
/// with its operator policy's keys added, the smaller value where both set one.
pub(crate) fn effective_definition(
    policy: Option<&FieldTable>,
    operator: Option<&FieldTable>,
) -> FieldTable {
    let mut out = policy.cloned().unwrap_or_default();
    for (key, op) in operator.into_iter().flat_map(FieldTable::iter) {
        let merged = match (out.get(key).and_then(FieldValue::as_i64), op.as_i64()) {
            (Some(own), Some(cap)) if own <= cap => continue,
            _ => op.clone(),
        };
        out.insert(key.clone(), merged);
    }
    out
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
        Policy::new(d, PolicyKind::Policy).unwrap_err().text
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
        assert!(
            Policy::new(
                def("p", "^a\\.", 0, &[("message-ttl", int(0))]),
                PolicyKind::Policy
            )
            .is_ok()
        );
        assert!(
            Policy::new(
                def("p", ".", 0, &[("queue-mode", s("lazy"))]),
                PolicyKind::Policy
            )
            .is_ok()
        );
        assert_eq!(
            refusal(def("p", ".", 0, &[("queue-mode", s("eager"))])),
            "invalid value for 'queue-mode' in policy 'p': 'eager' is not one of default, lazy"
        );
    }

    #[test]
    fn the_highest_priority_applies_then_the_first_name() {
        let one = |n: i64| [("max-length", FieldValue::I64(n))];
        let mut all = Policies::default();
        all.set(Policy::new(def("b", "^orders", 1, &one(1)), PolicyKind::Policy).unwrap());
        all.set(Policy::new(def("a", "^orders", 1, &one(2)), PolicyKind::Policy).unwrap());
        all.set(Policy::new(def("low", "orders", 0, &one(3)), PolicyKind::Policy).unwrap());
        assert_eq!(all.for_queue("orders.dlq").unwrap().def.name, "a");
        assert_eq!(all.for_queue("my-orders").unwrap().def.name, "low");
        assert!(all.for_queue("payments").is_none());
        let mut queues_only = def("q", ".", 9, &one(4));
        queues_only.apply_to = PolicyTarget::Queues;
        all.set(Policy::new(queues_only, PolicyKind::Policy).unwrap());
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
            Policy::new(def("p", pattern, 0, &one), PolicyKind::Policy)
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
        let policy = Policy::new(
            def(
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
            ),
            PolicyKind::Policy,
        )
        .unwrap();
        let mut raw = FieldTable::new();
        raw.insert("x-max-length", FieldValue::I64(10));
        raw.insert("x-message-ttl", FieldValue::I64(1_000));
        raw.insert("x-dead-letter-exchange", s("own-dlx"));
        let declared = QueueArgs::parse("q", &raw).unwrap();
        let args = queue_args(&declared, &raw, Some(&policy), None);
        assert_eq!(args.max_length, Some(3));
        assert_eq!(args.message_ttl, Some(Duration::from_secs(1)));
        assert_eq!(args.overflow, Overflow::RejectPublish);
        assert_eq!(args.dead_letter_exchange.as_deref(), Some("own-dlx"));
        assert_eq!(queue_args(&declared, &raw, None, None), declared);
        let bare = QueueArgs::default();
        let args = queue_args(&bare, &FieldTable::new(), Some(&policy), None);
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

    #[test]
    fn operator_policies_set_only_limits() {
        let operator = |keys: &[(&str, FieldValue)]| {
            Policy::new(def("cap", ".", 0, keys), PolicyKind::Operator)
        };
        for key in OPERATOR_POLICY_KEYS {
            assert!(operator(&[(key, FieldValue::I64(5))]).is_ok(), "{key}");
        }
        for key in [
            "dead-letter-exchange",
            "overflow",
            "delivery-limit",
            "ha-mode",
        ] {
            assert_eq!(
                operator(&[(key, FieldValue::I64(1))]).unwrap_err().text,
                format!(
                    "unsupported key '{key}' in operator policy 'cap' (this broker's operator \
                     policies set expires, max-length, max-length-bytes, message-ttl)"
                )
            );
        }
        assert_eq!(
            operator(&[("max-length", FieldValue::I64(-1))])
                .unwrap_err()
                .text,
            "invalid value for 'max-length' in operator policy 'cap': '-1' is not a non-negative integer"
        );
        assert_eq!(
            Policy::new(def("", ".", 0, &[]), PolicyKind::Operator)
                .unwrap_err()
                .text,
            "an operator policy needs a name"
        );
    }

    #[test]
    fn an_operator_policy_caps_the_argument_and_the_policy() {
        let int = FieldValue::I64;
        let policy = Policy::new(
            def(
                "p",
                ".",
                0,
                &[
                    ("max-length", int(10)),
                    ("expires", int(3_600_000)),
                    ("dead-letter-exchange", FieldValue::from("dlx")),
                ],
            ),
            PolicyKind::Policy,
        )
        .unwrap();
        let operator = Policy::new(
            def(
                "cap",
                ".",
                0,
                &[
                    ("max-length", int(5)),
                    ("expires", int(7_200_000)),
                    ("message-ttl", int(60_000)),
                ],
            ),
            PolicyKind::Operator,
        )
        .unwrap();
        let mut raw = FieldTable::new();
        raw.insert("x-max-length", int(3));
        let declared = QueueArgs::parse("q", &raw).unwrap();
        let args = queue_args(&declared, &raw, Some(&policy), Some(&operator));
        assert_eq!(args.max_length, Some(3), "the argument is the smallest");
        assert_eq!(args.expires, Some(Duration::from_secs(3_600)));
        assert_eq!(args.message_ttl, Some(Duration::from_secs(60)));
        assert_eq!(args.dead_letter_exchange.as_deref(), Some("dlx"));
        let bare = queue_args(
            &QueueArgs::default(),
            &FieldTable::new(),
            None,
            Some(&operator),
        );
        assert_eq!(bare.max_length, Some(5));
        assert_eq!(bare.dead_letter_exchange, None);

        let merged =
            effective_definition(Some(&policy.def.definition), Some(&operator.def.definition));
        assert_eq!(merged.get("max-length"), Some(&int(5)));
        assert_eq!(merged.get("expires"), Some(&int(3_600_000)));
        assert_eq!(merged.get("message-ttl"), Some(&int(60_000)));
        assert_eq!(merged.get_str("dead-letter-exchange"), Some("dlx"));
        assert_eq!(
            effective_definition(None, Some(&operator.def.definition)),
            operator.def.definition
        );
        assert!(effective_definition(None, None).is_empty());
    }
}
