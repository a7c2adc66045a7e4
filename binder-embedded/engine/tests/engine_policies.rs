//! Policies: what they set on the queues and exchanges they match, how they combine with
//! declared arguments, and what setting, replacing and clearing one does at once.

mod common;

use std::time::Duration;

use common::*;
use stream_engine::*;

fn policy(
    name: &str,
    pattern: &str,
    apply_to: PolicyTarget,
    keys: &[(&str, FieldValue)],
) -> PolicyDef {
    PolicyDef {
        name: name.into(),
        pattern: pattern.into(),
        apply_to,
        priority: 0,
        definition: args(keys),
    }
}

#[tokio::test]
async fn a_dead_letter_exchange_from_a_policy_takes_rejected_messages() {
    let (broker, _c, ch) = open();
    dead_letter_target(&ch, "dlx", "dlq");
    declare(&ch, "orders");
    declare(&ch, "payments");
    broker
        .set_policy(policy(
            "dlx",
            "^orders$",
            PolicyTarget::Queues,
            &[("dead-letter-exchange", "dlx".into())],
        ))
        .unwrap();
    let infos = broker.queues();
    let policy_of = |q: &str| infos.iter().find(|i| i.name == q).unwrap().policy.clone();
    assert_eq!(policy_of("orders").as_deref(), Some("dlx"));
    assert_eq!(policy_of("payments"), None, "the pattern searches the name");
    assert_eq!(policy_of("dlq"), None);
    for q in ["orders", "payments"] {
        publish(&ch, "", q, q).await;
        let got = ch.basic_get(q, false).unwrap().unwrap().delivery;
        ch.basic_reject(got.delivery_tag, false).unwrap();
    }
    assert_eq!(drain(&ch, "dlq"), ["orders"], "payments follows no policy");

    // Cleared: rejected messages are dropped again.
    broker.clear_policy("dlx").unwrap();
    assert_eq!(broker.queues()[1].policy, None);
    publish(&ch, "", "orders", "later").await;
    let got = ch.basic_get("orders", false).unwrap().unwrap().delivery;
    ch.basic_reject(got.delivery_tag, false).unwrap();
    assert!(drain(&ch, "dlq").is_empty());
}

#[tokio::test]
async fn a_queue_s_own_argument_wins_except_for_limits_where_the_smaller_applies() {
    let (broker, _c, ch) = open();
    dead_letter_target(&ch, "own", "own.dlq");
    dead_letter_target(&ch, "theirs", "theirs.dlq");
    declare_with(
        &ch,
        "q",
        args(&[
            ("x-dead-letter-exchange", "own".into()),
            ("x-max-length", FieldValue::I32(10)),
        ]),
    );
    broker
        .set_policy(policy(
            "p",
            "^q$",
            PolicyTarget::All,
            &[
                ("dead-letter-exchange", "theirs".into()),
                ("max-length", FieldValue::I32(2)),
            ],
        ))
        .unwrap();
    for body in ["1", "2", "3"] {
        publish(&ch, "", "q", body).await;
    }
    assert_eq!(
        drain(&ch, "own.dlq"),
        ["1"],
        "max-length 2 (the policy's, smaller)"
    );
    assert!(
        drain(&ch, "theirs.dlq").is_empty(),
        "the queue's own exchange"
    );
    // The declaration is still compared with what was declared, not with the policy.
    declare_with(
        &ch,
        "q",
        args(&[
            ("x-dead-letter-exchange", "own".into()),
            ("x-max-length", FieldValue::I32(10)),
        ]),
    );
    assert_eq!(
        broker
            .queues()
            .iter()
            .find(|q| q.name == "q")
            .unwrap()
            .arguments
            .len(),
        2
    );
}

