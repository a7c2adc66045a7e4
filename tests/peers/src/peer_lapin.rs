//! Raw lapin used well: a confirm channel with a window of publishes in flight (from
//! `basic_publish` to its confirm), a consumer with `basic.qos` prefetch acking with
//! `multiple = true` every [`ACK_EVERY`] deliveries and whenever no further delivery is
//! buffered. The producer encodes each struct, the consumer decodes each payload.

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions,
};
use lapin::types::{FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};

use crate::payload::{BenchMsg, Sink, decode};

/// The consumer acks (`multiple`) after this many deliveries at the latest.
pub const ACK_EVERY: usize = 50;

/// A confirm channel to publish on and a consumer on `queue`, on one connection or, with a
/// publisher connection apart, on two (as RabbitMQ recommends, so that a publisher blocked by
/// a resource alarm does not stop the consumer's acks).
pub struct RawLapin {
    conn: Connection,
    /// The publisher's own connection, when apart.
    publishing: Option<Connection>,
    publisher: Channel,
    consuming: Channel,
    consumer: Option<lapin::Consumer>,
}

impl std::fmt::Debug for RawLapin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RawLapin")
    }
}

impl RawLapin {
    pub async fn connect(uri: &str, queue: &str, prefetch: u16, apart: bool) -> RawLapin {
        let conn = Connection::connect(uri, ConnectionProperties::default())
            .await
            .expect("connect");
        let publishing = if apart {
            Some(
                Connection::connect(uri, ConnectionProperties::default())
                    .await
                    .expect("connect"),
            )
        } else {
            None
        };
        let publisher = publishing
            .as_ref()
            .unwrap_or(&conn)
            .create_channel()
            .await
            .expect("channel.open");
        publisher
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirm.select");
        let consuming = conn.create_channel().await.expect("channel.open");
        consuming
            .basic_qos(prefetch, BasicQosOptions { global: false })
            .await
            .expect("basic.qos");
        let consumer = consuming
            .basic_consume(
                ShortString::from(queue),
                ShortString::from(""),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("basic.consume");
        RawLapin {
            conn,
            publishing,
            publisher,
            consuming,
            consumer: Some(consumer),
        }
    }

    /// The consumer, for the consuming task.
    pub fn take_consumer(&mut self) -> lapin::Consumer {
        self.consumer.take().expect("consumer taken once")
    }

    pub fn publisher(&self) -> Channel {
        self.publisher.clone()
    }

    pub async fn close(self) {
        let _ = self.publisher.close(200, ShortString::from("OK")).await;
        let _ = self.consuming.close(200, ShortString::from("OK")).await;
        let _ = self.conn.close(200, ShortString::from("OK")).await;
        if let Some(conn) = self.publishing {
            let _ = conn.close(200, ShortString::from("OK")).await;
        }
    }
}

/// Publishes every message (encoded here) to `exchange` with `routing_key`, with at most
/// `window` publishes awaiting their confirms.
pub async fn publish(
    ch: &Channel,
    exchange: &str,
    routing_key: &str,
    msgs: &[BenchMsg],
    delivery_mode: u8,
    window: usize,
) {
    let props = BasicProperties::default().with_delivery_mode(delivery_mode);
    let mut in_flight = FuturesUnordered::new();
    for m in msgs {
        if in_flight.len() >= window {
            in_flight.next().await;
        }
        in_flight.push(publish_one(ch, exchange, routing_key, m, props.clone()));
    }
    while in_flight.next().await.is_some() {}
}

/// One publish, from encoding to its confirm.
async fn publish_one(
    ch: &Channel,
    exchange: &str,
    routing_key: &str,
    m: &BenchMsg,
    props: BasicProperties,
) {
    let payload = serde_json::to_vec(m).expect("encode");
    let confirm = ch
        .basic_publish(
            ShortString::from(exchange),
            ShortString::from(routing_key),
            BasicPublishOptions::default(),
            &payload,
            props,
        )
        .await
        .expect("basic.publish")
        .await
        .expect("publisher confirm");
    assert!(
        matches!(confirm, Confirmation::Ack(_)),
        "not confirmed: {confirm:?}"
    );
}

/// Takes `n` deliveries, decoding each into `sink`, acking as the module says.
pub async fn consume(mut consumer: lapin::Consumer, n: usize, sink: Sink) -> lapin::Consumer {
    let ack = BasicAckOptions { multiple: true };
    let (mut count, mut unacked) = (0, 0);
    let mut pending: Option<lapin::Acker> = None;
    while count < n {
        let next = match consumer.next().now_or_never() {
            Some(next) => next,
            None => {
                if let Some(acker) = pending.take() {
                    acker.ack(ack).await.expect("basic.ack");
                    unacked = 0;
                }
                consumer.next().await
            }
        };
        let delivery = next.expect("consumer ended").expect("delivery");
        assert!(!delivery.redelivered, "unexpected redelivery");
        sink.arrived(&decode(&delivery.data));
        count += 1;
        unacked += 1;
        if unacked >= ACK_EVERY || count == n {
            delivery.acker.ack(ack).await.expect("basic.ack");
            unacked = 0;
            pending = None;
        } else {
            pending = Some(delivery.acker);
        }
    }
    consumer
}
