//! The memory high watermark set in configuration (`spring.embedded.memory-high-watermark`),
//! on the broker every configured `embedded` binder of a process shares: the first binder
//! configuration that sets it decides, one that sets another value is refused at startup, and
//! an unusable value stops startup naming the key.
//!
//! The shared broker lives as long as the process, so the shared-broker steps run in order in
//! one test, in a file of their own; the other tests use brokers of their own.

mod common;

use binder_core::runtime::App;
use binder_embedded::EmbeddedBinder;
use common::config;

async fn start(
    yaml: &str,
    outputs: &[&str],
) -> Result<binder_core::runtime::RunningApp, Vec<String>> {
    let mut builder = App::builder(config(yaml));
    for o in outputs {
        builder = builder.output(*o);
    }
    builder.start().await.map_err(|e| e.problems)
}

#[tokio::test]
async fn the_configured_watermark_applies_to_the_shared_broker_and_must_agree() {
    let shared = EmbeddedBinder::shared_broker();
    assert_eq!(
        shared.memory_high_watermark(),
        Some(400 << 20),
        "the default until a configuration sets one"
    );

    // An unusable value stops startup, naming the key, and changes nothing.
    let problems = start(
        "spring.embedded.memory-high-watermark: {absolute: lots}\n\
         spring.cloud.stream.bindings.out.destination: wm-bad\n",
        &["out"],
    )
    .await
    .unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("`spring.embedded.memory-high-watermark.absolute` is `lots`"),
        "{problems:?}"
    );
    assert_eq!(shared.memory_high_watermark(), Some(400 << 20));

    // The first configuration to set it decides.
    let first = start(
        "spring.embedded.memory-high-watermark: {absolute: 64MiB}\n\
         spring.cloud.stream.bindings.out.destination: wm-one\n",
        &["out"],
    )
    .await
    .unwrap();
    assert_eq!(shared.memory_high_watermark(), Some(64 << 20));

    // Two binder configurations, one agreeing (written otherwise) and one not.
    let yaml = r#"
spring.cloud.stream:
  binders:
    same: {type: embedded, environment: {spring.embedded.memory-high-watermark: {absolute: 67108864}}}
    other: {type: embedded, environment: {spring.embedded.memory-high-watermark: 0.5}}
    silent: {type: embedded}
  bindings:
    a-out: {destination: wm-a, binder: same}
    b-out: {destination: wm-b, binder: other}
    c-out: {destination: wm-c, binder: silent}
"#;
    let problems = start(yaml, &["a-out", "b-out", "c-out"]).await.unwrap_err();
    assert_eq!(problems.len(), 1, "only the disagreeing one: {problems:?}");
    let p = &problems[0];
    assert!(
        p.starts_with("binding `b-out`: cannot create binder `other`:")
            && p.contains("`spring.embedded.memory-high-watermark` is {relative: 0.5}")
            && p.contains("set {absolute: 67108864} (67108864 bytes)")
            && p.contains("shares one broker"),
        "{p}"
    );
    assert_eq!(shared.memory_high_watermark(), Some(64 << 20), "unchanged");

    // An instance given in code on the shared broker is held to the same agreement.
    let in_code = std::sync::Arc::new(EmbeddedBinder::new(EmbeddedBinder::shared_broker()));
    let problems = App::builder(config(
        "spring.embedded.memory-high-watermark: 0.5\n\
         spring.cloud.stream.bindings.out.destination: wm-in-code-shared
",
    ))
    .binder("embedded", in_code)
    .output("out")
    .start()
    .await
    .unwrap_err()
    .problems;
    assert!(
        problems
            .iter()
            .any(|p| p.contains("given in code") && p.contains("shares one broker")),
        "{problems:?}"
    );
    assert_eq!(shared.memory_high_watermark(), Some(64 << 20), "unchanged");
    first.shutdown().await;
}

#[tokio::test]
async fn a_binder_given_in_code_applies_the_configured_watermark_to_its_own_broker() {
    let broker = binder_embedded::engine::Broker::new();
    let binder = std::sync::Arc::new(EmbeddedBinder::new(broker.clone()));
    let app = App::builder(config(
        "spring.embedded.memory-high-watermark: {absolute: 32MiB}\n\
         spring.cloud.stream.bindings.out.destination: wm-in-code\n",
    ))
    .binder("embedded", binder.clone())
    .output("out")
    .start()
    .await
    .unwrap();
    assert_eq!(broker.memory_high_watermark(), Some(32 << 20));
    app.shutdown().await;

    // A value it cannot use stops startup, naming the key: it is not ignored.
    let problems = App::builder(config(
        "spring.embedded.memory-high-watermark: {absolute: lots}\n\
         spring.cloud.stream.bindings.out.destination: wm-in-code\n",
    ))
    .binder("embedded", binder)
    .output("out")
    .start()
    .await
    .unwrap_err()
    .problems;
    assert!(
        problems
            .iter()
            .any(|p| p.contains("given in code") && p.contains("memory-high-watermark")),
        "{problems:?}"
    );
}

#[tokio::test]
async fn the_watermark_can_come_from_an_environment_variable() {
    let broker = binder_embedded::engine::Broker::new();
    let config = binder_core::config::ConfigLoader::new()
        .env(vec![(
            "SPRING_EMBEDDED_MEMORYHIGHWATERMARK_ABSOLUTE".to_owned(),
            "16MiB".to_owned(),
        )])
        .yaml_str("spring.cloud.stream.bindings.out.destination: wm-env\n")
        .load()
        .unwrap();
    let app = App::builder(config)
        .binder(
            "embedded",
            std::sync::Arc::new(EmbeddedBinder::new(broker.clone())),
        )
        .output("out")
        .start()
        .await
        .unwrap();
    assert_eq!(broker.memory_high_watermark(), Some(16 << 20));
    app.shutdown().await;
}