#[tokio::test]
async fn a_lower_limit_drops_the_oldest_at_once_unless_the_queue_rejects_publishes() {
    let (broker, _c, ch) = open();
    dead_letter_target(&ch, "dlx", "dlq");
    declare_with(
        &ch,
        "drop",
        args(&[("x-dead-letter-exchange", "dlx".into())]),
    );
    declare_with(
        &ch,
        "reject",
        args(&[("x-overflow", "reject-publish".into())]),
    );
    for body in ["1", "2", "3", "4"] {
        publish(&ch, "", "drop", body).await;
        publish(&ch, "", "reject", body).await;
    }
    broker
        .set_policy(policy(
            "short",
            "^(drop|reject)$",
            PolicyTarget::Queues,
            &[("max-length", FieldValue::I32(1))],
        ))
        .unwrap();
    let dead: Vec<String> = drain(&ch, "dlq");
    assert_eq!(
        dead,
        ["1", "2", "3"],
        "dead-lettered as maxlen, oldest first"
    );
    assert_eq!(broker.queue_counts("drop"), Some((1, 0)));
    assert_eq!(
        broker.queue_counts("reject"),
        Some((4, 0)),
        "nothing dropped"
    );
    // reject-publish refuses what comes now, until the queue is under the limit again.
    let confirm = conn_confirming(&broker);
    let outcome = confirm
        .basic_publish("", "reject", PublishOptions::default(), msg("5"))
        .await
        .unwrap();
    assert!(!outcome.is_ack(), "nacked: the queue is full");
    broker.clear_policy("short").unwrap();
    let outcome = confirm
        .basic_publish("", "reject", PublishOptions::default(), msg("6"))
        .await
        .unwrap();
    assert!(outcome.is_ack());
    assert_eq!(drain(&ch, "reject"), ["1", "2", "3", "4", "6"]);
    confirm.close();
}

fn conn_confirming(broker: &Broker) -> Channel {
    // The connection goes when the broker does; the channel keeps it open.
    let conn = broker.connect();
    let ch = conn.open_channel().unwrap();
    std::mem::forget(conn);
    ch.confirm_select().unwrap();
    ch
}

#[tokio::test(start_paused = true)]
async fn a_message_ttl_policy_applies_to_messages_queued_from_then_on() {
    let (broker, _c, ch) = open();
    declare(&ch, "q");
    publish(&ch, "", "q", "before").await;
    broker
        .set_policy(policy(
            "ttl",
            "^q$",
            PolicyTarget::Queues,
            &[("message-ttl", FieldValue::I32(1000))],
        ))
        .unwrap();
    publish(&ch, "", "q", "after").await;
    tokio::time::sleep(Duration::from_millis(1001)).await;
    assert_eq!(drain(&ch, "q"), ["before"]);
}

