//! `spring.rabbitmq.connection-timeout` and `requested-heartbeat` against the real broker: an
//! address that accepts TCP but never speaks AMQP is given up after the timeout and the next
//! one is used, and the broker runs the connection with the requested heartbeat.

mod common;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use binder_amqp::AmqpBroker;
use binder_core::binder::{Binder, BinderErrorKind};
use binder_rabbit::{RabbitBinder, RabbitSettings};

/// A TCP listener that accepts connections and never answers; it lives as long as the test.
fn silent_peer() -> (TcpListener, std::thread::JoinHandle<()>, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepting = listener.try_clone().unwrap();
    let thread = std::thread::spawn(move || {
        let mut held = Vec::new();
        while let Ok((socket, _)) = accepting.accept() {
            held.push(socket);
        }
    });
    (listener, thread, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_address_is_given_up_after_the_connection_timeout() {
    if common::binder().await.is_none() {
        return;
    }
    let (_listener, _thread, port) = silent_peer();
    let silent = format!("amqp://guest:guest@127.0.0.1:{port}/%2f");
    let settings = RabbitSettings {
        uris: vec![silent.clone(), common::amqp_url()],
        connection_timeout: Duration::from_millis(300),
        ..RabbitSettings::default()
    };
    let binder = RabbitBinder::new(settings);
    let started = Instant::now();
    // A queue that does not exist: NotFound proves the broker behind the second address
    // answered.
    let answer = tokio::time::timeout(Duration::from_secs(20), binder.inspect("amq.no-such"))
        .await
        .expect("connecting gives the silent address up");
    assert!(
        matches!(answer, Err(ref e) if e.kind() == BinderErrorKind::NotFound),
        "the second address answered: {answer:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(300));

    // With the silent address alone, the binder reports it unreachable, naming the wait.
    let binder = RabbitBinder::new(RabbitSettings {
        uris: vec![silent],
        connection_timeout: Duration::from_millis(300),
        ..RabbitSettings::default()
    });
    let answer = tokio::time::timeout(Duration::from_secs(20), binder.inspect("amq.no-such"))
        .await
        .expect("connecting gives up");
    match answer {
        Err(e) if e.kind() == BinderErrorKind::Unreachable => {
            let reason = e.to_string();
            assert!(
                reason.contains("no AMQP handshake within 300ms"),
                "{reason}"
            )
        }
        other => panic!("expected unreachable, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_runs_the_connection_with_the_requested_heartbeat() {
    if common::binder().await.is_none() {
        return;
    }
    let name = common::unique("heartbeat");
    let binder = RabbitBinder::new(RabbitSettings {
        connection_name: name.clone(),
        requested_heartbeat: Duration::from_secs(7),
        ..RabbitSettings::from_uri(&common::amqp_url())
    });
    let _ = binder.inspect("amq.no-such").await;
    let listing = common::rabbitmqctl(&["list_connections", "client_properties", "timeout"]);
    let line = listing
        .lines()
        .find(|l| l.contains(&format!("\"{name}\"")))
        .unwrap_or_else(|| panic!("the connection {name} is listed:\n{listing}"));
    assert!(
        line.trim_end().ends_with("\t7"),
        "heartbeat timeout 7 s: {line}"
    );
    binder.close().await;
}

#[test]
fn the_startup_log_names_every_address_without_its_password() {
    let settings = RabbitSettings {
        uris: vec![
            "amqp://orders:s3cret@rabbit-1:5672/%2f".to_owned(),
            "amqp://rabbit-2:5673/prod".to_owned(),
        ],
        ..RabbitSettings::default()
    };
    let described = RabbitBinder::new(settings).describe();
    assert_eq!(
        described,
        "RabbitMQ at amqp://orders:***@rabbit-1:5672/%2f, amqp://rabbit-2:5673/prod"
    );
}

/// `AMQP_URL` with other credentials, or another virtual host.
fn with(user_pass: Option<&str>, vhost: Option<&str>) -> String {
    let url = common::amqp_url();
    let (scheme, rest) = url.split_once("://").expect("an AMQP URI");
    let rest = rest.split_once('@').map_or(rest, |(_, host)| host);
    let (host, path) = rest.split_once('/').unwrap_or((rest, "%2f"));
    let creds = user_pass.unwrap_or("guest:guest");
    format!("{scheme}://{creds}@{host}/{}", vhost.unwrap_or(path))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_and_unknown_virtual_hosts_fail_at_once() {
    if common::binder().await.is_none() {
        return;
    }
    for (uri, expected) in [
        (
            with(Some("nobody-here:wrong"), None),
            "ACCESS_REFUSED - Login was refused",
        ),
        (with(None, Some("no-such-vhost-for-tests")), "NOT_ALLOWED"),
    ] {
        let binder = RabbitBinder::new(RabbitSettings::from_uri(&uri));
        let answer = tokio::time::timeout(Duration::from_secs(20), binder.inspect("amq.no-such"))
            .await
            .expect("a refusal is an answer, not a wait");
        match answer {
            Err(e) if e.kind() == BinderErrorKind::Refused => {
                let reason = e.to_string();
                assert!(reason.contains(expected), "{reason}");
                assert!(!reason.contains(":wrong@"), "no password in {reason}");
            }
            other => panic!("expected a refusal for {uri}, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_with_refused_credentials_stops_starting_with_the_reason() {
    if common::binder().await.is_none() {
        return;
    }
    let config = binder_core::config::ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str("spring.cloud.stream.bindings.refused-out: {destination: refused-test}\n")
        .load()
        .unwrap();
    let binder = std::sync::Arc::new(RabbitBinder::new(RabbitSettings::from_uri(&with(
        Some("nobody-here:wrong"),
        None,
    ))));
    let started = tokio::time::timeout(
        Duration::from_secs(20),
        binder_core::runtime::App::builder(config)
            .binder("embedded", binder)
            .output("refused-out")
            .start(),
    )
    .await
    .expect("startup stops instead of waiting for ever");
    let error = started.expect_err("credentials are refused").to_string();
    assert!(
        error.contains("binding `refused-out`") && error.contains("ACCESS_REFUSED"),
        "{error}"
    );
}

#[tokio::test]
async fn a_binder_given_in_code_refuses_spring_rabbitmq_settings_it_would_ignore() {
    let config = binder_core::config::ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(
            "spring.rabbitmq.host: elsewhere\nspring.cloud.stream:\n  defaultBinder: rabbit\n  bindings.in-code-out.destination: in-code\n",
        )
        .load()
        .unwrap();
    // Refused before anything connects: the settings point nowhere.
    let binder = std::sync::Arc::new(RabbitBinder::new(RabbitSettings::from_uri(
        "amqp://guest:guest@127.0.0.1:1/%2f",
    )));
    let error = binder_core::runtime::App::builder(config)
        .binder("rabbit", binder)
        .output("in-code-out")
        .start()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("binder `rabbit` given in code")
            && error
                .contains("spring.rabbitmq.host: is set, but this rabbit binder was given in code"),
        "{error}"
    );
}
