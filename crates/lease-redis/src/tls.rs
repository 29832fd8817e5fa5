//! TLS for Redis connections (feature `tls`): which CAs to trust and which client certificate
//! to present, checked before any round trip.
//!
//! redis-rs speaks TLS through rustls; this crate pins rustls's `ring` crypto provider (and
//! installs it as the process default when none is installed, because redis-rs builds its
//! rustls configuration from the process default).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use lease_redis::tls::TlsConfig;
//!
//! let config = TlsConfig::new()
//!     .ca_file("/etc/redis/tls/ca.crt")
//!     .client_identity_files("/etc/redis/tls/client.crt", "/etc/redis/tls/client.key");
//! let backend = lease_redis::connect::connect_tls("rediss://redis.internal:6380/", &config).await?;
//! # let _ = backend;
//! # Ok(()) }
//! ```
//!
//! What the server can refuse, and how each refusal is reported, is in
//! [`crate::connect::TlsFailure`].

use std::fmt;
use std::path::{Path, PathBuf};

use redis::{ClientTlsConfig, TlsCertificates};
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Where a PEM document comes from: given bytes, or a file read when the configuration is
/// checked.
#[derive(Clone)]
enum Pem {
    Bytes(Vec<u8>),
    File(PathBuf),
}

impl Pem {
    fn read(&self, what: &'static str) -> Result<Vec<u8>, TlsConfigError> {
        match self {
            Pem::Bytes(b) => Ok(b.clone()),
            Pem::File(path) => std::fs::read(path).map_err(|source| TlsConfigError::Unreadable {
                what,
                path: path.clone(),
                source,
            }),
        }
    }

    fn describe(&self) -> String {
        match self {
            Pem::Bytes(b) => format!("<{} bytes>", b.len()),
            Pem::File(p) => p.display().to_string(),
        }
    }
}

/// Which CAs a TLS connection trusts, and which client certificate it presents (mutual TLS).
///
/// - With no CA given, the system's roots are trusted (`SSL_CERT_FILE` / `SSL_CERT_DIR`
///   replace the platform's store when set, as with OpenSSL).
/// - With a CA ([`ca_pem`](Self::ca_pem) / [`ca_file`](Self::ca_file)), only that CA is
///   trusted, unless [`system_roots(true)`](Self::system_roots) adds the system's roots.
///
/// Files are read, and every PEM parsed, by [`certificates`](Self::certificates), which
/// [`crate::connect::connect_tls`] calls before any round trip: a missing file or a key that
/// does not match its certificate is a [`TlsConfigError`], not a failed handshake.
#[derive(Clone, Default)]
#[must_use]
pub struct TlsConfig {
    ca: Option<Pem>,
    identity: Option<(Pem, Pem)>,
    system_roots: Option<bool>,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The key is never printed, not even its file name's contents.
        f.debug_struct("TlsConfig")
            .field("ca", &self.ca.as_ref().map(Pem::describe))
            .field(
                "client_cert",
                &self.identity.as_ref().map(|(c, _)| c.describe()),
            )
            .field("system_roots", &self.system_roots)
            .finish()
    }
}

