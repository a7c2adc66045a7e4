//! The metadata log: durable exchanges, queues and bindings, policies and operator policies,
//! one record per change, replayed
//! at start and rewritten (compacted) as a snapshot once it holds much more than the state.

use std::collections::BTreeMap;

use stream_engine::{BindingDef, DestinationKind, ExchangeDef, PolicyDef, QueueDef};

use crate::codec::{self, Decoded, In, Malformed, Out};

/// One change to the durable declarations.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum MetaOp {
    ExchangeDeclared(ExchangeDef),
    ExchangeDeleted(String),
    /// A queue, with its incarnation: a queue deleted and declared again under the same name
    /// is a new incarnation, and the old one's messages are not its.
    QueueDeclared(u64, QueueDef),
    QueueDeleted(String),
    BindingAdded(BindingDef),
    BindingRemoved(BindingDef),
    /// The next queue incarnation to hand out, first in a rewritten log: the queues deleted
    /// before the rewrite are not in it, and a queue declared again must not get one of
    /// their incarnations (their records may still be in the segments).
    NextIncarnation(u64),
    /// A policy set, or replaced by name.
    PolicySet(PolicyDef),
    PolicyCleared(String),
    /// An operator policy set, or replaced by name (named apart from policies).
    OperatorPolicySet(PolicyDef),
    OperatorPolicyCleared(String),
}

impl MetaOp {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Out::default();
        match self {
            MetaOp::ExchangeDeclared(x) => {
                out.u8(1);
                codec::put_exchange(&mut out, x);
            }
            MetaOp::ExchangeDeleted(name) => {
                out.u8(2);
                out.str(name);
            }
            MetaOp::QueueDeclared(incarnation, q) => {
                out.u8(3);
                out.u64(*incarnation);
                codec::put_queue(&mut out, q);
            }
            MetaOp::QueueDeleted(name) => {
                out.u8(4);
                out.str(name);
            }
            MetaOp::BindingAdded(b) => {
                out.u8(5);
                codec::put_binding(&mut out, b);
            }
            MetaOp::BindingRemoved(b) => {
                out.u8(6);
                codec::put_binding(&mut out, b);
            }
            MetaOp::NextIncarnation(n) => {
                out.u8(7);
                out.u64(*n);
            }
            MetaOp::PolicySet(p) => {
                out.u8(8);
                codec::put_policy(&mut out, p);
            }
            MetaOp::PolicyCleared(name) => {
                out.u8(9);
                out.str(name);
            }
            MetaOp::OperatorPolicySet(p) => {
                out.u8(10);
                codec::put_policy(&mut out, p);
            }
            MetaOp::OperatorPolicyCleared(name) => {
                out.u8(11);
                out.str(name);
            }
        }
        out.0
    }

    pub fn decode(payload: &[u8]) -> Decoded<MetaOp> {
        let mut inp = In(payload);
        Ok(match inp.u8()? {
            1 => MetaOp::ExchangeDeclared(codec::get_exchange(&mut inp)?),
            2 => MetaOp::ExchangeDeleted(inp.string()?),
            3 => {
                let incarnation = inp.u64()?;
                if incarnation >= MAX_INCARNATION {
                    return Err(Malformed("a queue incarnation beyond the range"));
                }
                MetaOp::QueueDeclared(incarnation, codec::get_queue(&mut inp)?)
            }
            4 => MetaOp::QueueDeleted(inp.string()?),
            5 => MetaOp::BindingAdded(codec::get_binding(&mut inp)?),
            6 => MetaOp::BindingRemoved(codec::get_binding(&mut inp)?),
            7 => match inp.u64()? {
                n if n > MAX_INCARNATION => {
                    return Err(Malformed("a queue incarnation beyond the range"));
                }
                n => MetaOp::NextIncarnation(n),
            },
            8 => MetaOp::PolicySet(codec::get_policy(&mut inp)?),
            9 => MetaOp::PolicyCleared(inp.string()?),
            10 => MetaOp::OperatorPolicySet(codec::get_policy(&mut inp)?),
            11 => MetaOp::OperatorPolicyCleared(inp.string()?),
            _ => return Err(Malformed("unknown metadata record")),
        })
    }
}

