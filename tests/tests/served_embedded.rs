//! An `embedded` binder configured to listen (`spring.embedded.listen`) serves its
//! in-process broker on the network with `stream-broker`'s server: a service on the `rabbit`
//! binder, with its own connection as another process would have, sends to the hosting
//! service and receives from it.

use std::sync::Arc;
use std::time::Duration;

use binder_core::binder::Binder;
use binder_core::config::{ConfigLoader, StreamConfig};
use binder_core::runtime::{App, handler};
use binder_embedded::EmbeddedBinder;
use binder_embedded::engine::Broker;
use binder_rabbit::{RabbitBinder, RabbitSettings};
use tokio::sync::mpsc;

fn load(yaml: &str) -> StreamConfig {
    ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(yaml)
        .load()
        .unwrap_or_else(|e| panic!("{e}"))
}

async fn next(rx: &mut mpsc::UnboundedReceiver<String>) -> String {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("a message within 10 s")
        .expect("the handler is alive")
}

#[tokio::test]
async fn a_service_on_the_rabbit_binder_reaches_a_served_embedded_broker() {
    let host = EmbeddedBinder::new(Broker::new());
    let (orders_tx, mut orders) = mpsc::unbounded_channel();
    let hosting = App::builder(load(
        "spring.embedded.listen: 127.0.0.1:0\nspring.cloud.stream.bindings:\n  orders-in: {destination: served-orders, group: billing}\n  receipts-out: {destination: served-receipts}\n",
    ))
    .binder("embedded", Arc::new(host.clone()))
    .listener(
        "orders-in",
        handler::payload(move |order: String| {
            let tx = orders_tx.clone();
            async move {
                let _ = tx.send(order);
            }
        }),
    )
    .output("receipts-out")
    .start()
    .await
    .unwrap();
    let addr = host.local_addr().expect("the broker is served");
    assert_ne!(addr.port(), 0, "the chosen port is reported");

    let url = format!("amqp://guest:guest@{addr}/%2f");
    let (receipts_tx, mut receipts) = mpsc::unbounded_channel();
    let remote = App::builder(load(
        "spring.cloud.stream:\n  defaultBinder: rabbit\n  bindings:\n    orders-out: {destination: served-orders}\n    receipts-in: {destination: served-receipts, group: shop}\n",
    ))
    .binder(
        "rabbit",
        Arc::new(RabbitBinder::new(RabbitSettings::from_uri(&url))),
    )
    .output("orders-out")
    .listener(
        "receipts-in",
        handler::payload(move |receipt: String| {
            let tx = receipts_tx.clone();
            async move {
                let _ = tx.send(receipt);
            }
        }),
    )
    .start()
    .await
    .unwrap();

    let send_order = remote.output("orders-out").unwrap();
    for n in 0..100 {
        send_order.send(&format!("order {n}")).await.unwrap();
    }
    for n in 0..100 {
        assert_eq!(next(&mut orders).await, format!("order {n}"));
    }
    let send_receipt = hosting.output("receipts-out").unwrap();
    send_receipt.send(&"receipt 7").await.unwrap();
    assert_eq!(next(&mut receipts).await, "receipt 7");

    remote.shutdown().await;
    hosting.shutdown().await;
    // A binder given in code is the caller's: it serves until it is closed (one created
    // from configuration closes with the application).
    assert_eq!(
        host.local_addr(),
        Some(addr),
        "still served after the app's shutdown"
    );
    host.close().await;
    assert_eq!(
        host.local_addr(),
        None,
        "closing the binder stops the listener"
    );
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "nothing listens on {addr} any more"
    );
}

#[tokio::test]
async fn an_address_in_use_fails_startup_naming_the_setting() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let err = App::builder(load(&format!(
        "spring.embedded.listen: {addr}\nspring.cloud.stream.bindings.out.destination: served-taken\n"
    )))
    .binder("embedded", Arc::new(EmbeddedBinder::new(Broker::new())))
    .output("out")
    .start()
    .await
    .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("spring.embedded.listen"), "{text}");
    assert!(text.contains(&addr.to_string()), "{text}");
}
