//! The observer seam: an observer that records every event sees the right sequence for a
//! success, a retried failure, a dead-lettered message, a send, and lifecycle changes.

use std::sync::Arc;
use std::time::Duration;

use binder_core::Message;
use binder_core::config::{ConfigLoader, StreamConfig};
use binder_core::runtime::{
    App, AppBuilder, BindingState, BindingStateChanged, DeadLetterRoute, DeadLettered, Failed,
    Handled, HandlerError, Observer, Received, Retried, Sent, Settle, Settled, handler,
};
use binder_embedded::EmbeddedBinder;
use binder_embedded::engine::Broker;
use tokio::sync::mpsc;

/// Records each event as a line of text; with `indexes`, each binding name is followed by
/// the binding's number in the event (`in#0`, `dest#-` for none).
struct Recorder(mpsc::UnboundedSender<String>, bool);

impl Recorder {
    fn note(&self, line: String) {
        let _ = self.0.send(line);
    }

    fn name(&self, binding: &str, index: Option<usize>) -> String {
        match (self.1, index) {
            (false, _) => binding.to_owned(),
            (true, Some(i)) => format!("{binding}#{i}"),
            (true, None) => format!("{binding}#-"),
        }
    }
}

impl Observer for Recorder {
    fn received(&self, e: &Received<'_>) {
        self.note(format!(
            "received {} from {}",
            self.name(e.binding, e.binding_index),
            e.queue
        ));
    }
    fn handled(&self, e: &Handled<'_>) {
        self.note(format!(
            "handled {} attempt {}",
            self.name(e.binding, e.binding_index),
            e.attempt
        ));
    }
    fn failed(&self, e: &Failed<'_>) {
        self.note(format!(
            "failed {} attempt {}: {}{}",
            self.name(e.binding, e.binding_index),
            e.attempt,
            e.error,
            if e.will_retry { ", will retry" } else { "" }
        ));
    }
    fn retried(&self, e: &Retried<'_>) {
        self.note(format!(
            "retried {} attempt {} after {:?}",
            self.name(e.binding, e.binding_index),
            e.attempt,
            e.delay
        ));
    }
    fn dead_lettered(&self, e: &DeadLettered<'_>) {
        let route = match e.route {
            DeadLetterRoute::Republished {
                exchange,
                routing_key,
            } => format!("republished to {exchange} with {routing_key}"),
            DeadLetterRoute::Rejected => "rejected".to_owned(),
            other => format!("{other:?}"),
        };
        self.note(format!(
            "dead-lettered {} from {} after {}: {} ({route})",
            e.binding, e.queue, e.attempts, e.reason
        ));
    }
    fn settled(&self, e: &Settled<'_>) {
        let how = match e.how {
            Settle::Ack => "ack",
            Settle::Reject => "reject",
            Settle::Requeue => "requeue",
            Settle::AutoAcked => "auto-acked",
            _ => "other",
        };
        self.note(format!(
            "settled {} {how}{}",
            self.name(e.binding, e.binding_index),
            if e.error.is_some() { " (failed)" } else { "" }
        ));
    }
    fn sent(&self, e: &Sent<'_>) {
        self.note(format!(
            "sent {}{}{}",
            self.name(e.binding, e.binding_index),
            e.partition
                .map(|n| format!(" partition {n}"))
                .unwrap_or_default(),
            if e.error.is_some() { " (failed)" } else { "" }
        ));
    }
    fn binding_state(&self, e: &BindingStateChanged<'_>) {
        self.note(format!(
            "state {}{} {}",
            e.binding,
            e.queue.map(|q| format!(" ({q})")).unwrap_or_default(),
            e.state
        ));
    }
}

fn config(yaml: &str) -> StreamConfig {
    ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(yaml)
        .load()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// An application on a broker of its own, with a recorder; the lines it records.
fn app(yaml: &str) -> (AppBuilder, mpsc::UnboundedReceiver<String>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let builder = App::builder(config(yaml))
        .binder("embedded", Arc::new(EmbeddedBinder::new(Broker::new())))
        .observer(Recorder(tx, false));
    (builder, rx)
}

/// Lines up to and including the first that `last` accepts (within 10 s).
async fn until(rx: &mut mpsc::UnboundedReceiver<String>, last: &str) -> Vec<String> {
    let mut lines = Vec::new();
    loop {
        let line = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("no `{last}` within 10 s; saw {lines:#?}"))
            .expect("the application dropped its observers");
        let done = line == last;
        lines.push(line);
        if done {
            return lines;
        }
    }
}

fn without_states(lines: Vec<String>) -> Vec<String> {
    lines
        .into_iter()
        .filter(|l| !l.starts_with("state "))
        .collect()
}

/// The send events apart from the others: the sender and the consumer are different tasks,
/// so only the order within each side is defined.
fn sends_apart(lines: Vec<String>) -> (Vec<String>, Vec<String>) {
    lines.into_iter().partition(|l| l.starts_with("sent "))
}

