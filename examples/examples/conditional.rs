//! Conditional dispatch: several listeners on one binding, chosen by a header condition,
//! with a fallback listener for the rest.
//!
//! ```text
//! cargo run --example conditional
//! ```

use std::sync::Arc;

use binder_core::Message;
use binder_core::config::ConfigLoader;
use binder_core::runtime::{App, State};
use stream_macros::{input, stream_listener};
use tokio::sync::mpsc;

#[input("events-in")]
#[derive(Debug)]
struct EventsIn;

#[derive(Debug)]
struct Log {
    tx: mpsc::UnboundedSender<String>,
}

#[stream_listener(input = EventsIn, condition = "headers['type'] == 'created'")]
async fn on_created(id: u32, log: State<Log>) {
    let _ = log.tx.send(format!("created {id}"));
}

#[stream_listener(input = EventsIn, condition = "headers['type'] == 'cancelled' || headers['type'] == 'refunded'")]
async fn on_cancelled(id: u32, log: State<Log>) {
    let _ = log.tx.send(format!("cancelled {id}"));
}

/// No condition: takes what no condition matches.
#[stream_listener(input = EventsIn)]
async fn on_other(id: u32, log: State<Log>) {
    let _ = log.tx.send(format!("other {id}"));
}

#[tokio::main]
async fn main() -> binder_core::runtime::ServiceExit {
    // Errors print as a person reads them; a configuration problem exits with status 2.
    run().await.into()
}

async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    binder_embedded::link();
    let config = ConfigLoader::new()
        .yaml_str("spring.cloud.stream.bindings.events-in: {destination: events, group: tracker}\n")
        .load()?;
    binder_core::runtime::init_logging(&config)?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let app = App::builder(config)
        .registered()
        .shared_state(Arc::new(Log { tx }))
        .start()
        .await?;
    let events = [
        (1, "created"),
        (2, "cancelled"),
        (3, "shipped"),
        (4, "refunded"),
    ];
    for (id, kind) in events {
        let m = Message::new(id.to_string()).with_header("type", kind);
        app.publisher().send_message("events", m).await?;
    }
    for _ in events {
        println!("{}", rx.recv().await.unwrap_or_default());
    }
    app.shutdown().await;
    println!("summary: dispatched={}", events.len());
    Ok(())
}
