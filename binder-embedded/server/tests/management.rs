//! The HTTP management API against a running server: authentication and tags, vhost
//! filtering, every path, purge, `get` with each ack mode, publish, the dead-letter
//! extension under `/api/stream/`, 404s, the health checks.

mod common;
#[path = "common/http.rs"]
mod http;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};
use stream_broker::{ManagementConfig, PermissionConfig, Server, ServerConfig, UserConfig};
use stream_engine::{
    Broker, ConsumeOptions, ExchangeKind, FieldTable, FieldValue, Message, PublishOptions,
    QueueOptions,
};

const GUEST: Option<(&str, &str)> = Some(("guest", "guest"));
const MGMT: Option<(&str, &str)> = Some(("mgmt", "pw"));
const MON: Option<(&str, &str)> = Some(("mon", "pw"));

fn user(name: &str, tags: &[&str], permissions: &[(&str, PermissionConfig)]) -> UserConfig {
    UserConfig {
        name: name.into(),
        password_hash: None,
        password: Some("pw".into()),
        tags: tags.iter().map(|t| t.to_string()).collect(),
        permissions: permissions
            .iter()
            .map(|(v, p)| (v.to_string(), p.clone()))
            .collect(),
    }
}

fn config() -> ServerConfig {
    let mut config = common::config();
    config.vhosts = vec!["/".into(), "other".into()];
    config.users.push(user(
        "mgmt",
        &["management"],
        &[(
            "/",
            PermissionConfig {
                configure: "".into(),
                write: "^orders$".into(),
                read: "^work$".into(),
            },
        )],
    ));
    config.users.push(user("mon", &["monitoring"], &[]));
    config
        .users
        .push(user("app", &[], &[("/", PermissionConfig::all())]));
    config.management = Some(ManagementConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        allow_remote: false,
        sample_interval_ms: 100,
    });
    config
}

/// [`config`] with more `management` users, each with its configure, write and read
/// permissions on `/`.
fn config_with(users: &[(&str, [&str; 3])]) -> ServerConfig {
    let mut config = config();
    for (name, [configure, write, read]) in users {
        let permissions = PermissionConfig {
            configure: (*configure).into(),
            write: (*write).into(),
            read: (*read).into(),
        };
        config
            .users
            .push(user(name, &["management"], &[("/", permissions)]));
    }
    config
}

struct Fixture {
    server: Server,
    root: Broker,
    other: Broker,
    api: SocketAddr,
}

async fn fixture() -> Fixture {
    fixture_with(config()).await
}

async fn fixture_with(config: ServerConfig) -> Fixture {
    let root: Broker = Broker::new();
    let other: Broker = Broker::new();
    let brokers: HashMap<String, Broker> = [
        ("/".to_owned(), root.clone()),
        ("other".to_owned(), other.clone()),
    ]
    .into();
    let server = Server::bind(config, brokers).await.unwrap();
    let api = server.management_addr().expect("management configured");
    assert_ne!(api.port(), 0, "port 0 is resolved");
    let conn = other.connect();
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("elsewhere", QueueOptions::default(), FieldTable::new())
        .unwrap();
    Fixture {
        server,
        root,
        other,
        api,
    }
}

async fn get(f: &Fixture, path: &str, auth: Option<(&str, &str)>) -> http::Response {
    http::request(f.api, "GET", path, auth, None).await
}

async fn ok(f: &Fixture, path: &str, auth: Option<(&str, &str)>) -> Value {
    let r = get(f, path, auth).await;
    assert_eq!(
        r.status,
        200,
        "{path}: {}",
        String::from_utf8_lossy(&r.body)
    );
    r.json()
}

async fn post(f: &Fixture, path: &str, auth: Option<(&str, &str)>, body: Value) -> http::Response {
    http::request(f.api, "POST", path, auth, Some(&body)).await
}

fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_owned())
        .collect()
}

fn dead_letter_args() -> FieldTable {
    let mut args = FieldTable::new();
    args.insert("x-dead-letter-exchange", "");
    args.insert("x-dead-letter-routing-key", "work.dlq");
    args
}