#[tokio::test]
async fn a_success_and_a_send() {
    let (builder, mut rx) = app(
        "spring.cloud.stream.bindings:\n  in: {destination: obs-ok, group: g}\n  out: {destination: obs-ok}\n",
    );
    let running = builder
        .listener(
            "in",
            handler::incoming(|_m| async { Ok::<(), HandlerError>(()) }),
        )
        .output("out")
        .start()
        .await
        .unwrap();
    assert_eq!(
        until(&mut rx, "state in (obs-ok.g) running").await,
        vec!["state in (obs-ok.g) running"]
    );
    running
        .output("out")
        .unwrap()
        .send_message(Message::new("hello"))
        .await
        .unwrap();
    let (sent, lines) = sends_apart(until(&mut rx, "settled in ack").await);
    assert_eq!(sent, vec!["sent out"]);
    assert_eq!(
        lines,
        vec![
            "received in from obs-ok.g",
            "handled in attempt 1",
            "settled in ack",
        ]
    );
    running.shutdown().await;
    assert_eq!(
        until(&mut rx, "state in (obs-ok.g) stopped").await,
        vec!["state in (obs-ok.g) stopped"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_failure_retried_then_handled() {
    let (builder, mut rx) = app(
        "spring.cloud.stream.bindings.in: {destination: obs-retry, group: g, consumer: {maxAttempts: 3, backOffInitialInterval: 1000}}\n",
    );
    let running = builder
        .listener(
            "in",
            handler::incoming(|m| async move {
                if m.attempt == 1 {
                    Err(HandlerError::retryable("not yet"))
                } else {
                    Ok(())
                }
            }),
        )
        .start()
        .await
        .unwrap();
    running
        .publisher()
        .send_message("obs-retry", Message::new("x"))
        .await
        .unwrap();
    let (sent, lines) = sends_apart(without_states(until(&mut rx, "settled in ack").await));
    assert_eq!(sent, vec!["sent obs-retry"]);
    assert_eq!(
        lines,
        vec![
            "received in from obs-retry.g",
            "failed in attempt 1: not yet, will retry",
            "retried in attempt 2 after 1s",
            "handled in attempt 2",
            "settled in ack",
        ]
    );
    running.shutdown().await;
}

#[tokio::test]
async fn a_message_dead_lettered() {
    let (builder, mut rx) = app(
        "spring.cloud.stream:\n  bindings.in: {destination: obs-dlq, group: g, consumer: {maxAttempts: 1}}\n  rabbit.bindings.in.consumer: {autoBindDlq: true}\n",
    );
    let running = builder
        .listener(
            "in",
            handler::incoming(|_m| async { Err::<(), _>(HandlerError::fatal("bad order")) }),
        )
        .start()
        .await
        .unwrap();
    running
        .publisher()
        .send_message("obs-dlq", Message::new("x"))
        .await
        .unwrap();
    let (sent, lines) = sends_apart(without_states(until(&mut rx, "settled in ack").await));
    assert_eq!(sent, vec!["sent obs-dlq"]);
    assert_eq!(
        lines,
        vec![
            "received in from obs-dlq.g",
            "failed in attempt 1: bad order",
            "dead-lettered in from obs-dlq.g after 1: bad order (republished to DLX with obs-dlq.g)",
            "settled in ack",
        ]
    );
    running.shutdown().await;
}

#[tokio::test]
async fn pause_resume_and_output_stop_start() {
    let (builder, mut rx) = app(
        "spring.cloud.stream.bindings:\n  in: {destination: obs-life, group: g}\n  out: {destination: obs-life-out}\n",
    );
    let running = builder
        .listener(
            "in",
            handler::incoming(|_m| async { Ok::<(), HandlerError>(()) }),
        )
        .output("out")
        .start()
        .await
        .unwrap();
    until(&mut rx, "state in (obs-life.g) running").await;
    running.pause("in").await.unwrap();
    assert_eq!(running.state("in"), Some(BindingState::Paused));
    running.resume("in").await.unwrap();
    running.stop("out").await.unwrap();
    // Stopping a stopped output changes nothing, and says nothing.
    running.stop("out").await.unwrap();
    running.start("out").await.unwrap();
    assert_eq!(
        until(&mut rx, "state out running").await,
        vec![
            "state in (obs-life.g) paused",
            "state in (obs-life.g) running",
            "state out stopped",
            "state out running",
        ]
    );
    running.shutdown().await;
}

#[tokio::test]
async fn events_number_bindings_in_the_order_of_their_names() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let running = App::builder(config(
        "spring.cloud.stream.bindings:\n  b-in: {destination: obs-index, group: g}\n  a-out: {destination: obs-index}\n  c-out: {destination: obs-index-other}\n",
    ))
    .binder("embedded", Arc::new(EmbeddedBinder::new(Broker::new())))
    .observer(Recorder(tx, true))
    .listener(
        "b-in",
        handler::incoming(|_m| async { Ok::<(), HandlerError>(()) }),
    )
    .output("c-out")
    .output("a-out")
    .start()
    .await
    .unwrap();
    until(&mut rx, "state b-in (obs-index.g) running").await;
    running
        .output("a-out")
        .unwrap()
        .send_message(Message::new("one"))
        .await
        .unwrap();
    let (sent, lines) = sends_apart(until(&mut rx, "settled b-in#1 ack").await);
    assert_eq!(sent, vec!["sent a-out#0"]);
    assert_eq!(
        lines,
        vec![
            "received b-in#1 from obs-index.g",
            "handled b-in#1 attempt 1",
            "settled b-in#1 ack",
        ]
    );
    running
        .output("c-out")
        .unwrap()
        .send_message(Message::new("two"))
        .await
        .unwrap();
    assert_eq!(until(&mut rx, "sent c-out#2").await, vec!["sent c-out#2"]);
    // A destination sent to dynamically is not one of the application's bindings.
    running
        .publisher()
        .send_message("obs-index-dynamic", Message::new("three"))
        .await
        .unwrap();
    assert_eq!(
        until(&mut rx, "sent obs-index-dynamic#-").await,
        vec!["sent obs-index-dynamic#-"]
    );
    running.shutdown().await;
}
