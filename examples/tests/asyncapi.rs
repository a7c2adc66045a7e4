//! The AsyncAPI documents: `streamctl asyncapi` on a configuration with an input (group,
//! dead-letter queue), outputs (a routing key, an expression), embedded and rabbit binders;
//! an application's document with its listeners' payload schemas. Each is validated against
//! the official AsyncAPI 3.0.0 JSON Schema (`@asyncapi/specs` 6, by
//! `tests/support/validate_asyncapi.py` with python's `jsonschema`), and a document without
//! `info` is shown to be refused, so the check is known to bite.
//!
//! The validator needs `python3` with `jsonschema` and the schema file: by default
//! `target/asyncapi-validator/node_modules/@asyncapi/specs/schemas/3.0.0.json` (`.ci/run`
//! installs it with `npm install --prefix target/asyncapi-validator @asyncapi/specs@6`), or
//! the file `ASYNCAPI_SCHEMA` names. Without them the validation is skipped with the reason
//! printed, unless `REQUIRE_ASYNCAPI_VALIDATOR=1`, which makes it fail.
#[path = "support/cli.rs"]
mod cli;

use cli::streamctl;

use std::path::{Path, PathBuf};
use std::process::Command;

use binder_core::config::{ConfigLoader, StreamConfig};
use binder_core::runtime::App;
use serde_json::Value;
use stream_macros::{input, output, stream_listener};

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// The schema file and the script, or why the validation cannot run.
fn validator() -> Result<(PathBuf, PathBuf), String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = manifest.join("tests/support/validate_asyncapi.py");
    let schema = match std::env::var_os("ASYNCAPI_SCHEMA") {
        Some(path) => PathBuf::from(path),
        None => manifest
            .join("../target/asyncapi-validator/node_modules/@asyncapi/specs/schemas/3.0.0.json"),
    };
    if !schema.is_file() {
        return Err(format!(
            "no AsyncAPI 3.0.0 schema at {} (npm install --prefix target/asyncapi-validator @asyncapi/specs@6, or set ASYNCAPI_SCHEMA)",
            schema.display()
        ));
    }
    let probe = Command::new("python3")
        .args(["-c", "import jsonschema"])
        .output();
    match probe {
        Ok(out) if out.status.success() => Ok((schema, script)),
        Ok(_) => Err("python3 has no `jsonschema` module (pip install jsonschema)".to_owned()),
        Err(e) => Err(format!("no python3: {e}")),
    }
}

