//! Our path: an [`App`] with `#[stream_listener]` handlers (or `handler::payload` ones, for
//! the many-destination scenario) on the embedded binder or on RabbitMQ, and the sends through
//! its [`Output`]s.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use binder_core::config::ConfigLoader;
use binder_core::runtime::{
    App, AppBuilder, HandlerError, ListenerDef, Output, RunningApp, State, handler,
};
use binder_embedded::EmbeddedBinder;
use binder_embedded::engine::Broker;
use binder_rabbit::RabbitBinder;
use stream_macros::{input, stream_listener};

use crate::payload::{BenchMsg, Sink};

#[input("in")]
#[derive(Debug)]
pub struct OneIn;

#[input("in0")]
#[derive(Debug)]
pub struct In0;

#[input("in1")]
#[derive(Debug)]
pub struct In1;

#[input("in2")]
#[derive(Debug)]
pub struct In2;

#[input("in3")]
#[derive(Debug)]
pub struct In3;

#[stream_listener(input = OneIn)]
async fn one(m: BenchMsg, sink: State<Sink>) -> Result<(), HandlerError> {
    sink.arrived(&m);
    Ok(())
}

#[stream_listener(input = In0)]
async fn four0(m: BenchMsg, sink: State<Sink>) -> Result<(), HandlerError> {
    sink.arrived(&m);
    Ok(())
}

#[stream_listener(input = In1)]
async fn four1(m: BenchMsg, sink: State<Sink>) -> Result<(), HandlerError> {
    sink.arrived(&m);
    Ok(())
}

#[stream_listener(input = In2)]
async fn four2(m: BenchMsg, sink: State<Sink>) -> Result<(), HandlerError> {
    sink.arrived(&m);
    Ok(())
}

#[stream_listener(input = In3)]
async fn four3(m: BenchMsg, sink: State<Sink>) -> Result<(), HandlerError> {
    sink.arrived(&m);
    Ok(())
}

#[stream_listener(input = OneIn)]
async fn one_batch(ms: Vec<BenchMsg>, sink: State<Sink>) -> Result<(), HandlerError> {
    for m in &ms {
        sink.arrived(m);
    }
    Ok(())
}

#[stream_listener(input = In0)]
async fn four0_batch(ms: Vec<BenchMsg>, sink: State<Sink>) -> Result<(), HandlerError> {
    ms.iter().for_each(|m| sink.arrived(m));
    Ok(())
}

#[stream_listener(input = In1)]
async fn four1_batch(ms: Vec<BenchMsg>, sink: State<Sink>) -> Result<(), HandlerError> {
    ms.iter().for_each(|m| sink.arrived(m));
    Ok(())
}

#[stream_listener(input = In2)]
async fn four2_batch(ms: Vec<BenchMsg>, sink: State<Sink>) -> Result<(), HandlerError> {
    ms.iter().for_each(|m| sink.arrived(m));
    Ok(())
}

#[stream_listener(input = In3)]
async fn four3_batch(ms: Vec<BenchMsg>, sink: State<Sink>) -> Result<(), HandlerError> {
    ms.iter().for_each(|m| sink.arrived(m));
    Ok(())
}

/// The batch listener of input `in` (`consumer.batchMode`).
pub static ONE_BATCH: &ListenerDef = &one_batch_listener;
/// The batch listeners of inputs `in0` to `in3`.
pub static FOUR_BATCH: [&ListenerDef; 4] = [
    &four0_batch_listener,
    &four1_batch_listener,
    &four2_batch_listener,
    &four3_batch_listener,
];

/// The listener of input `in` (destination of output `out`).
pub static ONE: &ListenerDef = &one_listener;
/// The listeners of inputs `in0` to `in3` (destinations of outputs `out0` to `out3`).
pub static FOUR: [&ListenerDef; 4] = [
    &four0_listener,
    &four1_listener,
    &four2_listener,
    &four3_listener,
];

/// Where an app's bindings live.
#[derive(Debug, Clone)]
pub enum Target {
    /// A fresh embedded broker.
    Embedded,
    /// RabbitMQ, through this binder (the caller closes it).
    Rabbit(Arc<RabbitBinder>),
}

impl Target {
    /// The binder type (and the name the app's binder instance is given).
    fn binder_name(&self) -> &'static str {
        match self {
            Target::Embedded => "embedded",
            Target::Rabbit(_) => "rabbit",
        }
    }
}

/// Binding settings beyond the defaults, written into the app's configuration.
#[derive(Debug, Clone, Default)]
pub struct Tuning {
    /// `rabbit.bindings.<input>.consumer.prefetch`.
    pub prefetch: Option<u16>,
    /// `rabbit.bindings.<output>.producer.deliveryMode` (`PERSISTENT`, `NON_PERSISTENT`).
    pub delivery_mode: Option<&'static str>,
    /// Batches of this size: the inputs' `consumer.batchMode`, with the extension's
    /// `enableBatching`, `batchSize` and a `receiveTimeout` of [`BATCH_RECEIVE_TIMEOUT_MS`].
    pub batch: Option<u16>,
}

/// The receive timeout of the batch contenders: the last, short batch of a run waits this
/// long for a delivery that does not come.
pub const BATCH_RECEIVE_TIMEOUT_MS: u64 = 2;

