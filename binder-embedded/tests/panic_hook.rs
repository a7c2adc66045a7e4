//! The runtime's panic hook chains to the program's own: alone in this test binary, since
//! a panic hook is set for the whole process.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use binder_core::runtime::handler;
use binder_embedded::engine::Broker;
use common::{app, next, watch_queue};

#[tokio::test]
async fn a_program_hook_still_runs_and_the_dead_letter_names_where_the_handler_panicked() {
    let seen = Arc::new(AtomicUsize::new(0));
    let counted = seen.clone();
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        counted.fetch_add(1, Ordering::SeqCst);
        default(info);
    }));
    let broker = Broker::new();
    let yaml = "spring.cloud.stream:\n  bindings.in: {destination: orders, group: svc, consumer: {maxAttempts: 1}}\n  rabbit.bindings.in.consumer.autoBindDlq: true\n";
    let line = line!() + 2;
    let h = handler::incoming(|_| async {
        panic!("order {} is cursed", 13);
        #[allow(unreachable_code)]
        ()
    });
    let running = app(&broker, yaml).listener("in", h).start().await.unwrap();
    let mut dlq = watch_queue(&broker, "orders.svc.dlq");
    running.publisher().send("orders", &13).await.unwrap();
    let dead = next(&mut dlq.consumer).await;
    let trace = dead
        .message()
        .headers
        .get_str("x-exception-stacktrace")
        .unwrap()
        .to_owned();
    let at = format!(
        "handler panicked: order 13 is cursed\n  at {}:{line}:",
        file!()
    );
    assert!(
        trace.starts_with(&at),
        "{trace:?} does not start with {at:?}"
    );
    assert_eq!(
        seen.load(Ordering::SeqCst),
        1,
        "the program's hook ran once"
    );
    running.shutdown().await;
}
