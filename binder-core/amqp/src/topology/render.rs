//! Human-readable rendering of a plan.

use std::fmt::Write;

use super::{DestinationType, TopologyPlan};
use binder_core::message::Headers;

fn args(arguments: &Headers) -> String {
    if arguments.is_empty() {
        String::new()
    } else {
        format!(
            " {}",
            serde_json::to_string(arguments).unwrap_or_else(|_| arguments.to_string())
        )
    }
}

fn flags(pairs: &[(bool, &str)]) -> String {
    let set: Vec<&str> = pairs
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, s)| *s)
        .collect();
    if set.is_empty() {
        String::new()
    } else {
        format!(" ({})", set.join(", "))
    }
}

pub(super) fn text(plan: &TopologyPlan) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "exchanges ({}):", plan.exchanges.len());
    for e in &plan.exchanges {
        let _ = writeln!(
            out,
            "  {} [{}]{}{}",
            e.name,
            e.kind,
            flags(&[
                (e.durable, "durable"),
                (e.auto_delete, "auto-delete"),
                (e.internal, "internal")
            ]),
            args(&e.arguments)
        );
    }
    let _ = writeln!(out, "queues ({}):", plan.queues.len());
    for q in &plan.queues {
        let _ = writeln!(
            out,
            "  {}{}{}",
            q.name,
            flags(&[
                (q.durable, "durable"),
                (q.exclusive, "exclusive"),
                (q.auto_delete, "auto-delete")
            ]),
            args(&q.arguments)
        );
    }
    let _ = writeln!(out, "bindings ({}):", plan.bindings.len());
    for b in &plan.bindings {
        let arrow = match b.destination_type {
            DestinationType::Queue => "queue",
            DestinationType::Exchange => "exchange",
        };
        let key = if b.routing_key.is_empty() {
            "(no key)".to_owned()
        } else {
            format!("'{}'", b.routing_key)
        };
        let _ = writeln!(
            out,
            "  {} -> {arrow} {} with {key}{}",
            b.source,
            b.destination,
            args(&b.arguments)
        );
    }
    out
}