/// `work` (dead-lettering to `work.dlq`), bound from the topic exchange `orders`.
async fn topology(f: &Fixture) -> (stream_engine::Connection, stream_engine::Channel) {
    let conn = f.root.connect();
    let ch = conn.open_channel().unwrap();
    let durable = QueueOptions {
        durable: true,
        ..QueueOptions::default()
    };
    ch.queue_declare("work", durable, dead_letter_args())
        .unwrap();
    ch.queue_declare("work.dlq", QueueOptions::default(), FieldTable::new())
        .unwrap();
    ch.exchange_declare(
        "orders",
        ExchangeKind::Topic,
        Default::default(),
        FieldTable::new(),
    )
    .unwrap();
    ch.queue_bind("work", "orders", "order.#", FieldTable::new())
        .unwrap();
    (conn, ch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logins_need_a_management_tag_and_see_their_vhosts() {
    let f = fixture().await;
    let r = get(&f, "/api/overview", None).await;
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Basic realm=\"RabbitMQ Management\"")
    );
    let xhr = [("X-Requested-With", "XMLHttpRequest")];
    let r = http::request_with(f.api, "GET", "/api/overview", None, None, &xhr).await;
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        None,
        "the page's requests get no dialog"
    );
    let page = get(&f, "/", None).await;
    assert_eq!(page.status, 200, "the page itself needs no login");
    assert!(
        String::from_utf8_lossy(&page.body).contains("<title>stream-broker management</title>")
    );
    let r = get(&f, "/api/overview", Some(("guest", "wrong"))).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"], "not_authorised");
    let r = get(&f, "/api/overview", Some(("app", "pw"))).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["reason"], "Not management user");

    let all = ok(&f, "/api/queues", GUEST).await;
    assert_eq!(names(&all), ["elsewhere"]);
    assert_eq!(all[0]["vhost"], "other");
    assert!(
        names(&ok(&f, "/api/queues", MGMT).await).is_empty(),
        "mgmt sees / only"
    );
    assert_eq!(names(&ok(&f, "/api/queues", MON).await), ["elsewhere"]);
    assert_eq!(names(&ok(&f, "/api/vhosts", MGMT).await), ["/"]);
    assert_eq!(names(&ok(&f, "/api/vhosts", MON).await), ["/", "other"]);
    let r = get(&f, "/api/queues/other", MGMT).await;
    assert_eq!(r.status, 401, "a vhost without permissions");
    assert_eq!(r.json()["reason"], "Not authorised to access virtual host");
    assert_eq!(
        ok(&f, "/api/queues/other", MON).await[0]["name"],
        "elsewhere"
    );
    f.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_path_answers_in_rabbitmqs_shapes() {
    let f = fixture().await;
    let (_conn, ch) = topology(&f).await;
    for i in 0..3 {
        ch.basic_publish(
            "orders",
            "order.new",
            PublishOptions::default(),
            Message::new(format!("m{i}")),
        )
        .await
        .unwrap();
    }

    let o = ok(&f, "/api/overview", GUEST).await;
    assert_eq!(o["product_name"], "stream-broker");
    assert_eq!(o["rabbitmq_version"], "3.10.0");
    assert_eq!(o["object_totals"]["queues"], 3);
    assert_eq!(o["queue_totals"]["messages_ready"], 3);
    assert!(o["message_stats"]["publish_details"]["rate"].is_number());
    let listeners: Vec<(String, u64)> = o["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["protocol"].as_str().unwrap().to_owned(),
                l["port"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        listeners,
        [
            ("amqp".to_owned(), u64::from(f.server.local_addr().port())),
            ("http".to_owned(), u64::from(f.api.port())),
        ]
    );

    let q = ok(&f, "/api/queues/%2F/work", GUEST).await;
    assert_eq!(q["name"], "work");
    assert_eq!(q["vhost"], "/");
    assert_eq!(q["durable"], true);
    assert_eq!(q["auto_delete"], false);
    assert_eq!(q["exclusive"], false);
    assert_eq!(q["arguments"]["x-dead-letter-routing-key"], "work.dlq");
    assert_eq!(
        (q["messages"].clone(), q["messages_ready"].clone()),
        (json!(3), json!(3))
    );
    assert_eq!(q["messages_unacknowledged"], 0);
    assert_eq!(q["consumers"], 0);
    assert_eq!(
        names(&ok(&f, "/api/queues/%2F", GUEST).await),
        ["work", "work.dlq"]
    );

    // The sampler turns the counters into rates over its last interval: once it has seen
    // the queue, more publishes and deliveries show as positive rates.
    tokio::time::sleep(Duration::from_millis(250)).await;
    for i in 0..3 {
        ch.basic_publish(
            "orders",
            "order.more",
            PublishOptions::default(),
            Message::new(format!("n{i}")),
        )
        .await
        .unwrap();
    }
    ch.basic_get("work", true).unwrap().expect("a message");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    loop {
        let q = ok(&f, "/api/queues/%2F/work", GUEST).await;
        let stats = &q["message_stats"];
        let publish = stats["publish_details"]["rate"].as_f64().unwrap();
        let deliver = stats["deliver_get_details"]["rate"].as_f64().unwrap();
        if publish > 0.0 && deliver > 0.0 {
            assert_eq!(stats["publish"], 6);
            assert_eq!(stats["deliver_get"], 1);
            let o = ok(&f, "/api/overview", GUEST).await;
            assert_eq!(o["message_stats"]["publish"], 6);
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no rate: {stats}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let xs = ok(&f, "/api/exchanges/%2F", GUEST).await;
    let xnames = names(&xs);
    assert_eq!(xnames[0], "", "the default exchange first");
    assert!(xnames.contains(&"orders".to_owned()) && xnames.contains(&"amq.topic".to_owned()));
    let x = ok(&f, "/api/exchanges/%2F/orders", GUEST).await;
    assert_eq!(
        (x["type"].clone(), x["durable"].clone()),
        (json!("topic"), json!(false))
    );
    assert_eq!(
        ok(&f, "/api/exchanges/%2F/amq.default", GUEST).await["name"],
        ""
    );
    // "other" has the same but orders.
    assert_eq!(
        names(&ok(&f, "/api/exchanges", MON).await).len(),
        2 * xs.as_array().unwrap().len() - 1
    );
    let bs = ok(&f, "/api/bindings/%2F", GUEST).await;
    let b = bs
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["source"] == "orders")
        .expect("orders -> work");
    assert_eq!(b["destination"], "work");
    assert_eq!(b["destination_type"], "queue");
    assert_eq!(b["routing_key"], "order.#");
    // RabbitMQ quotes the routing key in it, as a form value.
    assert_eq!(b["properties_key"], "order.%23");
    assert!(
        bs.as_array()
            .unwrap()
            .iter()
            .any(|b| b["source"] == "" && b["destination"] == "work.dlq")
    );
    let all = ok(&f, "/api/bindings", GUEST).await;
    assert_eq!(
        all.as_array().unwrap().len(),
        bs.as_array().unwrap().len() + 1,
        "{all:#}"
    );

    let consumer = ch
        .basic_consume(
            "work.dlq",
            ConsumeOptions {
                consumer_tag: Some("watcher".into()),
                ..ConsumeOptions::default()
            },
        )
        .unwrap();
    let cs = ok(&f, "/api/consumers", GUEST).await;
    assert_eq!(cs[0]["consumer_tag"], "watcher");
    assert_eq!(cs[0]["queue"], json!({"name": "work.dlq", "vhost": "/"}));
    assert_eq!(cs[0]["ack_required"], true);
    drop(consumer);

    let lapin = common::lapin(&f.server).await;
    let conns = ok(&f, "/api/connections", GUEST).await;
    assert_eq!(conns.as_array().unwrap().len(), 1);
    assert_eq!(conns[0]["user"], "guest");
    assert_eq!(conns[0]["vhost"], "/");
    assert_eq!(conns[0]["protocol"], "AMQP 0-9-1");
    assert_eq!(conns[0]["port"], f.server.local_addr().port());
    assert!(
        ok(&f, "/api/connections", MGMT)
            .await
            .as_array()
            .unwrap()
            .is_empty(),
        "not its own"
    );
    assert_eq!(
        ok(&f, "/api/connections", MON)
            .await
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        ok(&f, "/api/overview", GUEST).await["object_totals"]["connections"],
        1
    );
    lapin.close(200, "bye".into()).await.unwrap();

    for missing in [
        "/api/queues/%2F/nope",
        "/api/queues/nope",
        "/api/exchanges/%2F/nope",
        "/api/bindings/nope",
        "/api/nothing",
    ] {
        let r = get(&f, missing, GUEST).await;
        assert_eq!(r.status, 404, "{missing}");
        assert_eq!(r.json()["error"], "Object Not Found");
    }
    f.server.shutdown().await;
}

async fn depth(f: &Fixture, queue: &str) -> u64 {
    ok(f, &format!("/api/queues/%2F/{queue}"), GUEST).await["messages_ready"]
        .as_u64()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_settles_by_its_ack_mode_and_purge_empties() {
    let f = fixture().await;
    let (_conn, ch) = topology(&f).await;
    for i in 0..4 {
        let m = Message::new(format!("m{i}"))
            .with_content_type("text/plain")
            .with_header("n", FieldValue::I64(i));
        ch.basic_publish("", "work", PublishOptions::default(), m)
            .await
            .unwrap();
    }
    let path = "/api/queues/%2F/work/get";
    let got = |mode: &str, count: u64| json!({"count": count, "ackmode": mode, "encoding": "auto", "truncate": 50000});

    let r = post(&f, path, GUEST, got("ack_requeue_true", 2)).await;
    assert_eq!(r.status, 200);
    let msgs = r.json();
    assert_eq!(msgs.as_array().unwrap().len(), 2);
    assert_eq!(msgs[0]["payload"], "m0");
    assert_eq!(msgs[0]["payload_encoding"], "string");
    assert_eq!(msgs[0]["payload_bytes"], 2);
    assert_eq!(msgs[0]["exchange"], "");
    assert_eq!(msgs[0]["routing_key"], "work");
    assert_eq!(msgs[0]["redelivered"], false);
    assert_eq!(msgs[0]["message_count"], 3);
    assert_eq!(
        msgs[0]["properties"],
        json!({"content_type": "text/plain", "headers": {"n": 0}})
    );
    assert_eq!(depth(&f, "work").await, 4, "requeued");

    let r = post(&f, path, GUEST, got("reject_requeue_true", 1)).await;
    assert_eq!(r.json()[0]["redelivered"], true, "requeued before");
    assert_eq!(depth(&f, "work").await, 4);

    let r = post(
        &f,
        path,
        GUEST,
        json!({"count": 1, "ackmode": "ack_requeue_false", "encoding": "base64"}),
    )
    .await;
    assert_eq!(r.json()[0]["payload"], "bTA=");
    assert_eq!(r.json()[0]["payload_encoding"], "base64");
    assert_eq!(depth(&f, "work").await, 3, "taken");

    let r = post(
        &f,
        path,
        GUEST,
        json!({"count": 1, "ackmode": "reject_requeue_false", "encoding": "auto", "truncate": 1}),
    )
    .await;
    assert_eq!(r.json()[0]["payload"], "m", "truncated");
    assert_eq!(r.json()[0]["payload_bytes"], 2);
    assert_eq!(depth(&f, "work").await, 2);
    assert_eq!(depth(&f, "work.dlq").await, 1, "dead-lettered");

    let r = post(&f, path, GUEST, json!({"count": 1, "ackmode": "sometimes"})).await;
    assert_eq!(r.status, 400);
    let r = post(
        &f,
        path,
        GUEST,
        json!({"count": 1, "ackmode": "ack_requeue_true", "colour": 1}),
    )
    .await;
    assert_eq!(
        (r.status, r.json()["reason"].clone()),
        (400, json!("unknown field 'colour'"))
    );
    let echo = json!({"vhost": "/", "name": "work", "count": 1, "ackmode": "ack_requeue_true"});
    assert_eq!(
        post(&f, path, GUEST, echo).await.status,
        200,
        "the path's names are fine"
    );
    let other = json!({"vhost": "/", "name": "other", "count": 1, "ackmode": "ack_requeue_true"});
    assert_eq!(post(&f, path, GUEST, other).await.status, 400);
    let r = post(
        &f,
        "/api/queues/%2F/nope/get",
        GUEST,
        got("ack_requeue_true", 1),
    )
    .await;
    assert_eq!(r.status, 404);
    let r = post(
        &f,
        "/api/queues/%2F/work.dlq/get",
        MGMT,
        got("ack_requeue_true", 1),
    )
    .await;
    assert_eq!(r.status, 403, "mgmt may not read work.dlq");
    assert_eq!(
        post(&f, path, MGMT, got("ack_requeue_true", 1))
            .await
            .status,
        200
    );

    let r = http::request(
        f.api,
        "DELETE",
        "/api/queues/%2F/work.dlq/contents",
        MGMT,
        None,
    )
    .await;
    assert_eq!(r.status, 403);
    let r = http::request(
        f.api,
        "DELETE",
        "/api/queues/%2F/work/contents",
        GUEST,
        None,
    )
    .await;
    assert_eq!(r.status, 204);
    assert_eq!(depth(&f, "work").await, 0);
    let r = http::request(
        f.api,
        "DELETE",
        "/api/queues/%2F/nope/contents",
        GUEST,
        None,
    )
    .await;
    assert_eq!(r.status, 404);
    f.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_reports_whether_it_was_routed() {
    let f = fixture().await;
    let _topology = topology(&f).await;
    let body = |key: &str| json!({"properties": {"delivery_mode": 2, "headers": {"h": "v"}}, "routing_key": key, "payload": "hello", "payload_encoding": "string"});
    let r = post(
        &f,
        "/api/exchanges/%2F/orders/publish",
        GUEST,
        body("order.new"),
    )
    .await;
    assert_eq!((r.status, r.json()), (200, json!({"routed": true})));
    let r = post(
        &f,
        "/api/exchanges/%2F/orders/publish",
        GUEST,
        body("nothing"),
    )
    .await;
    assert_eq!(r.json(), json!({"routed": false}));
    let r = post(&f, "/api/exchanges/%2F/amq.default/publish", GUEST, json!({"properties": {}, "routing_key": "work", "payload": "aGk=", "payload_encoding": "base64"})).await;
    assert_eq!(r.json(), json!({"routed": true}));
    let got = post(
        &f,
        "/api/queues/%2F/work/get",
        GUEST,
        json!({"count": 2, "ackmode": "ack_requeue_true"}),
    )
    .await
    .json();
    assert_eq!(got[0]["payload"], "hello");
    assert_eq!(
        got[0]["properties"],
        json!({"delivery_mode": 2, "headers": {"h": "v"}})
    );
    assert_eq!(got[1]["payload"], "hi");
    let r = post(&f, "/api/exchanges/%2F/nope/publish", GUEST, body("x")).await;
    assert_eq!(r.status, 404);
    let r = post(
        &f,
        "/api/exchanges/%2F/orders/publish",
        GUEST,
        json!({"properties": {"colour": "red"}, "routing_key": "k", "payload": ""}),
    )
    .await;
    assert_eq!(
        (r.status, r.json()["reason"].clone()),
        (400, json!("unknown property 'colour'"))
    );
    let r = post(
        &f,
        "/api/exchanges/%2F/amq.default/publish",
        MGMT,
        body("work"),
    )
    .await;
    assert_eq!(r.status, 403, "mgmt may write to orders only");
    assert_eq!(
        post(
            &f,
            "/api/exchanges/%2F/orders/publish",
            MGMT,
            body("order.x")
        )
        .await
        .status,
        200
    );
    // A body is read only after the login and the virtual host's check: without a login a
    // 3 MiB body is refused as a login would be (401), on a virtual host the user may not
    // see as that (401), and only then for its size (413, past 2 MiB).
    for path in [
        "/api/exchanges/%2F/orders/publish",
        "/api/queues/%2F/work/get",
        "/api/queues/%2F/big",
    ] {
        let method = if path.ends_with("/big") {
            "PUT"
        } else {
            "POST"
        };
        let status = |auth| http::status_of_a_big_request(f.api, method, path, auth, 3 << 20);
        assert_eq!(status(None).await, 401, "{path} without a login");
        assert_eq!(status(GUEST).await, 413, "{path}");
        let elsewhere = path.replace("%2F", "other");
        let r = http::status_of_a_big_request(f.api, method, &elsewhere, MGMT, 3 << 20).await;
        assert_eq!(r, 401, "{elsewhere} on a virtual host mgmt does not see");
    }
    f.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_listed_redriven_and_removed_one_by_one() {
    let f = fixture().await;
    let (_conn, ch) = topology(&f).await;
    for i in 0..4 {
        ch.basic_publish(
            "orders",
            &format!("order.{i}"),
            PublishOptions::default(),
            Message::new(format!("m{i}")),
        )
        .await
        .unwrap();
    }
    // Reject all four: the queue dead-letters them to work.dlq with x-death.
    let r = post(
        &f,
        "/api/queues/%2F/work/get",
        GUEST,
        json!({"count": 4, "ackmode": "reject_requeue_false"}),
    )
    .await;
    assert_eq!(r.json().as_array().unwrap().len(), 4);
    assert_eq!(depth(&f, "work.dlq").await, 4);

    let list = ok(
        &f,
        "/api/stream/queues/%2F/work.dlq/messages?count=10",
        GUEST,
    )
    .await;
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 4);
    assert_eq!(list[0]["payload"], "m0");
    assert_eq!(list[0]["redelivered"], false, "listing delivers nothing");
    let death = &list[0]["properties"]["headers"]["x-death"][0];
    assert_eq!(death["reason"], "rejected");
    assert_eq!(death["queue"], "work");
    assert_eq!(
        list[1]["redrive_to"],
        json!({"exchange": "orders", "routing_key": "order.1"})
    );
    let seq = |i: usize| list[i]["seq"].as_u64().unwrap();
    assert_eq!(
        ok(
            &f,
            "/api/stream/queues/%2F/work.dlq/messages?count=1",
            GUEST
        )
        .await
        .as_array()
        .unwrap()
        .len(),
        1
    );

    // One message back to where it came from.
    let path = format!(
        "/api/stream/queues/%2F/work.dlq/messages/{}/redrive",
        seq(1)
    );
    let r = http::request(f.api, "POST", &path, GUEST, None).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["queues"], 1);
    assert_eq!(depth(&f, "work.dlq").await, 3);
    let back = post(
        &f,
        "/api/queues/%2F/work/get",
        GUEST,
        json!({"count": 1, "ackmode": "ack_requeue_false"}),
    )
    .await
    .json();
    assert_eq!(
        (back[0]["payload"].clone(), back[0]["routing_key"].clone()),
        (json!("m1"), json!("order.1"))
    );
    assert_eq!(
        back[0]["properties"]["headers"]["x-death"][0]["count"], 1,
        "its history goes along"
    );
    assert_eq!(
        http::request(f.api, "POST", &path, GUEST, None)
            .await
            .status,
        404,
        "gone"
    );

    // A re-drive that cannot go anywhere leaves the message where it is.
    let path = format!(
        "/api/stream/queues/%2F/work.dlq/messages/{}/redrive",
        seq(0)
    );
    let r = post(
        &f,
        &path,
        GUEST,
        json!({"exchange": "orders", "routing_key": "nowhere"}),
    )
    .await;
    assert_eq!(r.status, 409);
    assert_eq!(r.json()["error"], "not_redriven");
    assert_eq!(depth(&f, "work.dlq").await, 3);
    let r = post(
        &f,
        &path,
        GUEST,
        json!({"exchange": "missing", "routing_key": "k"}),
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(depth(&f, "work.dlq").await, 3);

    // One removed.
    let path = format!("/api/stream/queues/%2F/work.dlq/messages/{}", seq(2));
    assert_eq!(
        http::request(f.api, "DELETE", &path, GUEST, None)
            .await
            .status,
        204
    );
    assert_eq!(
        http::request(f.api, "DELETE", &path, GUEST, None)
            .await
            .status,
        404
    );
    assert_eq!(depth(&f, "work.dlq").await, 2);

    // The rest back.
    let r = http::request(
        f.api,
        "POST",
        "/api/stream/queues/%2F/work.dlq/redrive",
        GUEST,
        None,
    )
    .await;
    assert_eq!(r.json(), json!({"redriven": 2, "failed": []}));
    assert_eq!(depth(&f, "work.dlq").await, 0);
    assert_eq!(depth(&f, "work").await, 2);

    // A message with no origin needs a target.
    ch.basic_publish(
        "",
        "work.dlq",
        PublishOptions::default(),
        Message::new("orphan"),
    )
    .await
    .unwrap();
    let orphan = ok(&f, "/api/stream/queues/%2F/work.dlq/messages", GUEST).await;
    assert_eq!(orphan[0]["redrive_to"], Value::Null);
    let path = format!(
        "/api/stream/queues/%2F/work.dlq/messages/{}/redrive",
        orphan[0]["seq"]
    );
    assert_eq!(
        http::request(f.api, "POST", &path, GUEST, None)
            .await
            .status,
        400
    );
    let r = post(
        &f,
        &path,
        MGMT,
        json!({"exchange": "orders", "routing_key": "order.z"}),
    )
    .await;
    assert_eq!(r.status, 403, "mgmt may not read work.dlq");
    f.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redriven_persistent_message_is_moved_on_disk_too() {
    let dir = tempfile::tempdir().unwrap();
    let config = || {
        let mut c = config();
        c.vhosts = vec!["/".into()];
        c.users.retain(|u| u.name == "guest");
        c.data_dir = Some(dir.path().to_owned());
        c
    };
    let server = Server::standalone(config()).await.unwrap();
    let api = server.management_addr().unwrap();
    let amqp = common::lapin(&server).await;
    let ch = amqp.create_channel().await.unwrap();
    for q in ["work", "work.dlq"] {
        let durable = lapin::options::QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        ch.queue_declare(q.into(), durable, Default::default())
            .await
            .unwrap();
    }
    for i in 0..2 {
        let body = json!({
            "properties": {"delivery_mode": 2, "headers": {"x-original-exchange": "", "x-original-routingKey": "work"}},
            "routing_key": "work.dlq",
            "payload": format!("p{i}"),
        });
        let r = http::request(
            api,
            "POST",
            "/api/exchanges/%2F/amq.default/publish",
            GUEST,
            Some(&body),
        )
        .await;
        assert_eq!(r.json(), json!({"routed": true}));
    }
    let list = http::request(
        api,
        "GET",
        "/api/stream/queues/%2F/work.dlq/messages",
        GUEST,
        None,
    )
    .await
    .json();
    let path = format!(
        "/api/stream/queues/%2F/work.dlq/messages/{}/redrive",
        list[0]["seq"]
    );
    let r = http::request(api, "POST", &path, GUEST, None).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    amqp.close(200, "bye".into()).await.unwrap();
    server.shutdown().await;

    let server = Server::standalone(config()).await.unwrap();
    let api = server.management_addr().unwrap();
    let take = |queue: &'static str| async move {
        http::request(
            api,
            "POST",
            &format!("/api/queues/%2F/{queue}/get"),
            GUEST,
            Some(&json!({"count": 10, "ackmode": "ack_requeue_true"})),
        )
        .await
        .json()
    };
    let work = take("work").await;
    assert_eq!(work.as_array().unwrap().len(), 1, "{work}");
    assert_eq!(work[0]["payload"], "p0");
    let dlq = take("work.dlq").await;
    assert_eq!(dlq.as_array().unwrap().len(), 1, "{dlq}");
    assert_eq!(dlq[0]["payload"], "p1");
    server.shutdown().await;
}

/// RabbitMQ's alarm health checks: 200 `{"status": "ok"}`, 503 with the alarms in effect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_alarm_health_checks_answer_503_while_an_alarm_is_in_effect() {
    let f = fixture().await;
    for path in [
        "/api/health/checks/alarms",
        "/api/health/checks/local-alarms",
    ] {
        assert_eq!(get(&f, path, None).await.status, 401, "{path}");
        assert_eq!(ok(&f, path, MGMT).await, json!({"status": "ok"}), "{path}");
    }
    f.root.set_disk_alarm(true);
    for (path, reason) in [
        (
            "/api/health/checks/alarms",
            "There are alarms in effect in the cluster",
        ),
        (
            "/api/health/checks/local-alarms",
            "There are alarms in effect on the node",
        ),
    ] {
        let r = get(&f, path, MGMT).await;
        assert_eq!(r.status, 503, "{path}");
        let body = r.json();
        assert_eq!(body["status"], "failed", "{path}");
        assert_eq!(body["reason"], reason, "{path}");
        let alarms = body["alarms"].as_array().unwrap();
        assert_eq!(alarms.len(), 1, "{path}: {body}");
        assert_eq!(alarms[0]["resource"], "disk space", "{path}");
        assert!(
            alarms[0]["node"]
                .as_str()
                .unwrap()
                .starts_with("stream-broker@")
        );
    }
    // A connection that publishes meanwhile is held back: listed as `blocked`, as RabbitMQ
    // lists it, until the alarm clears.
    let amqp = common::lapin(&f.server).await;
    let ch = amqp.create_channel().await.unwrap();
    ch.confirm_select(Default::default()).await.unwrap();
    let held = ch
        .basic_publish(
            "".into(),
            "nowhere".into(),
            Default::default(),
            b"held",
            Default::default(),
        )
        .await
        .unwrap();
    let state = || async { ok(&f, "/api/connections", GUEST).await[0]["state"].clone() };
    let mut seen = state().await;
    for _ in 0..500 {
        if seen == "blocked" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        seen = state().await;
    }
    assert_eq!(seen, "blocked");
    f.root.set_disk_alarm(false);
    // Confirmed as the alarm clears, not at the client's next frame (its heartbeat, 30 s).
    tokio::time::timeout(Duration::from_secs(5), held)
        .await
        .expect("the held publish is confirmed once the alarm clears")
        .unwrap();
    assert_eq!(state().await, "running");
    amqp.close(200, "bye".into()).await.unwrap();
    assert_eq!(
        ok(&f, "/api/health/checks/alarms", MGMT).await,
        json!({"status": "ok"})
    );
    // The node's alarms, whichever virtual host has them: `mgmt` does not see `other`.
    f.other.set_disk_alarm(true);
    assert_eq!(get(&f, "/api/health/checks/alarms", MGMT).await.status, 503);
    f.other.set_disk_alarm(false);
    f.server.shutdown().await;
}

/// The store health check: 503 once a virtual host's message store has failed (a failed
/// sync, as a full or broken disk gives), naming the virtual host and the cause, to users who
/// see it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_health_check_answers_503_once_a_store_failed() {
    use std::sync::Arc;
    use stream_store::{DiskStore, FaultFs, StoreConfig};

    let fs = FaultFs::new();
    let store =
        DiskStore::open_with(Arc::new(fs.clone()), "/failing", StoreConfig::default()).unwrap();
    let root: Broker = Broker::with_store(stream_engine::BrokerConfig::default(), store).unwrap();
    let brokers: HashMap<String, Broker> = [
        ("/".to_owned(), root.clone()),
        ("other".to_owned(), Broker::new()),
    ]
    .into();
    let mut config = config();
    config.users.push(user(
        "elsewhere",
        &["management"],
        &[("other", PermissionConfig::all())],
    ));
    let server = Server::bind(config, brokers).await.unwrap();
    let api = server.management_addr().unwrap();
    let check = |auth| async move {
        http::request(api, "GET", "/api/stream/health/checks/stores", auth, None).await
    };
    let r = check(MGMT).await;
    assert_eq!((r.status, r.json()), (200, json!({"status": "ok"})));
    let r = http::request(api, "GET", "/api/health/checks/virtual-hosts", MGMT, None).await;
    assert_eq!((r.status, r.json()), (200, json!({"status": "ok"})));

    let conn = root.connect();
    let ch = conn.open_channel().unwrap();
    let durable = QueueOptions {
        durable: true,
        ..QueueOptions::default()
    };
    ch.queue_declare("kept", durable, FieldTable::new())
        .unwrap();
    ch.confirm_select().unwrap();
    fs.fail_syncs(true);
    let mut m = Message::new("lost");
    m.properties.delivery_mode = Some(2);
    let refused = ch
        .basic_publish("", "kept", PublishOptions::default(), m)
        .await;
    assert!(refused.is_err(), "{refused:?}");

    // A user who does not see `/` is not told of its store.
    let r = check(Some(("elsewhere", "pw"))).await;
    assert_eq!((r.status, r.json()), (200, json!({"status": "ok"})));
    // The aliveness test fails on the virtual host that is down, and passes on the other.
    let r = http::request(api, "GET", "/api/aliveness-test/%2F", GUEST, None).await;
    assert_eq!(r.status, 503);
    let reason = r.json()["reason"].as_str().unwrap().to_owned();
    assert!(
        reason.starts_with("the virtual host is down: its message store failed: "),
        "{reason}"
    );
    let r = http::request(
        api,
        "GET",
        "/api/aliveness-test/other",
        Some(("elsewhere", "pw")),
        None,
    )
    .await;
    assert_eq!((r.status, r.json()), (200, json!({"status": "ok"})));
    // RabbitMQ's own check: the virtual host is down. The node's status, whoever asks; the
    // names the user sees.
    for (auth, listed) in [
        (MGMT, json!(["/"])),
        (MON, json!(["/"])),
        (Some(("elsewhere", "pw")), json!([])),
    ] {
        let r = http::request(api, "GET", "/api/health/checks/virtual-hosts", auth, None).await;
        assert_eq!(r.status, 503);
        assert_eq!(
            r.json(),
            json!({"status": "failed", "reason": "Some virtual hosts are down", "virtual-hosts": listed})
        );
    }
    for auth in [MGMT, MON] {
        let r = check(auth).await;
        assert_eq!(r.status, 503);
        let body = r.json();
        assert_eq!(body["status"], "failed");
        let reason = body["reason"].as_str().unwrap();
        assert!(reason.starts_with("A message store failed"), "{reason}");
        let stores = body["stores"].as_array().unwrap();
        assert_eq!(stores.len(), 1, "{body}");
        assert_eq!(stores[0]["vhost"], "/");
        let reason = stores[0]["reason"].as_str().unwrap();
        assert!(reason.contains("injected sync failure"), "{reason}");
    }
    server.shutdown().await;
}

/// RabbitMQ's listener checks name the server's listeners (AMQP and this API), by port or by
/// protocol with RabbitMQ's aliases; the quorum and mirror checks pass on a single node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_and_node_checks_answer_as_rabbitmqs_do() {
    let f = fixture().await;
    let amqp = f.server.local_addr().port();
    for path in [
        format!("/api/health/checks/port-listener/{amqp}"),
        "/api/health/checks/protocol-listener/amqp".to_owned(),
        "/api/health/checks/node-is-quorum-critical".to_owned(),
        "/api/health/checks/node-is-mirror-sync-critical".to_owned(),
    ] {
        assert_eq!(get(&f, &path, None).await.status, 401, "{path}");
    }
    for port in [amqp, f.api.port()] {
        let path = format!("/api/health/checks/port-listener/{port}");
        assert_eq!(
            ok(&f, &path, MGMT).await,
            json!({"status": "ok", "port": port})
        );
    }
    let unused = if amqp == 1 { 2 } else { 1 };
    let r = get(
        &f,
        &format!("/api/health/checks/port-listener/{unused}"),
        MGMT,
    )
    .await;
    assert_eq!(r.status, 503);
    let body = r.json();
    assert_eq!(body["status"], "failed");
    assert_eq!(body["reason"], "No active listener");
    assert_eq!(body["missing"], unused);
    assert_eq!(body["ports"], json!([amqp, f.api.port()]));
    let r = get(&f, "/api/health/checks/port-listener/amqp", MGMT).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["reason"], "Invalid port");

    for (asked, protocol) in [
        ("amqp", "amqp"),
        ("AMQP091", "amqp"),
        ("amqp0-9-1", "amqp"),
        ("http", "http"),
        ("management", "http"),
    ] {
        let path = format!("/api/health/checks/protocol-listener/{asked}");
        assert_eq!(
            ok(&f, &path, MGMT).await,
            json!({"status": "ok", "protocol": protocol}),
            "{asked}"
        );
    }
    // No TLS listener here; AMQP 1.0 and MQTT are not spoken at all.
    for (asked, missing) in [
        ("amqps", "amqp/ssl"),
        ("amqp1.0", "amqp1.0"),
        ("mqtt", "mqtt"),
    ] {
        let r = get(
            &f,
            &format!("/api/health/checks/protocol-listener/{asked}"),
            MGMT,
        )
        .await;
        assert_eq!(r.status, 503, "{asked}");
        assert_eq!(
            r.json(),
            json!({
                "status": "failed",
                "reason": "No active listener",
                "missing": missing,
                "protocols": ["amqp", "http"],
            })
        );
    }

    for path in [
        "/api/health/checks/node-is-quorum-critical",
        "/api/health/checks/node-is-mirror-sync-critical",
    ] {
        assert_eq!(
            ok(&f, path, MGMT).await,
            json!({"status": "ok", "reason": "single node cluster"})
        );
    }
    // Without a TLS listener no certificate can expire.
    assert_eq!(
        ok(
            &f,
            "/api/health/checks/certificate-expiration/10/years",
            MGMT
        )
        .await,
        json!({"status": "ok"})
    );
    f.server.shutdown().await;
}

