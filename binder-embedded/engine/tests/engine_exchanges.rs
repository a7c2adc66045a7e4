//! Exchange semantics: types, exchange-to-exchange bindings, alternate, internal, auto-delete,
//! reserved names and declaration errors.

mod common;

use common::*;
use stream_engine::*;

fn exchange(ch: &Channel, name: &str, kind: ExchangeKind) {
    ch.exchange_declare(name, kind, ExchangeOptions::default(), FieldTable::new())
        .unwrap();
}

#[tokio::test]
async fn the_default_exchange_routes_by_queue_name() {
    let (_b, _c, ch) = open();
    declare(&ch, "q");
    assert_eq!(
        publish(&ch, "", "q", "1").await.status,
        PublishStatus::Routed(1)
    );
    assert_eq!(
        publish(&ch, "", "other", "2").await.status,
        PublishStatus::Unroutable
    );
    assert_eq!(drain(&ch, "q"), ["1"]);
    let err = ch.queue_bind("q", "", "q", FieldTable::new()).unwrap_err();
    assert_eq!(err.code, ReplyCode::AccessRefused);
}

#[tokio::test]
async fn direct_fanout_topic_route_as_rabbitmq() {
    let (_b, _c, ch) = open();
    exchange(&ch, "d", ExchangeKind::Direct);
    exchange(&ch, "f", ExchangeKind::Fanout);
    exchange(&ch, "t", ExchangeKind::Topic);
    for q in ["q1", "q2"] {
        declare(&ch, q);
    }
    ch.queue_bind("q1", "d", "red", FieldTable::new()).unwrap();
    ch.queue_bind("q2", "d", "blue", FieldTable::new()).unwrap();
    ch.queue_bind("q1", "f", "ignored", FieldTable::new())
        .unwrap();
    ch.queue_bind("q2", "f", "", FieldTable::new()).unwrap();
    ch.queue_bind("q1", "t", "order.*", FieldTable::new())
        .unwrap();
    ch.queue_bind("q2", "t", "order.#", FieldTable::new())
        .unwrap();

    publish(&ch, "d", "red", "d-red").await;
    publish(&ch, "d", "green", "d-green").await;
    publish(&ch, "f", "whatever", "f").await;
    publish(&ch, "t", "order.created", "t-1").await;
    publish(&ch, "t", "order.eu.created", "t-2").await;
    assert_eq!(drain(&ch, "q1"), ["d-red", "f", "t-1"]);
    assert_eq!(drain(&ch, "q2"), ["f", "t-1", "t-2"]);
}

#[tokio::test]
async fn a_queue_bound_twice_gets_one_copy() {
    let (_b, _c, ch) = open();
    exchange(&ch, "t", ExchangeKind::Topic);
    declare(&ch, "q");
    ch.queue_bind("q", "t", "a.*", FieldTable::new()).unwrap();
    ch.queue_bind("q", "t", "#", FieldTable::new()).unwrap();
    assert_eq!(
        publish(&ch, "t", "a.b", "x").await.status,
        PublishStatus::Routed(1)
    );
    assert_eq!(drain(&ch, "q"), ["x"]);
}

#[tokio::test]
async fn headers_exchange_matches_all_and_any() {
    let (_b, _c, ch) = open();
    exchange(&ch, "h", ExchangeKind::Headers);
    declare(&ch, "all");
    declare(&ch, "any");
    let both = args(&[
        ("x-match", "all".into()),
        ("fmt", "pdf".into()),
        ("kind", "report".into()),
    ]);
    let either = args(&[
        ("x-match", "any".into()),
        ("fmt", "pdf".into()),
        ("kind", "report".into()),
    ]);
    ch.queue_bind("all", "h", "", both).unwrap();
    ch.queue_bind("any", "h", "", either).unwrap();
    let send = |fmt: &'static str, kind: &'static str| {
        let m = msg(&format!("{fmt}/{kind}"))
            .with_header("fmt", fmt)
            .with_header("kind", kind);
        ch.basic_publish("h", "", PublishOptions::default(), m)
    };
    send("pdf", "report").await.unwrap();
    send("pdf", "log").await.unwrap();
    send("zip", "log").await.unwrap();
    assert_eq!(drain(&ch, "all"), ["pdf/report"]);
    assert_eq!(drain(&ch, "any"), ["pdf/report", "pdf/log"]);
}

