//! TLS against a RabbitMQ node of the test's own (never the shared broker), with a TLS
//! listener that asks for client certificates (`fail_if_no_peer_cert`), and a CA and
//! certificates made by the test with the `openssl` command: messages cross over TLS with a
//! client certificate from PEM files or PKCS#12; a server certificate that does not verify
//! (another CA, another name, expired), a missing client certificate and a port that does not speak
//! TLS stop the binder with the address and the reason, as a refusal (`BinderErrorKind::Refused`) and not as an
//! unreachable broker that startup would wait for. Without RabbitMQ installed the test says
//! so and passes, unless `REQUIRE_RABBIT=1`.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use binder_amqp::AmqpBroker;
use binder_amqp::SubscriptionSpec;
use binder_core::binder::{Binder, BinderError, BinderErrorKind, Settlement};
use binder_core::message::{DeliveryMode, Message};
use binder_rabbit::{RabbitBinder, RabbitSettings};
use common::PrivateNode;

/// `openssl <args>` in `dir`; a failure fails the test with openssl's message.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("the openssl command is installed");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a server certificate for `localhost` only, a client certificate (PEM and a
/// PKCS#12 file with password `secret`) and an unrelated second CA.
fn certificates(dir: &Path) {
    for (name, subject) in [
        ("ca", "/CN=rust-stream test CA"),
        ("other-ca", "/CN=another CA"),
    ] {
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                subject,
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.pem"),
            ],
        );
    }
    std::fs::write(dir.join("server.ext"), "subjectAltName=DNS:localhost\n").unwrap();
    for (name, subject, ext) in [
        ("server", "/CN=localhost", Some("server.ext")),
        ("client", "/CN=rust-stream client", None),
    ] {
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                subject,
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
            ],
        );
        let mut args = vec![
            "x509",
            "-req",
            "-days",
            "2",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
        ];
        let (csr, pem) = (format!("{name}.csr"), format!("{name}.pem"));
        args.extend(["-in", &csr, "-out", &pem]);
        if let Some(ext) = ext {
            args.extend(["-extfile", ext]);
        }
        openssl(dir, &args);
    }
    openssl(
        dir,
        &[
            "pkcs12",
            "-export",
            "-in",
            "client.pem",
            "-inkey",
            "client.key",
            "-out",
            "client.p12",
            "-passout",
            "pass:secret",
        ],
    );
}

/// Settings read as a service reads them: `spring.rabbitmq` from this YAML.
fn settings(yaml: &str) -> RabbitSettings {
    let cfg = binder_core::config::ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(yaml)
        .load()
        .unwrap();
    let mut settings = RabbitSettings::from_config(&cfg.binder_environment("rabbit"))
        .unwrap_or_else(|e| panic!("{e}\nin:\n{yaml}"));
    settings.connection_timeout = Duration::from_secs(20);
    settings
}

/// `Ok` once connected (the broker's answer about a queue that does not exist), else the
/// error.
async fn connect(binder: &RabbitBinder) -> Result<(), BinderError> {
    let answer = tokio::time::timeout(Duration::from_secs(30), binder.inspect("amq.no-such"))
        .await
        .expect("the binder answers");
    match answer {
        Err(e) if e.kind() == BinderErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(info) => panic!("a queue that does not exist was found: {info:?}"),
    }
}

