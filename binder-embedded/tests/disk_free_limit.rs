//! `spring.embedded.disk-free-limit`: while the data directory's disk has less free space
//! than the limit, the shared broker blocks publishers (its own file: the shared broker is
//! made once per process, with the first configuration's storage).

mod common;

use std::time::Duration;

use binder_core::runtime::App;
use binder_embedded::EmbeddedBinder;
use common::config;

#[tokio::test]
async fn a_disk_free_limit_above_the_free_space_blocks_the_shared_brokers_publishers() {
    let dir = tempfile::tempdir().unwrap();
    let free = stream_store::free_space(dir.path()).unwrap();
    let yaml = format!(
        "spring.embedded:\n  data-dir: {}\n  disk-free-limit: {}\nspring.cloud.stream.bindings:\n  orders-out:\n    destination: guarded-orders\n    producer: {{requiredGroups: billing}}\n",
        dir.path().display(),
        free.saturating_mul(2)
    );
    let app = App::builder(config(&yaml))
        .output("orders-out")
        .start()
        .await
        .unwrap();
    let shared = EmbeddedBinder::shared_broker();
    assert_eq!(shared.blocked_reason().as_deref(), Some("low on disk"));
    let out = app.output("orders-out").unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(300), out.send("held"))
            .await
            .is_err(),
        "a send went through under the disk alarm"
    );
    assert_eq!(shared.queue_counts("guarded-orders.billing"), Some((0, 0)));
    // The disk alarm is what holds it: lifted (as the monitor does once space is freed),
    // the send goes through.
    shared.set_disk_alarm(false);
    tokio::time::timeout(Duration::from_secs(5), out.send("free"))
        .await
        .expect("sent once the alarm is lifted")
        .unwrap();
    assert_eq!(shared.queue_counts("guarded-orders.billing"), Some((1, 0)));
    app.shutdown().await;
}
