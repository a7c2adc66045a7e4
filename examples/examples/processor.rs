//! A processor: input → handler → output (SCSt's `@StreamListener` with `@SendTo`).
//!
//! ```text
//! cargo run --example processor
//! ```

use std::sync::Arc;

use binder_core::config::ConfigLoader;
use binder_core::runtime::{App, State, processor};
use stream_macros::{input, stream_listener};
use tokio::sync::mpsc;

#[derive(Debug)]
struct Seen {
    tx: mpsc::UnboundedSender<String>,
}

/// Upper-cases words from `input` and sends them to `output`.
#[stream_listener(input = processor::Input, output = processor::Output)]
async fn shout(word: String) -> String {
    word.to_uppercase()
}

#[input("shouted")]
#[derive(Debug)]
struct Shouted;

#[stream_listener(input = Shouted)]
async fn print(word: String, seen: State<Seen>) {
    println!("[printer] {word}");
    let _ = seen.tx.send(word);
}

#[tokio::main]
async fn main() -> binder_core::runtime::ServiceExit {
    // Errors print as a person reads them; a configuration problem exits with status 2.
    run().await.into()
}

async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    binder_embedded::link();
    let config = ConfigLoader::new()
        .yaml_str(
            r#"
spring.cloud.stream.bindings:
  input: {destination: words, group: shouter}
  output: {destination: loud-words}
  shouted: {destination: loud-words, group: printer}
"#,
        )
        .load()?;
    binder_core::runtime::init_logging(&config)?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let app = App::builder(config)
        .register(&shout_listener)
        .register(&print_listener)
        .shared_state(Arc::new(Seen { tx }))
        .start()
        .await?;
    let words = ["stream", "all", "the", "things"];
    for w in words {
        app.publisher().send("words", &w).await?;
    }
    for _ in words {
        rx.recv().await;
    }
    app.shutdown().await;
    println!("summary: processed={}", words.len());
    Ok(())
}
