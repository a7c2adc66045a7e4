//! The TLS listener (`[tls]`), driven by clients nobody here wrote (lapin over amqps with
//! OpenSSL, the `rabbit` binder with `spring.rabbitmq.ssl.*`) and by a raw AMQP client over
//! rustls, with a CA, server and client certificates made by the test (the `openssl` crate):
//! messages cross with confirms; client certificates are asked for and checked as
//! `verify`/`fail_if_no_peer_cert` say; a failed handshake (plain AMQP on the TLS port, a
//! client that does not trust the server, a missing or foreign client certificate, silence)
//! closes that connection only, with a log line naming the peer; bad files are refused at
//! startup naming the key and the path; shutdown sends 320 then close_notify.

mod common;
#[path = "common/http.rs"]
mod http;
#[path = "common/process.rs"]
mod process;

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use amq_protocol::protocol::{AMQPClass, connection};
use futures::StreamExt;
use lapin::options::*;
use lapin::tcp::{OwnedIdentity, OwnedTLSConfig};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use openssl::asn1::Asn1Time;
use openssl::bn::{BigNum, MsbOption};
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::symm::Cipher;
use openssl::x509::extension::{
    BasicConstraints, ExtendedKeyUsage, KeyUsage, SubjectAlternativeName,
};
use openssl::x509::{X509, X509NameBuilder};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use stream_broker::{Server, ServerConfig, ServerError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls;

// ---------------------------------------------------------------------------------------
// Certificates

/// A P-256 key (fast to make; rustls and OpenSSL both take it).
fn new_key() -> PKey<Private> {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
    PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap()
}

/// What a certificate is for.
enum Role {
    Ca,
    /// A server certificate for `localhost` and 127.0.0.1.
    Server,
    Client,
}

/// A certificate for `key` named `cn`, signed by `issuer` (self-signed without one), valid
/// from now for two days.
fn certificate(
    cn: &str,
    key: &PKey<Private>,
    role: Role,
    issuer: Option<(&X509, &PKey<Private>)>,
) -> X509 {
    certificate_from(cn, key, role, issuer, 0)
}

/// [`certificate`], valid from `from_days` days from now, for two days.
fn certificate_from(
    cn: &str,
    key: &PKey<Private>,
    role: Role,
    issuer: Option<(&X509, &PKey<Private>)>,
    from_days: u32,
) -> X509 {
    let mut name = X509NameBuilder::new().unwrap();
    name.append_entry_by_nid(Nid::COMMONNAME, cn).unwrap();
    let name = name.build();
    let mut b = X509::builder().unwrap();
    b.set_version(2).unwrap();
    let mut serial = BigNum::new().unwrap();
    serial.rand(64, MsbOption::MAYBE_ZERO, false).unwrap();
    b.set_serial_number(&serial.to_asn1_integer().unwrap())
        .unwrap();
    b.set_subject_name(&name).unwrap();
    b.set_issuer_name(issuer.map_or(&name, |(c, _)| c.subject_name()))
        .unwrap();
    b.set_pubkey(key).unwrap();
    b.set_not_before(&Asn1Time::days_from_now(from_days).unwrap())
        .unwrap();
    b.set_not_after(&Asn1Time::days_from_now(from_days + 2).unwrap())
        .unwrap();
    match role {
        Role::Ca => {
            b.append_extension(BasicConstraints::new().critical().ca().build().unwrap())
                .unwrap();
            b.append_extension(
                KeyUsage::new()
                    .critical()
                    .key_cert_sign()
                    .crl_sign()
                    .build()
                    .unwrap(),
            )
            .unwrap();
        }
        Role::Server | Role::Client => {
            b.append_extension(BasicConstraints::new().build().unwrap())
                .unwrap();
            b.append_extension(KeyUsage::new().digital_signature().build().unwrap())
                .unwrap();
            let mut eku = ExtendedKeyUsage::new();
            if matches!(role, Role::Server) {
                eku.server_auth();
            } else {
                eku.client_auth();
            }
            b.append_extension(eku.build().unwrap()).unwrap();
        }
    }
    if matches!(role, Role::Server) {
        let san = SubjectAlternativeName::new()
            .dns("localhost")
            .ip("127.0.0.1")
            .build(&b.x509v3_context(issuer.map(|(c, _)| &**c), None))
            .unwrap();
        b.append_extension(san).unwrap();
    }
    b.sign(issuer.map_or(key, |(_, k)| k), MessageDigest::sha256())
        .unwrap();
    b.build()
}

/// The files a test works with, in a directory of its own.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    /// `ca.pem`; `server.pem` and `server.key` (SEC1, "EC PRIVATE KEY") signed by it, and
    /// `future-server.pem` for the same key, valid only from tomorrow;
    /// `client.pem` and `client.key` (PKCS#8) signed by it; `other-ca.pem` and a client
    /// certificate it signed (`foreign-client.pem`, `.key`); `other.key` (a key no
    /// certificate has); `encrypted.key` (`server.key`'s key under a password).
    fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let write =
            |name: &str, bytes: &[u8]| std::fs::write(dir.path().join(name), bytes).unwrap();
        let ca_key = new_key();
        let ca = certificate("rust-stream test CA", &ca_key, Role::Ca, None);
        write("ca.pem", &ca.to_pem().unwrap());
        let server_key = new_key();
        let server = certificate("localhost", &server_key, Role::Server, Some((&ca, &ca_key)));
        write("server.pem", &server.to_pem().unwrap());
        let future = certificate_from(
            "localhost",
            &server_key,
            Role::Server,
            Some((&ca, &ca_key)),
            1,
        );
        write("future-server.pem", &future.to_pem().unwrap());
        write(
            "server.key",
            &server_key.ec_key().unwrap().private_key_to_pem().unwrap(),
        );
        write(
            "encrypted.key",
            &server_key
                .private_key_to_pem_pkcs8_passphrase(Cipher::aes_256_cbc(), b"secret")
                .unwrap(),
        );
        let client_key = new_key();
        let client = certificate(
            "rust-stream client",
            &client_key,
            Role::Client,
            Some((&ca, &ca_key)),
        );
        write("client.pem", &client.to_pem().unwrap());
        write(
            "client.key",
            &client_key.private_key_to_pem_pkcs8().unwrap(),
        );
        let other_ca_key = new_key();
        let other_ca = certificate("another CA", &other_ca_key, Role::Ca, None);
        write("other-ca.pem", &other_ca.to_pem().unwrap());
        let foreign_key = new_key();
        let foreign = certificate(
            "foreign client",
            &foreign_key,
            Role::Client,
            Some((&other_ca, &other_ca_key)),
        );
        write("foreign-client.pem", &foreign.to_pem().unwrap());
        write(
            "foreign-client.key",
            &foreign_key.private_key_to_pem_pkcs8().unwrap(),
        );
        write("other.key", &new_key().private_key_to_pem_pkcs8().unwrap());
        Pki { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A server configuration on port 0 for both listeners, `[tls]` with the server's
    /// certificate and key and then `extra` lines.
    fn config(&self, extra: &str) -> ServerConfig {
        let text = format!(
            "listen = \"127.0.0.1:0\"\n[tls]\nlisten = \"127.0.0.1:0\"\ncertfile = {:?}\nkeyfile = {:?}\n{extra}",
            self.path("server.pem"),
            self.path("server.key"),
        );
        ServerConfig::from_toml(&text).unwrap_or_else(|e| panic!("{e}\nin:\n{text}"))
    }

    /// `verify_peer` against `ca.pem`, a certificate required or not.
    fn verify_peer(&self, required: bool) -> ServerConfig {
        self.config(&format!(
            "cacertfile = {:?}\nverify = \"verify_peer\"\nfail_if_no_peer_cert = {required}\n",
            self.path("ca.pem")
        ))
    }
}

// ---------------------------------------------------------------------------------------
// Clients

/// lapin over amqps (OpenSSL) trusting `ca`, with a client certificate if given.
async fn amqps(
    server: &Server,
    ca: &Path,
    client: Option<(&Path, &Path)>,
) -> lapin::Result<Connection> {
    let config = OwnedTLSConfig {
        cert_chain: Some(std::fs::read_to_string(ca).unwrap()),
        identity: client.map(|(pem, key)| OwnedIdentity::PKCS8 {
            pem: std::fs::read(pem).unwrap(),
            key: std::fs::read(key).unwrap(),
        }),
    };
    let uri = format!("amqps://guest:guest@{}/%2f", tls_addr(server));
    let connect = Connection::connect_with_config(
        &uri,
        ConnectionProperties::default(),
        config,
        lapin::runtime::default_runtime()?,
    );
    tokio::time::timeout(Duration::from_secs(10), connect)
        .await
        .expect("lapin's amqps connect answers within 10 s")
}

fn tls_addr(server: &Server) -> SocketAddr {
    server.tls_addr().expect("the server has a TLS listener")
}

/// A rustls client session to the TLS listener trusting `ca.pem`, for raw AMQP.
async fn rustls_client(server: &Server, pki: &Pki) -> tokio_rustls::client::TlsStream<TcpStream> {
    let tcp = TcpStream::connect(tls_addr(server)).await.unwrap();
    rustls_over(tcp, pki).await
}

/// A rustls client session over a connected socket, trusting `ca.pem`.
async fn rustls_over(tcp: TcpStream, pki: &Pki) -> tokio_rustls::client::TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(pki.path("ca.pem")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .expect("TLS handshake with rustls")
}

/// Declares a queue, publishes `n` messages with confirms (all acked), consumes and acks
/// them, in order.
async fn round_trip(conn: &Connection, queue: &str, n: usize) {
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let mut confirms = Vec::new();
    for i in 0..n {
        let body = format!("message {i}");
        confirms.push(
            ch.basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                BasicProperties::default(),
            )
            .await
            .unwrap(),
        );
    }
    for c in confirms {
        assert!(
            c.await.unwrap().is_ack(),
            "a publish over TLS was not acked"
        );
    }
    let mut consumer = ch
        .basic_consume(
            queue.into(),
            "tls-consumer".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    for i in 0..n {
        let d = tokio::time::timeout(Duration::from_secs(5), consumer.next())
            .await
            .expect("a delivery over TLS within 5 s")
            .expect("the consumer is open")
            .unwrap();
        assert_eq!(d.data, format!("message {i}").as_bytes());
        d.ack(BasicAckOptions::default()).await.unwrap();
    }
}

// ---------------------------------------------------------------------------------------
// Logs

/// What the server logged in this test binary (every test's lines).
fn logs() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let sink = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || LogWriter(sink.clone()))
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
        buffer
    })
}

struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        std::io::stderr().write_all(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The log lines naming `peer` (as the server saw it) and containing `what`; waits up to 5 s
/// for at least one.
async fn logged(peer: SocketAddr, what: &str) -> Vec<String> {
    let needle = format!("peer={peer}");
    let lines = || {
        let text = String::from_utf8_lossy(&logs().lock().unwrap()).into_owned();
        text.lines()
            .filter(|l| l.contains(&needle) && l.contains(what))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    common::eventually(&format!("a log line with {needle} and {what:?}"), || {
        !lines().is_empty()
    })
    .await;
    lines()
}

// ---------------------------------------------------------------------------------------
// Tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lapin_over_amqps_publishes_and_consumes_with_confirms() {
    let pki = Pki::new();
    let server = Server::standalone(pki.config("")).await.unwrap();
    assert_ne!(server.tls_addr(), Some(server.local_addr()));
    let conn = amqps(&server, &pki.path("ca.pem"), None)
        .await
        .expect("amqps with the test CA");
    round_trip(&conn, "tls.lapin", 200).await;
    // The plain listener stays, over the same brokers: the queue declared over TLS is
    // there, every message taken and acked.
    let plain = common::lapin(&server).await;
    let ch = plain.create_channel().await.unwrap();
    let declared = ch
        .queue_declare(
            "tls.lapin".into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        declared.message_count(),
        0,
        "every message consumed over TLS"
    );
    assert_eq!(server.connections(), 2);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_versions_are_offered_as_configured() {
    let pki = Pki::new();
    logs();
    for (versions, expected) in [
        ("[\"tlsv1.2\"]", rustls::ProtocolVersion::TLSv1_2),
        ("[\"tlsv1.3\"]", rustls::ProtocolVersion::TLSv1_3),
        (
            "[\"tlsv1.2\", \"tlsv1.3\"]",
            rustls::ProtocolVersion::TLSv1_3,
        ),
    ] {
        let server = Server::standalone(pki.config(&format!("versions = {versions}\n")))
            .await
            .unwrap();
        let mut raw = common::Raw::over(rustls_client(&server, &pki).await);
        raw.handshake(131072, 2047, 0).await;
        assert_eq!(
            raw.socket.get_ref().1.protocol_version(),
            Some(expected),
            "versions = {versions}"
        );
        // The connection's log line says how it is carried.
        let peer = raw.socket.get_ref().0.local_addr().unwrap();
        let opened = logged(peer, "connection opened").await;
        let tls = format!("tls={}", expected.as_str().unwrap());
        assert!(
            opened[0].contains(&tls) && opened[0].contains("client_certificate=false"),
            "{opened:?}"
        );
        // Gone before the shutdown, which would otherwise wait for its close-ok.
        drop(raw);
        server.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rabbit_binder_connects_with_its_trust_store() {
    use binder_amqp::{AmqpBroker, ProducerSpec, SubscriptionSpec};
    use binder_core::binder::{BinderErrorKind, Settlement};
    use binder_core::message::{DeliveryMode, Message};
    use binder_rabbit::{RabbitBinder, RabbitSettings};

    let pki = Pki::new();
    let server = Server::standalone(pki.verify_peer(true)).await.unwrap();
    let port = tls_addr(&server).port();
    let binder = |ssl: String| {
        let yaml = format!(
            "spring.rabbitmq:\n  host: localhost\n  port: {port}\n  ssl:\n    enabled: true\n    trust-store: {}\n{ssl}",
            pki.path("ca.pem").display()
        );
        let cfg = binder_core::config::ConfigLoader::new()
            .env(Vec::<(String, String)>::new())
            .yaml_str(&yaml)
            .load()
            .unwrap();
        let mut settings = RabbitSettings::from_config(&cfg.binder_environment("rabbit"))
            .unwrap_or_else(|e| panic!("{e}\nin:\n{yaml}"));
        settings.connection_timeout = Duration::from_secs(10);
        RabbitBinder::new(settings)
    };
    // With the client certificate (`ssl.certificate`, `ssl.private-key`) messages cross.
    let binder_ok = binder(format!(
        "    certificate: {}\n    private-key: {}\n",
        pki.path("client.pem").display(),
        pki.path("client.key").display()
    ));
    let plan = binder_amqp::topology::TopologyPlan {
        queues: vec![binder_amqp::topology::QueueDecl {
            name: "tls.rabbit-binder".into(),
            durable: false,
            exclusive: false,
            auto_delete: false,
            arguments: Default::default(),
        }],
        ..Default::default()
    };
    tokio::time::timeout(Duration::from_secs(20), binder_ok.provision(&plan))
        .await
        .expect("the binder answers")
        .expect("the rabbit binder provisions over TLS");
    let producer = binder_ok
        .producer(ProducerSpec {
            exchange: String::new(),
            delivery_mode: DeliveryMode::NonPersistent,
        })
        .await
        .unwrap();
    producer
        .publish("tls.rabbit-binder", Message::new("over rustls"))
        .await
        .expect("confirmed over TLS");
    let mut sub = binder_ok
        .subscribe(SubscriptionSpec::manual_ack("tls.rabbit-binder", 1))
        .await
        .unwrap();
    let delivery = tokio::time::timeout(Duration::from_secs(10), sub.next())
        .await
        .expect("the message arrives over TLS")
        .expect("the subscription is open");
    assert_eq!(delivery.message().payload.as_ref(), b"over rustls");
    delivery.settler.settle(Settlement::Ack).await.unwrap();

    // Without one, the binder is refused (and says it is a TLS refusal, not an unreachable
    // broker).
    let binder_refused = binder(String::new());
    let answer = tokio::time::timeout(
        Duration::from_secs(20),
        binder_refused.inspect("amq.no-such"),
    )
    .await
    .expect("the binder answers");
    match answer {
        Err(e) if e.kind() == BinderErrorKind::Refused => eprintln!("refused as expected: {e}"),
        other => panic!("expected a TLS refusal, got {other:?}"),
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_if_no_peer_cert_refuses_a_client_without_a_certificate() {
    let pki = Pki::new();
    logs();
    let server = Server::standalone(pki.verify_peer(true)).await.unwrap();
    let ca = pki.path("ca.pem");
    let with_cert = amqps(
        &server,
        &ca,
        Some((&pki.path("client.pem"), &pki.path("client.key"))),
    )
    .await
    .expect("a client certificate from the CA is taken");
    round_trip(&with_cert, "tls.mutual", 10).await;

    let refused = amqps(&server, &ca, None).await;
    assert!(refused.is_err(), "connected without a client certificate");
    let foreign = amqps(
        &server,
        &ca,
        Some((
            &pki.path("foreign-client.pem"),
            &pki.path("foreign-client.key"),
        )),
    )
    .await;
    assert!(foreign.is_err(), "connected with another CA's certificate");

    // Neither refusal touched the established connection; the listener still serves.
    with_cert.create_channel().await.unwrap();
    amqps(
        &server,
        &ca,
        Some((&pki.path("client.pem"), &pki.path("client.key"))),
    )
    .await
    .expect("a new connection with a certificate");
    common::eventually("the server logs the refusals", || {
        let text = String::from_utf8_lossy(&logs().lock().unwrap()).into_owned();
        text.contains("TLS handshake failed")
    })
    .await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_peer_alone_takes_clients_without_a_certificate_but_checks_one_given() {
    let pki = Pki::new();
    let server = Server::standalone(pki.verify_peer(false)).await.unwrap();
    let ca = pki.path("ca.pem");
    let anonymous = amqps(&server, &ca, None)
        .await
        .expect("no certificate is fine without fail_if_no_peer_cert");
    anonymous.create_channel().await.unwrap();
    amqps(
        &server,
        &ca,
        Some((&pki.path("client.pem"), &pki.path("client.key"))),
    )
    .await
    .expect("a certificate from the CA");
    let foreign = amqps(
        &server,
        &ca,
        Some((
            &pki.path("foreign-client.pem"),
            &pki.path("foreign-client.key"),
        )),
    )
    .await;
    assert!(
        foreign.is_err(),
        "a certificate from another CA is checked and refused"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_handshakes_close_that_connection_only_and_are_logged_with_the_peer() {
    let pki = Pki::new();
    logs();
    let server = Server::standalone(pki.config("")).await.unwrap();
    let ca = pki.path("ca.pem");
    let established = amqps(&server, &ca, None).await.unwrap();

    // Plain AMQP on the TLS port: the server answers with an alert (or nothing) and closes.
    let mut plain = TcpStream::connect(tls_addr(&server)).await.unwrap();
    let plain_peer = plain.local_addr().unwrap();
    plain.write_all(b"AMQP\x00\x00\x09\x01").await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut answer))
        .await
        .expect("the server closes a plain AMQP client on the TLS port")
        .ok();
    assert!(
        !answer.starts_with(b"AMQP") && answer.len() < 64,
        "not an AMQP answer, at most a TLS alert: {answer:?}"
    );
    let lines = logged(plain_peer, "TLS handshake failed").await;
    assert_eq!(lines.len(), 1, "one line per failed handshake: {lines:?}");
    assert!(lines[0].contains("WARN"), "{}", lines[0]);
    assert!(lines[0].contains("plain AMQP client"), "{}", lines[0]);

    // A client that does not trust the server's CA.
    let untrusted = amqps(&server, &pki.path("other-ca.pem"), None).await;
    assert!(untrusted.is_err(), "connected trusting another CA");

    // Random bytes that are not a TLS record either.
    let mut junk = TcpStream::connect(tls_addr(&server)).await.unwrap();
    let junk_peer = junk.local_addr().unwrap();
    junk.write_all(&[0x16, 0x03, 0x01, 0xff, 0xff, 1, 2, 3])
        .await
        .unwrap();
    let _ = junk.shutdown().await;
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), junk.read_to_end(&mut rest))
        .await
        .expect("the server closes a client sending junk")
        .ok();
    logged(junk_peer, "TLS handshake failed").await;

    // The established connection and the listener are unharmed.
    round_trip(&established, "tls.after-failures", 5).await;
    let again = amqps(&server, &ca, None)
        .await
        .expect("a new TLS connection");
    again.create_channel().await.unwrap();
    common::still_serving(&server).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tls_handshake_counts_toward_the_handshake_timeout() {
    let pki = Pki::new();
    logs();
    let mut config = pki.config("");
    config.limits.handshake_timeout_ms = 1000;
    let server = Server::standalone(config).await.unwrap();
    // Silent: no ClientHello.
    let mut silent = TcpStream::connect(tls_addr(&server)).await.unwrap();
    let silent_peer = silent.local_addr().unwrap();
    let started = tokio::time::Instant::now();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), silent.read_to_end(&mut buf))
        .await
        .expect("a silent client is closed at the handshake timeout")
        .ok();
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(3),
        "closed after {waited:?}"
    );
    logged(silent_peer, "TLS handshake timeout").await;
    // A slow TLS handshake leaves that much less time for AMQP's: connected, 700 ms
    // before the ClientHello, then silent at the AMQP header. The connection is closed
    // 1 s after the TCP accept, about 300 ms after the TLS handshake, not 1 s after it.
    let tcp = TcpStream::connect(tls_addr(&server)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let mut slow = rustls_over(tcp, &pki).await;
    let tls_done = tokio::time::Instant::now();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), slow.read(&mut buf))
        .await
        .expect("a client silent after TLS is closed at the handshake timeout");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    let after_tls = tls_done.elapsed();
    assert!(
        after_tls < Duration::from_millis(800),
        "closed {after_tls:?} after the TLS handshake: the deadline did not count it"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_tls_connections_with_320_then_close_notify() {
    let pki = Pki::new();
    let server = Server::standalone(pki.config("")).await.unwrap();
    let mut raw = common::Raw::over(rustls_client(&server, &pki).await);
    raw.handshake(131072, 2047, 0).await;
    raw.open_channel(1).await;
    let lapin = amqps(&server, &pki.path("ca.pem"), None).await.unwrap();
    common::eventually("both connections open", || server.connections() == 2).await;
    let stopping = tokio::spawn(server.shutdown());
    let (ch, m) = raw.next_method().await.expect("connection.close");
    let AMQPClass::Connection(connection::AMQPMethod::Close(close)) = m else {
        panic!("expected connection.close, got {m:?}");
    };
    assert_eq!((ch, close.reply_code), (0, 320), "{close:?}");
    assert!(close.reply_text.as_str().starts_with("CONNECTION_FORCED"));
    raw.method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::CloseOk(connection::CloseOk {})),
    )
    .await;
    // rustls reads 0 only after the peer's close_notify; a bare TCP close is UnexpectedEof.
    let mut rest = [0u8; 64];
    let end = tokio::time::timeout(Duration::from_secs(5), raw.socket.read(&mut rest))
        .await
        .expect("the server ends the TLS session");
    assert!(matches!(end, Ok(0)), "no close_notify: {end:?}");
    tokio::time::timeout(Duration::from_secs(10), stopping)
        .await
        .expect("shutdown finishes")
        .unwrap();
    common::eventually("lapin's TLS connection is closed", || {
        !lapin.status().connected()
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// Configuration refused at startup

/// The error `Server::standalone` gives for this configuration.
async fn refused(config: ServerConfig) -> String {
    match Server::standalone(config).await {
        Ok(server) => {
            server.shutdown().await;
            panic!("the server started");
        }
        Err(e) => {
            assert!(
                matches!(e, ServerError::Tls(_) | ServerError::Config(_)),
                "{e:?}"
            );
            e.to_string()
        }
    }
}

#[tokio::test]
async fn bad_tls_files_are_refused_at_startup_naming_the_key_and_the_path() {
    let pki = Pki::new();
    let path = |name: &str| pki.path(name).display().to_string();
    let with = |certfile: &str, keyfile: &str, extra: &str| {
        ServerConfig::from_toml(&format!(
            "listen = \"127.0.0.1:0\"\n[tls]\nlisten = \"127.0.0.1:0\"\ncertfile = {:?}\nkeyfile = {:?}\n{extra}",
            pki.path(certfile),
            pki.path(keyfile)
        ))
        .unwrap()
    };
    let e = refused(with("server.pem", "missing.key", "")).await;
    assert!(
        e.starts_with("tls.keyfile: cannot read ") && e.contains(&path("missing.key")),
        "{e}"
    );
    let e = refused(with("missing.pem", "server.key", "")).await;
    assert!(
        e.starts_with("tls.certfile: cannot read ") && e.contains(&path("missing.pem")),
        "{e}"
    );
    let e = refused(with("server.pem", "other.key", "")).await;
    assert!(
        e.starts_with("tls.keyfile: ")
            && e.contains("is not the key of the certificate")
            && e.contains(&path("other.key"))
            && e.contains(&path("server.pem")),
        "{e}"
    );
    // A key where the certificate should be, a certificate where the key should be.
    let e = refused(with("client.key", "server.key", "")).await;
    assert!(
        e.starts_with("tls.certfile: ")
            && e.contains("holds no PEM certificate")
            && e.contains(&path("client.key")),
        "{e}"
    );
    let e = refused(with("server.pem", "server.pem", "")).await;
    assert!(
        e.starts_with("tls.keyfile: ") && e.contains("holds no PEM private key"),
        "{e}"
    );
    let e = refused(with("server.pem", "encrypted.key", "")).await;
    assert!(
        e.starts_with("tls.keyfile: ") && e.contains("password-protected"),
        "{e}"
    );
    let ca = |file: &str| {
        format!(
            "cacertfile = {:?}\nverify = \"verify_peer\"\n",
            pki.path(file)
        )
    };
    let e = refused(with("server.pem", "server.key", &ca("missing-ca.pem"))).await;
    assert!(e.starts_with("tls.cacertfile: cannot read "), "{e}");
    let e = refused(with("server.pem", "server.key", &ca("client.key"))).await;
    assert!(
        e.starts_with("tls.cacertfile: ") && e.contains("holds no PEM certificate"),
        "{e}"
    );
    // Not PEM at all.
    std::fs::write(
        pki.path("garbage.pem"),
        "-----BEGIN CERTIFICATE-----\n!!!\n",
    )
    .unwrap();
    let e = refused(with("garbage.pem", "server.key", "")).await;
    assert!(
        e.starts_with("tls.certfile: ") && e.contains("malformed PEM"),
        "{e}"
    );
    // A configuration built in code is checked too.
    let mut config = pki.config("");
    if let Some(tls) = config.tls.as_mut() {
        tls.fail_if_no_peer_cert = true;
    }
    let e = refused(config).await;
    assert!(e.contains("tls.fail_if_no_peer_cert"), "{e}");
    // The TLS address taken: the error says it is the TLS listener's.
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut config = pki.config("");
    if let Some(tls) = config.tls.as_mut() {
        tls.listen = holder.local_addr().unwrap();
    }
    match Server::standalone(config).await {
        Err(e @ ServerError::BindTls { .. }) => {
            assert!(e.to_string().contains("tls.listen"), "{e}")
        }
        other => panic!("expected BindTls, got {other:?}"),
    }
}

#[test]
fn an_unknown_key_in_the_tls_table_is_refused_by_name() {
    let e = ServerConfig::from_toml(
        "[tls]\nlisten = \"127.0.0.1:0\"\ncertfile = \"a\"\nkeyfile = \"b\"\ndepth = 2\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("unknown field `depth`"), "{e}");
}

/// A key the checks above rely on parsing as rustls does: the server's SEC1 key and the
/// client's PKCS#8 key are both read.
#[test]
fn the_generated_keys_are_the_formats_the_docs_name() {
    let pki = Pki::new();
    let server = std::fs::read_to_string(pki.path("server.key")).unwrap();
    assert!(server.starts_with("-----BEGIN EC PRIVATE KEY-----"));
    assert!(matches!(
        PrivateKeyDer::from_pem_file(pki.path("server.key")).unwrap(),
        PrivateKeyDer::Sec1(_)
    ));
    assert!(matches!(
        PrivateKeyDer::from_pem_file(pki.path("client.key")).unwrap(),
        PrivateKeyDer::Pkcs8(_)
    ));
}

// ---------------------------------------------------------------------------------------
// The binary

#[test]
fn the_binary_serves_tls_at_tls_listen_and_refuses_the_flag_without_a_tls_table() {
    use std::process::Command;

    let pki = Pki::new();
    let file = pki.path("broker.toml");
    std::fs::write(
        &file,
        format!(
            "listen = \"127.0.0.1:0\"\n[tls]\nlisten = \"127.0.0.1:1\"\ncertfile = {:?}\nkeyfile = {:?}\n",
            pki.path("server.pem"),
            pki.path("server.key")
        ),
    )
    .unwrap();
    let mut command = process::stream_broker();
    command.args([
        "--config",
        file.to_str().unwrap(),
        "--tls-listen",
        "127.0.0.1:0",
    ]);
    let (mut child, tls_addr) =
        process::spawn_until(command, "tls_addr=", "tls_addr", Duration::from_secs(30));
    let tls_addr: SocketAddr = tls_addr.parse().unwrap();
    assert_ne!(tls_addr.port(), 1, "--tls-listen overrides tls.listen");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let config = OwnedTLSConfig {
            cert_chain: Some(std::fs::read_to_string(pki.path("ca.pem")).unwrap()),
            identity: None,
        };
        let conn = Connection::connect_with_config(
            &format!("amqps://guest:guest@{tls_addr}/%2f"),
            ConnectionProperties::default(),
            config,
            lapin::runtime::default_runtime().unwrap(),
        )
        .await
        .expect("amqps to the binary");
        conn.create_channel().await.unwrap();
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        common::eventually("SIGTERM closes the TLS connection", || {
            !conn.status().connected()
        })
        .await;
    });
    assert!(child.wait().unwrap().success());

    let plain = pki.path("plain.toml");
    std::fs::write(&plain, "listen = \"127.0.0.1:0\"\n").unwrap();
    let out = process::stream_broker()
        .args([
            "--config",
            plain.to_str().unwrap(),
            "--tls-listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--tls-listen needs a [tls] table"), "{err}");
}

// ---------------------------------------------------------------------------------------
// pika

/// pika over TLS with a client certificate: publishes with confirms, gets and acks.
const PIKA_TLS: &str = r#"
import ssl, sys, pika
port, ca, cert, key = sys.argv[1:5]
context = ssl.create_default_context(cafile=ca)
context.load_cert_chain(cert, key)
params = pika.ConnectionParameters(
    host="127.0.0.1", port=int(port),
    ssl_options=pika.SSLOptions(context, "localhost"),
    credentials=pika.PlainCredentials("guest", "guest"))
conn = pika.BlockingConnection(params)
ch = conn.channel()
ch.confirm_delivery()
ch.queue_declare("tls.pika")
for i in range(50):
    ch.basic_publish("", "tls.pika", f"m{i}".encode())
got = []
for i in range(50):
    method, _, body = ch.basic_get("tls.pika", auto_ack=False)
    got.append(body)
    ch.basic_ack(method.delivery_tag)
assert got == [f"m{i}".encode() for i in range(50)], got
conn.close()
print("pika_tls: 50 confirmed, 50 got")
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pika_over_tls_with_a_client_certificate() {
    use std::process::Command;
    let missing = match Command::new("python3").args(["-c", "import pika"]).output() {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(format!(
            "python3 cannot import pika: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Some(format!("python3 cannot be run: {e}")),
    };
    if let Some(reason) = missing {
        assert!(
            std::env::var("REQUIRE_CLIENTS").as_deref() != Ok("1"),
            "REQUIRE_CLIENTS=1 but {reason}"
        );
        eprintln!("skipped: {reason} (pip install pika; REQUIRE_CLIENTS=1 makes this fail)");
        return;
    }
    let pki = Pki::new();
    let server = Server::standalone(pki.verify_peer(true)).await.unwrap();
    let args: Vec<String> = vec![
        "-c".into(),
        PIKA_TLS.into(),
        tls_addr(&server).port().to_string(),
        pki.path("ca.pem").display().to_string(),
        pki.path("client.pem").display().to_string(),
        pki.path("client.key").display().to_string(),
    ];
    let run = tokio::task::spawn_blocking(move || Command::new("python3").args(&args).output());
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("pika finishes within 60 s")
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("pika_tls: 50 confirmed, 50 got"),
        "pika over TLS failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    server.shutdown().await;
}

/// The certificate-expiration health check looks at the certificates the TLS listener was
/// started with (here the server's and the CA's, both valid for two more days): it passes
/// for a window of one day and fails for one of a week, listing each file's expiry date as
/// RabbitMQ writes it; a malformed window or unit is a 400. The listener checks name the TLS
/// listener too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_certificate_expiration_check_reads_the_served_certificates() {
    let pki = Pki::new();
    let mut config = pki.verify_peer(false);
    config.management = Some(stream_broker::ManagementConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        allow_remote: false,
        sample_interval_ms: 1000,
    });
    let server = common::server(config).await;
    let api = server.management_addr().unwrap();
    let guest = Some(("guest", "guest"));
    let get = |path: String| async move { http::request(api, "GET", &path, guest, None).await };

    for within in ["1/days", "0/years", "-3/weeks"] {
        let r = get(format!(
            "/api/health/checks/certificate-expiration/{within}"
        ))
        .await;
        assert_eq!(
            (r.status, r.json()),
            (200, serde_json::json!({"status": "ok"})),
            "{within}"
        );
    }
    for within in ["1/weeks", "3/DAYS", "1/months", "1/years"] {
        let r = get(format!(
            "/api/health/checks/certificate-expiration/{within}"
        ))
        .await;
        assert_eq!(r.status, 503, "{within}");
        let body = r.json();
        assert_eq!(body["status"], "failed");
        assert_eq!(body["reason"], "Certificates expiring");
        let expired = body["expired"].as_array().unwrap();
        assert_eq!(expired.len(), 1, "{body}");
        let listener = &expired[0];
        assert_eq!(listener["protocol"], "amqp/ssl");
        assert_eq!(listener["port"], tls_addr(&server).port());
        assert_eq!(listener["interface"], "127.0.0.1");
        assert_eq!(
            listener["certfile"],
            pki.path("server.pem").display().to_string()
        );
        assert_eq!(
            listener["cacertfile"],
            pki.path("ca.pem").display().to_string()
        );
        for (key, file) in [
            ("certfile_expires_on", "server.pem"),
            ("cacertfile_expires_on", "ca.pem"),
        ] {
            let dates = listener[key].as_array().unwrap();
            assert_eq!(dates.len(), 1, "{key}: {body}");
            assert_eq!(
                dates[0].as_str().unwrap(),
                not_after(&pki.path(file)),
                "{key}"
            );
        }
    }
    for (within, reason) in [
        ("soon/days", "Invalid expiration value."),
        (
            "1/fortnights",
            "Time unit not recognised. Supported units: days, weeks, months, years.",
        ),
    ] {
        let r = get(format!(
            "/api/health/checks/certificate-expiration/{within}"
        ))
        .await;
        assert_eq!(r.status, 400, "{within}");
        assert_eq!(r.json()["reason"], reason);
    }

    let tls_port = tls_addr(&server).port();
    let r = get(format!("/api/health/checks/port-listener/{tls_port}")).await;
    assert_eq!(r.status, 200);
    let overview = get("/api/overview".into()).await.json();
    let listeners: Vec<(&str, u64)> = overview["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["protocol"].as_str().unwrap(), l["port"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        listeners,
        [
            ("amqp", u64::from(server.local_addr().port())),
            ("amqp/ssl", u64::from(tls_port)),
            ("http", u64::from(api.port())),
        ]
    );
    for asked in ["amqps", "amqp/ssl"] {
        let r = get(format!(
            "/api/health/checks/protocol-listener/{}",
            asked.replace('/', "%2F")
        ))
        .await;
        assert_eq!(
            (r.status, r.json()),
            (
                200,
                serde_json::json!({"status": "ok", "protocol": "amqp/ssl"})
            ),
            "{asked}"
        );
    }
    server.shutdown().await;
}

/// A served certificate not yet valid fails the check whatever the window, listed as an
/// error where an expiry date would be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_not_yet_valid_fails_the_expiration_check() {
    let pki = Pki::new();
    let text = format!(
        "listen = \"127.0.0.1:0\"\n[tls]\nlisten = \"127.0.0.1:0\"\ncertfile = {:?}\nkeyfile = {:?}\n\
         [management]\nlisten = \"127.0.0.1:0\"\n",
        pki.path("future-server.pem"),
        pki.path("server.key"),
    );
    let server = common::server(ServerConfig::from_toml(&text).unwrap()).await;
    let api = server.management_addr().unwrap();
    let r = http::request(
        api,
        "GET",
        "/api/health/checks/certificate-expiration/1/days",
        Some(("guest", "guest")),
        None,
    )
    .await;
    assert_eq!(r.status, 503);
    let body = r.json();
    let listener = &body["expired"][0];
    assert_eq!(
        listener["certfile_expires_on"],
        serde_json::json!([{"error": "Certificate is not yet valid"}])
    );
    assert_eq!(listener["cacertfile"], serde_json::Value::Null);
    assert_eq!(listener["cacertfile_expires_on"], serde_json::json!([]));
    server.shutdown().await;
}

/// A certificate file's expiry, as RabbitMQ writes it (`2027-01-31 9:05:00`), read with
/// OpenSSL: `Asn1Time`'s text is `Jan 31 09:05:00 2027 GMT`.
fn not_after(path: &Path) -> String {
    let certificate = X509::from_pem(&std::fs::read(path).unwrap()).unwrap();
    let text = certificate.not_after().to_string();
    let parts: Vec<&str> = text.split_whitespace().collect();
    let [month, day, time, year, "GMT"] = parts[..] else {
        panic!("unexpected time {text}");
    };
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = months.iter().position(|m| *m == month).unwrap() + 1;
    let (hour, rest) = time.split_once(':').unwrap();
    format!(
        "{year}-{month:02}-{:02} {}:{rest}",
        day.parse::<u32>().unwrap(),
        hour.parse::<u32>().unwrap()
    )
}
