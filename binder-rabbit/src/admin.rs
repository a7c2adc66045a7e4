//! Operator actions on a queue over plain AMQP 0-9-1, for tools such as `streamctl`: purge it,
//! look at its messages without taking them, and send dead-lettered messages back where they
//! came from. They need no management API, so they work on RabbitMQ and on `stream-broker`
//! alike.

use binder_amqp::convert;
use binder_core::binder::{BinderError, BinderResult};
use binder_core::message::{HeaderValue, Message};
use lapin::Confirmation;
use lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions,
    ExchangeDeclareOptions, QueueDeclareOptions, QueuePurgeOptions,
};
use lapin::types::{FieldTable, ShortString};

use crate::binder::{RabbitBinder, broker, queue_error};

/// A message looked at in a queue, left there.
#[derive(Debug, Clone, PartialEq)]
pub struct PeekedMessage {
    /// The exchange it was last published to (for a dead-lettered message, the dead-letter
    /// exchange).
    pub exchange: String,
    /// The routing key it was last published with.
    pub routing_key: String,
    /// The broker had delivered it before.
    pub redelivered: bool,
    /// Its payload, headers and properties.
    pub message: Message,
}

impl PeekedMessage {
    /// Where the message was first published, read from its headers: the framework's
    /// `x-original-exchange` / `x-original-routingKey` (written by `republishToDlq`), else
    /// the most recent `x-death` entry (written by the broker's dead-lettering). `None` when
    /// neither says.
    pub fn origin(&self) -> Option<(String, String)> {
        origin(&self.message)
    }
}

/// The exchange and routing key a dead-lettered message was first published to.
pub fn origin(message: &Message) -> Option<(String, String)> {
    let headers = &message.headers;
    if let (Some(exchange), Some(key)) = (
        headers.get_str("x-original-exchange"),
        headers.get_str("x-original-routingKey"),
    ) {
        return Some((exchange.to_owned(), key.to_owned()));
    }
    let Some(HeaderValue::Array(deaths)) = headers.get("x-death") else {
        return None;
    };
    // The broker keeps the most recent death first.
    let HeaderValue::Table(latest) = deaths.first()? else {
        return None;
    };
    let exchange = latest.get_str("exchange")?;
    let key = match latest.get("routing-keys") {
        Some(HeaderValue::Array(keys)) => keys.first().and_then(HeaderValue::as_str)?,
        _ => return None,
    };
    Some((exchange.to_owned(), key.to_owned()))
}

/// What [`RabbitBinder::replay`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replay {
    /// Messages republished to their origin, confirmed there, then removed from the queue.
    pub replayed: u32,
    /// Messages left in the queue, in queue order, each with the reason.
    pub kept: Vec<Kept>,
}

/// A message [`RabbitBinder::replay`] left where it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    /// Its routing key in the queue (the dead-letter routing key).
    pub routing_key: String,
    /// Why it stayed.
    pub reason: String,
}