/// Queue incarnations are below this, in the metadata log and in the keys of the segments and
/// ack files (a larger one is malformed), and the next one to hand out at most this: a store
/// takes one per durable queue declared, so only a damaged file comes near it, and the writer
/// refuses a declaration once it is reached rather than write a record it could not read.
pub(crate) const MAX_INCARNATION: u64 = 1 << 62;

/// The durable declarations, as the log's records so far make them.
#[derive(Debug, Default, Clone)]
pub(crate) struct Meta {
    pub exchanges: BTreeMap<String, ExchangeDef>,
    /// Queues with their incarnation.
    pub queues: BTreeMap<String, (u64, QueueDef)>,
    pub bindings: Vec<BindingDef>,
    pub policies: BTreeMap<String, PolicyDef>,
    pub operator_policies: BTreeMap<String, PolicyDef>,
    /// The next queue incarnation to hand out.
    pub next_incarnation: u64,
}

impl Meta {
    pub fn apply(&mut self, op: &MetaOp) {
        match op {
            MetaOp::ExchangeDeclared(x) => {
                self.exchanges.insert(x.name.clone(), x.clone());
            }
            MetaOp::ExchangeDeleted(name) => {
                self.exchanges.remove(name);
                self.bindings.retain(|b| {
                    b.source != *name
                        && !(b.destination_kind == DestinationKind::Exchange
                            && b.destination == *name)
                });
            }
            MetaOp::QueueDeclared(incarnation, q) => {
                self.next_incarnation = self.next_incarnation.max(incarnation + 1);
                self.queues
                    .insert(q.name.clone(), (*incarnation, q.clone()));
            }
            MetaOp::QueueDeleted(name) => {
                self.queues.remove(name);
                self.bindings.retain(|b| {
                    !(b.destination_kind == DestinationKind::Queue && b.destination == *name)
                });
            }
            MetaOp::BindingAdded(b) => {
                if !self.bindings.contains(b) {
                    self.bindings.push(b.clone());
                }
            }
            MetaOp::BindingRemoved(b) => self.bindings.retain(|kept| kept != b),
            MetaOp::NextIncarnation(n) => self.next_incarnation = self.next_incarnation.max(*n),
            MetaOp::PolicySet(p) => {
                self.policies.insert(p.name.clone(), p.clone());
            }
            MetaOp::PolicyCleared(name) => {
                self.policies.remove(name);
            }
            MetaOp::OperatorPolicySet(p) => {
                self.operator_policies.insert(p.name.clone(), p.clone());
            }
            MetaOp::OperatorPolicyCleared(name) => {
                self.operator_policies.remove(name);
            }
        }
    }

    /// The records that declare the state as it is (what a compacted log holds).
    pub fn snapshot(&self) -> Vec<MetaOp> {
        let mut ops = vec![MetaOp::NextIncarnation(self.next_incarnation)];
        ops.extend(
            self.exchanges
                .values()
                .cloned()
                .map(MetaOp::ExchangeDeclared),
        );
        ops.extend(
            self.queues
                .values()
                .map(|(i, q)| MetaOp::QueueDeclared(*i, q.clone())),
        );
        ops.extend(self.bindings.iter().cloned().map(MetaOp::BindingAdded));
        ops.extend(self.policies.values().cloned().map(MetaOp::PolicySet));
        ops.extend(
            self.operator_policies
                .values()
                .cloned()
                .map(MetaOp::OperatorPolicySet),
        );
        ops
    }

    /// How many records a compacted log holds.
    pub fn live_records(&self) -> usize {
        1 + self.exchanges.len()
            + self.queues.len()
            + self.bindings.len()
            + self.policies.len()
            + self.operator_policies.len()
    }

