//! Files, profiles, environment overrides and validation errors.

use std::fs;
use std::path::Path;

use binder_amqp::rabbit;
use binder_core::config::{ConfigError, ConfigLoader, StreamConfig};

const NO_ENV: [(&str, &str); 0] = [];

fn yaml(text: &str) -> Result<StreamConfig, ConfigError> {
    ConfigLoader::new().env(NO_ENV).yaml_str(text).load()
}

/// The rendered error of an invalid YAML text.
fn problems(text: &str) -> String {
    match yaml(text) {
        Ok(_) => panic!("expected the configuration to be refused:\n{text}"),
        Err(e) => e.to_string(),
    }
}

fn write(dir: &Path, name: &str, text: &str) {
    fs::write(dir.join(name), text).unwrap();
}

#[test]
fn a_spring_tutorial_configuration_loads_unchanged() {
    let cfg = yaml(
        r#"
spring:
  application:
    name: product-service
  cloud:
    stream:
      bindings:
        inputProductAdd:
          destination: mqTestProduct
          content-type: application/json
          group: addProductHandler
        outputProductAdd:
          destination: mqTestProduct
      rabbit:
        bindings:
          inputProductAdd:
            consumer:
              bindingRoutingKey: addProduct.*
          outputProductAdd:
            producer:
              routingKeyExpression: '''addProduct.'' + headers[''type'']'
server:
  port: 8080
"#,
    )
    .unwrap();
    let input = &cfg.bindings["inputProductAdd"];
    assert_eq!(input.destination, "mqTestProduct");
    assert_eq!(input.group.as_deref(), Some("addProductHandler"));
    assert_eq!(
        rabbit(input).consumer.common.binding_routing_key.as_deref(),
        Some("addProduct.*")
    );
    let output = &cfg.bindings["outputProductAdd"];
    assert_eq!(
        rabbit(output).producer.routing_key_expression.as_deref(),
        Some("'addProduct.' + headers['type']")
    );
}

#[test]
fn binding_names_keep_their_case() {
    let cfg = yaml(
        "spring.cloud.stream.bindings:\n  inputProductAdd: {group: a}\n  inputproductadd: {group: b}\n",
    )
    .unwrap();
    let names: Vec<&String> = cfg.bindings.keys().collect();
    assert_eq!(names, ["inputProductAdd", "inputproductadd"]);
    assert_eq!(cfg.bindings["inputProductAdd"].group.as_deref(), Some("a"));
}

#[test]
fn defaults_sections_apply_under_binding_values() {
    let cfg = yaml(
        r#"
spring.cloud.stream:
  instanceCount: 2
  default:
    contentType: text/plain
    consumer: {maxAttempts: 7, concurrency: 2}
  rabbit.default.consumer: {prefetch: 50, autoBindDlq: true}
  bindings:
    a: {group: g, consumer: {maxAttempts: 1}}
    c: {group: g}
  rabbit.bindings:
    a.consumer: {prefetch: 5}
"#,
    )
    .unwrap();
    let a = cfg.binding("a");
    assert_eq!(a.content_type, "text/plain");
    assert_eq!(a.consumer.max_attempts, 1);
    assert_eq!(a.consumer.concurrency, 2);
    assert_eq!(rabbit(&a).consumer.prefetch, 5);
    assert!(rabbit(&a).consumer.common.auto_bind_dlq);
    assert_eq!(a.instance_count(), 2);
    // A binding only code knows gets the defaults too.
    let b = cfg.binding("b");
    assert_eq!(b.consumer.max_attempts, 7);
    assert_eq!(rabbit(&b).consumer.prefetch, 50);
    // A binding configured without its own `rabbit` section gets the defaults, untouched by
    // the binding that has one (they share the default section, `a` holds a copy).
    let c = cfg.binding("c");
    assert_eq!(rabbit(&c).consumer.prefetch, 50);
    assert!(rabbit(&c).consumer.common.auto_bind_dlq);
}

#[test]
fn files_profiles_and_precedence() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "application.yaml",
        "spring:\n  profiles.active: dev\n  cloud.stream.bindings.in:\n    destination: base\n    group: g\n",
    );
    write(
        dir.path(),
        "application-dev.toml",
        "[spring.cloud.stream.bindings.in]\ndestination = \"dev\"\n",
    );
    write(
        dir.path(),
        "application-prod.yml",
        "spring.cloud.stream.bindings.in.destination: prod\n",
    );

    let load = |loader: ConfigLoader| loader.dir(dir.path()).load().unwrap();
    let cfg = load(ConfigLoader::new().env(NO_ENV));
    assert_eq!(cfg.active_profiles, ["dev"], "from spring.profiles.active");
    assert_eq!(cfg.binding("in").destination, "dev");
    assert_eq!(
        cfg.binding("in").group.as_deref(),
        Some("g"),
        "base values stay"
    );
    assert_eq!(cfg.sources.len(), 2);

    let cfg = load(ConfigLoader::new().env([("SPRING_PROFILES_ACTIVE", "prod")]));
    assert_eq!(cfg.binding("in").destination, "prod", "the variable wins");

    let cfg = load(ConfigLoader::new().env(NO_ENV).profiles(["dev", "prod"]));
    assert_eq!(cfg.binding("in").destination, "prod", "later profiles win");

    // An explicit file, by API or STREAM_CONFIG, with its profiles beside it.
    let other = dir.path().join("other.yaml");
    fs::write(
        &other,
        "spring.cloud.stream.bindings.in.destination: other\n",
    )
    .unwrap();
    write(
        dir.path(),
        "other-x.yaml",
        "spring.cloud.stream.bindings.in.group: x\n",
    );
    let var = other.display().to_string();
    let cfg = ConfigLoader::new()
        .env([
            ("STREAM_CONFIG", var.as_str()),
            ("SPRING_PROFILES_ACTIVE", "x"),
        ])
        .load()
        .unwrap();
    assert_eq!(cfg.binding("in").destination, "other");
    assert_eq!(cfg.binding("in").group.as_deref(), Some("x"));
}

#[test]
fn environment_overrides_files() {
    let text = r#"
spring.cloud.stream:
  bindings:
    inputProductAdd: {destination: fromFile, group: g}
    orders-in-0: {destination: orders}
"#;
    let cfg = ConfigLoader::new()
        .yaml_str(text)
        .env([
            (
                "SPRING_CLOUD_STREAM_BINDINGS_INPUTPRODUCTADD_DESTINATION",
                "fromEnv",
            ),
            (
                "SPRING_CLOUD_STREAM_BINDINGS_ORDERSIN0_CONSUMER_MAXATTEMPTS",
                "9",
            ),
            ("SPRING_CLOUD_STREAM_BINDINGS_ORDERSIN0_GROUP", "g"),
            (
                "SPRING_CLOUD_STREAM_RABBIT_BINDINGS_ORDERSIN0_CONSUMER_AUTOBINDDLQ",
                "true",
            ),
            ("SPRING_CLOUD_STREAM_DEFAULTBINDER", "rabbit"),
            ("UNRELATED_VARIABLE", "ignored"),
        ])
        .load()
        .unwrap();
    assert_eq!(cfg.binding("inputProductAdd").destination, "fromEnv");
    let orders = cfg.binding("orders-in-0");
    assert_eq!(orders.consumer.max_attempts, 9);
    assert!(rabbit(&orders).consumer.common.auto_bind_dlq);
    assert_eq!(cfg.default_binder.as_deref(), Some("rabbit"));
    assert!(!cfg.bindings.contains_key("inputproductadd"));
}

#[test]
fn spring_application_json_keeps_exact_names_and_loses_to_relaxed_variables() {
    let cfg = ConfigLoader::new()
        .yaml_str("spring.cloud.stream.bindings.a.group: g")
        .env([
            (
                "SPRING_APPLICATION_JSON",
                r#"{"spring":{"cloud":{"stream":{"bindings":{"newBinding":{"destination":"d","group":"j"}}}}}}"#,
            ),
            ("SPRING_CLOUD_STREAM_BINDINGS_NEWBINDING_GROUP", "v"),
        ])
        .load()
        .unwrap();
    let b = cfg.binding("newBinding");
    assert_eq!(b.destination, "d");
    assert_eq!(b.group.as_deref(), Some("v"));
}

#[test]
fn code_overrides_win() {
    let cfg = ConfigLoader::new()
        .env([("SPRING_CLOUD_STREAM_BINDINGS_A_GROUP", "env")])
        .yaml_str("spring.cloud.stream.bindings.a.group: file")
        .set("spring.cloud.stream.bindings.a.group", "code")
        .load()
        .unwrap();
    assert_eq!(cfg.binding("a").group.as_deref(), Some("code"));
}

#[test]
fn the_application_keeps_its_own_keys() {
    let cfg = yaml("myapp:\n  greeting: hello\nspring.cloud.stream.bindings.a.group: g\n").unwrap();
    let greeting = cfg
        .raw()
        .clone()
        .into_table()
        .unwrap()
        .remove("myapp")
        .unwrap()
        .into_table()
        .unwrap()
        .remove("greeting")
        .unwrap()
        .into_string()
        .unwrap();
    assert_eq!(greeting, "hello");
}

#[test]
fn unknown_keys_are_named_with_file_path_and_a_suggestion() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "application.yaml",
        "spring.cloud.stream.bindings.input.consumer.maxAtempts: 3\n",
    );
    let err = ConfigLoader::new()
        .env(NO_ENV)
        .dir(dir.path())
        .load()
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("application.yaml"), "{text}");
    assert!(
        text.contains("spring.cloud.stream.bindings.input.consumer.maxAtempts"),
        "{text}"
    );
    assert!(text.contains("did you mean `maxAttempts`?"), "{text}");
    assert_eq!(err.problems().len(), 1);
}

#[test]
fn unknown_keys_without_a_near_match_list_the_valid_ones() {
    let text = problems("spring.cloud.stream.bindings.input.colour: red");
    assert!(text.contains("unknown property `colour`"), "{text}");
    assert!(
        text.contains("destination, group, contentType, binder"),
        "{text}"
    );
    let text = problems("spring.cloud.stream.bindngs.input.group: g");
    assert!(text.contains("did you mean `bindings`?"), "{text}");
    let text = problems("spring.cloud.stream.rabbit.bindings.in.consumer.autoBindDql: true");
    assert!(text.contains("did you mean `autoBindDlq`?"), "{text}");
}

#[test]
fn an_extension_namespace_nobody_registered_is_an_unknown_key() {
    // `rabbit` is registered by binder-amqp (linked here); `kafka` by no binder.
    let text = problems("spring.cloud.stream.kafka.bindings.in.consumer.ackMode: RECORD");
    assert!(
        text.contains("spring.cloud.stream.kafka: unknown key `kafka`"),
        "{text}"
    );
    assert!(
        text.contains("rabbit"),
        "the registered namespace is listed: {text}"
    );
    let text = problems("spring.cloud.stream.rabit.bindings.in.consumer.prefetch: 5");
    assert!(text.contains("did you mean `rabbit`?"), "{text}");
    let text = problems("spring.cloud.stream.rabbit.bindngs.in.consumer.prefetch: 5");
    assert!(text.contains("did you mean `bindings`?"), "{text}");
}

#[test]
fn wrong_types_and_ranges_say_what_was_expected() {
    let text = problems(
        r#"
spring.cloud.stream.bindings.in:
  group: g
  consumer:
    maxAttempts: three
    concurrency: 0
    backOffMultiplier: 0.5
    autoStartup: maybe
spring.cloud.stream.rabbit.bindings.in.consumer:
  prefetch: 70000
  acknowledgeMode: SOMETIMES
  exchangeType: topik
"#,
    );
    for expected in [
        "consumer.maxAttempts: expected a whole number from 0 to 4294967295, found `three`",
        "consumer.concurrency: must be at least 1",
        "consumer.backOffMultiplier: must be 1.0 or more",
        "consumer.autoStartup: expected a boolean (true or false), found `maybe`",
        "consumer.prefetch: expected a whole number from 0 to 65535, found `70000`",
        "consumer.acknowledgeMode: unknown value `SOMETIMES`; expected one of: AUTO, MANUAL, NONE",
        "consumer.exchangeType: unknown value `topik`; did you mean `topic`?",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    assert!(
        text.starts_with("invalid configuration (7 problems)"),
        "{text}"
    );
}

#[test]
fn a_key_written_twice_in_two_spellings_is_refused() {
    let text = problems(
        "spring.cloud.stream.bindings.in.consumer:\n  maxAttempts: 2\n  max-attempts: 3\n",
    );
    assert!(text.contains("set twice"), "{text}");
}

#[test]
fn contradictions_are_refused() {
    let cases = [
        (
            "spring.cloud.stream.rabbit.bindings.in.consumer.autoBindDlq: true",
            "rabbit.bindings.in.consumer.autoBindDlq: needs a `group`",
        ),
        (
            "spring.cloud.stream.bindings.in: {group: g, consumer: {concurrency: 3}}\nspring.cloud.stream.rabbit.bindings.in.consumer.exclusive: true",
            "rabbit.bindings.in.consumer.exclusive: an exclusive consumer allows one consumer on the queue, but concurrency is 3",
        ),
        (
            "spring.cloud.stream.bindings.in.binder: rabit",
            "bindings.in.binder: no binder `rabit` is configured or known; did you mean `rabbit`?",
        ),
        (
            "spring.cloud.stream.defaultBinder: kafka",
            "defaultBinder: no binder `kafka` is configured or known (available: embedded, rabbit)",
        ),
        (
            "spring.cloud.stream.bindings.in: {group: g, consumer: {partitioned: true}}\nspring.cloud.stream.rabbit.bindings.in.consumer.exchangeType: fanout",
            "a fanout exchange cannot route to partitions",
        ),
        (
            "spring.cloud.stream.bindings.out.producer: {partitionKeyExpression: \"headers['k']\", partitionCount: 2}\nspring.cloud.stream.rabbit.bindings.out.producer.exchangeType: fanout",
            "rabbit.bindings.out.producer.exchangeType: a fanout exchange cannot route to partitions",
        ),
        (
            "spring.cloud.stream.bindings.in: {group: g, consumer: {partitioned: true, instanceCount: 2, instanceIndex: 2}}",
            "instance index 2 is out of range: instanceCount is 2",
        ),
        (
            "spring.cloud.stream.bindings.in.consumer: {partitioned: true}",
            "bindings.in.group: missing: a partitioned consumer needs a group",
        ),
        (
            "spring.cloud.stream.bindings.in.consumer: {backOffInitialInterval: 5000, backOffMaxInterval: 1000}",
            "consumer.backOffMaxInterval: 1000 ms is shorter than backOffInitialInterval (5000 ms)",
        ),
        (
            "spring.cloud.stream.bindings.in.consumer.headerMode: embeddedHeaders",
            "embeddedHeaders is not supported",
        ),
        (
            "spring.cloud.stream.rabbit.bindings.in.consumer: {quorum: {enabled: true}, maxPriority: 5, lazy: true}",
            "quorum queues do not support maxPriority, lazy",
        ),
        (
            "spring.cloud.stream.rabbit.bindings.out.producer: {routingKey: a, routingKeyExpression: \"'b'\"}",
            "set either routingKey or routingKeyExpression, not both",
        ),
        (
            "spring.cloud.stream.rabbit.bindings.out.producer.alternateExchange.type: fanout",
            "an alternate exchange needs a name",
        ),
        (
            "spring.cloud.stream.bindings.b: {group: g, consumer: {maxAttempts: 2}, producer: {partitionCount: 2}}",
            "a binding is either an input or an output",
        ),
        (
            "spring.cloud.stream.binders.mq: {environment: {}}",
            "binders.mq.type: missing: every binder configuration needs a type",
        ),
        (
            "spring.cloud.stream.binders.mq.type: rabbitmq",
            "binders.mq.type: no binder `rabbitmq` is configured or known; did you mean `rabbit`?",
        ),
        (
            "spring.cloud.stream.bindings.in.destination: ''",
            "bindings.in.destination: must not be empty",
        ),
    ];
    for (text, expected) in cases {
        let err = problems(text);
        assert!(
            err.contains(expected),
            "for\n{text}\nexpected {expected:?} in\n{err}"
        );
    }
}

#[test]
fn named_binders_are_resolved() {
    let cfg = yaml(
        r#"
spring.cloud.stream:
  defaultBinder: local
  binders:
    local: {type: embedded}
    mq:
      type: rabbit
      environment:
        spring.rabbitmq.host: mq.internal
  bindings:
    a: {group: g, binder: mq}
    b: {group: g}
"#,
    )
    .unwrap();
    assert_eq!(cfg.binder_for("a"), "mq");
    assert_eq!(cfg.binder_type(&cfg.binder_for("a")), "rabbit");
    assert_eq!(cfg.binder_for("b"), "local");
    assert_eq!(cfg.binder_type("local"), "embedded");
    assert!(cfg.binders["mq"].environment.clone().into_table().is_ok());
}

#[test]
fn file_problems_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.yaml");
    let err = ConfigLoader::new()
        .env(NO_ENV)
        .file(&missing)
        .load()
        .unwrap_err();
    assert!(matches!(err, ConfigError::File { .. }));
    assert!(err.to_string().contains("nope.yaml"), "{err}");

    let bad = dir.path().join("application.yaml");
    fs::write(&bad, "spring: [unclosed\n").unwrap();
    let err = ConfigLoader::new()
        .env(NO_ENV)
        .dir(dir.path())
        .load()
        .unwrap_err();
    assert!(err.to_string().contains("application.yaml"), "{err}");

    let odd = dir.path().join("app.ini");
    fs::write(&odd, "").unwrap();
    let err = ConfigLoader::new()
        .env(NO_ENV)
        .file(&odd)
        .load()
        .unwrap_err();
    assert!(err.to_string().contains(".yaml, .yml or .toml"), "{err}");
}

#[test]
fn environment_problems_name_the_variable() {
    let err = ConfigLoader::new()
        .env([(
            "SPRING_CLOUD_STREAM_BINDINGS_A_CONSUMER_MAXATTEMPTS",
            "lots",
        )])
        .load()
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("environment variable SPRING_CLOUD_STREAM_BINDINGS_A_CONSUMER_MAXATTEMPTS"),
        "{text}"
    );
    let err = ConfigLoader::new()
        .env([("SPRING_APPLICATION_JSON", "{oops")])
        .load()
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("SPRING_APPLICATION_JSON: invalid JSON"),
        "{err}"
    );
}