impl RabbitBinder {
    /// Whether an exchange of this name exists (a passive declare).
    pub async fn exchange_exists(&self, exchange: &str) -> BinderResult<bool> {
        if exchange.is_empty() {
            // The default exchange cannot be declared, even passively; it always exists.
            return Ok(true);
        }
        let ch = self.channel().await?;
        let declared = ch
            .exchange_declare(
                ShortString::from(exchange),
                lapin::ExchangeKind::Direct,
                ExchangeDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await;
        match declared {
            Ok(()) => {
                let _ = ch.close(200, ShortString::from("OK")).await;
                Ok(true)
            }
            // The refusal closed the channel.
            Err(e) if matches!(e.kind(), lapin::ErrorKind::ProtocolError(p) if p.get_id() == 404) => {
                Ok(false)
            }
            Err(e) => Err(broker(e)),
        }
    }

    /// Removes every ready message from `queue` and returns how many there were (messages
    /// delivered and not yet acknowledged stay).
    pub async fn purge_queue(&self, queue: &str) -> BinderResult<u32> {
        let ch = self.channel().await?;
        let purged = ch
            .queue_purge(ShortString::from(queue), QueuePurgeOptions::default())
            .await
            .map_err(|e| queue_error(e, queue))?;
        let _ = ch.close(200, ShortString::from("OK")).await;
        Ok(purged)
    }

    /// The first `max` ready messages of `queue`, left in it: they are fetched without being
    /// acknowledged and return to the queue, in their order, when the channel closes. The
    /// broker marks them redelivered.
    pub async fn peek(&self, queue: &str, max: u32) -> BinderResult<Vec<PeekedMessage>> {
        let ch = self.channel().await?;
        let mut seen = Vec::new();
        while seen.len() < max as usize {
            let got = ch
                .basic_get(ShortString::from(queue), BasicGetOptions { no_ack: false })
                .await
                .map_err(|e| queue_error(e, queue))?;
            let Some(got) = got else { break };
            let d = got.delivery;
            seen.push(PeekedMessage {
                exchange: d.exchange.as_str().to_owned(),
                routing_key: d.routing_key.as_str().to_owned(),
                redelivered: d.redelivered,
                message: convert::message(d.data, &d.properties),
            });
        }
        let _ = ch.close(200, ShortString::from("OK")).await;
        Ok(seen)
    }

    /// Sends up to `max` messages of a dead-letter `queue` back to where they were first
    /// published ([`origin`]), one at a time: each is republished (mandatory, with its
    /// properties and headers) and removed from `queue` only after the broker confirmed it
    /// and routed it to a queue. A message without an origin, one no queue takes, or one
    /// the broker refuses stays in `queue`, in its place, with the reason in
    /// [`Replay::kept`]. Only the messages ready when it starts are looked at, so a message
    /// that fails again and comes back is not replayed twice in one call.
    pub async fn replay(&self, queue: &str, max: u32) -> BinderResult<Replay> {
        let ch = self.channel().await?;
        let ready = ch
            .queue_declare(
                ShortString::from(queue),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|e| queue_error(e, queue))?
            .message_count();
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(broker)?;
        let mut report = Replay::default();
        for _ in 0..ready.min(max) {
            let got = ch
                .basic_get(ShortString::from(queue), BasicGetOptions { no_ack: false })
                .await
                .map_err(|e| queue_error(e, queue))?;
            let Some(got) = got else { break };
            let d = got.delivery;
            let message = convert::message(d.data, &d.properties);
            let keep = |reason: String| Kept {
                routing_key: d.routing_key.as_str().to_owned(),
                reason,
            };
            let Some((exchange, key)) = origin(&message) else {
                report.kept.push(keep(
                    "no x-original-exchange or x-death header says where it came from".into(),
                ));
                continue;
            };
            let confirm = ch
                .basic_publish(
                    ShortString::from(exchange.as_str()),
                    ShortString::from(key.as_str()),
                    BasicPublishOptions {
                        mandatory: true,
                        immediate: false,
                    },
                    &message.payload,
                    d.properties.clone(),
                )
                .await
                .map_err(broker)?
                .await
                .map_err(broker)?;
            let refused = match confirm {
                Confirmation::Ack(None) => None,
                Confirmation::Ack(Some(returned)) => Some(format!(
                    "exchange `{exchange}` routes key `{key}` to no queue ({} {})",
                    returned.reply_code, returned.reply_text
                )),
                Confirmation::Nack(_) => Some(format!(
                    "the broker refused the republish to exchange `{exchange}` (nack)"
                )),
                Confirmation::NotRequested => {
                    return Err(BinderError::broker(
                        "the broker did not confirm the republish",
                    ));
                }
            };
            match refused {
                None => {
                    ch.basic_ack(d.delivery_tag, BasicAckOptions::default())
                        .await
                        .map_err(broker)?;
                    report.replayed += 1;
                }
                Some(reason) => report.kept.push(keep(reason)),
            }
        }
        // The messages kept were fetched and not acknowledged: closing the channel puts them
        // back in their places.
        let _ = ch.close(200, ShortString::from("OK")).await;
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use binder_core::message::Headers;

    fn with_headers(pairs: Vec<(&str, HeaderValue)>) -> Message {
        let mut m = Message::default();
        for (k, v) in pairs {
            m.headers.insert(k, v);
        }
        m
    }

    #[test]
    fn the_framework_s_headers_win_over_x_death() {
        let mut death = Headers::new();
        death.insert("exchange", HeaderValue::String("dlx-path".into()));
        death.insert(
            "routing-keys",
            HeaderValue::Array(vec![HeaderValue::String("k".into())]),
        );
        let m = with_headers(vec![
            ("x-original-exchange", HeaderValue::String("orders".into())),
            ("x-original-routingKey", HeaderValue::String("new".into())),
            (
                "x-death",
                HeaderValue::Array(vec![HeaderValue::Table(death)]),
            ),
        ]);
        assert_eq!(origin(&m), Some(("orders".into(), "new".into())));
    }

    #[test]
    fn the_latest_x_death_entry_gives_the_origin() {
        let entry = |exchange: &str, key: &str| {
            let mut t = Headers::new();
            t.insert("exchange", HeaderValue::String(exchange.into()));
            t.insert(
                "routing-keys",
                HeaderValue::Array(vec![HeaderValue::String(key.into())]),
            );
            HeaderValue::Table(t)
        };
        let m = with_headers(vec![(
            "x-death",
            HeaderValue::Array(vec![entry("latest", "a"), entry("older", "b")]),
        )]);
        assert_eq!(origin(&m), Some(("latest".into(), "a".into())));
    }

    #[test]
    fn a_message_without_either_has_no_origin() {
        assert_eq!(origin(&Message::default()), None);
        let m = with_headers(vec![(
            "x-original-exchange",
            HeaderValue::String("x".into()),
        )]);
        assert_eq!(origin(&m), None);
    }
}