/// RabbitMQ's aliveness test: a message through the queue `aliveness-test` of the virtual
/// host, as the user (who needs permissions on the virtual host, and configure, write and
/// read on the queue); not held back by an alarm, as RabbitMQ's direct connections are not,
/// and neither is the API's publish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aliveness_test_sends_a_message_through_its_queue() {
    let f = fixture_with(config_with(&[
        ("no-write", [".*", "", ".*"]),
        ("no-read", [".*", ".*", ""]),
    ]))
    .await;
    assert_eq!(get(&f, "/api/aliveness-test/%2F", None).await.status, 401);
    for _ in 0..2 {
        assert_eq!(
            ok(&f, "/api/aliveness-test/%2F", GUEST).await,
            json!({"status": "ok"})
        );
    }
    // The queue stays (as RabbitMQ's does), empty.
    assert_eq!(depth(&f, "aliveness-test").await, 0);
    // `mgmt` may not configure it, `no-write` publish to the default exchange, `no-read` get
    // from it: 403. `mon` sees every virtual host but has no permissions on `/`, and `mgmt`
    // none on `other`: 401. `nowhere` does not exist: 404.
    for (auth, path, status) in [
        (MGMT, "/api/aliveness-test/%2F", 403),
        (Some(("no-write", "pw")), "/api/aliveness-test/%2F", 403),
        (Some(("no-read", "pw")), "/api/aliveness-test/%2F", 403),
        (MON, "/api/aliveness-test/%2F", 401),
        (MGMT, "/api/aliveness-test/other", 401),
        (GUEST, "/api/aliveness-test/nowhere", 404),
    ] {
        let r = get(&f, path, auth).await;
        assert_eq!(r.status, status, "{auth:?} {path}");
    }

    f.root.set_disk_alarm(true);
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        get(&f, "/api/aliveness-test/%2F", GUEST),
    )
    .await
    .expect("an alarm does not hold the test back");
    assert_eq!((r.status, r.json()), (200, json!({"status": "ok"})));
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        post(
            &f,
            "/api/exchanges/%2F/amq.default/publish",
            GUEST,
            json!({"routing_key": "aliveness-test", "payload": "by hand", "properties": {}}),
        ),
    )
    .await
    .expect("an alarm does not hold the API's publish back");
    assert_eq!((r.status, r.json()), (200, json!({"routed": true})));
    assert_eq!(depth(&f, "aliveness-test").await, 1);
    f.root.set_disk_alarm(false);
    f.server.shutdown().await;
}

async fn request(f: &Fixture, method: &str, path: &str, body: Option<Value>) -> http::Response {
    http::request(f.api, method, path, GUEST, body.as_ref()).await
}