/// The refusal's text; a refusal must not look like an unreachable broker (waiting would
/// not help).
async fn refusal(binder: &RabbitBinder) -> String {
    match connect(binder).await {
        Err(e) if e.kind() == BinderErrorKind::Refused => {
            eprintln!("refused as expected: {e}");
            e.to_string()
        }
        other => panic!("expected a TLS refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_node_of_its_own() {
    let Some(node) = PrivateNode::start_tls("rust-stream-tls", |dir| {
        certificates(dir);
        let d = dir.display();
        format!(
            "ssl_options.cacertfile = {d}/ca.pem\n\
             ssl_options.certfile = {d}/server.pem\n\
             ssl_options.keyfile = {d}/server.key\n\
             ssl_options.verify = verify_peer\n\
             ssl_options.fail_if_no_peer_cert = true\n"
        )
    }) else {
        return;
    };
    let d = node.dir().display().to_string();
    let port = node.tls_port();
    let at = |host: &str, ssl: &str| {
        format!(
            "spring.rabbitmq:\n  host: {host}\n  port: {port}\n  ssl:\n    enabled: true\n{ssl}"
        )
    };
    let pem_client = format!("    certificate: {d}/client.pem\n    private-key: {d}/client.key\n");
    let trusted = format!("    trust-store: {d}/ca.pem\n");

    // Messages cross over TLS, with the client's certificate from PEM files.
    let binder = RabbitBinder::new(settings(&at("localhost", &(trusted.clone() + &pem_client))));
    let queue = common::unique("tls");
    let plan = common::queue_plan(&queue, false);
    binder.provision(&plan).await.unwrap();
    let producer = common::direct_producer(&binder, DeliveryMode::NonPersistent).await;
    producer
        .publish(&queue, Message::new("over TLS"))
        .await
        .expect("confirmed over TLS");
    let mut sub = binder
        .subscribe(SubscriptionSpec::manual_ack(queue.as_str(), 1))
        .await
        .unwrap();
    let delivery = common::next_delivery(sub.as_mut()).await;
    assert_eq!(delivery.message().payload.as_ref(), b"over TLS");
    delivery.settler.settle(Settlement::Ack).await.unwrap();
    sub.cancel().await.unwrap();
    binder.remove(&plan).await.unwrap();
    binder.close().await;

    // The client's certificate from a PKCS#12 file (Spring's key-store).
    let binder = RabbitBinder::new(settings(&at(
        "localhost",
        &format!(
            "{trusted}    key-store: {d}/client.p12\n    key-store-type: PKCS12\n    \
             key-store-password: secret\n"
        ),
    )));
    connect(&binder)
        .await
        .expect("connected with a PKCS#12 client certificate");
    binder.close().await;

    // Without a client certificate the node refuses the session.
    let binder = RabbitBinder::new(settings(&at("localhost", &trusted)));
    let err = refusal(&binder).await;
    assert!(err.contains(&format!("localhost:{port}")), "{err}");
    // The broker's alert says so, unless it was lost with the connection (see tls.rs).
    assert!(
        err.contains("certificate required") || err.contains("it wants a client certificate"),
        "{err}"
    );

    // Refused credentials are not taken for a TLS refusal.
    let binder = RabbitBinder::new(settings(&format!(
        "{}  password: wrong\n",
        at("localhost", &(trusted.clone() + &pem_client))
    )));
    match connect(&binder).await {
        Err(e) if e.kind() == BinderErrorKind::Refused => assert!(
            e.to_string().contains("ACCESS_REFUSED") && !e.to_string().contains("certificate"),
            "refused credentials: {e}"
        ),
        other => panic!("expected the broker's refusal of the credentials, got {other:?}"),
    }

    // A server certificate from a CA not trusted.
    let binder = RabbitBinder::new(settings(&at(
        "localhost",
        &format!("    trust-store: {d}/other-ca.pem\n{pem_client}"),
    )));
    let err = refusal(&binder).await;
    assert!(
        err.contains(&format!("amqps://guest:***@localhost:{port}/")),
        "the address is named: {err}"
    );
    // RabbitMQ sends its CA with its certificate, and OpenSSL names what it did not trust.
    assert!(
        err.contains(
            "the server's certificate is refused: self-signed certificate in certificate chain"
        ) || err.contains(
            "the server's certificate is refused: unable to get local issuer certificate"
        ),
        "{err}"
    );

    // A service configured so stops at startup, naming the address and the reason, instead
    // of waiting for a broker it takes for unreachable.
    binder_rabbit::link();
    let yaml = format!(
        "{}spring.cloud.stream:\n  defaultBinder: rabbit\n  bindings.out.destination: {}\n",
        at(
            "localhost",
            &format!("    trust-store: {d}/other-ca.pem\n{pem_client}")
        ),
        common::unique("tls-startup"),
    );
    let config = binder_core::config::ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(&yaml)
        .load()
        .unwrap();
    let started = tokio::time::timeout(
        Duration::from_secs(30),
        binder_core::runtime::App::builder(config)
            .output("out")
            .start(),
    )
    .await
    .expect("startup stops instead of waiting");
    let Err(err) = started else {
        panic!("a service started with an untrusted server certificate");
    };
    let err = err.to_string();
    assert!(err.contains(&format!("localhost:{port}")), "{err}");
    assert!(err.contains("the server's certificate is refused"), "{err}");

    // The server's certificate names `localhost`, not `127.0.0.1`.
    let binder = RabbitBinder::new(settings(&at("127.0.0.1", &(trusted.clone() + &pem_client))));
    let err = refusal(&binder).await;
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    assert!(
        err.contains("the server's certificate is refused: IP address mismatch"),
        "{err}"
    );
    let binder = RabbitBinder::new(settings(&at(
        "127.0.0.1",
        &format!("{trusted}{pem_client}    verify-hostname: false\n"),
    )));
    connect(&binder)
        .await
        .expect("connected without checking the name");
    binder.close().await;

    // Without validation any server certificate is taken (the system's CAs do not know it).
    let binder = RabbitBinder::new(settings(&at(
        "127.0.0.1",
        &format!("{pem_client}    validate-server-certificate: false\n"),
    )));
    connect(&binder)
        .await
        .expect("connected without validating the server's certificate");
    binder.close().await;

    // An expired server certificate: the node takes the new file once its PEM cache is
    // cleared.
    openssl(
        node.dir(),
        &[
            "x509",
            "-req",
            "-days",
            "-1",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-extfile",
            "server.ext",
            "-out",
            "server.pem",
        ],
    );
    node.ctl(&["eval", "ssl:clear_pem_cache()."]);
    let binder = RabbitBinder::new(settings(&at("localhost", &(trusted.clone() + &pem_client))));
    let err = refusal(&binder).await;
    assert!(err.contains(&format!("localhost:{port}")), "{err}");
    assert!(
        err.contains("the server's certificate is refused: certificate has expired"),
        "{err}"
    );

    // A port that does not speak TLS.
    let plain = node.port();
    let binder = RabbitBinder::new(settings(&format!(
        "spring.rabbitmq:\n  host: localhost\n  port: {plain}\n  ssl:\n    enabled: true\n{trusted}{pem_client}"
    )));
    let err = refusal(&binder).await;
    assert!(err.contains(&format!("localhost:{plain}")), "{err}");
    assert!(err.contains("TLS handshake failed"), "{err}");
}