/// Runs the validator on `doc`: `Some((valid, report))`, or `None` (skipped, the reason
/// printed) when it cannot run and `REQUIRE_ASYNCAPI_VALIDATOR` is not `1`.
fn validate(doc: &Value) -> Option<(bool, String)> {
    let (schema, script) = match validator() {
        Ok(found) => found,
        Err(why) => {
            if std::env::var("REQUIRE_ASYNCAPI_VALIDATOR").as_deref() == Ok("1") {
                panic!("REQUIRE_ASYNCAPI_VALIDATOR=1 but the validator cannot run: {why}");
            }
            eprintln!("SKIPPED the AsyncAPI schema validation: {why}");
            return None;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "asyncapi.json", &doc.to_string());
    let out = Command::new("python3")
        .arg(&script)
        .arg(&schema)
        .arg(&path)
        .output()
        .unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    match out.status.code() {
        Some(0) => Some((true, report)),
        Some(1) => Some((false, report)),
        _ => panic!("the validator could not run: {report}"),
    }
}

fn assert_valid(doc: &Value) {
    if let Some((valid, report)) = validate(doc) {
        assert!(
            valid,
            "not a valid AsyncAPI 3.0.0 document:\n{report}\n{doc:#}"
        );
    }
}

const SERVICE: &str = r#"
spring:
  application.name: orders-service
  cloud.stream:
    binders:
      local: {type: embedded}
      mq: {type: rabbit, environment: {spring.rabbitmq: {host: mq.example, virtual-host: /prod}}}
    bindings:
      orders-in: {destination: orders, group: billing, binder: mq, consumer: {max-attempts: 2}}
      invoices-out: {destination: invoices.created, binder: local, producer: {}}
      audit-out: {destination: audit, binder: mq, producer: {}}
    rabbit.bindings:
      orders-in.consumer: {autoBindDlq: true, bindingRoutingKey: "order.*"}
      invoices-out.producer: {routingKey: invoice.created}
      audit-out.producer: {routingKeyExpression: "headers['kind']"}
info.app.version: 1.4.2
"#;

#[test]
fn streamctl_asyncapi_prints_a_valid_document_of_the_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "application.yaml", SERVICE);
    let out = streamctl(&["asyncapi", "--config", &path]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["asyncapi"], "3.0.0");
    assert_eq!(doc["info"]["title"], "orders-service");
    assert_eq!(doc["info"]["version"], "1.4.2");

    // The input: the exchange, the group's queue it receives from (rabbit's vhost), its DLQ.
    let exchange = &doc["channels"]["orders"]["bindings"]["amqp"];
    assert_eq!(exchange["is"], "routingKey");
    assert_eq!(exchange["exchange"]["name"], "orders");
    assert_eq!(exchange["exchange"]["vhost"], "/prod");
    let receive = &doc["operations"]["orders-in"];
    assert_eq!(receive["action"], "receive");
    assert_eq!(receive["x-group"], "billing");
    assert_eq!(receive["x-binder"]["type"], "rabbit");
    assert_eq!(receive["channel"]["$ref"], "#/channels/orders_billing");
    let queue = &doc["channels"]["orders_billing"]["bindings"]["amqp"];
    assert_eq!(queue["is"], "queue");
    assert_eq!(queue["queue"]["name"], "orders.billing");
    assert_eq!(queue["queue"]["durable"], true);
    assert_eq!(queue["x-bindings"][0]["routingKey"], "order.*");
    let dlq = &doc["channels"]["orders_billing_dlq"];
    assert_eq!(dlq["address"], "orders.billing.dlq");
    assert_eq!(dlq["bindings"]["amqp"]["x-bindings"][0]["exchange"], "DLX");

    // The outputs: a fixed routing key on the embedded binder, an expression on rabbit.
    let send = &doc["operations"]["invoices-out"];
    assert_eq!(send["action"], "send");
    assert_eq!(send["channel"]["$ref"], "#/channels/invoices_created");
    assert_eq!(send["bindings"]["amqp"]["cc"][0], "invoice.created");
    assert_eq!(send["x-binder"]["type"], "embedded");
    assert_eq!(
        doc["channels"]["invoices_created"]["bindings"]["amqp"]["exchange"]["vhost"],
        "/"
    );
    let audit = &doc["operations"]["audit-out"]["bindings"]["amqp"];
    assert_eq!(audit["x-routingKeyExpression"], "headers['kind']");
    assert!(audit.get("cc").is_none(), "{audit}");

    // The rabbit binder's server, its channels' references; the embedded binder serves
    // nothing on the network here: no server, and its channels name none.
    let servers = doc["servers"].as_object().unwrap();
    assert_eq!(servers.keys().collect::<Vec<_>>(), ["mq"], "{servers:?}");
    let mq = &servers["mq"];
    assert_eq!(mq["host"], "mq.example:5672");
    assert_eq!(mq["protocol"], "amqp");
    assert_eq!(mq["protocolVersion"], "0.9.1");
    assert_eq!(mq["pathname"], "/%2Fprod");
    assert_eq!(mq["x-binder"]["type"], "rabbit");
    for channel in ["orders", "orders_billing", "orders_billing_dlq", "audit"] {
        assert_eq!(
            doc["channels"][channel]["servers"],
            serde_json::json!([{"$ref": "#/servers/mq"}]),
            "{channel}"
        );
    }
    assert!(doc["channels"]["invoices_created"].get("servers").is_none());

    // No program, no payload types: said so, nothing invented.
    let payload = &doc["components"]["messages"]["orders-in"]["payload"];
    assert_eq!(payload.as_object().unwrap().len(), 1, "{payload}");
    assert!(
        payload["description"]
            .as_str()
            .unwrap()
            .starts_with("No schema")
    );

    assert_valid(&doc);
}