    /// A queue's current incarnation.
    pub fn incarnation(&self, queue: &str) -> Option<u64> {
        self.queues.get(queue).map(|(i, _)| *i)
    }
}

#[cfg(test)]
mod tests {
    use stream_engine::{FieldTable, QueueOptions};

    use super::*;

    #[test]
    fn queue_incarnations_beyond_the_range_are_malformed() {
        let q = QueueDef {
            name: "q".to_owned(),
            options: QueueOptions::default(),
            arguments: FieldTable::new(),
        };
        let decodes = |op: MetaOp| MetaOp::decode(&op.encode()).is_ok();
        for (incarnation, declared, next) in [
            (MAX_INCARNATION - 1, true, true),
            (MAX_INCARNATION, false, true),
            (MAX_INCARNATION + 1, false, false),
            (u64::MAX, false, false),
        ] {
            let declaration = MetaOp::QueueDeclared(incarnation, q.clone());
            assert_eq!(decodes(declaration), declared, "{incarnation}");
            assert_eq!(
                decodes(MetaOp::NextIncarnation(incarnation)),
                next,
                "{incarnation}"
            );
        }
        // What applying the largest declaration leaves is a next incarnation that decodes.
        let mut meta = Meta::default();
        meta.apply(&MetaOp::QueueDeclared(MAX_INCARNATION - 1, q));
        assert!(decodes(meta.snapshot().remove(0)));
    }

    #[test]
    fn a_rewritten_log_keeps_the_policies_set_and_not_those_cleared() {
        let mut definition = FieldTable::new();
        definition.insert("message-ttl", stream_engine::FieldValue::I64(60_000));
        let policy = |name: &str| PolicyDef {
            name: name.to_owned(),
            pattern: "^q".to_owned(),
            apply_to: stream_engine::PolicyTarget::Exchanges,
            priority: i64::MIN,
            definition: definition.clone(),
        };
        let mut meta = Meta::default();
        meta.apply(&MetaOp::PolicySet(policy("a")));
        meta.apply(&MetaOp::PolicySet(policy("b")));
        meta.apply(&MetaOp::PolicyCleared("a".to_owned()));
        meta.apply(&MetaOp::OperatorPolicySet(policy("a")));
        meta.apply(&MetaOp::OperatorPolicySet(policy("c")));
        meta.apply(&MetaOp::OperatorPolicyCleared("c".to_owned()));
        let mut rewritten = Meta::default();
        for op in meta.snapshot() {
            rewritten.apply(&MetaOp::decode(&op.encode()).unwrap());
        }
        assert_eq!(
            rewritten.policies.into_values().collect::<Vec<_>>(),
            [policy("b")]
        );
        assert_eq!(
            rewritten
                .operator_policies
                .into_values()
                .collect::<Vec<_>>(),
            [policy("a")],
            "named apart from the policies"
        );
        assert_eq!(meta.live_records(), 3);
        let mut bad = MetaOp::PolicySet(policy("c")).encode();
        // The tag, then the name and the pattern, each after its 4-byte length.
        let target = 1 + (4 + 1) + (4 + 2);
        bad[target] = 7;
        assert!(
            MetaOp::decode(&bad).is_err(),
            "an unknown target is malformed"
        );
    }

    #[test]
    fn a_rewritten_log_keeps_the_next_incarnation_of_deleted_queues() {
        let q = QueueDef {
            name: "q".to_owned(),
            options: QueueOptions::default(),
            arguments: FieldTable::new(),
        };
        let mut meta = Meta::default();
        meta.apply(&MetaOp::QueueDeclared(4, q));
        meta.apply(&MetaOp::QueueDeleted("q".to_owned()));
        let mut rewritten = Meta::default();
        for op in meta.snapshot() {
            rewritten.apply(&MetaOp::decode(&op.encode()).unwrap());
        }
        assert_eq!(rewritten.next_incarnation, 5);
    }
}