/// Each end's bindings, as RabbitMQ's page lists them on a queue's and an exchange's page:
/// `http.x` binds `http.q` (`order.#`) and `http.fan`.
async fn binding_ends_are_listed(api: SocketAddr) {
    let get = |path: &'static str| http::request(api, "GET", path, GUEST, None);
    let ends = |response: http::Response| -> Vec<String> {
        assert_eq!(response.status, 200);
        response
            .json()
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                format!(
                    "{}>{}:{}",
                    b["source"].as_str().unwrap(),
                    b["destination"].as_str().unwrap(),
                    b["routing_key"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(
        ends(get("/api/queues/%2F/http.q/bindings").await),
        [">http.q:http.q", "http.x>http.q:order.#"]
    );
    assert_eq!(
        ends(get("/api/exchanges/%2F/http.x/bindings/source").await),
        ["http.x>http.q:order.#", "http.x>http.fan:"]
    );
    assert_eq!(
        ends(get("/api/exchanges/%2F/http.fan/bindings/destination").await),
        ["http.x>http.fan:"]
    );
    assert!(ends(get("/api/exchanges/%2F/http.x/bindings/destination").await).is_empty());
    assert!(
        ends(get("/api/exchanges/%2F/amq.default/bindings/source").await)
            .contains(&">http.q:http.q".to_owned())
    );
    for path in [
        "/api/queues/%2F/nope/bindings",
        "/api/exchanges/%2F/nope/bindings/source",
        "/api/exchanges/%2F/nope/bindings/destination",
        "/api/queues/nope/http.q/bindings",
    ] {
        assert_eq!(get(path).await.status, 404, "{path}");
    }
}

/// Queues, exchanges and bindings declared, listed and deleted over HTTP as RabbitMQ's API
/// does it (`rabbitmqadmin declare queue ...`): 201 then 204 for a declaration, 400 for an
/// inequivalent one, 404 for what is missing, 403 without configure (or write and read for a
/// binding); what HTTP declares routes messages over AMQP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_exchanges_and_bindings_are_declared_and_deleted_over_http() {
    let f = fixture_with(config_with(&[
        // May bind to `http.q` but not read from (bind from) `http.x`.
        ("binder", ["", "^http\\.q$", ""]),
        // May declare and use `dl.*` only.
        ("dl", ["^dl\\.", "^dl\\.", "^dl\\."]),
        // The same without read.
        ("dl-no-read", ["^dl\\.", "^dl\\.", ""]),
    ]))
    .await;
    let me = ok(&f, "/api/whoami", GUEST).await;
    assert_eq!(me, json!({"name": "guest", "tags": ["administrator"]}));

    // A queue: created, declared again (204), described, inequivalent (400).
    let body = json!({"durable": true, "arguments": {"x-max-length": 10}});
    let r = request(&f, "PUT", "/api/queues/%2F/http.q", Some(body.clone())).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        request(&f, "PUT", "/api/queues/%2F/http.q", Some(body))
            .await
            .status,
        204
    );
    let q = ok(&f, "/api/queues/%2F/http.q", GUEST).await;
    assert_eq!(
        (q["durable"].clone(), q["arguments"]["x-max-length"].clone()),
        (json!(true), json!(10))
    );
    let r = request(
        &f,
        "PUT",
        "/api/queues/%2F/http.q",
        Some(json!({"durable": false})),
    )
    .await;
    assert_eq!(r.status, 400);
    let reason = r.json()["reason"].as_str().unwrap().to_owned();
    assert!(reason.contains("inequivalent arg 'durable'"), "{reason}");
    // An empty body declares with the method's defaults: not durable.
    assert_eq!(
        request(&f, "PUT", "/api/queues/%2F/http.transient", None)
            .await
            .status,
        201
    );
    assert_eq!(
        ok(&f, "/api/queues/%2F/http.transient", GUEST).await["durable"],
        false
    );
    for (body, word) in [
        (json!({"durable": "yes"}), "durable"),
        (json!({"exclusive": true}), "exclusive"),
        (json!({"node": "rabbit@elsewhere"}), "node"),
        (json!({"name": "other"}), "name"),
    ] {
        let r = request(&f, "PUT", "/api/queues/%2F/http.q", Some(body)).await;
        assert_eq!(r.status, 400, "{word}");
        let reason = r.json()["reason"].as_str().unwrap().to_owned();
        assert!(reason.contains(word), "{reason}");
    }
    let node = ok(&f, "/api/overview", GUEST).await["node"].clone();
    let r = request(
        &f,
        "PUT",
        "/api/queues/%2F/http.q",
        Some(json!({"durable": true, "arguments": {"x-max-length": 10}, "node": node})),
    )
    .await;
    assert_eq!(r.status, 204);

    // An exchange, and bindings to the queue and to another exchange.
    let r = request(
        &f,
        "PUT",
        "/api/exchanges/%2F/http.x",
        Some(json!({"type": "topic", "durable": true, "arguments": {"x-note": "kept"}})),
    )
    .await;
    assert_eq!(r.status, 201);
    let declared = ok(&f, "/api/exchanges/%2F/http.x", GUEST).await;
    assert_eq!(declared["type"], "topic");
    // Arguments the broker does not act on are kept and shown, as RabbitMQ keeps them.
    assert_eq!(declared["arguments"], json!({"x-note": "kept"}));
    let exported = ok(&f, "/api/definitions/%2F", GUEST).await;
    let exported = exported["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "http.x")
        .cloned();
    assert_eq!(
        exported.map(|x| x["arguments"].clone()),
        Some(json!({"x-note": "kept"}))
    );
    let r = request(
        &f,
        "PUT",
        "/api/exchanges/%2F/http.x",
        Some(json!({"type": "fanout", "durable": true})),
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        request(
            &f,
            "PUT",
            "/api/exchanges/%2F/http.fan",
            Some(json!({"type": "fanout"}))
        )
        .await
        .status,
        201
    );
    assert_eq!(
        request(
            &f,
            "PUT",
            "/api/exchanges/%2F/amq.mine",
            Some(json!({"type": "direct"}))
        )
        .await
        .status,
        403
    );
    assert_eq!(
        request(&f, "PUT", "/api/exchanges/%2F/amq.default", None)
            .await
            .status,
        403
    );

    let r = request(
        &f,
        "POST",
        "/api/bindings/%2F/e/http.x/q/http.q",
        Some(json!({"routing_key": "order.#"})),
    )
    .await;
    assert_eq!(r.status, 201);
    assert_eq!(
        r.header("location"),
        Some("/api/bindings/%2F/e/http.x/q/http.q/order.%2523")
    );
    let r = request(
        &f,
        "POST",
        "/api/bindings/%2F/e/http.x/e/http.fan",
        Some(json!({"routing_key": "", "arguments": {"k": "v"}})),
    )
    .await;
    assert_eq!(r.status, 201);
    let to_exchange = ok(&f, "/api/bindings/%2F/e/http.x/e/http.fan", GUEST).await;
    let props = to_exchange[0]["properties_key"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(props.starts_with('~') && props.len() > 1, "{props}");
    assert_eq!(
        r.header("location").map(str::to_owned),
        Some(format!("/api/bindings/%2F/e/http.x/e/http.fan/{props}"))
    );
    let listed = ok(&f, "/api/bindings/%2F/e/http.x/q/http.q", GUEST).await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["routing_key"], "order.#");
    assert_eq!(listed[0]["destination_type"], "queue");
    // On a task of its own: this test's steps take much of a debug build's stack already.
    tokio::spawn(binding_ends_are_listed(f.api)).await.unwrap();
    for path in [
        "/api/bindings/%2F/e/nope/q/http.q",
        "/api/bindings/%2F/e/http.x/q/nope",
        "/api/bindings/%2F/e/http.x/z/http.q",
    ] {
        assert_eq!(
            request(&f, "POST", path, Some(json!({}))).await.status,
            404,
            "{path}"
        );
    }
    assert_eq!(
        request(
            &f,
            "POST",
            "/api/bindings/%2F/e/amq.default/q/http.q",
            Some(json!({}))
        )
        .await
        .status,
        403
    );

    // What HTTP declared routes over AMQP.
    let conn = f.root.connect();
    let ch = conn.open_channel().unwrap();
    let outcome = ch
        .basic_publish(
            "http.x",
            "order.new",
            PublishOptions::default(),
            Message::new("via http"),
        )
        .await
        .unwrap();
    assert!(matches!(
        outcome.status,
        stream_engine::PublishStatus::Routed(1)
    ));
    assert_eq!(depth(&f, "http.q").await, 1);

    // Another connection's exclusive queue: 405, as RabbitMQ answers.
    let exclusive = QueueOptions {
        exclusive: true,
        ..QueueOptions::default()
    };
    ch.queue_declare("http.owned", exclusive, FieldTable::new())
        .unwrap();
    for method in ["PUT", "DELETE"] {
        let r = request(&f, method, "/api/queues/%2F/http.owned", None).await;
        assert_eq!(
            r.status,
            405,
            "{method}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
    // Bindings with routing keys `` and `~` have keys of their own: each deletes its own.
    for key in ["", "~"] {
        let body = json!({"routing_key": key});
        let r = request(
            &f,
            "POST",
            "/api/bindings/%2F/e/http.x/q/http.q",
            Some(body),
        )
        .await;
        assert_eq!(r.status, 201);
    }
    let listed = ok(&f, "/api/bindings/%2F/e/http.x/q/http.q", GUEST).await;
    let keys: Vec<(String, String)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            let key = b["properties_key"].as_str().unwrap().to_owned();
            (b["routing_key"].as_str().unwrap().to_owned(), key)
        })
        .collect();
    assert_eq!(keys.len(), 3, "{listed}");
    for (routing_key, key) in keys.iter().filter(|(k, _)| k.is_empty() || k == "~") {
        let path = format!(
            "/api/bindings/%2F/e/http.x/q/http.q/{}",
            key.replace('%', "%25")
        );
        assert_eq!(
            request(&f, "DELETE", &path, None).await.status,
            204,
            "{routing_key:?}"
        );
        let left = ok(&f, "/api/bindings/%2F/e/http.x/q/http.q", GUEST).await;
        assert!(
            !left
                .as_array()
                .unwrap()
                .iter()
                .any(|b| b["routing_key"] == routing_key.as_str()),
            "{routing_key:?} still bound: {left}"
        );
    }
    assert_eq!(
        ok(&f, "/api/bindings/%2F/e/http.x/q/http.q", GUEST)
            .await
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        get(&f, "/api/bindings/%2F/e/nope/q/http.q", GUEST)
            .await
            .status,
        404
    );

    // Read on the source is needed too; and a dead-letter exchange or an alternate exchange
    // the user may not write to is refused, as over AMQP.
    let r = http::request(
        f.api,
        "POST",
        "/api/bindings/%2F/e/http.x/q/http.q",
        Some(("binder", "pw")),
        Some(&json!({})),
    )
    .await;
    assert_eq!(r.status, 403);
    assert!(
        r.json()["reason"]
            .as_str()
            .unwrap()
            .contains("exchange 'http.x'")
    );
    let dl = Some(("dl", "pw"));
    for (path, body) in [
        (
            "/api/queues/%2F/dl.q",
            json!({"arguments": {"x-dead-letter-exchange": "http.x"}}),
        ),
        (
            "/api/exchanges/%2F/dl.x",
            json!({"type": "direct", "arguments": {"alternate-exchange": "http.x"}}),
        ),
    ] {
        let r = http::request(f.api, "PUT", path, dl, Some(&body)).await;
        assert_eq!(r.status, 403, "{path}");
        assert!(
            r.json()["reason"]
                .as_str()
                .unwrap()
                .contains("exchange 'http.x'"),
            "{path}"
        );
    }
    let body = json!({"arguments": {"x-dead-letter-exchange": "dl.x"}});
    let r = http::request(f.api, "PUT", "/api/queues/%2F/dl.q", dl, Some(&body)).await;
    assert_eq!(r.status, 201);
    // Read on the queue is needed too.
    let r = http::request(
        f.api,
        "PUT",
        "/api/queues/%2F/dl.unread",
        Some(("dl-no-read", "pw")),
        Some(&body),
    )
    .await;
    assert_eq!(r.status, 403);
    assert!(
        r.json()["reason"]
            .as_str()
            .unwrap()
            .contains("queue 'dl.unread'")
    );
    // Only a declaration that creates the queue is checked, as in RabbitMQ: declaring again
    // one that an administrator made is fine.
    let pointing = json!({"arguments": {"x-dead-letter-exchange": "http.x"}});
    assert_eq!(
        request(&f, "PUT", "/api/queues/%2F/dl.made", Some(pointing.clone()))
            .await
            .status,
        201
    );
    let r = http::request(f.api, "PUT", "/api/queues/%2F/dl.made", dl, Some(&pointing)).await;
    assert_eq!(r.status, 204);

    // `mgmt` may not configure (declare, delete) nor write to `http.q` (bind): 403.
    for (method, path) in [
        ("PUT", "/api/queues/%2F/mine"),
        ("DELETE", "/api/queues/%2F/http.q"),
        ("PUT", "/api/exchanges/%2F/mine"),
        ("DELETE", "/api/exchanges/%2F/http.x"),
        ("POST", "/api/bindings/%2F/e/http.x/q/http.q"),
        ("DELETE", "/api/bindings/%2F/e/http.x/q/http.q/order.%23"),
    ] {
        let r = http::request(f.api, method, path, MGMT, Some(&json!({}))).await;
        assert_eq!(r.status, 403, "{method} {path}");
    }
    assert_eq!(
        http::request(f.api, "PUT", "/api/queues/other/x", MGMT, None)
            .await
            .status,
        401
    );

    // Unbinding, by properties_key; deleting, with conditions.
    assert_eq!(
        request(
            &f,
            "DELETE",
            "/api/bindings/%2F/e/http.x/q/http.q/nope",
            None
        )
        .await
        .status,
        404
    );
    assert_eq!(
        request(
            &f,
            "DELETE",
            "/api/bindings/%2F/e/http.x/q/http.q/order.%23",
            None
        )
        .await
        .status,
        204
    );
    assert_eq!(
        ok(&f, "/api/bindings/%2F/e/http.x/q/http.q", GUEST).await,
        json!([])
    );
    let path = format!("/api/bindings/%2F/e/http.x/e/http.fan/{props}");
    assert_eq!(request(&f, "DELETE", &path, None).await.status, 204);
    let r = request(&f, "DELETE", "/api/queues/%2F/http.q?if-empty=true", None).await;
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        request(&f, "DELETE", "/api/queues/%2F/http.q?if-empty=maybe", None)
            .await
            .status,
        400
    );
    assert_eq!(
        request(&f, "DELETE", "/api/queues/%2F/http.q?if-unused=true", None)
            .await
            .status,
        204
    );
    assert_eq!(
        request(&f, "DELETE", "/api/queues/%2F/http.q", None)
            .await
            .status,
        404
    );
    assert_eq!(f.root.queue_counts("http.q"), None);
    assert_eq!(
        request(&f, "DELETE", "/api/exchanges/%2F/http.x", None)
            .await
            .status,
        204
    );
    assert!(!f.root.exchange_exists("http.x"));
    assert_eq!(
        request(&f, "DELETE", "/api/exchanges/%2F/http.x", None)
            .await
            .status,
        404
    );
    assert_eq!(
        request(&f, "DELETE", "/api/exchanges/%2F/amq.topic", None)
            .await
            .status,
        403
    );
    drop(ch);
    drop(conn);
    f.server.shutdown().await;
}

/// RabbitMQ's definitions: exported as RabbitMQ writes them (users with their hashes,
/// virtual hosts, permissions, and every queue, exchange and binding but the default and
/// `amq.` ones), for administrators only; imported into another server, where they declare
/// the same topology; refused by name where they hold what this broker takes from its
/// configuration file, or does not support.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn definitions_export_and_import_the_topology() {
    let f = fixture().await;
    let (_conn, ch) = topology(&f).await;
    // A queue a connection owns is not exported, as in RabbitMQ.
    let exclusive = QueueOptions {
        exclusive: true,
        ..QueueOptions::default()
    };
    ch.queue_declare("owned", exclusive, FieldTable::new())
        .unwrap();
    assert_eq!(get(&f, "/api/definitions", MGMT).await.status, 401);
    assert_eq!(get(&f, "/api/definitions", MON).await.status, 401);
    let defs = ok(&f, "/api/definitions", GUEST).await;
    assert_eq!(defs["rabbit_version"], "3.10.0");
    let users: Vec<&str> = defs["users"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["name"].as_str().unwrap())
        .collect();
    assert_eq!(users, ["app", "guest", "mgmt", "mon"]);
    let guest = &defs["users"][1];
    assert_eq!(guest["hashing_algorithm"], "rabbit_password_hashing_sha256");
    assert_eq!(guest["tags"], json!(["administrator"]));
    assert_eq!(guest["password_hash"].as_str().unwrap().len(), 48);
    assert_eq!(defs["vhosts"], json!([{"name": "/"}, {"name": "other"}]));
    assert!(
        defs["permissions"].as_array().unwrap().contains(&json!({
            "user": "mgmt", "vhost": "/", "configure": "", "write": "^orders$", "read": "^work$"
        })),
        "{}",
        defs["permissions"]
    );
    let names = |section: &str| -> Vec<String> {
        defs[section]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| {
                format!(
                    "{}:{}",
                    q["vhost"].as_str().unwrap(),
                    q["name"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(names("queues"), ["/:work", "/:work.dlq", "other:elsewhere"]);
    assert_eq!(names("exchanges"), ["/:orders"]);
    assert_eq!(
        defs["bindings"],
        json!([{
            "source": "orders", "vhost": "/", "destination": "work", "destination_type": "queue",
            "routing_key": "order.#", "arguments": {}
        }])
    );
    let work = &defs["queues"][0];
    assert_eq!(work["durable"], true);
    assert_eq!(work["arguments"]["x-dead-letter-routing-key"], "work.dlq");
    for section in [
        "topic_permissions",
        "parameters",
        "global_parameters",
        "policies",
    ] {
        assert_eq!(defs[section], json!([]), "{section}");
    }

    // One virtual host: its topology, without `vhost` fields; as a download.
    let r = get(&f, "/api/definitions/%2F?download=root.json", GUEST).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-disposition"),
        Some("attachment; filename=root.json")
    );
    let root = r.json();
    assert!(root.get("users").is_none());
    assert_eq!(
        root["queues"][0],
        json!({
            "name": "work", "durable": true, "auto_delete": false,
            "arguments": {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "work.dlq"}
        })
    );
    assert_eq!(get(&f, "/api/definitions/nowhere", GUEST).await.status, 400);

    // Imported into another server: the same topology; users, virtual hosts and permissions
    // as configured are taken (the plain passwords' hashes have fresh salts).
    let g = fixture().await;
    let r = http::request(g.api, "POST", "/api/definitions", GUEST, Some(&defs)).await;
    assert_eq!(r.status, 204, "{}", String::from_utf8_lossy(&r.body));
    let again = ok(&g, "/api/definitions", GUEST).await;
    for section in ["vhosts", "permissions", "queues", "exchanges", "bindings"] {
        assert_eq!(again[section], defs[section], "{section}");
    }
    assert_eq!(g.root.queue_counts("work"), Some((0, 0)));
    // Imported again: nothing changes (declarations are idempotent).
    let r = http::request(g.api, "POST", "/api/definitions", GUEST, Some(&defs)).await;
    assert_eq!(r.status, 204);

    // One virtual host's, into another virtual host.
    let r = http::request(g.api, "POST", "/api/definitions/other", GUEST, Some(&root)).await;
    assert_eq!(r.status, 204, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(g.other.queue_counts("work.dlq"), Some((0, 0)));
    assert!(g.other.exchange_exists("orders"));

    // Refused by name, before anything is declared.
    let mut bob = defs.clone();
    bob["users"][0]["name"] = json!("bob");
    bob["queues"] = json!([{"name": "not.declared", "vhost": "/", "durable": true}]);
    let mut foreign_hash = defs.clone();
    foreign_hash["users"][1]["password_hash"] =
        json!("kI3GCqG+cq65rBQ9tiUUCREygKhmilKrZEWKSz+H0FJ1fk4/");
    let mut policy = root.clone();
    policy["policies"] =
        json!([{"name": "mirror", "pattern": ".*", "definition": {"ha-mode": "all"}}]);
    let mut named = defs.clone();
    named["global_parameters"] = json!([{"name": "cluster_name", "value": "rabbit@elsewhere"}]);
    let mut unknown = root.clone();
    unknown["explicit_vhosts"] = json!([]);
    let mut inequivalent = root.clone();
    inequivalent["queues"][0]["durable"] = json!(false);
    for (path, body, said) in [
        (
            "/api/definitions",
            &bob,
            "users[0]: no user 'bob' is configured",
        ),
        (
            "/api/definitions",
            &foreign_hash,
            "users[1]: 'guest''s password_hash is neither the configured hash nor a hash of the configured password",
        ),
        (
            "/api/definitions/%2F",
            &policy,
            "policies[0]: unsupported key 'ha-mode' in policy 'mirror'",
        ),
        (
            "/api/definitions",
            &named,
            "global_parameters are not supported",
        ),
        (
            "/api/definitions/%2F",
            &unknown,
            "unknown section 'explicit_vhosts'",
        ),
        (
            "/api/definitions/%2F",
            &defs,
            "users belong to the whole server's definitions",
        ),
        (
            "/api/definitions/%2F",
            &inequivalent,
            "queue 'work' in virtual host '/': inequivalent arg 'durable'",
        ),
    ] {
        let r = http::request(g.api, "POST", path, GUEST, Some(body)).await;
        assert_eq!(r.status, 400, "{said}");
        let reason = r.json()["reason"].as_str().unwrap().to_owned();
        assert!(reason.contains(said), "{reason} does not say {said}");
    }
    assert_eq!(g.root.queue_counts("not.declared"), None);
    // The exporting cluster's identity, which every RabbitMQ node export carries, is left
    // aside.
    let mut identified = defs.clone();
    identified["global_parameters"] =
        json!([{"name": "internal_cluster_id", "value": "rabbitmq-cluster-id-x"}]);
    let r = http::request(g.api, "POST", "/api/definitions", GUEST, Some(&identified)).await;
    assert_eq!(r.status, 204, "{}", String::from_utf8_lossy(&r.body));
    // Checked before anything is declared: a virtual host that is not configured, a name
    // AMQP cannot carry.
    for (entry, said) in [
        (
            json!({"queues": [{"name": "early", "vhost": "/", "durable": true}, {"name": "q", "vhost": "typo"}]}),
            "queues[1]: no virtual host 'typo' is configured",
        ),
        (
            json!({"queues": [{"name": "early", "vhost": "/"}, {"name": "", "vhost": "/"}]}),
            "queues[1]: a queue name is 1 to 255 bytes long",
        ),
        (
            json!({"queues": [{"name": "early", "vhost": "/"}], "bindings": [{"source": "orders", "vhost": "/", "destination": "early", "destination_type": "queue", "routing_key": "k".repeat(256)}]}),
            "bindings[0]: a routing key is at most 255 bytes long",
        ),
    ] {
        let r = http::request(g.api, "POST", "/api/definitions", GUEST, Some(&entry)).await;
        assert_eq!(r.status, 400, "{said}");
        let reason = r.json()["reason"].as_str().unwrap().to_owned();
        assert!(reason.contains(said), "{reason} does not say {said}");
        assert_eq!(g.root.queue_counts("early"), None, "{said}");
    }
    // A refusal only the broker can tell stops the import there, saying what stays.
    let partial = json!({"queues": [
        {"name": "made.first", "vhost": "/", "durable": true},
        {"name": "work", "vhost": "/", "durable": false},
        {"name": "never.made", "vhost": "/"},
    ]});
    let r = http::request(g.api, "POST", "/api/definitions", GUEST, Some(&partial)).await;
    assert_eq!(r.status, 400);
    let reason = r.json()["reason"].as_str().unwrap().to_owned();
    assert!(
        reason
            .starts_with("queues[1]: queue 'work' in virtual host '/': inequivalent arg 'durable'")
            && reason
                .ends_with("of the 3 declarations, the 1 before this one were applied and stay"),
        "{reason}"
    );
    assert_eq!(g.root.queue_counts("made.first"), Some((0, 0)));
    assert_eq!(g.root.queue_counts("never.made"), None);
    // Reserved `amq.` names are skipped, as RabbitMQ's import skips them (a server-named
    // queue a client declared, the broker's own exchanges), with the bindings to them.
    let reserved = json!({
        "queues": [{"name": "amq.gen-abc", "durable": false}, {"name": "kept", "durable": false}],
        "exchanges": [{"name": "amq.mine", "type": "direct"}],
        "bindings": [
            {"source": "amq.topic", "destination": "amq.gen-abc", "destination_type": "queue", "routing_key": "k"},
            {"source": "amq.topic", "destination": "kept", "destination_type": "queue", "routing_key": "k"},
        ],
    });
    let r = http::request(
        g.api,
        "POST",
        "/api/definitions/%2F",
        GUEST,
        Some(&reserved),
    )
    .await;
    assert_eq!(r.status, 204, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(g.root.queue_counts("amq.gen-abc"), None);
    assert!(!g.root.exchange_exists("amq.mine"));
    assert!(
        g.root
            .bindings()
            .iter()
            .any(|b| b.source == "amq.topic" && b.destination == "kept")
    );
    // A body past axum's 2 MiB (an argument of 3 MB) is taken here; nobody but an
    // administrator makes the server read one.
    let big = json!({"queues": [{"name": "big", "durable": false, "arguments": {"x-note": "n".repeat(3 << 20)}}]});
    let r = http::request(g.api, "POST", "/api/definitions/%2F", GUEST, Some(&big)).await;
    assert_eq!(
        r.status,
        204,
        "{}",
        String::from_utf8_lossy(&r.body[..r.body.len().min(300)])
    );
    assert_eq!(g.root.queue_counts("big"), Some((0, 0)));
    // Refused before the body is read: the server may close before taking all of it.
    let size = big.to_string().len();
    let status =
        http::status_of_a_big_request(g.api, "POST", "/api/definitions/%2F", MGMT, size).await;
    assert_eq!(status, 401);
    assert_eq!(
        http::request(g.api, "POST", "/api/definitions", MGMT, Some(&root))
            .await
            .status,
        401
    );
    assert_eq!(
        http::request(
            g.api,
            "POST",
            "/api/definitions/nowhere",
            GUEST,
            Some(&root)
        )
        .await
        .status,
        404
    );
    g.server.shutdown().await;
    f.server.shutdown().await;
}

/// RabbitMQ's `/api/nodes`: this one node, with the figures monitoring integrations read
/// (memory against the watermarks, the alarms, sockets, file descriptors; disk free against
/// its limit when the server watches a data directory), for monitoring users.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_gives_its_resource_figures() {
    let f = fixture().await;
    // What `other` holds puts it nearest its watermark; one AMQP connection is open.
    let conn = f.other.connect();
    let ch = conn.open_channel().unwrap();
    ch.basic_publish(
        "",
        "elsewhere",
        PublishOptions::default(),
        Message::new(vec![0u8; 4096]),
    )
    .await
    .unwrap();
    let amqp = lapin::Connection::connect(
        &format!("amqp://guest:guest@{}/%2f", f.server.local_addr()),
        Default::default(),
    )
    .await
    .unwrap();
    assert_eq!(get(&f, "/api/nodes", MGMT).await.status, 401);
    let nodes = ok(&f, "/api/nodes", MON).await;
    let list = nodes.as_array().unwrap();
    assert_eq!(list.len(), 1, "{nodes}");
    let node = &list[0];
    let name = ok(&f, "/api/overview", MON).await["node"].clone();
    assert_eq!(node["name"], name);
    assert_eq!(
        (node["running"].clone(), node["type"].clone()),
        (json!(true), json!("disc"))
    );
    assert!(f.other.memory_used() > 4096 && f.root.memory_used() == 0);
    assert_eq!(node["mem_used"], f.other.memory_used());
    assert_eq!(node["mem_limit"], f.other.memory_high_watermark().unwrap());
    assert_eq!(
        (node["mem_alarm"].clone(), node["disk_free_alarm"].clone()),
        (json!(false), json!(false))
    );
    assert_eq!(node["sockets_used"], 1);
    assert!(
        node["fd_used"].as_u64().unwrap() > 0 && node["fd_total"].as_u64().unwrap() > 0,
        "{node}"
    );
    assert!(
        node["uptime"].is_u64() && node["os_pid"].is_string(),
        "{node}"
    );
    assert!(
        node.get("disk_free").is_none(),
        "no data directory is watched: {node}"
    );
    f.other.set_disk_alarm(true);
    let path = format!("/api/nodes/{}", name.as_str().unwrap());
    assert_eq!(ok(&f, &path, MON).await["disk_free_alarm"], true);
    f.other.set_disk_alarm(false);
    assert_eq!(
        get(&f, "/api/nodes/rabbit@elsewhere", MON).await.status,
        404
    );
    amqp.close(200, "bye".into()).await.unwrap();
    drop(ch);
    drop(conn);
    f.server.shutdown().await;

    // A standalone server with a data directory: its free space and limit.
    let dir = tempfile::tempdir().unwrap();
    let mut config = config();
    config.vhosts = vec!["/".into()];
    config.data_dir = Some(dir.path().to_owned());
    let server = Server::standalone(config).await.unwrap();
    let api = server.management_addr().unwrap();
    let r = http::request(api, "GET", "/api/nodes", MON, None).await;
    let node = &r.json()[0];
    assert_eq!(node["disk_free_limit"], 50_000_000);
    assert!(node["disk_free"].as_u64().unwrap() > 0, "{node}");
    server.shutdown().await;
}

/// Users and permissions read as RabbitMQ shows them, for administrators; what would change
/// them, a virtual host or a policy answers 405 saying they come from the configuration file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_and_permissions_are_read_only() {
    let f = fixture().await;
    for path in [
        "/api/users",
        "/api/users/mgmt",
        "/api/permissions",
        "/api/permissions/%2F/mgmt",
    ] {
        assert_eq!(get(&f, path, MGMT).await.status, 401, "{path}");
        assert_eq!(get(&f, path, MON).await.status, 401, "{path}");
    }
    let users = ok(&f, "/api/users", GUEST).await;
    let names: Vec<&str> = users
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["app", "guest", "mgmt", "mon"]);
    let mon = ok(&f, "/api/users/mon", GUEST).await;
    assert_eq!(mon["tags"], json!(["monitoring"]));
    assert_eq!(mon["hashing_algorithm"], "rabbit_password_hashing_sha256");
    assert_eq!(get(&f, "/api/users/nobody", GUEST).await.status, 404);
    let all = ok(&f, "/api/permissions", GUEST).await;
    let mgmt_root = json!({"user": "mgmt", "vhost": "/", "configure": "", "write": "^orders$", "read": "^work$"});
    assert!(all.as_array().unwrap().contains(&mgmt_root), "{all}");
    assert_eq!(ok(&f, "/api/permissions/%2F/mgmt", GUEST).await, mgmt_root);
    assert_eq!(
        get(&f, "/api/permissions/other/mgmt", GUEST).await.status,
        404
    );
    assert_eq!(ok(&f, "/api/vhosts/other", GUEST).await["name"], "other");
    assert_eq!(get(&f, "/api/vhosts/nowhere", GUEST).await.status, 404);
    for (method, path) in [
        ("PUT", "/api/users/new"),
        ("DELETE", "/api/users/mgmt"),
        ("PUT", "/api/permissions/%2F/mgmt"),
        ("PUT", "/api/vhosts/new"),
        ("DELETE", "/api/vhosts/other"),
    ] {
        let r = http::request(f.api, method, path, GUEST, Some(&json!({}))).await;
        assert_eq!(r.status, 405, "{method} {path}");
        assert_eq!(r.header("allow"), Some("GET"), "{method} {path}");
        let reason = r.json()["reason"].as_str().unwrap().to_owned();
        assert!(reason.contains("configuration file"), "{reason}");
        for (auth, who) in [(None, "without a login"), (MGMT, "not an administrator")] {
            let r = http::request(f.api, method, path, auth, Some(&json!({}))).await;
            assert_eq!(r.status, 401, "{method} {path} {who}");
        }
    }
    assert_eq!(
        f.other.queue_counts("elsewhere"),
        Some((0, 0)),
        "other is still there"
    );
    f.server.shutdown().await;
}

/// A connection or channel name as a path segment (`127.0.0.1:1 -> 127.0.0.1:2 (1)`).
fn path_segment(name: &str) -> String {
    name.replace(' ', "%20")
        .replace('>', "%3E")
        .replace('(', "%28")
        .replace(')', "%29")
}

/// The listed connection whose client said nothing of itself (the raw client's).
fn raw_connection(list: &Value) -> Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|c| c["client_properties"] == json!({}))
        .unwrap_or_else(|| panic!("no raw connection in {list}"))
        .clone()
}