#[test]
fn servers_are_a_clusters_nodes_and_the_embedded_brokers_listener() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "application.yaml",
        r#"
spring:
  embedded.listen: 127.0.0.1:5673
  rabbitmq: {addresses: "node-a.example:5672,amqps://guest:secret@node-b.example:5671/%2F", ssl.enabled: true}
  cloud.stream:
    binders:
      local: {type: embedded}
      cluster: {type: rabbit}
    bindings:
      orders-in: {destination: orders, group: billing, binder: cluster}
      events-out: {destination: events, binder: local}
"#,
    );
    let out = streamctl(&["asyncapi", "--config", &path, "--input", "orders-in"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let servers = &doc["servers"];
    let text = servers.to_string();
    assert!(
        !text.contains("secret") && !text.contains("guest"),
        "{text}"
    );
    assert_eq!(servers["cluster"]["host"], "node-a.example:5672");
    assert_eq!(servers["cluster"]["protocol"], "amqps");
    assert_eq!(servers["cluster-2"]["host"], "node-b.example:5671");
    assert_eq!(servers["cluster-2"]["protocol"], "amqps");
    assert_eq!(servers["local"]["host"], "127.0.0.1:5673");
    assert_eq!(servers["local"]["protocol"], "amqp");
    assert_eq!(servers["local"]["pathname"], "/%2F");
    assert_eq!(
        doc["channels"]["orders"]["servers"],
        serde_json::json!([{"$ref": "#/servers/cluster"}, {"$ref": "#/servers/cluster-2"}])
    );
    assert_eq!(
        doc["channels"]["events"]["servers"],
        serde_json::json!([{"$ref": "#/servers/local"}])
    );
    assert_valid(&doc);
}

#[test]
fn streamctl_asyncapi_takes_roles_and_refuses_unknown_bindings() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "application.yaml",
        "spring.cloud.stream.bindings.feed: {destination: feed}\n",
    );
    // Guessed: a producer. Said: an input.
    let out = streamctl(&["asyncapi", "--config", &path]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["operations"]["feed"]["action"], "send");
    let out = streamctl(&["asyncapi", "--config", &path, "--input", "feed"]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["operations"]["feed"]["action"], "receive");
    // An anonymous queue has no address until it is declared.
    assert_eq!(doc["channels"]["feed_anonymous"]["address"], Value::Null);
    assert_valid(&doc);

    let out = streamctl(&["asyncapi", "--config", &path, "--output", "fed"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("`fed` is not a binding"), "{stderr}");
}

#[test]
fn a_document_without_info_is_refused_by_the_validator() {
    binder_embedded::link();
    binder_rabbit::link();
    let config: StreamConfig = ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(SERVICE)
        .load()
        .unwrap();
    let mut doc = binder_core::asyncapi::Document::from_config(&config).into_json();
    doc.as_object_mut().unwrap().remove("info");
    if let Some((valid, report)) = validate(&doc) {
        assert!(!valid, "accepted without `info`:\n{report}");
        assert!(report.contains("'info' is a required property"), "{report}");
    }
    // A binding the AMQP bindings schema forbids (a queue on a routing-key channel).
    let mut doc = binder_core::asyncapi::Document::from_config(&config).into_json();
    doc["channels"]["orders"]["bindings"]["amqp"]["queue"] = serde_json::json!({"name": "q"});
    if let Some((valid, report)) = validate(&doc) {
        assert!(
            !valid,
            "accepted a queue on a routingKey channel:\n{report}"
        );
    }
}

// An application: listeners declared with the macro, one payload with a schema, one without.

#[input("orders-in")]
struct OrdersIn;

#[input("pings-in")]
struct PingsIn;

/// An order.
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Order {
    /// Its number.
    id: u64,
    lines: Vec<Line>,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Line {
    sku: String,
    quantity: u32,
}

/// No `JsonSchema`: the document says so.
#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct Ping {
    at: u64,
}

#[derive(serde::Serialize, schemars::JsonSchema)]
struct Invoice {
    order: u64,
    total_cents: i64,
}

#[stream_listener(input = OrdersIn, schema)]
async fn take_order(order: Order) {
    let _ = order.id;
}

