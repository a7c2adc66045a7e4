//! The TLS listener's setup (`[tls]`): the server's certificate and key, the CAs clients'
//! certificates are checked against, and the versions offered, read from their PEM files
//! at startup into a rustls configuration (with the `ring` provider), and the validity of
//! those certificates, for the certificate-expiration health check.

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

/// The certificates a TLS listener was started with, as read from its files: what the
/// certificate-expiration health check looks at (the files may have changed since; the
/// listener serves these until the server restarts).
#[derive(Debug, Clone)]
pub(crate) struct ServedCertificates {
    /// `certfile`: the server's certificate and its chain.
    pub certfile: CertificateFile,
    /// `cacertfile` (with `verify_peer`): the CAs clients' certificates must chain to.
    pub cacertfile: Option<CertificateFile>,
}

/// A PEM file of certificates, as read at startup.
#[derive(Debug, Clone)]
pub(crate) struct CertificateFile {
    pub path: PathBuf,
    /// The validity of each certificate in it, in order.
    pub validities: Vec<Validity>,
}

/// Why a certificate fails the certificate-expiration check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Expiring {
    /// It expires (or expired) then, written as RabbitMQ writes it.
    On(String),
    /// It is not yet valid, or cannot be decoded.
    Error(String),
}

/// When one certificate is valid, or why that could not be read from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Validity {
    /// From `not_before` to `not_after`, in seconds since the Unix epoch, with `not_after`
    /// written as RabbitMQ writes it (`2027-01-31 9:05:00`, UTC).
    Dates {
        not_before: u64,
        not_after: u64,
        not_after_text: String,
    },
    /// The certificate's DER could not be decoded.
    Unreadable(String),
}

impl Validity {
    /// The validity of a DER certificate.
    pub(crate) fn of(der: &[u8]) -> Validity {
        use x509_cert::der::Decode;
        match x509_cert::Certificate::from_der(der) {
            Ok(certificate) => {
                let validity = certificate.tbs_certificate().validity();
                let end = validity.not_after.to_date_time();
                Validity::Dates {
                    not_before: validity.not_before.to_unix_duration().as_secs(),
                    not_after: end.unix_duration().as_secs(),
                    not_after_text: format!(
                        "{}-{:02}-{:02} {}:{:02}:{:02}",
                        end.year(),
                        end.month(),
                        end.day(),
                        end.hour(),
                        end.minutes(),
                        end.seconds()
                    ),
                }
            }
            Err(e) => Validity::Unreadable(format!("the certificate cannot be decoded: {e}")),
        }
    }

    /// Why this certificate fails a check at `now` for a window ending at `deadline` (both
    /// in seconds since the Unix epoch; a deadline in the past is allowed, as RabbitMQ allows
    /// a negative window): it expires before the deadline, is not yet valid, or cannot be
    /// read. `None` when it passes.
    pub(crate) fn failure(&self, now: u64, deadline: i128) -> Option<Expiring> {
        match self {
            Validity::Dates {
                not_before,
                not_after,
                not_after_text,
            } => {
                if *not_before > now {
                    Some(Expiring::Error("Certificate is not yet valid".into()))
                } else if i128::from(*not_after) < deadline {
                    Some(Expiring::On(not_after_text.clone()))
                } else {
                    None
                }
            }
            Validity::Unreadable(why) => Some(Expiring::Error(why.clone())),
        }
    }
}

/// The acceptor for a `[tls]` table, its files read and checked, and the certificates it
/// serves and checks clients against.
pub(crate) fn acceptor(config: &TlsConfig) -> Result<(TlsAcceptor, ServedCertificates), TlsError> {
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
    let file = |path: &Path, certificates: &[CertificateDer<'_>]| CertificateFile {
        path: path.to_owned(),
        validities: certificates.iter().map(|c| Validity::of(c)).collect(),
    };
    let mut served = ServedCertificates {
        certfile: file(&config.certfile, &chain),
        cacertfile: None,
    };
    let builder = match (config.verify, &config.cacertfile) {
        (TlsVerify::VerifyNone, _) => builder.with_no_client_auth(),
        (TlsVerify::VerifyPeer, Some(path)) => {
            let cas = certificates("cacertfile", path)?;
            served.cacertfile = Some(file(path, &cas));
            let verifier = client_verifier(path, cas, config.fail_if_no_peer_cert, provider)?;
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
    Ok((TlsAcceptor::from(Arc::new(server)), served))
}

/// Checks clients' certificates against `cas`, read from `cacertfile` at `path`.
fn client_verifier(
    path: &Path,
    cas: Vec<CertificateDer<'static>>,
    required: bool,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let mut roots = RootCertStore::empty();
    for (n, certificate) in cas.into_iter().enumerate() {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn dates(not_before: u64, not_after: u64) -> Validity {
        Validity::Dates {
            not_before,
            not_after,
            not_after_text: format!("at {not_after}"),
        }
    }

    #[test]
    fn a_certificate_fails_when_it_expires_before_the_deadline_or_is_not_yet_valid() {
        let day: i128 = 86_400;
        let now = 1_000_000;
        let valid = dates(now - 10, now + 86_400 * 2);
        assert_eq!(valid.failure(now, i128::from(now) + day), None);
        assert_eq!(
            valid.failure(now, i128::from(now) + 3 * day),
            Some(Expiring::On("at 1172800".into()))
        );
        assert_eq!(
            dates(now + 1, now + 86_400 * 2).failure(now, i128::from(now)),
            Some(Expiring::Error("Certificate is not yet valid".into()))
        );
        // A deadline in the past: what expired before it fails, what expired since passes.
        let expired = dates(0, now - 10);
        assert!(expired.failure(now, i128::from(now)).is_some());
        assert_eq!(expired.failure(now, i128::from(now) - day), None);
    }

    #[test]
    fn bytes_that_are_no_certificate_are_reported_not_trusted() {
        let unreadable = Validity::of(b"not DER");
        assert!(
            matches!(&unreadable, Validity::Unreadable(why) if why.starts_with("the certificate cannot be decoded")),
            "{unreadable:?}"
        );
        assert!(matches!(unreadable.failure(0, 0), Some(Expiring::Error(_))));
    }
}
