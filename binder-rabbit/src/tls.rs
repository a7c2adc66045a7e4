//! TLS (`amqps://`) through the system's OpenSSL: the CAs trusted for the server's
//! certificate, the client's own certificate for mutual TLS, and how the server's
//! certificate is checked.

use std::fmt;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use lapin::tcp::AsyncTcpStream;
use lapin::uri::{AMQPScheme, AMQPUri};
use lapin::{Connection, ConnectionProperties};
use openssl::pkcs12::Pkcs12;
use openssl::pkey::{PKey, Private};
use openssl::ssl::{ErrorCode, SslConnector, SslMethod, SslVerifyMode, SslVersion};
use openssl::x509::X509;
use openssl::x509::store::X509StoreBuilder;

/// How `amqps://` connections are made (`spring.rabbitmq.ssl.*`). The default trusts the
/// system's CAs, checks the server's certificate and its name, and offers no client
/// certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// The CA certificates the server's certificate must chain to, instead of the system's
    /// (`ssl.trust-store`).
    pub trust_store: Option<TrustStore>,
    /// The client's certificate and key, for brokers that ask for one (`ssl.key-store`, or
    /// `ssl.certificate` and `ssl.private-key`).
    pub key_store: Option<KeyStore>,
    /// Whether the server's certificate must chain to a trusted CA and be valid now
    /// (`ssl.validate-server-certificate`, true by default). Off, any certificate is taken.
    pub validate_server_certificate: bool,
    /// Whether the server's certificate must name the host connected to
    /// (`ssl.verify-hostname`, true by default).
    pub verify_hostname: bool,
    /// The highest TLS version offered (`ssl.algorithm`: `TLSv1.2`, `TLSv1.3`); `None`
    /// offers OpenSSL's highest.
    pub max_version: Option<TlsVersion>,
}

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings {
            trust_store: None,
            key_store: None,
            validate_server_certificate: true,
            verify_hostname: true,
            max_version: None,
        }
    }
}

/// A TLS protocol version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    /// TLS 1.2.
    Tls12,
    /// TLS 1.3.
    Tls13,
}

/// Trusted CA certificates, as read from their file at startup.
#[derive(Clone, PartialEq, Eq)]
pub enum TrustStore {
    /// PEM certificates (`-----BEGIN CERTIFICATE-----`).
    Pem {
        /// The file they were read from.
        path: PathBuf,
        /// Its contents.
        pem: Vec<u8>,
    },
    /// The certificates of a PKCS#12 file (`.p12`, `.pfx`).
    Pkcs12 {
        /// The file.
        path: PathBuf,
        /// Its contents.
        der: Vec<u8>,
        /// Its password (empty for none).
        password: String,
    },
}

impl TrustStore {
    fn path(&self) -> &PathBuf {
        match self {
            TrustStore::Pem { path, .. } | TrustStore::Pkcs12 { path, .. } => path,
        }
    }
}

impl fmt::Debug for TrustStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TrustStore").field(self.path()).finish()
    }
}

/// The client's certificate and private key, as read from their files at startup.
#[derive(Clone, PartialEq, Eq)]
pub enum KeyStore {
    /// A PKCS#12 file holding the certificate (and its chain) and the key.
    Pkcs12 {
        /// The file.
        path: PathBuf,
        /// Its contents.
        der: Vec<u8>,
        /// Its password (empty for none).
        password: String,
    },
    /// PEM: the certificate (then its chain) in one file, the private key in the same or
    /// another one.
    Pem {
        /// The certificate's file.
        certificate_path: PathBuf,
        /// Its contents.
        certificate: Vec<u8>,
        /// The key's file.
        key_path: PathBuf,
        /// Its contents.
        key: Vec<u8>,
        /// The key's password, if it is encrypted.
        password: Option<String>,
    },
}

impl fmt::Debug for KeyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyStore::Pkcs12 { path, .. } => f.debug_tuple("KeyStore").field(path).finish(),
            KeyStore::Pem {
                certificate_path,
                key_path,
                ..
            } => f
                .debug_tuple("KeyStore")
                .field(certificate_path)
                .field(key_path)
                .finish(),
        }
    }
}

