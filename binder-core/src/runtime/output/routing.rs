//! How an output binding chooses routing keys: a fixed key, `routingKeyExpression`, and
//! partitioning (`partitionKeyExpression`, `partitionCount`); and the producer settings that
//! are refused rather than ignored.

use std::borrow::Cow;

use super::super::partition;
use super::super::spel::expression::RoutingKeyExpression;
use super::error::{OutputError, SendError};
use crate::config::BindingConfig;
use crate::message::Message;

/// Whether a binding can be an output (checked at startup): its settings are not refused
/// and its routing parses.
pub(crate) fn check(binding: &BindingConfig) -> Result<(), OutputError> {
    refused(binding)?;
    Routing::of(binding).map(drop)
}

/// The producer settings that are refused rather than ignored.
pub(crate) fn refused(binding: &BindingConfig) -> Result<(), OutputError> {
    if binding.producer.error_channel_enabled {
        return Err(OutputError::ErrorChannel {
            binding: binding.name.clone(),
        });
    }
    Ok(())
}

/// How an output chooses routing keys.
#[derive(Debug)]
pub(crate) enum Routing {
    /// A fixed key (`routingKey`, or the destination by default).
    Fixed(String),
    /// `routingKeyExpression`.
    Expression(RoutingKeyExpression),
}

impl Routing {
    /// The routing of a binding (its key, or the expression that computes it).
    pub(crate) fn of(binding: &BindingConfig) -> Result<Routing, OutputError> {
        let p = &binding.rabbit_producer;
        Ok(match (&p.routing_key_expression, &p.routing_key) {
            (Some(expr), _) => {
                Routing::Expression(RoutingKeyExpression::parse(expr).map_err(|source| {
                    OutputError::Expression {
                        binding: binding.name.clone(),
                        property: "routingKeyExpression",
                        source,
                    }
                })?)
            }
            (None, Some(key)) => Routing::Fixed(key.clone()),
            (None, None) => Routing::Fixed(binding.destination.clone()),
        })
    }
}

/// Partitioning of a producer (`partitionKeyExpression`, `partitionCount`).
#[derive(Debug)]
pub(crate) struct Partitioning {
    key: RoutingKeyExpression,
    count: u32,
}

impl Partitioning {
    /// The partitioning of a binding, if it is partitioned.
    pub(crate) fn of(binding: &BindingConfig) -> Result<Option<Partitioning>, OutputError> {
        let p = &binding.producer;
        if p.partition_selector_expression.is_some() {
            return Err(OutputError::PartitionSelector {
                binding: binding.name.clone(),
            });
        }
        let Some(expr) = &p.partition_key_expression else {
            return Ok(None);
        };
        let key = RoutingKeyExpression::parse(expr).map_err(|source| OutputError::Expression {
            binding: binding.name.clone(),
            property: "partitionKeyExpression",
            source,
        })?;
        Ok(Some(Partitioning {
            key,
            count: p.partition_count,
        }))
    }
}

/// The routing of one output: the key (or expression), and its partitioning.
#[derive(Debug)]
pub(crate) struct RoutingKeys {
    pub binding: String,
    pub destination: String,
    pub routing: Routing,
    pub partitioning: Option<Partitioning>,
}

impl RoutingKeys {
    /// The routing key of a message.
    pub(crate) fn key(&self, message: &Message) -> Result<Cow<'_, str>, SendError> {
        let base = match &self.routing {
            Routing::Fixed(k) => Cow::Borrowed(k.as_str()),
            Routing::Expression(e) => {
                Cow::Owned(
                    e.evaluate(message)
                        .map_err(|source| SendError::RoutingKey {
                            binding: self.binding.clone(),
                            source: Box::new(source),
                        })?,
                )
            }
        };
        let Some(p) = &self.partitioning else {
            return Ok(base);
        };
        let key = p
            .key
            .evaluate_key(message)
            .map_err(|source| SendError::RoutingKey {
                binding: self.binding.clone(),
                source: Box::new(source),
            })?;
        let hash = partition::java_hash(&key).map_err(|source| SendError::PartitionKey {
            binding: self.binding.clone(),
            expression: p.key.to_string(),
            source: Box::new(source),
        })?;
        let partition = partition::partition_of(hash, p.count);
        // As SCSt: `<destination>-<n>` unless a routing key was configured.
        let base = match &self.routing {
            Routing::Fixed(k) if *k == self.destination => self.destination.as_str(),
            _ => base.as_ref(),
        };
        Ok(Cow::Owned(format!("{base}-{partition}")))
    }
}