impl TlsConfig {
    /// Trust the system's roots, present no client certificate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Trust the CA certificate(s) in this PEM document (one or more `CERTIFICATE` blocks).
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca = Some(Pem::Bytes(pem.into()));
        self
    }

    /// Trust the CA certificate(s) in this PEM file.
    pub fn ca_file(mut self, path: impl AsRef<Path>) -> Self {
        self.ca = Some(Pem::File(path.as_ref().to_path_buf()));
        self
    }

    /// Present this client certificate chain and private key (PEM: PKCS#8, PKCS#1 or SEC1)
    /// when the server asks for one (mutual TLS).
    pub fn client_identity_pem(
        mut self,
        cert: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
    ) -> Self {
        self.identity = Some((Pem::Bytes(cert.into()), Pem::Bytes(key.into())));
        self
    }

    /// Like [`client_identity_pem`](Self::client_identity_pem), from files.
    pub fn client_identity_files(mut self, cert: impl AsRef<Path>, key: impl AsRef<Path>) -> Self {
        self.identity = Some((
            Pem::File(cert.as_ref().to_path_buf()),
            Pem::File(key.as_ref().to_path_buf()),
        ));
        self
    }

    /// Whether to trust the system's roots as well. Default: yes when no CA is given, no when
    /// one is.
    pub fn system_roots(mut self, yes: bool) -> Self {
        self.system_roots = Some(yes);
        self
    }

    /// Reads and checks everything: the CA PEM holds certificates rustls accepts as trust
    /// anchors, the client certificate and key parse and belong together, and there is at
    /// least one trusted root. Returns redis-rs's form, for
    /// `redis::Client::build_with_tls` (used by [`crate::connect::connect_tls`]).
    pub fn certificates(&self) -> Result<TlsCertificates, TlsConfigError> {
        install_crypto_provider();
        let mut anchors: Vec<CertificateDer<'static>> = Vec::new();
        if let Some(ca) = &self.ca {
            let pem = ca.read("CA certificate")?;
            let certs = parse_certs(&pem, "CA certificate")?;
            for cert in certs {
                RootCertStore::empty().add(cert.clone()).map_err(|e| {
                    TlsConfigError::BadCertificate {
                        what: "CA certificate",
                        detail: e.to_string(),
                    }
                })?;
                anchors.push(cert);
            }
        }
        if self.system_roots.unwrap_or(self.ca.is_none()) {
            anchors.extend(system_roots()?);
        }
        if anchors.is_empty() {
            return Err(TlsConfigError::NoTrustAnchors);
        }
        let client_tls = match &self.identity {
            None => None,
            Some((cert, key)) => {
                let cert_pem = cert.read("client certificate")?;
                let key_pem = key.read("client key")?;
                check_identity(&cert_pem, &key_pem)?;
                Some(ClientTlsConfig {
                    client_cert: cert_pem,
                    client_key: key_pem,
                })
            }
        };
        let mut root_pem = Vec::new();
        for cert in &anchors {
            root_pem.extend_from_slice(pem_encode("CERTIFICATE", cert.as_ref()).as_bytes());
        }
        Ok(TlsCertificates {
            client_tls,
            root_cert: Some(root_pem),
        })
    }
}

/// The TLS configuration is unusable; found before any round trip. Each variant names the
/// file or part to fix. The message names the cause once; `source()` is `None` (the cause is in
/// the message and the field).
#[derive(Debug)]
#[non_exhaustive]
pub enum TlsConfigError {
    /// A file could not be read (missing, permissions): check the path.
    Unreadable {
        /// Which file: "CA certificate", "client certificate" or "client key".
        what: &'static str,
        /// The path given.
        path: PathBuf,
        /// The I/O error (in the message; not repeated as `source()`).
        source: std::io::Error,
    },
    /// The PEM document holds no `CERTIFICATE` block (a key, or a DER file, given as a
    /// certificate?): give a PEM certificate.
    NoCertificate {
        /// Which document.
        what: &'static str,
    },
    /// A certificate is malformed or cannot be used (as a trust anchor, for a CA): replace it.
    BadCertificate {
        /// Which document.
        what: &'static str,
        /// What rustls said.
        detail: String,
    },
    /// The client key is missing, malformed, of an unsupported kind, or does not match the
    /// client certificate: give the key that belongs to the certificate (PEM: PKCS#8, PKCS#1
    /// or SEC1).
    BadKey(String),
    /// Nothing to trust: no CA given and the system's roots turned off (or the system has
    /// none). Give a CA, or turn the system's roots on.
    NoTrustAnchors,
    /// The system's roots could not be loaded (an unreadable `SSL_CERT_FILE`, say) and none
    /// were found: fix the store, or give a CA and turn the system's roots off.
    SystemRoots(String),
    /// redis-rs refused the configuration: the detail says why.
    Rejected(String),
}

impl std::fmt::Display for TlsConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TlsConfigError::Unreadable { what, path, source } => {
                write!(
                    f,
                    "cannot read the {what} file {}: {source}",
                    path.display()
                )
            }
            TlsConfigError::NoCertificate { what } => {
                write!(f, "the {what} holds no PEM certificate")
            }
            TlsConfigError::BadCertificate { what, detail } => {
                write!(f, "the {what} is not usable: {detail}")
            }
            TlsConfigError::BadKey(d) => write!(f, "the client key is not usable: {d}"),
            TlsConfigError::NoTrustAnchors => {
                f.write_str("no trusted CA: give a CA certificate or trust the system's roots")
            }
            TlsConfigError::SystemRoots(d) => {
                write!(f, "cannot load the system's root certificates: {d}")
            }
            TlsConfigError::Rejected(d) => write!(f, "redis-rs refused the TLS configuration: {d}"),
        }
    }
}

// No `source()`: the cause is in the message (see the type's documentation).
impl std::error::Error for TlsConfigError {}