/// The certificates a trust store holds; an error says why there are none.
pub(crate) fn trusted(store: &TrustStore) -> Result<Vec<X509>, String> {
    let certificates = match store {
        TrustStore::Pem { pem, .. } => {
            X509::stack_from_pem(pem).map_err(|e| format!("not PEM certificates: {e}"))?
        }
        TrustStore::Pkcs12 { der, password, .. } => {
            let parsed = Pkcs12::from_der(der)
                .and_then(|p| p.parse2(password))
                .map_err(|e| format!("not a PKCS#12 file this password opens: {e}"))?;
            parsed
                .cert
                .into_iter()
                .chain(parsed.ca.into_iter().flatten())
                .collect()
        }
    };
    if certificates.is_empty() {
        return Err("holds no certificate".to_owned());
    }
    Ok(certificates)
}

/// A client certificate, its key and the rest of its chain.
pub(crate) struct Identity {
    certificate: X509,
    key: PKey<Private>,
    chain: Vec<X509>,
}

/// The client identity a key store holds; an error says what is wrong with it.
pub(crate) fn identity(store: &KeyStore) -> Result<Identity, String> {
    let identity = match store {
        KeyStore::Pkcs12 { der, password, .. } => {
            let parsed = Pkcs12::from_der(der)
                .and_then(|p| p.parse2(password))
                .map_err(|e| format!("not a PKCS#12 file this password opens: {e}"))?;
            Identity {
                certificate: parsed.cert.ok_or("holds no certificate")?,
                key: parsed.pkey.ok_or("holds no private key")?,
                chain: parsed.ca.into_iter().flatten().collect(),
            }
        }
        KeyStore::Pem {
            certificate,
            key,
            password,
            ..
        } => {
            let mut chain = X509::stack_from_pem(certificate)
                .map_err(|e| format!("not a PEM certificate: {e}"))?
                .into_iter();
            let certificate = chain.next().ok_or("holds no PEM certificate")?;
            let key = match password {
                Some(p) => PKey::private_key_from_pem_passphrase(key, p.as_bytes()),
                None => PKey::private_key_from_pem(key),
            }
            .map_err(|e| {
                format!(
                    "not a PEM private key{}: {e}",
                    if password.is_some() {
                        " this password opens"
                    } else {
                        " (an encrypted key needs ssl.key-store-password)"
                    }
                )
            })?;
            Identity {
                certificate,
                key,
                chain: chain.collect(),
            }
        }
    };
    if !identity
        .certificate
        .public_key()
        .is_ok_and(|public| public.public_eq(&identity.key))
    {
        return Err("the private key is not the certificate's".to_owned());
    }
    Ok(identity)
}

/// An OpenSSL connector for these settings.
fn connector(tls: &TlsSettings) -> Result<SslConnector, String> {
    let openssl = |e: openssl::error::ErrorStack| format!("OpenSSL: {e}");
    let mut builder = SslConnector::builder(SslMethod::tls_client()).map_err(openssl)?;
    if let Some(store) = &tls.trust_store {
        let mut trusted_store = X509StoreBuilder::new().map_err(openssl)?;
        for certificate in trusted(store)? {
            trusted_store.add_cert(certificate).map_err(openssl)?;
        }
        builder.set_cert_store(trusted_store.build());
    }
    if !tls.validate_server_certificate {
        builder.set_verify(SslVerifyMode::NONE);
    }
    if let Some(store) = &tls.key_store {
        let id = identity(store)?;
        builder.set_certificate(&id.certificate).map_err(openssl)?;
        builder.set_private_key(&id.key).map_err(openssl)?;
        for certificate in id.chain {
            builder.add_extra_chain_cert(certificate).map_err(openssl)?;
        }
    }
    if let Some(version) = tls.max_version {
        let version = match version {
            TlsVersion::Tls12 => SslVersion::TLS1_2,
            TlsVersion::Tls13 => SslVersion::TLS1_3,
        };
        builder
            .set_max_proto_version(Some(version))
            .map_err(openssl)?;
    }
    Ok(builder.build())
}

/// Why a connection could not be opened.
#[derive(Debug)]
pub(crate) enum Failure {
    /// lapin's error, TLS aside: the broker could not be reached, went away, or refused the
    /// AMQP handshake.
    Connect(lapin::Error),
    /// TLS was refused by either side (an untrusted or expired certificate, a name
    /// mismatch, a client certificate the broker wants or refuses, a port that does not
    /// speak TLS): trying again will not help.
    Tls(String),
}

