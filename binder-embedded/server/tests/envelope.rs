//! The server is generic over the broker's envelope: a broker whose records are not the
//! engine's `Published` (as the `embedded` binder's are not) is served the same way.

mod common;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use stream_broker::{Server, WireEnvelope};
use stream_engine::{Broker, Envelope, Message, Native, Published};

/// A front end's own record: the engine's record plus a stamp of its own.
#[derive(Debug, Clone)]
struct Stamped {
    inner: Published,
    stamp: u64,
}

#[derive(Debug, Default, Clone, Copy)]
struct StampedEnvelope;

impl Envelope for StampedEnvelope {
    type Message = Message;
    type Record = Stamped;
    type Route = stream_engine::Route;

    fn seal(message: Message, route: stream_engine::Route) -> Arc<Stamped> {
        Arc::new(Stamped {
            inner: Published { route, message },
            stamp: 7,
        })
    }
    fn new_route(exchange: Arc<str>, routing_key: Arc<str>) -> stream_engine::Route {
        Native::new_route(exchange, routing_key)
    }
    fn is_route(route: &stream_engine::Route, exchange: &str, routing_key: &str) -> bool {
        Native::is_route(route, exchange, routing_key)
    }
    fn route_holders(r: &Stamped) -> usize {
        Native::route_holders(&r.inner)
    }
    fn set_route(r: &mut Stamped, route: stream_engine::Route) {
        Native::set_route(&mut r.inner, route)
    }
    fn message(r: &Stamped) -> &Message {
        &r.inner.message
    }
    fn exchange(r: &Stamped) -> &Arc<str> {
        Native::exchange(&r.inner)
    }
    fn routing_key(r: &Stamped) -> &Arc<str> {
        Native::routing_key(&r.inner)
    }
    fn payload_len(r: &Stamped) -> usize {
        Native::payload_len(&r.inner)
    }
    fn priority(r: &Stamped) -> Option<u8> {
        Native::priority(&r.inner)
    }
    fn expiration(r: &Stamped) -> Option<Duration> {
        Native::expiration(&r.inner)
    }
    fn persistent(r: &Stamped) -> bool {
        Native::persistent(&r.inner)
    }
    fn headers(r: &Stamped) -> Cow<'_, stream_engine::FieldTable> {
        Native::headers(&r.inner)
    }
    fn message_heap(r: &Stamped) -> usize {
        Native::message_heap(&r.inner)
    }
    fn to_native(r: &Stamped) -> Published {
        r.inner.clone()
    }
    fn from_native(p: Published) -> Stamped {
        Stamped { inner: p, stamp: 0 }
    }
}

impl WireEnvelope for StampedEnvelope {
    fn from_wire(message: Message) -> Message {
        message
    }
    fn to_wire(r: &Stamped) -> Cow<'_, Message> {
        // What the front end adds is visible to wire clients.
        Cow::Owned(
            r.inner
                .message
                .clone()
                .with_header("x-stamp", i64::try_from(r.stamp).unwrap_or(0)),
        )
    }
}

#[tokio::test]
async fn a_broker_with_its_own_envelope_is_served() {
    let broker: Broker<StampedEnvelope> = Broker::new();
    let brokers: HashMap<String, Broker<StampedEnvelope>> = [("/".to_owned(), broker)].into();
    let server = Server::bind(common::config(), brokers).await.unwrap();
    let conn = lapin::Connection::connect(
        &format!("amqp://guest:guest@{}/%2f", server.local_addr()),
        Default::default(),
    )
    .await
    .unwrap();
    let ch = conn.create_channel().await.unwrap();
    ch.queue_declare(
        "q".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.basic_publish(
        "".into(),
        "q".into(),
        BasicPublishOptions::default(),
        b"hi",
        Default::default(),
    )
    .await
    .unwrap();
    let mut consumer = ch
        .basic_consume(
            "q".into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let d = consumer.next().await.unwrap().unwrap();
    assert_eq!(d.data, b"hi");
    let stamp = d
        .properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get("x-stamp").cloned());
    assert_eq!(stamp, Some(lapin::types::AMQPValue::LongLongInt(7)));
    server.shutdown().await;
}
