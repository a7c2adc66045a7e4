//! The topology plan: which exchanges, queues and bindings a configuration declares, as data.
//!
//! Computed here, applied by every binder, printable before anything runs (`streamctl plan`).
//! Names and arguments follow Spring Cloud Stream's RabbitMQ binder exactly, so services of
//! both frameworks share a broker.

mod naming;
mod plan;
mod render;

pub use naming::{anonymous_suffix, dlx_name, routing_key_for_partition};
pub use plan::{
    BindingRole, ConsumerTopology, PlanError, ProducerTopology, infer_role, plan, plan_consumer,
    plan_producer,
};

use serde::Serialize;

use crate::properties::ExchangeType;
use binder_core::message::Headers;

/// One exchange declaration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExchangeDecl {
    /// Exchange name.
    pub name: String,
    /// Exchange type.
    #[serde(rename = "type")]
    pub kind: ExchangeType,
    /// Survives a broker restart.
    pub durable: bool,
    /// Deleted when its last binding goes.
    pub auto_delete: bool,
    /// Cannot be published to directly.
    pub internal: bool,
    /// Declaration arguments (`alternate-exchange`, …).
    pub arguments: Headers,
}

/// One queue declaration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueDecl {
    /// Queue name.
    pub name: String,
    /// Survives a broker restart.
    pub durable: bool,
    /// Owned by the declaring connection.
    pub exclusive: bool,
    /// Deleted when its last consumer goes.
    pub auto_delete: bool,
    /// Declaration arguments (`x-dead-letter-exchange`, `x-message-ttl`, …).
    pub arguments: Headers,
}

/// What a binding delivers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DestinationType {
    /// A queue.
    Queue,
    /// Another exchange.
    Exchange,
}

/// One binding declaration: `source` exchange to `destination`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BindingDecl {
    /// Source exchange.
    pub source: String,
    /// Bound queue or exchange.
    pub destination: String,
    /// Whether `destination` is a queue or an exchange.
    pub destination_type: DestinationType,
    /// Binding key.
    pub routing_key: String,
    /// Binding arguments (headers exchanges).
    pub arguments: Headers,
}

/// A list of declarations, each once, in the order they must be applied (exchanges, then
/// queues, then bindings).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TopologyPlan {
    /// Exchanges to declare.
    pub exchanges: Vec<ExchangeDecl>,
    /// Queues to declare.
    pub queues: Vec<QueueDecl>,
    /// Bindings to declare.
    pub bindings: Vec<BindingDecl>,
}

impl TopologyPlan {
    /// Whether nothing is declared.
    pub fn is_empty(&self) -> bool {
        self.exchanges.is_empty() && self.queues.is_empty() && self.bindings.is_empty()
    }

    /// Adds an exchange unless an identical one is there; a different one with the same name is
    /// a conflict.
    pub fn add_exchange(&mut self, decl: ExchangeDecl) -> Result<(), PlanError> {
        match self.exchanges.iter().find(|e| e.name == decl.name) {
            Some(existing) if *existing == decl => Ok(()),
            Some(existing) => Err(PlanError::ConflictingExchange {
                name: decl.name.clone(),
                existing: Box::new(existing.clone()),
                wanted: Box::new(decl),
            }),
            None => {
                self.exchanges.push(decl);
                Ok(())
            }
        }
    }

    /// Adds a queue unless an identical one is there; a different one with the same name is a
    /// conflict.
    pub fn add_queue(&mut self, decl: QueueDecl) -> Result<(), PlanError> {
        match self.queues.iter().find(|q| q.name == decl.name) {
            Some(existing) if *existing == decl => Ok(()),
            Some(existing) => Err(PlanError::ConflictingQueue {
                name: decl.name.clone(),
                existing: Box::new(existing.clone()),
                wanted: Box::new(decl),
            }),
            None => {
                self.queues.push(decl);
                Ok(())
            }
        }
    }

    /// Adds a binding unless an identical one is there (bindings never conflict).
    pub fn add_binding(&mut self, decl: BindingDecl) {
        if !self.bindings.contains(&decl) {
            self.bindings.push(decl);
        }
    }

    /// Merges another plan into this one.
    pub fn merge(&mut self, other: TopologyPlan) -> Result<(), PlanError> {
        for e in other.exchanges {
            self.add_exchange(e)?;
        }
        for q in other.queues {
            self.add_queue(q)?;
        }
        for b in other.bindings {
            self.add_binding(b);
        }
        Ok(())
    }

    /// The plan as the JSON object `streamctl plan --format json` prints.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// A human-readable listing.
    pub fn to_text(&self) -> String {
        render::text(self)
    }
}
