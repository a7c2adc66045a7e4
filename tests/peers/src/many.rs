//! Many destinations against one: two apps on the embedded broker, one with a single
//! output/input pair and one with `count` pairs (each input with a `handler::payload`
//! listener). Figures: the throughput of `n` messages sent round-robin over every output (one
//! producer task awaiting each `Output::send`), `App::start` time, and the heap the started
//! app holds per destination (configuration, bindings, broker objects and tasks).

use std::time::Instant;

use crate::alloc::Counting;
use crate::ours::{self, OursApp, Target, Tuning};
use crate::payload::{BenchMsg, Sink};
use crate::rounds::Figure;

/// One run with `count` destinations: [rate, start time, heap per destination].
pub async fn run(msgs: Vec<BenchMsg>, count: usize) -> Vec<Figure> {
    let n = msgs.len();
    let sink = Sink::new(n);
    let pairs = ours::pairs("many", count, true);
    let counting = Counting::start();
    let app = OursApp::start(&Target::Embedded, &pairs, &Tuning::default(), None, &sink).await;
    let heap = counting.live() as f64 / count as f64;
    drop(counting);
    let start_time = app.start_time;
    let outputs = app.outputs.clone();

    let start = Instant::now();
    let producer = tokio::spawn(async move {
        for (i, m) in msgs.iter().enumerate() {
            outputs[i % outputs.len()]
                .send(m)
                .await
                .expect("output.send");
        }
    });
    sink.all_arrived().await;
    let elapsed = start.elapsed();

    producer.await.expect("producer panicked");
    sink.check();
    app.finish().await;
    vec![
        Figure::rate(n as f64 / elapsed.as_secs_f64()),
        Figure::millis(start_time),
        Figure::bytes(heap),
    ]
}
