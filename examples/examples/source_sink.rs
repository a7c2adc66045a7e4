//! A source and a sink: one service sends, another (its own group) receives.
//!
//! ```text
//! cargo run --example source_sink
//! ```

use std::sync::Arc;

use binder_core::config::ConfigLoader;
use binder_core::runtime::{App, Sink, Source, State};
use stream_macros::stream_listener;
use tokio::sync::mpsc;

/// Received greetings go here, so `main` knows when all arrived.
#[derive(Debug)]
struct Inbox {
    tx: mpsc::UnboundedSender<String>,
}

#[stream_listener(input = Sink)]
async fn greet(name: String, inbox: State<Inbox>) {
    println!("[sink]   hello, {name}");
    let _ = inbox.tx.send(name);
}

#[tokio::main]
async fn main() -> binder_core::runtime::ServiceExit {
    // Errors print as a person reads them; a configuration problem exits with status 2.
    run().await.into()
}

async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    binder_embedded::link();
    // SCSt's Source (`output`) and Sink (`input`) bindings on one destination.
    let config = ConfigLoader::new()
        .yaml_str(
            "spring.cloud.stream.bindings:\n  input: {destination: greetings, group: greeter}\n  output: {destination: greetings}\n",
        )
        .load()?;
    binder_core::runtime::init_logging(&config)?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let sink = App::builder(config.select(&["input"]))
        .register(&greet_listener)
        .shared_state(Arc::new(Inbox { tx }))
        .start()
        .await?;
    let source = App::builder(config.select(&["output"]))
        .output(<Source as binder_core::runtime::OutputBinding>::NAME)
        .start()
        .await?;
    let out = source.output("output").expect("declared");
    let names = ["Ada", "Grace", "Barbara"];
    for name in names {
        println!("[source] sending {name}");
        out.send(&name).await?;
    }
    for _ in names {
        rx.recv().await;
    }
    source.shutdown().await;
    sink.shutdown().await;
    println!("summary: sent={} received={}", names.len(), names.len());
    Ok(())
}
