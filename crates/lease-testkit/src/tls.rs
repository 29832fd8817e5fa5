//! Certificates for TLS tests, generated per test with `rcgen`: a CA ([`TestPki`]), server
//! certificates ([`ServerCert`], current or expired, for the names you choose) and client
//! certificates ([`ClientCert`]) for mutual TLS. Every file is PEM, in the PKI's temporary
//! directory, removed when the last handle to it is dropped.
//!
//! A server started with [`crate::redis::RedisServerBuilder::tls`] listens on a TLS port
//! ([`crate::RedisServer::tls_url`]) besides its plain one. TLS servers run as processes only
//! (the container image carries no certificates): a TLS server ignores
//! `REDLEASE_TEST_SERVERS=container`.
//!
//! ```no_run
//! use lease_testkit::RedisServer;
//! use lease_testkit::tls::{ClientAuth, TestPki, Validity};
//!
//! # async fn demo() -> lease_testkit::Result<()> {
//! let pki = TestPki::new()?;
//! let cert = pki.server_cert(&["localhost", "127.0.0.1"], Validity::Current)?;
//! let server = RedisServer::builder().tls_with(&cert, ClientAuth::Required).start().await?;
//! let client = pki.client_cert("client-a")?;
//! // Connect to server.tls_url() trusting pki.ca_file(), presenting client.cert_file() and
//! // client.key_file().
//! # let _ = (server, client);
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, date_time_ymd,
};

use crate::tempdir::TempDir;
use crate::{Error, Result};

/// Whether a certificate is valid now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validity {
    /// Valid from 2020 to 2099.
    Current,
    /// Valid during 2001 only: expired.
    Expired,
}

/// Whether a TLS server asks for client certificates (`tls-auth-clients`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientAuth {
    /// `tls-auth-clients no`: no client certificate asked for.
    #[default]
    None,
    /// `tls-auth-clients optional`: a certificate is checked when given.
    Optional,
    /// `tls-auth-clients yes`: a client without a certificate signed by the CA is refused.
    Required,
}

impl ClientAuth {
    pub(crate) fn redis_value(self) -> &'static str {
        match self {
            ClientAuth::None => "no",
            ClientAuth::Optional => "optional",
            ClientAuth::Required => "yes",
        }
    }
}

/// A test certificate authority and the directory its files live in.
pub struct TestPki {
    dir: Arc<TempDir>,
    issuer: CertifiedIssuer<'static, KeyPair>,
    ca_pem: String,
    ca_file: PathBuf,
    next: AtomicU32,
}

impl std::fmt::Debug for TestPki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestPki")
            .field("ca_file", &self.ca_file)
            .finish_non_exhaustive()
    }
}

/// A server certificate and key (PEM files), with the CA that signed it.
#[derive(Debug, Clone)]
pub struct ServerCert {
    pub(crate) dir: Arc<TempDir>,
    cert_pem: String,
    key_pem: String,
    cert_file: PathBuf,
    key_file: PathBuf,
    ca_file: PathBuf,
}

/// A client certificate and key (PEM files) for mutual TLS.
#[derive(Debug, Clone)]
pub struct ClientCert {
    _dir: Arc<TempDir>,
    cert_pem: String,
    key_pem: String,
    cert_file: PathBuf,
    key_file: PathBuf,
}

fn rcgen_error(e: rcgen::Error) -> Error {
    Error::Config(format!("generating a test certificate: {e}"))
}

