//! A consumer's pump: takes deliveries from an engine [`Consumer`] in batches and writes them
//! to the connection's bounded output. When the socket does not drain, the output fills, the
//! pump waits, and deliveries stay in the engine (counted against prefetch as usual); while
//! the channel's flow is off the pump takes nothing.

use amq_protocol::protocol::{AMQPClass, basic};
use bytes::Bytes;
use stream_engine::{Consumer, Delivery};
use tokio::sync::{mpsc, watch};

use crate::convert::{properties_to_wire, short};
use crate::envelope::WireEnvelope;
use crate::wire::Encoder;

/// Deliveries taken from the engine at once.
const BATCH: usize = 64;
/// Bytes of encoded deliveries handed to the writer at once.
const CHUNK: usize = 64 * 1024;

/// Encodes one delivery (`basic.deliver`, content header, body frames).
pub fn encode_delivery<E: WireEnvelope>(
    e: &mut Encoder,
    channel: u16,
    d: &Delivery<E>,
    frame_max: usize,
) {
    let message = E::to_wire(&d.body);
    e.method(
        channel,
        AMQPClass::Basic(basic::AMQPMethod::Deliver(basic::Deliver {
            consumer_tag: short(&d.consumer_tag),
            delivery_tag: d.delivery_tag,
            redelivered: d.redelivered,
            exchange: short(d.exchange()),
            routing_key: short(d.routing_key()),
        })),
    );
    e.content(
        channel,
        properties_to_wire(&message),
        &message.payload,
        frame_max,
    );
}

/// Runs a consumer until it is cancelled (by the client, by its queue's deletion, or by its
/// channel's closing) or the connection's output is gone.
pub async fn pump<E: WireEnvelope>(
    mut consumer: Consumer<E>,
    channel: u16,
    out: mpsc::Sender<Bytes>,
    mut flow: watch::Receiver<bool>,
    frame_max: usize,
) {
    let mut batch = Vec::with_capacity(BATCH);
    let mut e = Encoder::new();
    loop {
        if flow.wait_for(|active| *active).await.is_err() {
            return;
        }
        batch.clear();
        if consumer.recv_many(&mut batch, BATCH).await == 0 {
            break;
        }
        // Flow may have been turned off while the pump waited: the batch waits with it.
        if flow.wait_for(|active| *active).await.is_err() {
            return;
        }
        for d in batch.drain(..) {
            encode_delivery(&mut e, channel, &d, frame_max);
            if e.len() >= CHUNK && out.send(e.take()).await.is_err() {
                return;
            }
        }
        if !e.is_empty() && out.send(e.take()).await.is_err() {
            return;
        }
    }
    // A no-ack consumer's inbox may still hold what the engine handed it before the cancel:
    // a RabbitMQ client would have received it already.
    while let Some(d) = consumer.try_recv() {
        encode_delivery(&mut e, channel, &d, frame_max);
    }
    if !e.is_empty() {
        let _ = out.send(e.take()).await;
    }
}
