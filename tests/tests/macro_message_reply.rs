//! A `#[stream_listener]` processor that replies with a `Message` (bare, in `Option`, in
//! `Result`) sends that message as it is to its output: payload and headers untouched, not
//! serialised as a value.

use std::sync::Arc;
use std::time::Duration;

use binder_core::Message;
use binder_core::config::ConfigLoader;
use binder_core::runtime::{App, HandlerError};
use binder_embedded::EmbeddedBinder;
use binder_embedded::engine::{Broker, ConsumeOptions};
use stream_macros::{input, output, stream_listener};

#[input("raw-in")]
struct RawIn;

#[input("maybe-in")]
struct MaybeIn;

#[output("relayed-out")]
struct RelayedOut;

#[stream_listener(input = RawIn, output = RelayedOut)]
async fn relay(message: Message) -> Result<Message, HandlerError> {
    Ok(Message::new(message.payload.to_vec()).with_header("relayed", "yes"))
}

#[stream_listener(input = MaybeIn, output = RelayedOut)]
async fn relay_some(message: Message) -> Option<Message> {
    (&message.payload[..] != b"drop").then_some(message)
}

const CONFIG: &str = r#"
spring.cloud.stream.bindings:
  raw-in: {destination: raw}
  maybe-in: {destination: maybe}
  relayed-out: {destination: relayed}
"#;

#[tokio::test]
async fn a_message_reply_goes_to_the_output_as_it_is() {
    let broker = Broker::new();
    let config = ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(CONFIG)
        .load()
        .unwrap();
    let app = App::builder(config)
        .binder("embedded", Arc::new(EmbeddedBinder::new(broker.clone())))
        .register(&relay_listener)
        .register(&relay_some_listener)
        .start()
        .await
        .unwrap();
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("relayed.seen", Default::default(), Default::default())
        .unwrap();
    ch.queue_bind("relayed.seen", "relayed", "#", Default::default())
        .unwrap();
    let mut seen = ch
        .basic_consume(
            "relayed.seen",
            ConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
        )
        .unwrap();
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(10), seen.recv())
            .await
            .expect("nothing within 10 s")
            .expect("cancelled")
    };

    let publisher = app.publisher();
    publisher
        .send_message("raw", Message::new(&b"not json at all"[..]))
        .await
        .unwrap();
    let d = next().await;
    assert_eq!(&d.message().payload[..], b"not json at all");
    assert_eq!(d.message().headers.get_str("relayed"), Some("yes"));

    for payload in [&b"drop"[..], &b"keep"[..]] {
        publisher
            .send_message("maybe", Message::new(payload))
            .await
            .unwrap();
    }
    // `None` sends nothing: the next message out is the one kept.
    assert_eq!(&next().await.message().payload[..], b"keep");

    let report = app.shutdown().await;
    assert!(report.drained);
}
