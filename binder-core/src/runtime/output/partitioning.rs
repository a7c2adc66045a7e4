//! How an output binding chooses a message's partition (`partitionKeyExpression`,
//! `partitionCount`), and the producer settings that are refused rather than ignored. Where a
//! partition is in the middleware's terms (a routing key, a topic partition) is the binder's
//! business: the runtime hands it the partition's index.

use super::super::partition;
use super::super::spel::expression::RoutingKeyExpression;
use super::error::{OutputError, SendError};
use crate::config::BindingConfig;
use crate::message::Message;

/// Whether a binding can be an output (checked at startup): its settings are not refused
/// and its partitioning parses.
pub(crate) fn check(binding: &BindingConfig) -> Result<(), OutputError> {
    refused(binding)?;
    Partitioning::of(binding).map(drop)
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

/// Partitioning of a producer (`partitionKeyExpression`, `partitionCount`).
#[derive(Debug)]
pub(crate) struct Partitioning {
    binding: String,
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
            binding: binding.name.clone(),
            key,
            count: p.partition_count,
        }))
    }

    /// The partition of a message: its key's Java hash modulo `partitionCount`, as Spring
    /// Cloud Stream's default selector computes it.
    pub(crate) fn partition(&self, message: &Message) -> Result<u32, SendError> {
        let key =
            self.key
                .evaluate_key(message)
                .map_err(|source| SendError::PartitionKeyExpression {
                    binding: self.binding.clone(),
                    source: Box::new(source),
                })?;
        let hash = partition::java_hash(&key).map_err(|source| SendError::PartitionKey {
            binding: self.binding.clone(),
            expression: self.key.to_string(),
            source: Box::new(source),
        })?;
        Ok(partition::partition_of(hash, self.count))
    }
}
