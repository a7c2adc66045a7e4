//! `spring.embedded.listen` with a `[tls]` table in `spring.embedded.server-config`: the
//! binder's broker is served over TLS too (the server's own code path, tested in depth in
//! `server/tests/tls.rs`), and a TLS file that cannot be used stops the binder naming the
//! setting, the key and the path.

use std::time::Duration;

use binder_core::binder::Binder;
use binder_core::config::ConfigLoader;
use binder_embedded::EmbeddedBinder;
use binder_embedded::engine::Broker;
use futures::StreamExt;
use lapin::options::*;
use lapin::tcp::OwnedTLSConfig;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use openssl::asn1::Asn1Time;
use openssl::bn::{BigNum, MsbOption};
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::PKey;
use openssl::x509::extension::{BasicConstraints, SubjectAlternativeName};
use openssl::x509::{X509, X509NameBuilder};

/// A self-signed certificate for 127.0.0.1 (`server.pem`, the client trusts it as its own
/// anchor) and its key (`server.key`).
fn self_signed(dir: &std::path::Path) {
    let key = PKey::from_ec_key(
        EcKey::generate(&EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap()).unwrap(),
    )
    .unwrap();
    let mut name = X509NameBuilder::new().unwrap();
    name.append_entry_by_nid(Nid::COMMONNAME, "localhost")
        .unwrap();
    let name = name.build();
    let mut b = X509::builder().unwrap();
    b.set_version(2).unwrap();
    let mut serial = BigNum::new().unwrap();
    serial.rand(64, MsbOption::MAYBE_ZERO, false).unwrap();
    b.set_serial_number(&serial.to_asn1_integer().unwrap())
        .unwrap();
    b.set_subject_name(&name).unwrap();
    b.set_issuer_name(&name).unwrap();
    b.set_pubkey(&key).unwrap();
    b.set_not_before(&Asn1Time::days_from_now(0).unwrap())
        .unwrap();
    b.set_not_after(&Asn1Time::days_from_now(2).unwrap())
        .unwrap();
    b.append_extension(BasicConstraints::new().build().unwrap())
        .unwrap();
    let san = SubjectAlternativeName::new()
        .ip("127.0.0.1")
        .build(&b.x509v3_context(None, None))
        .unwrap();
    b.append_extension(san).unwrap();
    b.sign(&key, MessageDigest::sha256()).unwrap();
    std::fs::write(dir.join("server.pem"), b.build().to_pem().unwrap()).unwrap();
    std::fs::write(
        dir.join("server.key"),
        key.private_key_to_pem_pkcs8().unwrap(),
    )
    .unwrap();
}

/// Configures `binder` with `spring.embedded` listening on port 0 and this server file.
fn configure(binder: &EmbeddedBinder, server_config: &std::path::Path) -> Result<(), String> {
    let yaml = format!(
        "spring.embedded:\n  listen: 127.0.0.1:0\n  server-config: {}\n",
        server_config.display()
    );
    let cfg = ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(&yaml)
        .load()
        .unwrap();
    binder
        .configure(&cfg.binder_environment("embedded"))
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_table_in_the_server_config_serves_the_broker_over_tls_too() {
    let dir = tempfile::tempdir().unwrap();
    self_signed(dir.path());
    let file = dir.path().join("broker.toml");
    std::fs::write(
        &file,
        format!(
            "[tls]\nlisten = \"127.0.0.1:0\"\ncertfile = {:?}\nkeyfile = {:?}\n",
            dir.path().join("server.pem"),
            dir.path().join("server.key")
        ),
    )
    .unwrap();
    let binder = EmbeddedBinder::new(Broker::new());
    configure(&binder, &file).unwrap();
    assert!(binder.local_addr().is_some(), "the plain listener stays");
    let port = binder.tls_addr().expect("served over TLS").port();
    assert_ne!(port, 0, "the port chosen for port 0");
    assert!(
        binder
            .describe()
            .contains(&format!("amqps://127.0.0.1:{port}")),
        "{}",
        binder.describe()
    );

    let tls = OwnedTLSConfig {
        cert_chain: Some(std::fs::read_to_string(dir.path().join("server.pem")).unwrap()),
        identity: None,
    };
    let conn = tokio::time::timeout(
        Duration::from_secs(10),
        Connection::connect_with_config(
            &format!("amqps://guest:guest@127.0.0.1:{port}/%2f"),
            ConnectionProperties::default(),
            tls,
            lapin::runtime::default_runtime().unwrap(),
        ),
    )
    .await
    .expect("amqps answers")
    .expect("amqps to the served embedded broker");
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    ch.queue_declare(
        "tls-served".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let confirm = ch
        .basic_publish(
            "".into(),
            "tls-served".into(),
            BasicPublishOptions::default(),
            b"over TLS to the embedded broker",
            BasicProperties::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(confirm.is_ack());
    let mut consumer = ch
        .basic_consume(
            "tls-served".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let delivery = tokio::time::timeout(Duration::from_secs(5), consumer.next())
        .await
        .expect("a delivery within 5 s")
        .expect("the consumer is open")
        .unwrap();
    assert_eq!(delivery.data, b"over TLS to the embedded broker");
    delivery.ack(BasicAckOptions::default()).await.unwrap();

    // Closing the binder closes the TLS connection (320 CONNECTION_FORCED).
    binder.close().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while conn.status().connected() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "still connected after close"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn an_unusable_tls_file_stops_the_binder_naming_the_setting_key_and_path() {
    let dir = tempfile::tempdir().unwrap();
    self_signed(dir.path());
    let file = dir.path().join("broker.toml");
    let missing = dir.path().join("missing.key");
    std::fs::write(
        &file,
        format!(
            "[tls]\nlisten = \"127.0.0.1:0\"\ncertfile = {:?}\nkeyfile = {:?}\n",
            dir.path().join("server.pem"),
            missing
        ),
    )
    .unwrap();
    let binder = EmbeddedBinder::new(Broker::new());
    let e = configure(&binder, &file).unwrap_err();
    assert!(
        e.contains("spring.embedded.listen")
            && e.contains("tls.keyfile: cannot read")
            && e.contains(&missing.display().to_string()),
        "{e}"
    );
    assert_eq!(binder.local_addr(), None, "nothing listens");
}

#[tokio::test]
async fn storage_keys_in_the_server_config_are_refused_naming_the_binders_own() {
    let dir = tempfile::tempdir().unwrap();
    for (line, binder_key) in [
        ("data_dir = \"/var/lib/x\"\n", "`spring.embedded.data-dir`"),
        (
            "data_dir = \"/var/lib/x\"\ndurability = \"none\"\n",
            "`spring.embedded.durability`",
        ),
        (
            "data_dir = \"/var/lib/x\"\ndisk_free_limit = 1000\n",
            "`spring.embedded.disk-free-limit`",
        ),
    ] {
        let file = dir.path().join("broker.toml");
        std::fs::write(&file, line).unwrap();
        let binder = EmbeddedBinder::new(Broker::new());
        let e = configure(&binder, &file).unwrap_err();
        assert!(
            e.contains("spring.embedded.server-config") && e.contains(binder_key),
            "{e}"
        );
    }
}