/// The listed connection of this name.
fn connection_named(list: &Value, name: &str) -> Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no connection {name} in {list}"))
        .clone()
}

/// Publishes `body` to `queue` through the default exchange; the confirm (in confirm mode)
/// is the caller's to await.
async fn publish(channel: &lapin::Channel, queue: &str, body: &[u8]) -> lapin::PublisherConfirm {
    channel
        .basic_publish(
            "".into(),
            queue.into(),
            Default::default(),
            body,
            Default::default(),
        )
        .await
        .unwrap()
}

/// Starts a consumer with manual acknowledgements.
async fn consume(channel: &lapin::Channel, queue: &str, tag: &str) -> lapin::Consumer {
    channel
        .basic_consume(
            queue.into(),
            tag.into(),
            Default::default(),
            Default::default(),
        )
        .await
        .unwrap()
}

/// Connections and their channels listed as RabbitMQ lists them (prefetch, unacknowledged
/// deliveries, confirm and transaction state, consumers with their channel), each user seeing
/// its own and monitors everyone's; a connection closed over HTTP by its user or an
/// administrator with 320 CONNECTION_FORCED and the request's reason, and nobody else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_and_channels_are_listed_and_closed() {
    use futures::StreamExt;
    use lapin::options::*;

    const ALICE: Option<(&str, &str)> = Some(("alice", "pw"));
    let f = fixture_with(config_with(&[("alice", [".*", ".*", ".*"])])).await;
    let amqp = common::lapin(&f.server).await;
    let confirmed = amqp.create_channel().await.unwrap();
    confirmed
        .basic_qos(7, BasicQosOptions::default())
        .await
        .unwrap();
    confirmed
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    for queue in ["chan-q", "tx-q"] {
        confirmed
            .queue_declare(queue.into(), Default::default(), Default::default())
            .await
            .unwrap();
        publish(&confirmed, queue, b"m").await.await.unwrap();
    }
    let mut consumer = consume(&confirmed, "chan-q", "chan-consumer").await;
    let _unacked = consumer.next().await.unwrap().unwrap();
    let transactional = amqp.create_channel().await.unwrap();
    transactional.tx_select().await.unwrap();
    let got = transactional
        .basic_get("tx-q".into(), BasicGetOptions::default())
        .await
        .unwrap()
        .expect("a message");
    got.ack(BasicAckOptions::default()).await.unwrap();
    publish(&transactional, "tx-q", b"held").await;
    // A round trip on the channel: the server has handled what came before it.
    transactional
        .queue_declare(
            "tx-q".into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            Default::default(),
        )
        .await
        .unwrap();
    let alice = lapin::Connection::connect(
        &common::uri(&f.server, "alice", "pw", ""),
        Default::default(),
    )
    .await
    .unwrap();
    let alice_channel = alice.create_channel().await.unwrap();
    let mut alice_events = alice.events_listener();
    // What a forced close must give back: an unacknowledged delivery, an exclusive queue.
    alice_channel
        .queue_declare("alice-q".into(), Default::default(), Default::default())
        .await
        .unwrap();
    let exclusive = QueueDeclareOptions {
        exclusive: true,
        ..Default::default()
    };
    alice_channel
        .queue_declare("alice-excl".into(), exclusive, Default::default())
        .await
        .unwrap();
    publish(&alice_channel, "alice-q", b"a").await;
    let mut alice_consumer = consume(&alice_channel, "alice-q", "alice-consumer").await;
    let _alice_unacked = alice_consumer.next().await.unwrap().unwrap();
    assert_eq!(f.root.queue_unacked("alice-q"), Some(1));
    let mut raw = common::Raw::connect(&f.server).await;
    raw.handshake(131072, 2047, 0).await;

    // Connections: what the handshake agreed and what the client said.
    let conns = ok(&f, "/api/connections", GUEST).await;
    assert_eq!(conns.as_array().unwrap().len(), 3, "{conns}");
    let ours = conns
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["user"] == "guest" && c["client_properties"]["product"] == "lapin")
        .unwrap_or_else(|| panic!("guest's lapin connection in {conns}"))
        .clone();
    let limits = common::config().limits;
    assert_eq!(ours["channels"], 2);
    assert_eq!(ours["auth_mechanism"], "PLAIN");
    assert_eq!(ours["frame_max"], limits.frame_max);
    assert_eq!(ours["channel_max"], limits.channel_max);
    assert_eq!(ours["timeout"], limits.heartbeat);
    assert_eq!(ours["user_who_performed_action"], "guest");
    let ours_name = ours["name"].as_str().unwrap().to_owned();
    let raw_conn = raw_connection(&conns);
    assert_eq!(raw_conn["channels"], 0);
    // Every octet each way, the handshake's included.
    assert_eq!(raw_conn["recv_oct"], raw.written, "{raw_conn}");
    assert_eq!(raw_conn["send_oct"], raw.read, "{raw_conn}");
    let raw_name = raw_conn["name"].as_str().unwrap().to_owned();
    let alices = ok(&f, "/api/connections", ALICE).await;
    assert_eq!(
        alices.as_array().unwrap().len(),
        1,
        "only its own: {alices}"
    );
    assert_eq!(alices[0]["user"], "alice");
    let alice_name = alices[0]["name"].as_str().unwrap().to_owned();
    assert_eq!(
        ok(&f, "/api/vhosts/%2F/connections", MON)
            .await
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert_eq!(
        ok(&f, "/api/vhosts/other/connections", GUEST).await,
        json!([])
    );
    assert_eq!(
        get(&f, "/api/vhosts/nope/connections", GUEST).await.status,
        404
    );
    let one = ok(
        &f,
        &format!("/api/connections/{}", path_segment(&ours_name)),
        MON,
    )
    .await;
    assert_eq!(one["name"], ours_name.as_str());

    // Channels: prefetch, confirms, unacknowledged deliveries, the transaction's held work.
    let channels = ok(&f, "/api/channels", GUEST).await;
    assert_eq!(channels.as_array().unwrap().len(), 3, "{channels}");
    let first = ok(
        &f,
        &format!(
            "/api/channels/{}",
            path_segment(&format!("{ours_name} (1)"))
        ),
        GUEST,
    )
    .await;
    assert_eq!(first["number"], 1);
    assert_eq!(first["connection_details"]["name"], ours_name.as_str());
    assert_eq!(first["user"], "guest");
    assert_eq!(first["vhost"], "/");
    assert_eq!(first["prefetch_count"], 7);
    assert_eq!(first["global_prefetch_count"], 0);
    assert_eq!(first["confirm"], true);
    assert_eq!(first["transactional"], false);
    assert_eq!(first["consumer_count"], 1);
    assert_eq!(first["messages_unacknowledged"], 1);
    assert_eq!(first["messages_unconfirmed"], 0);
    // Counts since the channel opened; rates over the last sample interval.
    let stats = &first["message_stats"];
    assert_eq!(
        (&stats["publish"], &stats["deliver_get"], &stats["ack"]),
        (&json!(2), &json!(1), &json!(0)),
        "{stats}"
    );
    for rate in ["publish_details", "deliver_get_details", "ack_details"] {
        assert!(stats[rate]["rate"].is_number(), "{stats}");
    }
    let consumer_details = &first["consumer_details"][0];
    assert_eq!(consumer_details["consumer_tag"], "chan-consumer");
    assert_eq!(
        consumer_details["channel_details"]["name"],
        format!("{ours_name} (1)")
    );
    let listed = ok(
        &f,
        &format!("/api/connections/{}/channels", path_segment(&ours_name)),
        GUEST,
    )
    .await;
    let second = &listed[1];
    assert_eq!(second["number"], 2);
    assert_eq!(second["transactional"], true);
    assert_eq!(second["confirm"], false);
    assert_eq!(second["messages_uncommitted"], 1);
    assert_eq!(second["acks_uncommitted"], 1);
    assert_eq!(
        second["messages_unacknowledged"], 1,
        "acked in the transaction only"
    );
    assert_eq!(
        second["message_stats"]["publish"], 0,
        "a held publish counts once committed, as RabbitMQ's"
    );
    // Committed: nothing held any more, the ack applied.
    transactional.tx_commit().await.unwrap();
    let path = format!(
        "/api/channels/{}",
        path_segment(&format!("{ours_name} (2)"))
    );
    let committed = ok(&f, &path, GUEST).await;
    assert_eq!(committed["messages_uncommitted"], 0);
    assert_eq!(committed["acks_uncommitted"], 0);
    assert_eq!(committed["messages_unacknowledged"], 0);
    let stats = &committed["message_stats"];
    assert_eq!(
        (&stats["publish"], &stats["deliver_get"], &stats["ack"]),
        (&json!(1), &json!(1), &json!(1)),
        "the get, and its ack once committed: {stats}"
    );
    let alices_channels = ok(&f, "/api/vhosts/%2F/channels", ALICE).await;
    assert_eq!(alices_channels.as_array().unwrap().len(), 1);
    assert_eq!(
        alices_channels[0]["connection_details"]["name"],
        alice_name.as_str()
    );
    let consumers = ok(&f, "/api/consumers/%2F", GUEST).await;
    let chan_consumer = consumers
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["consumer_tag"] == "chan-consumer")
        .unwrap_or_else(|| panic!("chan-consumer in {consumers}"));
    assert_eq!(
        chan_consumer["channel_details"]["connection_name"],
        ours_name.as_str()
    );
    assert_eq!(chan_consumer["channel_details"]["number"], 1);
    assert_eq!(ok(&f, "/api/consumers/other", GUEST).await, json!([]));
    for missing in [
        format!("{ours_name} (9)"),
        "no such channel".to_owned(),
        "x (1)".to_owned(),
    ] {
        let path = format!("/api/channels/{}", path_segment(&missing));
        assert_eq!(get(&f, &path, GUEST).await.status, 404, "{missing}");
    }

    // A channel the client closes, and one the server closes for an error, leave the list.
    let extra = amqp.create_channel().await.unwrap();
    assert_eq!(
        ok(
            &f,
            &format!("/api/connections/{}/channels", path_segment(&ours_name)),
            GUEST
        )
        .await
        .as_array()
        .unwrap()
        .len(),
        3
    );
    extra.close(200, "done".into()).await.unwrap();
    let failing = amqp.create_channel().await.unwrap();
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    assert!(
        failing
            .queue_declare("missing".into(), passive, Default::default())
            .await
            .is_err()
    );
    let mut numbers = Vec::new();
    for _ in 0..500 {
        let listed = ok(
            &f,
            &format!("/api/connections/{}/channels", path_segment(&ours_name)),
            GUEST,
        )
        .await;
        numbers = listed
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["number"].as_u64().unwrap())
            .collect();
        if numbers.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(numbers, [1, 2]);
    let count = connection_named(&ok(&f, "/api/connections", GUEST).await, &ours_name);
    assert_eq!(count["channels"], 2);

    // Who may see and close what.
    let theirs_channel = format!(
        "/api/channels/{}",
        path_segment(&format!("{ours_name} (1)"))
    );
    let r = get(&f, &theirs_channel, ALICE).await;
    assert_eq!(r.status, 401);
    assert_eq!(ok(&f, &theirs_channel, MON).await["number"], 1);
    let alices_consumers = ok(&f, "/api/consumers", ALICE).await;
    let tags: Vec<&str> = alices_consumers
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["consumer_tag"].as_str().unwrap())
        .collect();
    assert_eq!(tags, ["alice-consumer"], "only its own, as in RabbitMQ");
    assert_eq!(
        ok(&f, "/api/consumers", MON)
            .await
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let theirs = format!("/api/connections/{}", path_segment(&ours_name));
    for (who, method) in [(ALICE, "GET"), (ALICE, "DELETE"), (MON, "DELETE")] {
        let r = http::request(f.api, method, &theirs, who, None).await;
        assert_eq!(r.status, 401, "{who:?} {method}");
        assert_eq!(r.json()["reason"], "User not authorised to access object");
    }
    let r = get(&f, &format!("{theirs}/channels"), ALICE).await;
    assert_eq!(r.status, 401);
    assert_eq!(get(&f, "/api/connections/nope", GUEST).await.status, 404);
    assert_eq!(get(&f, "/api/connections/nope", ALICE).await.status, 401);

    // An administrator closes another's connection with a reason; a user its own.
    let r = http::request_with(
        f.api,
        "DELETE",
        &format!("/api/connections/{}", path_segment(&raw_name)),
        GUEST,
        None,
        &[("X-Reason", "maintenance")],
    )
    .await;
    assert_eq!(r.status, 204);
    assert_eq!(
        raw.expect_connection_close(320).await,
        "CONNECTION_FORCED - maintenance"
    );
    let r = http::request(
        f.api,
        "DELETE",
        &format!("/api/connections/{}", path_segment(&alice_name)),
        ALICE,
        None,
    )
    .await;
    assert_eq!(r.status, 204);
    common::eventually("alice's connection closed", || !alice.status().connected()).await;
    // What it held is given back: its delivery requeued (one ready, no consumer), its
    // exclusive queue deleted.
    assert_eq!(f.root.queue_counts("alice-q"), Some((1, 0)));
    assert_eq!(f.root.queue_unacked("alice-q"), Some(0));
    assert_eq!(f.root.queue_counts("alice-excl"), None);
    let heard = loop {
        match tokio::time::timeout(Duration::from_secs(5), alice_events.next()).await {
            Ok(Some(lapin::Event::Error(e))) => break e.to_string(),
            Ok(Some(_)) => continue,
            other => panic!("no error event for alice's connection: {other:?}"),
        }
    };
    assert!(
        heard.contains("CONNECTION_FORCED") && heard.contains("Closed via management plugin"),
        "{heard}"
    );
    assert!(
        alice_channel
            .queue_declare("after".into(), Default::default(), Default::default())
            .await
            .is_err()
    );
    let mut remaining = Vec::new();
    // Listed until its close-ok and its socket's last bytes: a few seconds at most.
    for _ in 0..1000 {
        remaining = ok(&f, "/api/connections", GUEST)
            .await
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_owned())
            .collect();
        if remaining.len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(remaining, [ours_name.as_str()]);
    // The other connection goes on.
    publish(&confirmed, "chan-q", b"after").await.await.unwrap();
    // The sampler rates the channel while it publishes (every 100 ms here).
    let path = format!(
        "/api/channels/{}",
        path_segment(&format!("{ours_name} (1)"))
    );
    let mut rate = 0.0;
    for _ in 0..200 {
        publish(&confirmed, "chan-q", b"rated").await.await.unwrap();
        rate = ok(&f, &path, GUEST).await["message_stats"]["publish_details"]["rate"]
            .as_f64()
            .unwrap();
        if rate > 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(rate > 0.0, "no publish rate after 200 publishes over 2 s");
    amqp.close(200, "bye".into()).await.unwrap();
    f.server.shutdown().await;
}

/// A fixture whose queue `flood` holds `count` messages of 16 KiB.
async fn flooded(count: usize) -> Fixture {
    let f = fixture().await;
    let conn = f.root.connect();
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("flood", QueueOptions::default(), FieldTable::new())
        .unwrap();
    let payload = vec![7u8; 16 * 1024];
    for _ in 0..count {
        ch.basic_publish(
            "",
            "flood",
            PublishOptions::default(),
            Message::new(payload.clone()),
        )
        .await
        .unwrap();
    }
    f
}

/// Asks over HTTP to close the only listed connection.
async fn close_the_only_connection(f: &Fixture) {
    let name = ok(f, "/api/connections", GUEST).await[0]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/api/connections/{}", path_segment(&name));
    let r = http::request(f.api, "DELETE", &path, GUEST, None).await;
    assert_eq!(r.status, 204);
}

/// Waits until no connection is listed, 15 s at most.
async fn until_no_connection_is_listed(f: &Fixture) {
    let started = std::time::Instant::now();
    loop {
        let listed = ok(f, "/api/connections", GUEST).await;
        if listed.as_array().unwrap().is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "still listed: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A client that stopped reading (its socket full of deliveries) is still closed by a
/// management request: the server stops its consumer at once and drops it within a few
/// seconds rather than waiting for it to read the close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_stopped_reading_is_closed_all_the_same() {
    use amq_protocol::protocol::{AMQPClass, basic};

    let f = flooded(2048).await;
    let mut raw = common::Raw::connect(&f.server).await;
    raw.handshake(131072, 2047, 0).await;
    raw.open_channel(1).await;
    raw.method(
        1,
        AMQPClass::Basic(basic::AMQPMethod::Consume(basic::Consume {
            queue: "flood".into(),
            consumer_tag: "never-reads".into(),
            no_ack: false,
            ..Default::default()
        })),
    )
    .await;
    // The server fills the socket, then waits for a reader that never comes.
    // (No prefetch: the engine hands all 32 MiB over; the server's output and the socket's
    // buffers hold a few of them.)
    common::eventually("every message delivered, none acknowledged", || {
        f.root.queue_unacked("flood") == Some(2048)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    close_the_only_connection(&f).await;
    // Torn down at once, before the close is sent: every delivery back, the consumer gone,
    // while the connection waits for its client to read.
    common::eventually("the deliveries requeued", || {
        f.root.queue_counts("flood") == Some((2048, 0)) && f.root.queue_unacked("flood") == Some(0)
    })
    .await;
    until_no_connection_is_listed(&f).await;
    drop(raw);
    f.server.shutdown().await;
}

/// A client that asks for messages (`basic.get`) and never reads the answers fills its
/// socket from the connection's own loop: a management close and the server's shutdown
/// still reach that connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_stuck_on_its_own_answers_is_closed_and_shut_down() {
    use amq_protocol::protocol::{AMQPClass, basic};

    let f = flooded(4096).await;
    // Each get's answer carries 16 KiB: 2,048 of them are far more than the server's
    // output and the socket hold, so the connection's loop waits to send.
    let stuck = || async {
        let mut raw = common::Raw::connect(&f.server).await;
        raw.handshake(131072, 2047, 0).await;
        raw.open_channel(1).await;
        for _ in 0..2048 {
            raw.method(
                1,
                AMQPClass::Basic(basic::AMQPMethod::Get(basic::Get {
                    queue: "flood".into(),
                    no_ack: true,
                })),
            )
            .await;
        }
        raw
    };
    let first = stuck().await;
    close_the_only_connection(&f).await;
    until_no_connection_is_listed(&f).await;
    drop(first);

    let _second = stuck().await;
    tokio::time::timeout(Duration::from_secs(20), f.server.shutdown())
        .await
        .expect("the shutdown is not held by a client that does not read");
}

const PM: Option<(&str, &str)> = Some(("pm", "pw"));

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_are_set_listed_applied_and_cleared_over_http() {
    let mut config = config();
    config.users.push(user(
        "pm",
        &["policymaker"],
        &[("/", PermissionConfig::all())],
    ));
    let f = fixture_with(config).await;
    let put = |path: &'static str, auth, body: Value| async move {
        http::request(f.api, "PUT", path, auth, Some(&body)).await
    };
    assert_eq!(ok(&f, "/api/policies", GUEST).await, json!([]));
    assert_eq!(ok(&f, "/api/policies", PM).await, json!([]));
    for auth in [MGMT, MON] {
        // 401 whether or not the virtual host exists: nothing is told of it.
        for path in [
            "/api/policies",
            "/api/policies/%2F/p",
            "/api/policies/nowhere/p",
        ] {
            let r = get(&f, path, auth).await;
            assert_eq!(
                r.status, 401,
                "only policymakers and administrators: {path}"
            );
            assert_eq!(r.json()["reason"], "User not authorised to access object");
        }
    }
    assert_eq!(get(&f, "/api/policies/nowhere/p", PM).await.status, 404);
    let (_conn, ch) = topology(&f).await;
    for body in ["1", "2", "3"] {
        ch.basic_publish(
            "",
            "work",
            Default::default(),
            stream_engine::Message::new(body),
        )
        .await
        .unwrap();
    }

    // Set: 201, then 204 for the same name. The queue's own dead-letter arguments win,
    // the policy's max-length applies at once.
    let short = json!({"pattern": "^work$", "definition": {"max-length": 1, "dead-letter-exchange": "nowhere"}, "priority": 2, "apply-to": "queues"});
    assert_eq!(
        put("/api/policies/%2F/short", PM, short.clone())
            .await
            .status,
        201
    );
    assert_eq!(put("/api/policies/%2F/short", PM, short).await.status, 204);
    assert_eq!(depth(&f, "work").await, 1);
    assert_eq!(
        depth(&f, "work.dlq").await,
        2,
        "the queue's own dead-letter target"
    );
    let expected = json!({"vhost": "/", "name": "short", "pattern": "^work$", "apply-to": "queues", "definition": {"dead-letter-exchange": "nowhere", "max-length": 1}, "priority": 2});
    assert_eq!(ok(&f, "/api/policies/%2F/short", GUEST).await, expected);
    let work = ok(&f, "/api/queues/%2F/work", GUEST).await;
    assert_eq!(work["policy"], "short");
    assert_eq!(work["operator_policy"], Value::Null);
    assert_eq!(work["effective_policy_definition"], expected["definition"]);
    assert_eq!(
        work["arguments"],
        json!({"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "work.dlq"})
    );
    let dlq = ok(&f, "/api/queues/%2F/work.dlq", GUEST).await;
    assert_eq!(
        (&dlq["policy"], &dlq["effective_policy_definition"]),
        (&Value::Null, &json!({}))
    );

    // A policymaker only where it has permissions; the list is by priority.
    let ttl = json!({"pattern": ".", "definition": {"message-ttl": 60000}, "priority": 1});
    assert_eq!(
        put("/api/policies/other/ttl", PM, ttl.clone()).await.status,
        401
    );
    assert_eq!(put("/api/policies/other/ttl", GUEST, ttl).await.status, 201);
    let all = ok(&f, "/api/policies", GUEST).await;
    assert_eq!(names(&all), ["ttl", "short"]);
    assert_eq!(all[0]["apply-to"], "all", "the default");
    assert_eq!(names(&ok(&f, "/api/policies", PM).await), ["short"]);
    assert_eq!(get(&f, "/api/policies/other", PM).await.status, 401);
    assert_eq!(names(&ok(&f, "/api/policies/other", GUEST).await), ["ttl"]);
    let elsewhere = ok(&f, "/api/queues/other/elsewhere", GUEST).await;
    assert_eq!(elsewhere["policy"], "ttl");

    // An exchange shows its policy only when one applies.
    let ae = json!({"pattern": "^orders$", "definition": {"alternate-exchange": "amq.fanout"}, "apply-to": "exchanges"});
    assert_eq!(put("/api/policies/%2F/ae", GUEST, ae).await.status, 201);
    assert_eq!(
        ok(&f, "/api/exchanges/%2F/orders", GUEST).await["policy"],
        "ae"
    );
    let direct = ok(&f, "/api/exchanges/%2F/amq.direct", GUEST).await;
    assert!(direct.get("policy").is_none(), "{direct}");

    // Refusals name what is wrong and change nothing.
    for (body, reason) in [
        (
            json!({"definition": {"max-length": 1}}),
            "the policy needs a 'pattern'",
        ),
        (json!({"pattern": "."}), "the policy needs a 'definition'"),
        (
            json!({"pattern": ".", "definition": {"ha-mode": "all"}}),
            "unsupported key 'ha-mode' in policy 'bad'",
        ),
        (
            json!({"pattern": ".", "definition": {"max-length": "x"}}),
            "invalid value for 'max-length' in policy 'bad': 'x' is not a non-negative integer",
        ),
        (
            json!({"pattern": "(", "definition": {"max-length": 1}}),
            "invalid pattern '(' in policy 'bad'",
        ),
        (
            json!({"pattern": ".", "definition": {}}),
            "policy 'bad' has an empty definition",
        ),
        (
            json!({"pattern": ".", "definition": {"max-length": 1}, "apply-to": "streams"}),
            "apply-to \"streams\" unrecognised",
        ),
        (
            json!({"pattern": ".", "definition": {"max-length": 1}, "priority": "7"}),
            "priority must be an integer",
        ),
        (
            json!({"pattern": ".", "definition": {"max-length": 1}, "colour": "red"}),
            "unknown field 'colour'",
        ),
    ] {
        let r = put("/api/policies/%2F/bad", GUEST, body.clone()).await;
        assert_eq!(r.status, 400, "{body}");
        let got = r.json()["reason"].as_str().unwrap().to_owned();
        assert!(got.starts_with(reason), "{body}: {got}");
    }
    let body = json!({"pattern": ".", "definition": {"max-length": 1}});
    assert_eq!(
        put("/api/policies/nowhere/p", GUEST, body).await.status,
        404
    );
    // queue-mode, common in RabbitMQ 3.x exports: taken, without effect (as x-queue-mode).
    let lazy = json!({"pattern": "^lazy\\.", "definition": {"queue-mode": "lazy"}});
    assert_eq!(put("/api/policies/%2F/lazy", GUEST, lazy).await.status, 201);
    let eager = json!({"pattern": ".", "definition": {"queue-mode": "eager"}});
    assert_eq!(put("/api/policies/%2F/bad", GUEST, eager).await.status, 400);
    assert_eq!(get(&f, "/api/policies/%2F/bad", GUEST).await.status, 404);

    // Definitions carry them both ways; a policy the broker would refuse is refused before
    // anything of the import is applied.
    let defs = ok(&f, "/api/definitions", GUEST).await;
    assert_eq!(names(&defs["policies"]), ["ae", "lazy", "short", "ttl"]);
    assert_eq!(defs["policies"][2], expected);
    let one = ok(&f, "/api/definitions/other", GUEST).await;
    assert_eq!(one["policies"][0]["vhost"], "other");
    let bad = json!({
        "queues": [{"name": "imported.q", "durable": false, "auto_delete": false, "arguments": {}}],
        "policies": [{"name": "mirrored", "pattern": ".", "definition": {"ha-mode": "all"}}],
    });
    let r = post(&f, "/api/definitions/%2F", GUEST, bad).await;
    assert_eq!(r.status, 400);
    let reason = r.json()["reason"].as_str().unwrap().to_owned();
    assert!(
        reason.starts_with("policies[0]: unsupported key 'ha-mode'"),
        "{reason}"
    );
    assert_eq!(f.root.queue_counts("imported.q"), None, "nothing applied");
    let good = json!({
        "queues": [{"name": "imported.q", "durable": false, "auto_delete": false, "arguments": {}}],
        "policies": [{"name": "imported", "pattern": "^imported\\.", "definition": {"max-length": 7}}],
    });
    assert_eq!(
        post(&f, "/api/definitions/%2F", GUEST, good).await.status,
        204
    );
    let imported = ok(&f, "/api/queues/%2F/imported.q", GUEST).await;
    assert_eq!(
        imported["policy"], "imported",
        "set before the queues are declared"
    );

    // Cleared: 204, then 404; the queue follows no policy again.
    let delete = |path: &'static str| async move {
        http::request(f.api, "DELETE", path, PM, None).await.status
    };
    assert_eq!(delete("/api/policies/%2F/short").await, 204);
    assert_eq!(delete("/api/policies/%2F/short").await, 404);
    assert_eq!(
        ok(&f, "/api/queues/%2F/work", GUEST).await["policy"],
        Value::Null
    );
    f.server.shutdown().await;
}

/// Operator policies (RabbitMQ's `/api/operator-policies`): listed to any management user
/// who sees the virtual host, set, read by name and cleared by administrators only; their
/// limits cap the policy's and the queue's own; definitions carry them as parameters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_policies_cap_queues_and_travel_in_definitions() {
    let mut config = config();
    config.users.push(user(
        "pm",
        &["policymaker"],
        &[("/", PermissionConfig::all())],
    ));
    let f = fixture_with(config).await;
    let put = |path: &'static str, auth, body: Value| async move {
        http::request(f.api, "PUT", path, auth, Some(&body)).await
    };
    for auth in [GUEST, MGMT, MON, PM] {
        assert_eq!(ok(&f, "/api/operator-policies", auth).await, json!([]));
    }
    let (_conn, ch) = topology(&f).await;
    for body in ["1", "2", "3", "4"] {
        let m = stream_engine::Message::new(body);
        ch.basic_publish("", "work", Default::default(), m)
            .await
            .unwrap();
    }
    let limit = json!({"pattern": "^work$", "definition": {"max-length": 3}});
    assert_eq!(
        put("/api/policies/%2F/limit", GUEST, limit).await.status,
        201
    );
    assert_eq!(depth(&f, "work").await, 3);

    // Only administrators set one; the queue's limit becomes the smaller.
    let cap = json!({"pattern": "^work$", "definition": {"max-length": 2, "message-ttl": 60000}, "priority": 1, "apply-to": "queues"});
    for auth in [PM, MGMT] {
        let r = put("/api/operator-policies/%2F/cap", auth, cap.clone()).await;
        assert_eq!(r.status, 401);
        assert_eq!(r.json()["reason"], "Not administrator user");
    }
    let r = put("/api/operator-policies/%2F/cap", GUEST, cap.clone()).await;
    assert_eq!(r.status, 201);
    let r = put("/api/operator-policies/%2F/cap", GUEST, cap).await;
    assert_eq!(r.status, 204);
    assert_eq!(depth(&f, "work").await, 2);
    assert_eq!(depth(&f, "work.dlq").await, 2, "dead-lettered, as maxlen");
    let expected = json!({"vhost": "/", "name": "cap", "pattern": "^work$", "apply-to": "queues", "definition": {"max-length": 2, "message-ttl": 60000}, "priority": 1});
    assert_eq!(
        ok(&f, "/api/operator-policies/%2F/cap", GUEST).await,
        expected
    );
    assert_eq!(
        get(&f, "/api/operator-policies/%2F/cap", MON).await.status,
        401
    );
    assert_eq!(
        get(&f, "/api/operator-policies/%2F/nope", GUEST)
            .await
            .status,
        404
    );
    for auth in [GUEST, MGMT, MON] {
        let list = ok(&f, "/api/operator-policies/%2F", auth).await;
        assert_eq!(list, json!([expected]));
    }
    // Listed by priority, as RabbitMQ lists them; one applying to exchanges is taken, as
    // RabbitMQ takes it, and caps no queue.
    let wide = json!({"pattern": ".", "definition": {"max-length": 1}, "priority": 0, "apply-to": "exchanges"});
    let r = put("/api/operator-policies/%2F/wide", GUEST, wide).await;
    assert_eq!(r.status, 201);
    let listed = ok(&f, "/api/operator-policies", GUEST).await;
    assert_eq!(names(&listed), ["wide", "cap"]);
    assert_eq!(depth(&f, "work.dlq").await, 2, "no queue follows it");
    let path = "/api/operator-policies/%2F/wide";
    let r = http::request(f.api, "DELETE", path, GUEST, None).await;
    assert_eq!(r.status, 204);
    assert_eq!(
        get(&f, "/api/operator-policies/other", MGMT).await.status,
        401
    );
    assert_eq!(
        get(&f, "/api/operator-policies/nowhere", GUEST)
            .await
            .status,
        404
    );
    let work = ok(&f, "/api/queues/%2F/work", GUEST).await;
    assert_eq!(
        (&work["policy"], &work["operator_policy"]),
        (&json!("limit"), &json!("cap"))
    );
    assert_eq!(
        work["effective_policy_definition"],
        json!({"max-length": 2, "message-ttl": 60000})
    );
    let dlq = ok(&f, "/api/queues/%2F/work.dlq", GUEST).await;
    assert_eq!(dlq["operator_policy"], Value::Null);

    // Only limits, refused by name.
    for (definition, reason) in [
        (
            json!({"dead-letter-exchange": "x"}),
            "unsupported key 'dead-letter-exchange' in operator policy 'bad' (this broker's operator policies set expires, max-length, max-length-bytes, message-ttl)",
        ),
        (
            json!({"delivery-limit": 3}),
            "unsupported key 'delivery-limit' in operator policy 'bad'",
        ),
        (
            json!({"max-length": -1}),
            "invalid value for 'max-length' in operator policy 'bad': '-1' is not a non-negative integer",
        ),
        (json!({}), "operator policy 'bad' has an empty definition"),
    ] {
        let body = json!({"pattern": ".", "definition": definition});
        let r = put("/api/operator-policies/%2F/bad", GUEST, body).await;
        assert_eq!(r.status, 400, "{definition}");
        let got = r.json()["reason"].as_str().unwrap().to_owned();
        assert!(got.starts_with(reason), "{definition}: {got}");
    }
    let body = json!({"pattern": ".", "definition": {"max-length": 1}});
    let r = put("/api/operator-policies/nowhere/p", GUEST, body).await;
    assert_eq!(r.status, 404);

    // Definitions: among the parameters, as RabbitMQ writes them.
    let parameter = json!({"value": {"pattern": "^work$", "definition": {"max-length": 2, "message-ttl": 60000}, "priority": 1, "apply-to": "queues"}, "vhost": "/", "component": "operator_policy", "name": "cap"});
    let defs = ok(&f, "/api/definitions", GUEST).await;
    assert_eq!(defs["parameters"], json!([parameter]));
    assert_eq!(names(&defs["policies"]), ["limit"]);
    let root = ok(&f, "/api/definitions/%2F", GUEST).await;
    assert_eq!(root["parameters"], json!([parameter]));

    // Cleared: 204, then 404; imported back from the export.
    let delete = |auth| async move {
        let path = "/api/operator-policies/%2F/cap";
        http::request(f.api, "DELETE", path, auth, None)
            .await
            .status
    };
    assert_eq!(delete(PM).await, 401);
    assert_eq!(delete(GUEST).await, 204);
    assert_eq!(delete(GUEST).await, 404);
    let work = ok(&f, "/api/queues/%2F/work", GUEST).await;
    assert_eq!(work["operator_policy"], Value::Null);
    assert_eq!(
        work["effective_policy_definition"],
        json!({"max-length": 3})
    );
    let back = json!({"parameters": [parameter]});
    let r = post(&f, "/api/definitions/%2F", GUEST, back).await;
    assert_eq!(r.status, 204);
    assert_eq!(
        ok(&f, "/api/queues/%2F/work", GUEST).await["operator_policy"],
        "cap"
    );
    // One virtual host's export, whose entries name it, imports into another, as RabbitMQ's.
    let r = post(&f, "/api/definitions/other", GUEST, root).await;
    assert_eq!(r.status, 204, "{}", String::from_utf8_lossy(&r.body));
    let moved = ok(&f, "/api/definitions/other", GUEST).await;
    assert_eq!(moved["parameters"][0]["vhost"], "other");
    assert_eq!(names(&moved["policies"]), ["limit"]);
    let work = ok(&f, "/api/queues/other/work", GUEST).await;
    let followed = (&work["policy"], &work["operator_policy"]);
    assert_eq!(followed, (&json!("limit"), &json!("cap")));
    // Other parameters, and operator policies the broker refuses, are refused before
    // anything is applied.
    let queue = json!([{"name": "not.declared", "durable": false}]);
    let mut refused_key = parameter.clone();
    refused_key["value"]["definition"] = json!({"overflow": "reject-publish"});
    let mut shovel = parameter.clone();
    shovel["component"] = json!("shovel");
    for (entry, said) in [
        (
            refused_key,
            "parameters[0]: unsupported key 'overflow' in operator policy 'cap'",
        ),
        (
            shovel,
            "parameters[0]: component 'shovel' is not supported by stream-broker",
        ),
    ] {
        let body = json!({"parameters": [entry], "queues": queue});
        let r = post(&f, "/api/definitions/%2F", GUEST, body).await;
        assert_eq!(r.status, 400);
        let reason = r.json()["reason"].as_str().unwrap().to_owned();
        assert!(reason.starts_with(said), "{reason}");
        assert_eq!(f.root.queue_counts("not.declared"), None);
    }
    f.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn definitions_are_loaded_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("definitions.json");
    let definitions = json!({
        "policies": [{"vhost": "/", "name": "loaded", "pattern": "^loaded\\.", "apply-to": "queues", "definition": {"max-length": 3}, "priority": 0}],
        "queues": [{"name": "loaded.q", "vhost": "/", "durable": true, "auto_delete": false, "arguments": {}}],
        "exchanges": [{"name": "loaded.x", "vhost": "/", "type": "topic", "durable": true, "auto_delete": false, "internal": false, "arguments": {}}],
        "bindings": [{"source": "loaded.x", "vhost": "/", "destination": "loaded.q", "destination_type": "queue", "routing_key": "k.#", "arguments": {}}],
    });
    std::fs::write(&file, definitions.to_string()).unwrap();
    let mut config = config();
    config.management = None;
    config.load_definitions = Some(file.clone());
    let root: Broker = Broker::new();
    let other: Broker = Broker::new();
    let brokers = || -> HashMap<String, Broker> {
        [
            ("/".to_owned(), root.clone()),
            ("other".to_owned(), other.clone()),
        ]
        .into()
    };
    // Twice on the same brokers (a restart with a data directory): declarations are
    // idempotent, and without [management].
    for _ in 0..2 {
        let server = Server::bind(config.clone(), brokers()).await.unwrap();
        server.shutdown().await;
    }
    let q = root
        .queues()
        .into_iter()
        .find(|q| q.name == "loaded.q")
        .unwrap();
    assert_eq!((q.durable, q.policy.as_deref()), (true, Some("loaded")));
    assert!(root.exchange_exists("loaded.x"));
    let bound = root
        .bindings()
        .into_iter()
        .any(|b| b.source == "loaded.x" && b.destination == "loaded.q" && b.routing_key == "k.#");
    assert!(bound);

    // A file it cannot import stops the start, naming the file and the entry.
    let mut refused = definitions.clone();
    refused["policies"][0]["definition"] = json!({"ha-mode": "all"});
    std::fs::write(&file, refused.to_string()).unwrap();
    let err = Server::bind(config.clone(), brokers())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("load_definitions"), "{err}");
    assert!(
        err.contains("policies[0]: unsupported key 'ha-mode'"),
        "{err}"
    );
    config.load_definitions = Some(dir.path().join("missing.json"));
    let err = Server::bind(config, brokers())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("cannot read") && err.contains("missing.json"),
        "{err}"
    );
}

