//! Setting and clearing policies, and applying them to the queues and exchanges they match.

use std::sync::Arc;

use tokio::time::Instant;

use super::State;
use crate::envelope::Envelope;
use crate::error::{AmqpError, AmqpResult};
use crate::policy::{self, Policies, Policy, PolicyDef, PolicyKind};

impl<E: Envelope> State<E> {
    /// The policies of `kind`.
    fn policies_of(&mut self, kind: PolicyKind) -> &mut Policies {
        match kind {
            PolicyKind::Policy => &mut self.policies,
            PolicyKind::Operator => &mut self.operator_policies,
        }
    }

    /// Adds or replaces a policy (validated and compiled before the lock was taken) and
    /// applies it, and what it displaces, at once; whether it replaced one.
    pub(crate) fn set_policy(&mut self, policy: Policy) -> bool {
        let kind = policy.kind;
        match kind {
            PolicyKind::Policy => self.store.policy_set(&policy.def),
            PolicyKind::Operator => self.store.operator_policy_set(&policy.def),
        }
        let name = policy.def.name.clone();
        let kept = self.forget_refused(kind, &name);
        let replaced = self.policies_of(kind).set(policy) || kept;
        self.apply_policies(kind, &name);
        replaced
    }

    /// Takes `name` off the refused policies kept in the store; whether it was one.
    fn forget_refused(&mut self, kind: PolicyKind, name: &str) -> bool {
        let before = self.refused_policies.len();
        self.refused_policies
            .retain(|(k, n)| (*k, n.as_str()) != (kind, name));
        self.refused_policies.len() != before
    }

    /// Removes a policy; a 404 error if there is none of that kind and name.
    pub(crate) fn clear_policy(&mut self, kind: PolicyKind, name: &str) -> AmqpResult<()> {
        let applied = self.policies_of(kind).clear(name);
        if !applied && !self.forget_refused(kind, name) {
            return Err(AmqpError::not_found(format!(
                "{} '{name}' in vhost '{}'",
                kind.noun(),
                self.config.vhost
            )));
        }
        match kind {
            PolicyKind::Policy => self.store.policy_cleared(name),
            PolicyKind::Operator => self.store.operator_policy_cleared(name),
        }
        self.apply_policies(kind, name);
        Ok(())
    }

    pub(crate) fn policy_defs(&self, kind: PolicyKind) -> Vec<PolicyDef> {
        match kind {
            PolicyKind::Policy => self.policies.defs(),
            PolicyKind::Operator => self.operator_policies.defs(),
        }
    }

    /// Brings every queue and exchange to the policies that now apply to it. A queue whose
    /// limits dropped below its depth drops (dead-letters) its oldest messages at once unless
    /// it rejects publishes on overflow; one with an `expires` counts it from the change;
    /// messages already queued keep the TTL they were given.
    ///
    /// `touched` is the policy just set or cleared: a queue that follows it has a changed
    /// policy even when its effective arguments are the same.
    fn apply_policies(&mut self, touched_kind: PolicyKind, touched: &str) {
        let now = Instant::now();
        let names: Vec<Arc<str>> = self.registry.queues.keys().cloned().collect();
        let name_of = |p: Option<&Policy>| p.map(|p| Arc::<str>::from(p.def.name.as_str()));
        for name in names {
            let policy = self.policies.for_queue(&name);
            let operator = self.operator_policies.for_queue(&name);
            let (policy_name, operator_name) = (name_of(policy), name_of(operator));
            let q = self.registry.queues.get_mut(&name).expect("listed above");
            let args = policy::queue_args(&q.declared, &q.raw_args, policy, operator);
            let follows_touched = match touched_kind {
                PolicyKind::Policy => &policy_name,
                PolicyKind::Operator => &operator_name,
            }
            .as_deref()
                == Some(touched);
            let changed = q.policy != policy_name
                || q.operator_policy != operator_name
                || args != q.args
                || follows_touched;
            q.policy = policy_name;
            q.operator_policy = operator_name;
            if !changed {
                continue;
            }
            // As RabbitMQ, a queue whose policy changed counts its expiry from now.
            if args.expires.is_some() {
                q.last_used = now;
                self.work.timer_dirty = true;
            }
            q.args = args;
            q.drop_over_limits(&mut self.memory.used, &mut self.work.dying);
            // Dispatched again: its head may have gone, and its consumers may take more.
            self.work.mark_dirty(name);
        }
        let mut routing = false;
        for x in self.registry.exchanges.values_mut() {
            let policy = self.policies.for_exchange(&x.name);
            let alternate = policy::alternate_exchange(&x.arguments, policy);
            x.policy = policy.map(|p| Arc::from(p.def.name.as_str()));
            if alternate != x.alternate {
                x.alternate = alternate;
                routing = true;
            }
        }
        if routing {
            self.registry.routing_changed();
        }
        self.settle();
    }
}