#[tokio::test]
async fn exchange_to_exchange_bindings_route_onwards_without_loops() {
    let (_b, _c, ch) = open();
    exchange(&ch, "front", ExchangeKind::Topic);
    exchange(&ch, "back", ExchangeKind::Fanout);
    declare(&ch, "q");
    ch.exchange_bind("back", "front", "eu.#", FieldTable::new())
        .unwrap();
    ch.exchange_bind("front", "back", "", FieldTable::new())
        .unwrap();
    ch.queue_bind("q", "back", "", FieldTable::new()).unwrap();
    publish(&ch, "front", "eu.orders", "in").await;
    publish(&ch, "front", "us.orders", "out").await;
    assert_eq!(drain(&ch, "q"), ["in"]);
    ch.exchange_unbind("back", "front", "eu.#", &FieldTable::new())
        .unwrap();
    publish(&ch, "front", "eu.orders", "gone").await;
    assert!(drain(&ch, "q").is_empty());
}

#[tokio::test]
async fn unroutable_messages_go_to_the_alternate_exchange() {
    let (_b, _c, ch) = open();
    exchange(&ch, "ae", ExchangeKind::Fanout);
    ch.exchange_declare(
        "main",
        ExchangeKind::Direct,
        ExchangeOptions::default(),
        args(&[("alternate-exchange", "ae".into())]),
    )
    .unwrap();
    declare(&ch, "routed");
    declare(&ch, "unrouted");
    ch.queue_bind("routed", "main", "k", FieldTable::new())
        .unwrap();
    ch.queue_bind("unrouted", "ae", "", FieldTable::new())
        .unwrap();
    publish(&ch, "main", "k", "a").await;
    publish(&ch, "main", "nope", "b").await;
    assert_eq!(drain(&ch, "routed"), ["a"]);
    assert_eq!(drain(&ch, "unrouted"), ["b"]);
}

#[tokio::test]
async fn internal_exchanges_refuse_direct_publishes() {
    let (_b, conn, ch) = open();
    let opts = ExchangeOptions {
        internal: true,
        ..Default::default()
    };
    ch.exchange_declare("inner", ExchangeKind::Fanout, opts, FieldTable::new())
        .unwrap();
    exchange(&ch, "outer", ExchangeKind::Fanout);
    declare(&ch, "q");
    ch.exchange_bind("inner", "outer", "", FieldTable::new())
        .unwrap();
    ch.queue_bind("q", "inner", "", FieldTable::new()).unwrap();
    publish(&ch, "outer", "", "via-outer").await;
    assert_eq!(drain(&ch, "q"), ["via-outer"]);
    let err = ch
        .basic_publish("inner", "", PublishOptions::default(), msg("x"))
        .await
        .unwrap_err();
    assert_eq!(err.code, ReplyCode::AccessRefused);
    // The error closed the channel, as in AMQP.
    let err = ch.queue_purge("q").unwrap_err();
    assert_eq!(err.code, ReplyCode::ChannelError);
    let ch2 = conn.open_channel().unwrap();
    assert_eq!(ch2.queue_purge("q").unwrap(), 0);
}

#[tokio::test]
async fn auto_delete_exchanges_go_with_their_last_binding() {
    let (broker, _c, ch) = open();
    let opts = ExchangeOptions {
        auto_delete: true,
        ..Default::default()
    };
    ch.exchange_declare("temp", ExchangeKind::Fanout, opts, FieldTable::new())
        .unwrap();
    declare(&ch, "q1");
    declare(&ch, "q2");
    ch.queue_bind("q1", "temp", "", FieldTable::new()).unwrap();
    ch.queue_bind("q2", "temp", "", FieldTable::new()).unwrap();
    ch.queue_unbind("q1", "temp", "", &FieldTable::new())
        .unwrap();
    assert!(broker.exchange_exists("temp"));
    ch.queue_delete("q2", false, false).unwrap();
    assert!(
        !broker.exchange_exists("temp"),
        "deleted with its last binding"
    );
}