/// A channel's `message_stats` counts what RabbitMQ's does: confirms sent, unroutable
/// publishes returned or dropped, deliveries with and without acks, gets (with and without
/// acks, and empty ones), redeliveries and acks; each with its rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channels_message_stats_count_confirms_returns_gets_and_redeliveries() {
    use futures::StreamExt;
    use lapin::options::*;

    let f = fixture().await;
    let amqp = common::lapin(&f.server).await;
    let ch = amqp.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    ch.queue_declare("stats-q".into(), Default::default(), Default::default())
        .await
        .unwrap();
    for body in [&b"a"[..], b"b", b"c"] {
        publish(&ch, "stats-q", body).await.await.unwrap();
    }
    // Unroutable: returned when mandatory, dropped otherwise; both confirmed.
    for mandatory in [true, false] {
        ch.basic_publish(
            "".into(),
            "nowhere".into(),
            BasicPublishOptions {
                mandatory,
                ..Default::default()
            },
            b"lost",
            Default::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    }
    // A get awaiting its ack, requeued; then got again without an ack (a redelivery).
    let a = ch
        .basic_get("stats-q".into(), BasicGetOptions::default())
        .await
        .unwrap()
        .expect("a");
    a.nack(BasicNackOptions {
        requeue: true,
        ..Default::default()
    })
    .await
    .unwrap();
    ch.basic_get("stats-q".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .expect("a again");
    // A consumer that acks takes b and c; a no-ack one on another queue takes one more.
    let mut consumer = consume(&ch, "stats-q", "stats-consumer").await;
    let b = consumer.next().await.unwrap().unwrap();
    b.ack(BasicAckOptions::default()).await.unwrap();
    let c = consumer.next().await.unwrap().unwrap();
    c.ack(BasicAckOptions::default()).await.unwrap();
    ch.basic_cancel("stats-consumer".into(), Default::default())
        .await
        .unwrap();
    ch.queue_declare("stats-free".into(), Default::default(), Default::default())
        .await
        .unwrap();
    publish(&ch, "stats-free", b"d").await.await.unwrap();
    let mut free = ch
        .basic_consume(
            "stats-free".into(),
            "stats-free".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            Default::default(),
        )
        .await
        .unwrap();
    free.next().await.unwrap().unwrap();
    // An empty get, which also makes a round trip after everything above.
    assert!(
        ch.basic_get("stats-q".into(), BasicGetOptions::default())
            .await
            .unwrap()
            .is_none()
    );

    let listed = ok(&f, "/api/channels", GUEST).await;
    let stats = &listed[0]["message_stats"];
    let expected = [
        ("publish", 6),
        ("confirm", 6),
        ("return_unroutable", 1),
        ("drop_unroutable", 1),
        ("deliver_get", 5),
        ("deliver", 2),
        ("deliver_no_ack", 1),
        ("get", 1),
        ("get_no_ack", 1),
        ("get_empty", 1),
        ("redeliver", 1),
        ("ack", 2),
    ];
    for (key, count) in expected {
        assert_eq!(stats[key], count, "{key}: {stats}");
        assert!(
            stats[format!("{key}_details")]["rate"].is_number(),
            "{key}: {stats}"
        );
    }
    f.server.shutdown().await;
}