/// Installs rustls's `ring` provider as the process default unless one is installed already
/// (redis-rs builds its rustls configuration from the process default). Losing a race to
/// another installer is fine: a default exists either way.
pub fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

fn parse_certs(
    pem: &[u8],
    what: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsConfigError::BadCertificate {
            what,
            detail: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsConfigError::NoCertificate { what });
    }
    Ok(certs)
}

fn check_identity(cert_pem: &[u8], key_pem: &[u8]) -> Result<(), TlsConfigError> {
    let chain = parse_certs(cert_pem, "client certificate")?;
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| TlsConfigError::BadKey(e.to_string()))?;
    let provider = rustls::crypto::ring::default_provider();
    rustls::sign::CertifiedKey::from_der(chain, key, &provider)
        .map(drop)
        .map_err(|e| TlsConfigError::BadKey(e.to_string()))
}

/// The system's roots that rustls accepts (an unparsable one is skipped with a warning, as
/// rustls itself would).
fn system_roots() -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let loaded = rustls_native_certs::load_native_certs();
    let mut roots = Vec::with_capacity(loaded.certs.len());
    let mut skipped = 0usize;
    for cert in loaded.certs {
        if RootCertStore::empty().add(cert.clone()).is_ok() {
            roots.push(cert);
        } else {
            skipped += 1;
        }
    }
    if skipped > 0 {
        tracing::warn!(
            skipped,
            "system root certificates rustls cannot use were skipped"
        );
    }
    if !loaded.errors.is_empty() {
        let detail = loaded
            .errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        if roots.is_empty() {
            return Err(TlsConfigError::SystemRoots(detail));
        }
        tracing::warn!(errors = %detail, "some system root certificates could not be loaded");
    }
    Ok(roots)
}

/// PEM armour around DER bytes (base64, 64 columns).
fn pem_encode(label: &str, der: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = String::with_capacity(der.len().div_ceil(3) * 4);
    for chunk in der.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                let index = (n >> (18 - 6 * i)) & 63;
                b64.push(char::from(ALPHABET[index as usize]));
            } else {
                b64.push('=');
            }
        }
    }
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many times `needle` appears in the messages of `e` and of everything below it
    /// (the chain a reporter prints by walking `source()`).
    fn count_in_chain(e: &(dyn std::error::Error + 'static), needle: &str) -> usize {
        let mut count = 0;
        let mut next = Some(e);
        while let Some(err) = next {
            count += err.to_string().matches(needle).count();
            next = err.source();
        }
        count
    }

    #[test]
    fn each_cause_is_printed_once() {
        let e = TlsConfigError::Unreadable {
            what: "client key",
            path: "/nowhere/client.key".into(),
            source: std::io::Error::other("permission denied"),
        };
        assert_eq!(count_in_chain(&e, "permission denied"), 1, "{e}");
        assert!(std::error::Error::source(&e).is_none());
        let e = TlsConfigError::BadKey("not a key".into());
        assert_eq!(count_in_chain(&e, "not a key"), 1, "{e}");
    }

    #[test]
    fn pem_encoding_round_trips() {
        assert_eq!(
            pem_encode("X", b"foobar"),
            "-----BEGIN X-----\nZm9vYmFy\n-----END X-----\n"
        );
        assert!(pem_encode("X", b"fo").contains("\nZm8=\n"));
        assert!(pem_encode("X", b"f").contains("\nZg==\n"));
        let der: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let pem = pem_encode("CERTIFICATE", &der);
        let back = CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
        assert_eq!(back.as_ref(), &der[..]);
    }

    #[test]
    fn bad_inputs_are_typed_errors() {
        let e = TlsConfig::new()
            .ca_file("/nonexistent/ca.pem")
            .certificates()
            .unwrap_err();
        assert!(matches!(e, TlsConfigError::Unreadable { .. }), "{e}");
        let e = TlsConfig::new()
            .ca_pem("no pem here")
            .certificates()
            .unwrap_err();
        assert!(matches!(e, TlsConfigError::NoCertificate { .. }), "{e}");
        let e = TlsConfig::new()
            .ca_pem("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
            .certificates()
            .unwrap_err();
        assert!(matches!(e, TlsConfigError::BadCertificate { .. }), "{e}");
        let e = TlsConfig::new()
            .system_roots(false)
            .certificates()
            .unwrap_err();
        assert!(matches!(e, TlsConfigError::NoTrustAnchors), "{e}");
    }
}
