//! How an AMQP producer chooses a message's routing key, as Spring Cloud Stream's RabbitMQ
//! binder does: `routingKey` (the destination's name by default) or `routingKeyExpression`,
//! and `<key>-<partition>` for a partitioned output's message.

use std::borrow::Cow;

use binder_core::binder::{BinderError, BinderErrorKind, BinderResult};
use binder_core::config::BindingConfig;
use binder_core::message::Message;
use binder_core::runtime::RoutingKeyExpression;

use crate::properties::rabbit;

/// The routing key of a producer binding's messages.
#[derive(Debug)]
pub(crate) struct RoutingKey {
    binding: String,
    rule: Rule,
}

#[derive(Debug)]
enum Rule {
    /// `routingKey`, or the destination by default.
    Fixed(String),
    /// `routingKeyExpression`.
    Expression(RoutingKeyExpression),
}

impl RoutingKey {
    /// The routing of a binding. An expression that does not parse is refused here too,
    /// though the configuration's check refuses it first.
    pub(crate) fn of(binding: &BindingConfig) -> BinderResult<Self> {
        let p = &rabbit(binding).producer;
        let rule = match (&p.routing_key_expression, &p.routing_key) {
            (Some(expression), _) => {
                Rule::Expression(RoutingKeyExpression::parse(expression).map_err(|e| {
                    BinderError::config(format!(
                        "spring.cloud.stream.rabbit.bindings.{}.producer.routingKeyExpression: {e}",
                        binding.name
                    ))
                    .with_source(e)
                })?)
            }
            (None, Some(key)) => Rule::Fixed(key.clone()),
            (None, None) => Rule::Fixed(binding.destination.clone()),
        };
        Ok(RoutingKey {
            binding: binding.name.clone(),
            rule,
        })
    }

    /// The routing key of a message sent to `partition` (if the output is partitioned).
    pub(crate) fn of_message(
        &self,
        message: &Message,
        partition: Option<u32>,
    ) -> BinderResult<Cow<'_, str>> {
        let base = match &self.rule {
            Rule::Fixed(key) => Cow::Borrowed(key.as_str()),
            Rule::Expression(e) => Cow::Owned(e.evaluate(message).map_err(|source| {
                BinderError::new(
                    BinderErrorKind::Unroutable,
                    format!("routing key of binding `{}`: {source}", self.binding),
                )
                .with_source(source)
            })?),
        };
        Ok(match partition {
            None => base,
            Some(n) => Cow::Owned(format!("{base}-{n}")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use binder_core::config::ConfigLoader;

    fn binding(yaml: &str) -> BindingConfig {
        ConfigLoader::new()
            .env(Vec::<(String, String)>::new())
            .yaml_str(yaml)
            .load()
            .unwrap()
            .binding("out")
    }

    #[test]
    fn the_destination_is_the_default_key_and_a_partition_is_a_suffix() {
        let keys = RoutingKey::of(&binding(
            "spring.cloud.stream.bindings.out.destination: orders",
        ))
        .unwrap();
        let m = Message::new("{}");
        assert_eq!(keys.of_message(&m, None).unwrap(), "orders");
        assert_eq!(keys.of_message(&m, Some(3)).unwrap(), "orders-3");
    }

    #[test]
    fn an_expression_is_evaluated_per_message_and_its_failure_is_unroutable() {
        let keys = RoutingKey::of(&binding(
            "spring.cloud.stream.rabbit.bindings.out.producer.routingKeyExpression: headers['region']",
        ))
        .unwrap();
        let eu = Message::new("{}").with_header("region", "eu");
        assert_eq!(keys.of_message(&eu, None).unwrap(), "eu");
        assert_eq!(keys.of_message(&eu, Some(1)).unwrap(), "eu-1");
        let e = keys.of_message(&Message::new("{}"), None).unwrap_err();
        assert_eq!(e.kind(), BinderErrorKind::Unroutable);
        assert!(
            e.to_string().contains("routing key of binding `out`"),
            "{e}"
        );
    }
}