#[tokio::test]
async fn predeclared_exchanges_exist_and_amq_names_are_reserved() {
    let (broker, conn, ch) = open();
    for name in [
        "amq.direct",
        "amq.fanout",
        "amq.topic",
        "amq.headers",
        "amq.match",
    ] {
        assert!(broker.exchange_exists(name), "{name}");
    }
    let passive = ExchangeOptions {
        passive: true,
        ..Default::default()
    };
    ch.exchange_declare("amq.topic", ExchangeKind::Topic, passive, FieldTable::new())
        .unwrap();
    let err = ch
        .exchange_declare(
            "amq.custom",
            ExchangeKind::Topic,
            ExchangeOptions::default(),
            FieldTable::new(),
        )
        .unwrap_err();
    assert_eq!(err.code, ReplyCode::AccessRefused);
    assert!(err.to_string().contains("reserved prefix 'amq.*'"), "{err}");
    let ch = conn.open_channel().unwrap();
    let err = ch.exchange_delete("amq.direct", false).unwrap_err();
    assert_eq!(err.code, ReplyCode::AccessRefused);
}

#[tokio::test]
async fn redeclaring_differently_fails_406_and_passive_missing_fails_404() {
    let (_b, conn, ch) = open();
    exchange(&ch, "x", ExchangeKind::Topic);
    exchange(&ch, "x", ExchangeKind::Topic); // identical: fine
    let err = ch
        .exchange_declare(
            "x",
            ExchangeKind::Fanout,
            ExchangeOptions::default(),
            FieldTable::new(),
        )
        .unwrap_err();
    assert_eq!(err.code, ReplyCode::PreconditionFailed);
    assert_eq!(err.code.code(), 406);
    assert!(
        err.to_string()
            .contains("inequivalent arg 'type' for exchange 'x' in vhost '/': received 'fanout' but current is 'topic'"),
        "{err}"
    );
    let ch = conn.open_channel().unwrap();
    let passive = ExchangeOptions {
        passive: true,
        ..Default::default()
    };
    let err = ch
        .exchange_declare("missing", ExchangeKind::Topic, passive, FieldTable::new())
        .unwrap_err();
    assert_eq!(err.code, ReplyCode::NotFound);
    assert_eq!(
        err.to_string(),
        "404 NOT_FOUND - no exchange 'missing' in vhost '/'"
    );
    let ch = conn.open_channel().unwrap();
    let err = ch
        .basic_publish("missing", "", PublishOptions::default(), msg("x"))
        .await
        .unwrap_err();
    assert_eq!(err.code, ReplyCode::NotFound);
}

#[tokio::test]
async fn exchange_delete_if_unused() {
    let (broker, conn, ch) = open();
    exchange(&ch, "x", ExchangeKind::Direct);
    declare(&ch, "q");
    ch.queue_bind("q", "x", "k", FieldTable::new()).unwrap();
    let err = ch.exchange_delete("x", true).unwrap_err();
    assert_eq!(err.code, ReplyCode::PreconditionFailed);
    let ch = conn.open_channel().unwrap();
    ch.exchange_delete("x", false).unwrap();
    assert!(!broker.exchange_exists("x"));
    ch.exchange_delete("x", false).unwrap();
}

#[test]
fn reply_codes_map_onto_amqp() {
    let codes = [
        (ReplyCode::AccessRefused, 403),
        (ReplyCode::NotFound, 404),
        (ReplyCode::ResourceLocked, 405),
        (ReplyCode::PreconditionFailed, 406),
        (ReplyCode::NotAllowed, 530),
        (ReplyCode::NotImplemented, 540),
    ];
    for (code, number) in codes {
        assert_eq!(code.code(), number);
    }
    assert!(ReplyCode::NotAllowed.is_connection_error());
    assert!(!ReplyCode::NotFound.is_connection_error());
    let _ = FieldValue::Void;
}