/// Opens a connection to `uri`: plain for `amqp://`, TLS with these settings for
/// `amqps://`.
pub(crate) async fn connect(
    uri: AMQPUri,
    properties: ConnectionProperties,
    tls: &TlsSettings,
) -> Result<Connection, Failure> {
    if uri.scheme == AMQPScheme::AMQP {
        return Connection::connect_uri(uri, properties)
            .await
            .map_err(Failure::Connect);
    }
    let connector = connector(tls).map_err(Failure::Tls)?;
    let verify_hostname = tls.verify_hostname;
    let client_certificate = tls.key_store.is_some();
    let runtime = lapin::runtime::default_runtime().map_err(Failure::Connect)?;
    // The handshake runs on lapin's I/O thread; how it went is noted here, so a refusal is
    // told apart from a broker that cannot be reached.
    let outcome = Arc::new(Mutex::new(None::<Handshake>));
    let noted = outcome.clone();
    let connected = Connection::connector(
        uri,
        runtime,
        async move |uri: AMQPUri, runtime| {
            let note = |h: Handshake| *noted.lock().unwrap_or_else(|p| p.into_inner()) = Some(h);
            let host = uri.authority.host.clone();
            // Resolved off the worker thread, as lapin's own plain connect does.
            let addresses = runtime.to_socket_addrs((host.clone(), uri.authority.port));
            let AsyncTcpStream::Plain(plain) = AsyncTcpStream::connect(&runtime, addresses).await?
            else {
                return Err(std::io::Error::other("a new TCP stream is not plain").into());
            };
            let mut configuration = connector.configure().map_err(std::io::Error::other)?;
            configuration.set_verify_hostname(verify_hostname);
            let ssl = configuration
                .into_ssl(&host)
                .map_err(std::io::Error::other)?;
            let mut stream =
                async_openssl::SslStream::new(ssl, plain).map_err(std::io::Error::other)?;
            match Pin::new(&mut stream).connect().await {
                Ok(()) => {
                    note(Handshake::Done {
                        tls13: stream.ssl().version2() == Some(SslVersion::TLS1_3),
                    });
                    Ok(AsyncTcpStream::Openssl(stream))
                }
                Err(e) => {
                    let verified = stream.ssl().verify_result();
                    let reason = if verified.as_raw() != 0 {
                        format!(
                            "the server's certificate is refused: {}",
                            verified.error_string()
                        )
                    } else if e.to_string().contains("wrong version number") {
                        format!("{e} (the port does not seem to speak TLS)")
                    } else {
                        e.to_string()
                    };
                    if verified.as_raw() != 0 || e.code() == ErrorCode::SSL {
                        note(Handshake::Refused(reason.clone()));
                    }
                    Err(std::io::Error::other(reason).into())
                }
            }
        },
        properties,
    )
    .await;
    connected.map_err(|e| {
        let outcome = outcome.lock().unwrap_or_else(|p| p.into_inner()).take();
        match (outcome, refused_after_handshake(&e)) {
            (Some(Handshake::Refused(reason)), _) => {
                Failure::Tls(format!("TLS handshake failed: {reason}"))
            }
            // With TLS 1.3 the broker checks the client's certificate once the client's side
            // of the handshake is done, and says no with an alert on the first read; or, if
            // the client was writing its first bytes just then, the alert is lost with the
            // connection (a broken pipe or a reset).
            (Some(Handshake::Done { .. }), Some(alert)) => {
                Failure::Tls(format!("the broker refused the TLS session: {alert}"))
            }
            (Some(Handshake::Done { tls13: true }), None) if e.is_io_error() => {
                Failure::Tls(format!(
                    "the broker closed the connection as soon as the TLS handshake was done \
                     ({e}): {}",
                    if client_certificate {
                        "it refused the client certificate"
                    } else {
                        "it wants a client certificate (ssl.key-store, or ssl.certificate and \
                         ssl.private-key)"
                    }
                ))
            }
            _ => Failure::Connect(e),
        }
    })
}

/// How a TLS handshake went.
#[derive(Debug)]
enum Handshake {
    /// Done, in TLS 1.3 or not.
    Done { tls13: bool },
    /// Refused by either side, for this reason.
    Refused(String),
}

/// An OpenSSL protocol error (an alert from the broker) behind a failed connection.
fn refused_after_handshake(e: &lapin::Error) -> Option<String> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(here) = next {
        if let Some(ssl) = here.downcast_ref::<openssl::ssl::Error>() {
            return (ssl.code() == ErrorCode::SSL).then(|| ssl.to_string());
        }
        if let Some(io) = here.downcast_ref::<std::io::Error>() {
            if let Some(inner) = io.get_ref() {
                next = Some(inner);
                continue;
            }
        }
        next = here.source();
    }
    None
}
