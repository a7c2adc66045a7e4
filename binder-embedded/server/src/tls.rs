//! The TLS listener's setup (`[tls]`): the server's certificate and key, the CAs clients'
//! certificates are checked against, and the versions offered, read from their PEM files
//! at startup into a rustls configuration (with the `ring` provider).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::crypto::{CryptoProvider, ring};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, InconsistentKeys, RootCertStore, SupportedProtocolVersion};

use crate::config::{TlsConfig, TlsVerify, TlsVersion};

/// Why the TLS listener's files could not be used. Each error names the `[tls]` key and
/// the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("tls.{key}: cannot read {}: {source}", path.display())]
    Read {
        /// The key naming the file (`certfile`, `keyfile`, `cacertfile`).
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// A file is not what its key asks for (no certificate, no key, malformed PEM, a
    /// password-protected key).
    #[error("tls.{key}: {}: {problem}", path.display())]
    Content {
        /// The key naming the file.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// The private key is not the certificate's.
    #[error(
        "tls.keyfile: the private key in {} is not the key of the certificate in tls.certfile {}",
        keyfile.display(),
        certfile.display()
    )]
    KeyMismatch {
        /// `certfile`.
        certfile: PathBuf,
        /// `keyfile`.
        keyfile: PathBuf,
    },
    /// `verify = "verify_peer"` without `cacertfile` (the configuration's checks refuse it
    /// first; a configuration built in code may skip them).
    #[error(
        "tls.cacertfile is needed by verify = \"verify_peer\": the CAs clients' certificates must chain to"
    )]
    NoCacertfile,
    /// rustls refused the certificate and key together, for another reason.
    #[error("tls.certfile {} with tls.keyfile {}: {detail}", certfile.display(), keyfile.display())]
    Refused {
        /// `certfile`.
        certfile: PathBuf,
        /// `keyfile`.
        keyfile: PathBuf,
        /// rustls' reason.
        detail: String,
    },
}

/// The acceptor for a `[tls]` table, its files read and checked.
pub(crate) fn acceptor(config: &TlsConfig) -> Result<TlsAcceptor, TlsError> {
    let provider = Arc::new(ring::default_provider());
    let versions: Vec<&'static SupportedProtocolVersion> = config
        .versions
        .iter()
        .map(|v| match v {
            TlsVersion::Tls12 => &rustls::version::TLS12,
            TlsVersion::Tls13 => &rustls::version::TLS13,
        })
        .collect();
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        // Only reachable with a provider lacking every suite of these versions; ring has them.
        .map_err(|e| TlsError::Refused {
            certfile: config.certfile.clone(),
            keyfile: config.keyfile.clone(),
            detail: e.to_string(),
        })?;
    let chain = certificates("certfile", &config.certfile)?;
    let key = private_key(&config.keyfile)?;
    let builder = match (config.verify, &config.cacertfile) {
        (TlsVerify::VerifyNone, _) => builder.with_no_client_auth(),
        (TlsVerify::VerifyPeer, Some(path)) => {
            let verifier = client_verifier(path, config.fail_if_no_peer_cert, provider)?;
            builder.with_client_cert_verifier(verifier)
        }
        (TlsVerify::VerifyPeer, None) => return Err(TlsError::NoCacertfile),
    };
    let server = builder.with_single_cert(chain, key).map_err(|e| match e {
        rustls::Error::InconsistentKeys(InconsistentKeys::KeyMismatch) => TlsError::KeyMismatch {
            certfile: config.certfile.clone(),
            keyfile: config.keyfile.clone(),
        },
        other => TlsError::Refused {
            certfile: config.certfile.clone(),
            keyfile: config.keyfile.clone(),
            detail: other.to_string(),
        },
    })?;
    Ok(TlsAcceptor::from(Arc::new(server)))
}

/// Checks clients' certificates against the CAs in `cacertfile`.
fn client_verifier(
    path: &Path,
    required: bool,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let mut roots = RootCertStore::empty();
    for (n, certificate) in certificates("cacertfile", path)?.into_iter().enumerate() {
        roots.add(certificate).map_err(|e| TlsError::Content {
            key: "cacertfile",
            path: path.to_owned(),
            problem: format!("certificate {} is not a usable CA certificate: {e}", n + 1),
        })?;
    }
    let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
    let builder = if required {
        builder
    } else {
        builder.allow_unauthenticated()
    };
    builder.build().map_err(|e| TlsError::Content {
        key: "cacertfile",
        path: path.to_owned(),
        problem: e.to_string(),
    })
}

fn read(key: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        key,
        path: path.to_owned(),
        source,
    })
}

/// The PEM certificates in a file, in order; at least one.
fn certificates(key: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(key, path)?;
    let content = |problem: String| TlsError::Content {
        key,
        path: path.to_owned(),
        problem,
    };
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| content(format!("malformed PEM: {e}")))?;
    if certificates.is_empty() {
        return Err(content(
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    Ok(certificates)
}

/// The one private key in `keyfile`.
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read("keyfile", path)?;
    let content = |problem: String| TlsError::Content {
        key: "keyfile",
        path: path.to_owned(),
        problem,
    };
    match PrivateKeyDer::from_pem_slice(&pem) {
        Ok(key) => Ok(key),
        Err(rustls_pki_types::pem::Error::NoItemsFound) => {
            let text = String::from_utf8_lossy(&pem);
            if text.contains("ENCRYPTED PRIVATE KEY") || text.contains("Proc-Type: 4,ENCRYPTED") {
                Err(content(
                    "the private key is password-protected, which is not supported: store it \
                     unencrypted (e.g. `openssl pkey -in KEY -out KEY.plain`) and restrict the \
                     file's permissions"
                        .into(),
                ))
            } else {
                Err(content(
                    "holds no PEM private key (PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY)"
                        .into(),
                ))
            }
        }
        Err(e) => Err(content(format!("malformed PEM: {e}"))),
    }
}