/// A channel publishing one route again and again reuses where the last message went; every
/// change of bindings, queues and exchanges, made on another channel, is seen by its next
/// publish (each change is followed by a publish, and the route was published twice before it,
/// so that its result is kept).
#[tokio::test]
async fn a_repeated_route_follows_every_change_of_the_topology() {
    let (_b, conn, admin) = open();
    let p = conn.open_channel().unwrap();
    let routed = |o: PublishOutcome| o.status;
    exchange(&admin, "t", ExchangeKind::Topic);
    declare(&admin, "q1");
    declare(&admin, "q2");
    admin
        .queue_bind("q1", "t", "k.*", FieldTable::new())
        .unwrap();
    assert_eq!(
        routed(publish(&p, "t", "k.a", "1").await),
        PublishStatus::Routed(1)
    );

    admin.queue_bind("q2", "t", "#", FieldTable::new()).unwrap();
    assert_eq!(
        routed(publish(&p, "t", "k.a", "2").await),
        PublishStatus::Routed(2)
    );

    admin
        .queue_unbind("q1", "t", "k.*", &FieldTable::new())
        .unwrap();
    assert_eq!(
        routed(publish(&p, "t", "k.a", "3").await),
        PublishStatus::Routed(1)
    );

    admin.queue_delete("q2", false, false).unwrap();
    assert_eq!(
        routed(publish(&p, "t", "k.a", "4").await),
        PublishStatus::Unroutable
    );

    // Routing on through another exchange, bound with its queue before the route is used.
    exchange(&admin, "onward", ExchangeKind::Fanout);
    admin
        .queue_bind("q1", "onward", "", FieldTable::new())
        .unwrap();
    assert_eq!(
        routed(publish(&p, "t", "k.a", "5").await),
        PublishStatus::Unroutable
    );
    admin
        .exchange_bind("onward", "t", "k.a", FieldTable::new())
        .unwrap();
    assert_eq!(
        routed(publish(&p, "t", "k.a", "6").await),
        PublishStatus::Routed(1)
    );
    admin
        .exchange_unbind("onward", "t", "k.a", &FieldTable::new())
        .unwrap();
    assert_eq!(
        routed(publish(&p, "t", "k.a", "7").await),
        PublishStatus::Unroutable
    );

    // The exchange deleted and declared again: its bindings went with it.
    admin
        .queue_bind("q1", "t", "k.a", FieldTable::new())
        .unwrap();
    assert_eq!(
        routed(publish(&p, "t", "k.a", "8").await),
        PublishStatus::Routed(1)
    );
    admin.exchange_delete("t", false).unwrap();
    exchange(&admin, "t", ExchangeKind::Topic);
    assert_eq!(
        routed(publish(&p, "t", "k.a", "9").await),
        PublishStatus::Unroutable
    );

    // The default exchange: a queue declared, then deleted.
    assert_eq!(
        routed(publish(&p, "", "q3", "10").await),
        PublishStatus::Unroutable
    );
    assert_eq!(
        routed(publish(&p, "", "q3", "10b").await),
        PublishStatus::Unroutable
    );
    declare(&admin, "q3");
    assert_eq!(
        routed(publish(&p, "", "q3", "11").await),
        PublishStatus::Routed(1)
    );
    admin.queue_delete("q3", false, false).unwrap();
    assert_eq!(
        routed(publish(&p, "", "q3", "12").await),
        PublishStatus::Unroutable
    );

    assert_eq!(drain(&admin, "q1"), ["1", "2", "6", "8"]);
}

/// A transaction's publish routes when it commits: an exchange deleted meanwhile routes it
/// nowhere, even on a channel that had kept where that route went.
#[tokio::test]
async fn a_committed_publish_routes_through_the_exchanges_of_the_commit() {
    let (_b, conn, admin) = open();
    let p = conn.open_channel().unwrap();
    exchange(&admin, "t", ExchangeKind::Direct);
    declare(&admin, "q");
    admin.queue_bind("q", "t", "k", FieldTable::new()).unwrap();
    publish(&p, "t", "k", "1").await;
    publish(&p, "t", "k", "2").await;
    p.tx_select().unwrap();
    assert_eq!(
        publish(&p, "t", "k", "3").await.status,
        PublishStatus::Buffered
    );
    admin.exchange_delete("t", false).unwrap();
    p.tx_commit().await.unwrap();
    assert_eq!(drain(&admin, "q"), ["1", "2"]);
}