/// Checks that the unused queue `idle` is deleted `after` from now (within 100 ms), not
/// sooner; `since` says from what.
async fn expires_after(broker: &Broker, after: Duration, since: &str) {
    let margin = Duration::from_millis(100);
    tokio::time::sleep(after - margin).await;
    assert!(
        broker.queue_counts("idle").is_some(),
        "deleted early: {after:?} {since}"
    );
    tokio::time::sleep(margin * 2).await;
    assert!(
        broker.queue_counts("idle").is_none(),
        "not deleted {after:?} {since}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_expires_policy_deletes_an_unused_queue_counting_from_when_it_was_set() {
    let (broker, _c, ch) = open();
    declare(&ch, "idle");
    tokio::time::sleep(Duration::from_secs(10)).await;
    broker
        .set_policy(policy(
            "expire",
            "^idle$",
            PolicyTarget::Queues,
            &[("expires", FieldValue::I32(5000))],
        ))
        .unwrap();
    expires_after(
        &broker,
        Duration::from_secs(5),
        "from the policy, not the declaration",
    )
    .await;
}

/// A direct exchange `events` without bindings, and a fanout `ae` that routes to the queue
/// `unrouted`.
fn events_and_alternate(ch: &Channel) {
    for (name, kind) in [
        ("events", ExchangeKind::Direct),
        ("ae", ExchangeKind::Fanout),
    ] {
        ch.exchange_declare(name, kind, ExchangeOptions::default(), FieldTable::new())
            .unwrap();
    }
    declare(ch, "unrouted");
    ch.queue_bind("unrouted", "ae", "", FieldTable::new())
        .unwrap();
}

/// The policy `ae`: `events` takes `ae` as its alternate exchange.
fn events_to_alternate() -> PolicyDef {
    policy(
        "ae",
        "^events$",
        PolicyTarget::Exchanges,
        &[("alternate-exchange", "ae".into())],
    )
}

#[tokio::test]
async fn an_alternate_exchange_from_a_policy_takes_unroutable_messages() {
    let (broker, _c, ch) = open();
    events_and_alternate(&ch);
    broker.set_policy(events_to_alternate()).unwrap();
    let events = broker
        .exchanges()
        .into_iter()
        .find(|x| x.name == "events")
        .unwrap();
    assert_eq!(events.policy.as_deref(), Some("ae"));
    assert_eq!(events.alternate_exchange.as_deref(), Some("ae"));
    assert!(events.arguments.is_empty(), "the declaration is unchanged");
    publish(&ch, "events", "nobody", "lost?").await;
    assert_eq!(drain(&ch, "unrouted"), ["lost?"]);
    // A policy for queues only does not touch exchanges, nor one for exchanges queues.
    broker
        .set_policy(PolicyDef {
            priority: 5,
            ..policy(
                "queues",
                ".*",
                PolicyTarget::Queues,
                &[("max-length", FieldValue::I32(9))],
            )
        })
        .unwrap();
    let events = broker
        .exchanges()
        .into_iter()
        .find(|x| x.name == "events")
        .unwrap();
    assert_eq!(events.policy.as_deref(), Some("ae"));
    assert_eq!(broker.queues()[0].policy.as_deref(), Some("queues"));
    broker
        .set_policy(policy(
            "every",
            ".*",
            PolicyTarget::Exchanges,
            &[("alternate-exchange", "ae".into())],
        ))
        .unwrap();
    let default = &broker.exchanges()[0];
    assert_eq!(
        (default.name.as_str(), default.policy.as_deref()),
        ("", Some("every"))
    );
    publish(&ch, "", "no-such-queue", "dropped").await;
    assert!(
        drain(&ch, "unrouted").is_empty(),
        "the default exchange has no alternate"
    );
    broker.clear_policy("every").unwrap();
    broker.clear_policy("ae").unwrap();
    publish(&ch, "events", "nobody", "dropped").await;
    assert!(drain(&ch, "unrouted").is_empty());
    // Redeclared without arguments: equivalent (a policy is not part of the declaration).
    ch.exchange_declare(
        "events",
        ExchangeKind::Direct,
        ExchangeOptions::default(),
        FieldTable::new(),
    )
    .unwrap();
}

#[tokio::test]
async fn queues_declared_later_and_exclusive_ones_follow_policies_too() {
    let (broker, conn, ch) = open();
    broker
        .set_policy(policy(
            "two",
            "^(late|mine)$",
            PolicyTarget::All,
            &[("max-length", FieldValue::I32(2))],
        ))
        .unwrap();
    declare(&ch, "late");
    ch.queue_declare(
        "mine",
        QueueOptions {
            exclusive: true,
            ..Default::default()
        },
        FieldTable::new(),
    )
    .unwrap();
    for q in ["late", "mine"] {
        for body in ["1", "2", "3"] {
            publish(&ch, "", q, body).await;
        }
        assert_eq!(drain(&ch, q), ["2", "3"], "{q}");
    }
    drop(conn);
}

#[tokio::test]
async fn bad_policies_are_refused_by_name_and_change_nothing() {
    let (broker, _c, ch) = open();
    declare(&ch, "q");
    let bad = [
        policy(
            "p",
            "(",
            PolicyTarget::All,
            &[("max-length", FieldValue::I32(1))],
        ),
        policy("p", ".", PolicyTarget::All, &[("ha-mode", "all".into())]),
        policy(
            "p",
            ".",
            PolicyTarget::All,
            &[("federation-upstream-set", "all".into())],
        ),
        policy(
            "p",
            ".",
            PolicyTarget::All,
            &[("message-ttl", FieldValue::I32(-1))],
        ),
        policy("p", ".", PolicyTarget::All, &[]),
    ];
    for def in bad {
        let err = broker.set_policy(def.clone()).unwrap_err();
        assert_eq!(err.code, ReplyCode::PreconditionFailed, "{def:?}");
        assert!(err.text.contains("policy 'p'"), "{err}");
    }
    assert!(broker.policies().is_empty());
    assert_eq!(broker.queues()[0].policy, None);
}

#[tokio::test]
async fn an_alternate_exchange_set_after_routes_were_kept_takes_the_next_unroutable_message() {
    let (broker, _c, ch) = open();
    events_and_alternate(&ch);
    // The same key twice: the engine keeps the (empty) route of a key-routed exchange.
    publish(&ch, "events", "nobody", "1").await;
    publish(&ch, "events", "nobody", "2").await;
    broker.set_policy(events_to_alternate()).unwrap();
    publish(&ch, "events", "nobody", "3").await;
    assert_eq!(
        drain(&ch, "unrouted"),
        ["3"],
        "the kept route was dropped with the change"
    );
}

#[tokio::test]
async fn a_byte_limit_with_reject_publish_dlx_from_a_policy_dead_letters_what_it_refuses() {
    let (broker, _c, ch) = open();
    dead_letter_target(&ch, "dlx", "dlq");
    declare_with(&ch, "q", args(&[("x-dead-letter-exchange", "dlx".into())]));
    broker
        .set_policy(policy(
            "bytes",
            "^q$",
            PolicyTarget::Queues,
            &[
                ("max-length-bytes", FieldValue::I32(5)),
                ("overflow", "reject-publish-dlx".into()),
            ],
        ))
        .unwrap();
    let confirm = conn_confirming(&broker);
    for body in ["abc", "de", "f"] {
        let outcome = confirm
            .basic_publish("", "q", PublishOptions::default(), msg(body))
            .await
            .unwrap();
        assert_eq!(outcome.is_ack(), body != "f", "{body}");
    }
    assert_eq!(drain(&ch, "q"), ["abc", "de"]);
    assert_eq!(drain(&ch, "dlq"), ["f"]);
    confirm.close();
}

#[tokio::test(start_paused = true)]
async fn a_queue_whose_policy_changes_counts_its_expiry_from_the_change() {
    let (broker, _c, ch) = open();
    declare(&ch, "idle");
    let expire = |name: &str, ttl: i32| {
        policy(
            name,
            "^idle$",
            PolicyTarget::Queues,
            &[
                ("expires", FieldValue::I32(5000)),
                ("message-ttl", FieldValue::I32(ttl)),
            ],
        )
    };
    broker.set_policy(expire("expire", 1000)).unwrap();
    tokio::time::sleep(Duration::from_millis(4000)).await;
    // The same expiry, another policy: RabbitMQ starts the expiry again.
    assert!(
        !broker.set_policy(expire("expire.too", 2000)).unwrap(),
        "a new one"
    );
    broker
        .set_policy(PolicyDef {
            priority: 1,
            ..expire("expire.too", 2000)
        })
        .unwrap();
    tokio::time::sleep(Duration::from_millis(4000)).await;
    assert!(broker.queue_counts("idle").is_some(), "5 s from the change");
    // The same policy again with another pattern that still matches: a change all the same
    // (RabbitMQ compares the whole policy).
    let widened = PolicyDef {
        pattern: "^idl".into(),
        priority: 1,
        ..expire("expire.too", 2000)
    };
    assert!(broker.set_policy(widened).unwrap());
    expires_after(&broker, Duration::from_secs(5), "from the second change").await;
}

#[tokio::test]
async fn setting_a_policy_says_whether_it_replaced_one() {
    let (broker, _c, _ch) = open();
    let p = policy(
        "p",
        ".",
        PolicyTarget::All,
        &[("max-length", FieldValue::I32(1))],
    );
    assert!(!broker.set_policy(p.clone()).unwrap());
    assert!(broker.set_policy(p).unwrap());
}