impl TestPki {
    /// A new CA (`redlease test CA <pid>-<n>`, a name of its own; valid 2020-2099) with its
    /// certificate written to [`ca_file`](Self::ca_file).
    pub fn new() -> Result<Self> {
        let dir = Arc::new(TempDir::new("pki")?);
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(rcgen_error)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // A name of its own: TLS stacks look an issuer up by name, so two test CAs with one
        // name would look like one CA with a bad signature, not an unknown CA.
        static CAS: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "redlease test CA {}-{}",
            std::process::id(),
            CAS.fetch_add(1, Ordering::Relaxed)
        );
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = date_time_ymd(2020, 1, 1);
        params.not_after = date_time_ymd(2099, 1, 1);
        let key = KeyPair::generate().map_err(rcgen_error)?;
        let issuer = CertifiedIssuer::self_signed(params, key).map_err(rcgen_error)?;
        let ca_pem = issuer.pem();
        let ca_file = write(&dir, "ca.crt", &ca_pem)?;
        Ok(TestPki {
            dir,
            issuer,
            ca_pem,
            ca_file,
            next: AtomicU32::new(0),
        })
    }

    /// The CA certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The CA certificate's file.
    pub fn ca_file(&self) -> &Path {
        &self.ca_file
    }

    /// A server certificate for `names` (DNS names or IP addresses, as subject alternative
    /// names), signed by this CA.
    pub fn server_cert(&self, names: &[&str], validity: Validity) -> Result<ServerCert> {
        let (cert_pem, key_pem, cert_file, key_file) = self.issue(
            names,
            names.first().copied().unwrap_or("redis"),
            validity,
            ExtendedKeyUsagePurpose::ServerAuth,
            "server",
        )?;
        Ok(ServerCert {
            dir: self.dir.clone(),
            cert_pem,
            key_pem,
            cert_file,
            key_file,
            ca_file: self.ca_file.clone(),
        })
    }

    /// A (currently valid) client certificate with common name `name`, signed by this CA.
    pub fn client_cert(&self, name: &str) -> Result<ClientCert> {
        let (cert_pem, key_pem, cert_file, key_file) = self.issue(
            &[],
            name,
            Validity::Current,
            ExtendedKeyUsagePurpose::ClientAuth,
            "client",
        )?;
        Ok(ClientCert {
            _dir: self.dir.clone(),
            cert_pem,
            key_pem,
            cert_file,
            key_file,
        })
    }

    fn issue(
        &self,
        names: &[&str],
        common_name: &str,
        validity: Validity,
        usage: ExtendedKeyUsagePurpose,
        label: &str,
    ) -> Result<(String, String, PathBuf, PathBuf)> {
        let sans: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
        let mut params = CertificateParams::new(sans).map_err(rcgen_error)?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![usage];
        (params.not_before, params.not_after) = match validity {
            Validity::Current => (date_time_ymd(2020, 1, 1), date_time_ymd(2099, 1, 1)),
            Validity::Expired => (date_time_ymd(2001, 1, 1), date_time_ymd(2002, 1, 1)),
        };
        let key = KeyPair::generate().map_err(rcgen_error)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(rcgen_error)?;
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let cert_pem = cert.pem();
        let key_pem = key.serialize_pem();
        let cert_file = write(&self.dir, &format!("{label}-{n}.crt"), &cert_pem)?;
        let key_file = write(&self.dir, &format!("{label}-{n}.key"), &key_pem)?;
        Ok((cert_pem, key_pem, cert_file, key_file))
    }
}

fn write(dir: &TempDir, name: &str, contents: &str) -> Result<PathBuf> {
    let path = dir.path().join(name);
    std::fs::write(&path, contents)
        .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    Ok(path)
}

impl ServerCert {
    /// The certificate (PEM).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }
    /// The private key (PEM, PKCS#8).
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }
    /// The certificate's file (`--tls-cert-file`).
    pub fn cert_file(&self) -> &Path {
        &self.cert_file
    }
    /// The key's file (`--tls-key-file`).
    pub fn key_file(&self) -> &Path {
        &self.key_file
    }
    /// The signing CA's certificate file (`--tls-ca-cert-file`).
    pub fn ca_file(&self) -> &Path {
        &self.ca_file
    }
}

impl ClientCert {
    /// The certificate (PEM).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }
    /// The private key (PEM, PKCS#8).
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }
    /// The certificate's file.
    pub fn cert_file(&self) -> &Path {
        &self.cert_file
    }
    /// The key's file.
    pub fn key_file(&self) -> &Path {
        &self.key_file
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_pem_files() {
        let pki = TestPki::new().unwrap();
        let server = pki
            .server_cert(&["localhost", "127.0.0.1"], Validity::Expired)
            .unwrap();
        let client = pki.client_cert("c").unwrap();
        for path in [
            pki.ca_file(),
            server.cert_file(),
            server.key_file(),
            client.cert_file(),
            client.key_file(),
        ] {
            let text = std::fs::read_to_string(path).unwrap();
            assert!(text.starts_with("-----BEGIN "), "{}", path.display());
        }
        // The files outlive the PKI while a certificate is held.
        let file = server.cert_file().to_path_buf();
        drop(pki);
        assert!(file.exists());
        drop((server, client));
        assert!(!file.exists());
    }
}