#[stream_listener(input = PingsIn)]
async fn take_ping(ping: Ping) {
    let _ = ping.at;
}

// Processors: a typed reply is the payload of their output; a `Message` reply is untyped.

#[input("payments-in")]
struct PaymentsIn;

#[output("receipts-out")]
struct ReceiptsOut;

#[input("raw-in")]
struct RawIn;

#[output("raw-out")]
struct RawOut;

#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct Payment {
    cents: i64,
}

/// A receipt.
#[derive(serde::Serialize, schemars::JsonSchema)]
struct Receipt {
    cents: i64,
}

#[stream_listener(input = PaymentsIn, output = ReceiptsOut)]
async fn pay(payment: Payment) -> Result<Receipt, binder_core::runtime::HandlerError> {
    Ok(Receipt {
        cents: payment.cents,
    })
}

#[stream_listener(input = RawIn, output = RawOut)]
async fn relay(message: binder_core::message::Message) -> binder_core::message::Message {
    message
}

#[test]
fn a_processors_reply_type_is_its_outputs_payload() {
    binder_embedded::link();
    let config: StreamConfig = ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(
            "spring.cloud.stream.bindings:\n  payments-in: {destination: payments}\n  receipts-out: {destination: receipts}\n  raw-in: {destination: raw}\n  raw-out: {destination: relayed}\n",
        )
        .load()
        .unwrap();
    assert!(pay_listener.reply.is_some());
    assert!(relay_listener.reply.is_none());
    let doc = App::builder(config)
        .register(&pay_listener)
        .register(&relay_listener)
        .asyncapi()
        .into_json();
    let messages = &doc["components"]["messages"];
    assert_eq!(doc["operations"]["receipts-out"]["action"], "send");
    assert_eq!(
        messages["receipts-out"]["payload"]["$ref"],
        "#/components/schemas/Receipt"
    );
    assert_eq!(messages["receipts-out"]["name"], "Receipt");
    assert_eq!(
        doc["components"]["schemas"]["Receipt"]["properties"]["cents"]["type"],
        "integer"
    );
    let untyped = messages["raw-out"]["payload"]["description"]
        .as_str()
        .unwrap();
    assert!(untyped.starts_with("No schema"), "{untyped}");
    assert_valid(&doc);
}

#[test]
fn an_applications_document_has_its_listeners_payload_schemas() {
    binder_embedded::link();
    let config: StreamConfig = ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(
            "spring.cloud.stream.bindings:\n  orders-in: {destination: orders, group: billing}\n  pings-in: {destination: pings}\n  invoices-out: {destination: invoices}\n",
        )
        .load()
        .unwrap();
    assert!(take_order_listener.payload.is_some());
    let doc = App::builder(config)
        .register(&take_order_listener)
        .register(&take_ping_listener)
        .output("invoices-out")
        .payload::<Invoice>("invoices-out")
        .asyncapi()
        .into_json();
    let messages = &doc["components"]["messages"];
    assert_eq!(
        messages["orders-in"]["payload"]["$ref"],
        "#/components/schemas/Order"
    );
    assert_eq!(messages["orders-in"]["name"], "Order");
    let order = &doc["components"]["schemas"]["Order"];
    assert_eq!(order["properties"]["id"]["type"], "integer", "{order}");
    assert_eq!(
        order["properties"]["lines"]["items"]["$ref"],
        "#/components/schemas/Line"
    );
    assert!(doc["components"]["schemas"]["Line"].is_object());
    assert_eq!(
        messages["invoices-out"]["payload"]["$ref"],
        "#/components/schemas/Invoice"
    );
    let ping = &messages["pings-in"]["payload"];
    let why = ping["description"].as_str().unwrap();
    assert!(
        why.contains("Ping") && why.contains("does not implement `schemars::JsonSchema`"),
        "{why}"
    );
    assert_eq!(doc["operations"]["pings-in"]["action"], "receive");
    assert_eq!(
        doc["channels"]["orders"]["bindings"]["amqp"]["exchange"]["type"],
        "topic"
    );
    assert_valid(&doc);
}