/// The configuration of `pairs` (output, input, destination): each output sends to the
/// destination the input consumes from, in group `g`.
pub fn config_yaml(binder: &str, pairs: &[(String, String, String)], tuning: &Tuning) -> String {
    // Both binder types are linked into this binary: name the one the app runs on.
    let mut y =
        format!("spring:\n  cloud:\n    stream:\n      defaultBinder: {binder}\n      bindings:\n");
    for (out, inp, dest) in pairs {
        let _ = writeln!(y, "        {out}:\n          destination: {dest}");
        let _ = writeln!(
            y,
            "        {inp}:\n          destination: {dest}\n          group: g"
        );
        if tuning.batch.is_some() {
            let _ = writeln!(y, "          consumer:\n            batchMode: true");
        }
    }
    if tuning.prefetch.is_some() || tuning.delivery_mode.is_some() || tuning.batch.is_some() {
        y.push_str("      rabbit:\n        bindings:\n");
        for (out, inp, _) in pairs {
            if tuning.prefetch.is_some() || tuning.batch.is_some() {
                let _ = writeln!(y, "          {inp}:\n            consumer:");
            }
            if let Some(p) = tuning.prefetch {
                let _ = writeln!(y, "              prefetch: {p}");
            }
            if let Some(b) = tuning.batch {
                let _ = writeln!(
                    y,
                    "              enableBatching: true\n              batchSize: {b}\n              receiveTimeout: {BATCH_RECEIVE_TIMEOUT_MS}"
                );
            }
            if let Some(m) = tuning.delivery_mode {
                let _ = writeln!(
                    y,
                    "          {out}:\n            producer:\n              deliveryMode: {m}"
                );
            }
        }
    }
    y
}

/// A started app, its outputs in the order of the pairs, and what its handlers report to.
#[derive(Debug)]
pub struct OursApp {
    pub app: RunningApp,
    pub outputs: Vec<Output>,
    /// How long `App::start` took.
    pub start_time: Duration,
}

impl OursApp {
    /// Builds and starts an app on `target` with the `pairs`' bindings, `listeners` added with
    /// `register` (or, when `None`, a `handler::payload` listener on every input), and `sink`
    /// as its state.
    pub async fn start(
        target: &Target,
        pairs: &[(String, String, String)],
        tuning: &Tuning,
        listeners: Option<&[&ListenerDef]>,
        sink: &Sink,
    ) -> OursApp {
        let config = ConfigLoader::new()
            .env(Vec::<(String, String)>::new())
            .yaml_str(&config_yaml(target.binder_name(), pairs, tuning))
            .load()
            .unwrap_or_else(|e| panic!("configuration: {e}"));
        let mut builder: AppBuilder = App::builder(config);
        builder = match target {
            Target::Embedded => {
                builder.binder("embedded", Arc::new(EmbeddedBinder::new(Broker::new())))
            }
            Target::Rabbit(binder) => builder.binder("rabbit", binder.clone()),
        };
        match listeners {
            Some(defs) => {
                for def in defs {
                    builder = builder.register(def);
                }
                builder = builder.state(sink.clone());
            }
            None => {
                for (_, inp, _) in pairs {
                    let sink = sink.clone();
                    builder = builder.listener(
                        inp.clone(),
                        handler::payload(move |m: BenchMsg| {
                            let sink = sink.clone();
                            async move { sink.arrived(&m) }
                        }),
                    );
                }
            }
        }
        for (out, _, _) in pairs {
            builder = builder.output(out.clone());
        }
        let started = Instant::now();
        let app = builder
            .start()
            .await
            .unwrap_or_else(|e| panic!("app start: {e}"));
        let start_time = started.elapsed();
        let outputs = pairs
            .iter()
            .map(|(out, _, _)| app.output(out).expect("output binding"))
            .collect();
        OursApp {
            app,
            outputs,
            start_time,
        }
    }

    /// Shuts the app down (after the clock stopped), checking that it drained.
    pub async fn finish(self) {
        drop(self.outputs);
        let report = self.app.shutdown().await;
        assert!(report.drained, "shutdown did not drain: {report:?}");
    }
}

/// `count` pairs `out{i}` / `in{i}` / `{prefix}{i}` (or `out` / `in` / `prefix` for one).
pub fn pairs(prefix: &str, count: usize, numbered: bool) -> Vec<(String, String, String)> {
    if !numbered {
        return vec![("out".into(), "in".into(), prefix.to_owned())];
    }
    (0..count)
        .map(|i| (format!("out{i}"), format!("in{i}"), format!("{prefix}{i}")))
        .collect()
}

/// Sends every message through `output`, awaiting each confirm (what `Output::send` does).
pub async fn send_each(output: &Output, msgs: &[BenchMsg]) {
    for m in msgs {
        output.send(m).await.expect("output.send");
    }
}

/// Sends every message through `output` with `window` sends in flight (`Output::pipeline`).
pub async fn send_pipelined(output: &Output, msgs: &[BenchMsg], window: usize) {
    let mut pipeline = output.pipeline(window);
    for m in msgs {
        pipeline.send(m).await.expect("pipeline.send");
        for c in pipeline.confirmed() {
            c.result.expect("confirm");
        }
    }
    for c in pipeline.flush().await {
        c.result.expect("confirm");
    }
}
