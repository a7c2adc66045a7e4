//! What each kind of `#[stream_listener]` argument receives, an undecodable payload on the
//! failure path, and `State<T>` taken once at startup rather than per message.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use binder_core::config::ConfigLoader;
use binder_core::runtime::{App, Incoming, State};
use binder_core::{Headers, Message};
use binder_embedded::EmbeddedBinder;
use binder_embedded::engine::{Broker, ConsumeOptions};
use serde::{Deserialize, Serialize};
use stream_macros::{input, stream_listener};
use tokio::sync::mpsc;

#[input("args-in")]
#[derive(Debug)]
pub struct ArgsIn;

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct Order {
    id: u32,
}

/// What the listener saw of one delivery.
#[derive(Debug)]
struct Seen {
    order: Order,
    header: Option<String>,
    message_payload: Vec<u8>,
    incoming_binding: String,
    incoming_attempt: u32,
    incoming_header: Option<String>,
}

/// Where the listener reports what it saw.
#[derive(Debug)]
pub struct Report(Mutex<mpsc::UnboundedSender<Seen>>);

#[stream_listener(input = ArgsIn)]
async fn inspect(
    headers: Headers,
    order: Order,
    report: State<Report>,
    message: Message,
    incoming: Incoming,
) {
    let seen = Seen {
        order,
        header: headers.get_str("kind").map(str::to_owned),
        message_payload: message.payload.to_vec(),
        incoming_binding: incoming.binding.to_string(),
        incoming_attempt: incoming.attempt,
        incoming_header: incoming.message.headers.get_str("kind").map(str::to_owned),
    };
    let Report(sender) = &*report;
    sender.lock().unwrap().send(seen).unwrap();
}

const CONFIG: &str = r#"
spring.cloud.stream:
  bindings:
    args-in: {destination: args, group: g, consumer: {maxAttempts: 1}}
  rabbit.bindings.args-in.consumer.autoBindDlq: true
"#;

#[tokio::test]
async fn each_argument_gets_its_part_of_the_delivery_and_state_is_taken_at_startup() {
    let broker = Broker::new();
    let config = ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(CONFIG)
        .load()
        .unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let report = Arc::new(Report(Mutex::new(tx)));
    let app = App::builder(config)
        .binder("embedded", Arc::new(EmbeddedBinder::new(broker.clone())))
        .register(&inspect_listener)
        .shared_state(report.clone())
        .start()
        .await
        .unwrap();
    // Ours, the application's context's, and the handler's own, taken once at startup.
    assert_eq!(Arc::strong_count(&report), 3);

    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    let mut dlq = ch
        .basic_consume(
            "args.g.dlq",
            ConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
        )
        .unwrap();

    let publisher = app.publisher();
    let payload = serde_json::to_vec(&Order { id: 7 }).unwrap();
    publisher
        .send_message(
            "args",
            Message::new(payload.clone()).with_header("kind", "first"),
        )
        .await
        .unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("nothing handled within 10 s")
        .unwrap();
    assert_eq!(seen.order, Order { id: 7 });
    assert_eq!(seen.header.as_deref(), Some("first"));
    assert_eq!(seen.message_payload, payload);
    assert_eq!(seen.incoming_binding, "args-in");
    assert_eq!(seen.incoming_attempt, 1);
    assert_eq!(seen.incoming_header.as_deref(), Some("first"));
    // The call's clone of the state is gone with the call.
    assert_eq!(Arc::strong_count(&report), 3);

    // A payload that does not decode never reaches the function: it is dead-lettered with
    // the decode error as its reason.
    publisher
        .send_message("args", Message::new(&b"not json"[..]))
        .await
        .unwrap();
    let dead = tokio::time::timeout(Duration::from_secs(10), dlq.recv())
        .await
        .expect("nothing dead-lettered within 10 s")
        .unwrap();
    assert_eq!(&dead.message().payload[..], b"not json");
    let reason = dead
        .message()
        .headers
        .get_str("x-exception-message")
        .unwrap()
        .to_owned();
    assert!(reason.contains("decode"), "{reason}");
    assert!(rx.try_recv().is_err(), "the listener ran on a bad payload");

    let report_after = app.shutdown().await;
    assert!(report_after.drained);
    assert_eq!(broker.queue_counts("args.g"), Some((0, 0)));
}
