//! Connecting to Redis, and what a failed connection means: [`connect`], `connect_tls`
//! (feature `tls`), [`ConnectError`], and the classification of TLS failures
//! ([`TlsFailure`], [`tls_failure`], [`connect_failure`]).
//!
//! **Timeout policy** (the same for these functions, the CLI and Redlock nodes): connecting,
//! TLS handshake included, is bounded by [`CONNECT_TIMEOUT`]; the connection has **no
//! response timeout**, because the library bounds every call itself, and it is a
//! [`HealingConnection`]: given up and opened again when the server goes silent (see
//! [`crate::healing`]), with TCP keepalive and `TCP_USER_TIMEOUT`. A plain client talking to a
//! TLS port therefore fails within about two seconds, never hangs.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use lease_core::BackendError;
use redis::{ErrorKind, RedisError};

use crate::RedisBackend;
use crate::healing::HealingConnection;
#[cfg(feature = "cluster")]
use crate::healing_cluster::HealingCluster;
use crate::notify::ReleaseNotices;
#[cfg(feature = "tls")]
use crate::tls::{TlsConfig, TlsConfigError};

/// How long one connection attempt (TCP connect, TLS handshake, `HELLO`/`AUTH`) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Why a TLS connection failed, as far as the client can tell. Each variant says what the
/// operator should check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TlsFailure {
    /// The server's certificate was not issued by a CA this client trusts. Give the CA that
    /// signed the server's certificate (`TlsConfig::ca_file`, the CLI's `--tls-ca`), or check
    /// that you are talking to the server you think you are.
    UnknownCa,
    /// The server's certificate has expired (or is not valid yet): renew it on the server, or
    /// check the client's clock.
    CertificateExpired,
    /// The server's certificate is not valid for the host name in the URL: connect by a name
    /// (or IP address) listed in the certificate's subject alternative names.
    NameMismatch,
    /// The server requires a client certificate (`tls-auth-clients yes`) and got none, or
    /// refused the one given: configure a client certificate and key signed by the CA the
    /// server trusts (`TlsConfig::client_identity_files`, the CLI's `--tls-cert`/`--tls-key`).
    ClientCertificateRefused,
    /// A `rediss://` URL, but the server did not answer with TLS: it is most likely a plain
    /// Redis port. Use `redis://`, or the server's `tls-port`.
    NotTls,
    /// A plain `redis://` URL, but the server closed the connection or answered with something
    /// that is not Redis's protocol: it is most likely a TLS port. Use `rediss://`.
    PlainTcpToTlsPort,
    /// Any other TLS handshake failure (no common protocol version or cipher suite, a
    /// certificate the client cannot parse, an alert from the server). The source error
    /// has the details.
    Handshake,
}

impl TlsFailure {
    /// A short description for logs and one-line error messages.
    pub fn describe(self) -> &'static str {
        match self {
            TlsFailure::UnknownCa => {
                "the server's certificate is not signed by a trusted CA (give its CA)"
            }
            TlsFailure::CertificateExpired => {
                "the server's certificate has expired or is not valid yet"
            }
            TlsFailure::NameMismatch => {
                "the server's certificate is not valid for the host name in the URL"
            }
            TlsFailure::ClientCertificateRefused => {
                "the server requires a client certificate (mutual TLS) and got none or refused it"
            }
            TlsFailure::NotTls => {
                "the server did not answer with TLS (a plain Redis port? use redis://)"
            }
            TlsFailure::PlainTcpToTlsPort => {
                "the server closed the connection or did not speak Redis's protocol (a TLS port? use rediss://)"
            }
            TlsFailure::Handshake => "the TLS handshake failed",
        }
    }
}

impl fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// A connection to Redis could not be made. Nothing was sent to the lease keys: every
/// variant is "not applied".
///
/// The message names the cause once, and [`std::error::Error::source`] is `None` (the rule of
/// every redlease error, [`BackendError`] included): the cause is in the message and in the
/// variant's field, so a reporter that prints the source chain prints it once.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConnectError {
    /// The URL is malformed, or its scheme does not fit the call (a TLS connection needs a
    /// `rediss://` URL; `rediss://` needs the `tls` feature). Fix the URL. The URL itself is
    /// not repeated here: it may carry a password.
    InvalidUrl(String),
    /// The TLS configuration (CA, client certificate or key) is unusable, found before any
    /// round trip. Fix the files it names.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    TlsConfig(TlsConfigError),
    /// The TLS handshake failed (or a plain connection met a TLS port): `failure` says why,
    /// and what to check.
    Tls {
        /// What went wrong, as far as the client can tell.
        failure: TlsFailure,
        /// The error redis-rs reported (in the message; not repeated as `source()`).
        source: RedisError,
    },
    /// Any other failure: the server is unreachable (refused, timed out, unknown host), or it
    /// answered with an error (a wrong password: `WRONGPASS`). Check the address and the
    /// credentials; [`ConnectError::into_backend_error`] tells transient from permanent.
    Redis(RedisError),
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::InvalidUrl(m) => write!(f, "invalid Redis URL: {m}"),
            #[cfg(feature = "tls")]
            ConnectError::TlsConfig(e) => write!(f, "invalid TLS configuration: {e}"),
            ConnectError::Tls { failure, source } => write!(f, "TLS: {failure}: {source}"),
            ConnectError::Redis(e) => write!(f, "cannot connect to Redis: {e}"),
        }
    }
}

// No `source()`: each cause is in the message (see the type's documentation).
impl StdError for ConnectError {}

#[cfg(feature = "tls")]
impl From<TlsConfigError> for ConnectError {
    fn from(e: TlsConfigError) -> Self {
        ConnectError::TlsConfig(e)
    }
}

impl ConnectError {
    /// The TLS failure, when the connection failed in (or because of) TLS.
    pub fn tls_failure(&self) -> Option<TlsFailure> {
        match self {
            ConnectError::Tls { failure, .. } => Some(*failure),
            _ => None,
        }
    }

    /// As a [`BackendError`] (never applied): a bad URL or TLS configuration is
    /// [`BackendError::Invalid`]; a TLS failure is [`BackendError::Unavailable`]; any other
    /// error is mapped by [`crate::backend_error`] (a wrong password is `Refused`).
    pub fn into_backend_error(self) -> BackendError {
        match self {
            ConnectError::InvalidUrl(m) => BackendError::Invalid(format!("invalid Redis URL: {m}")),
            #[cfg(feature = "tls")]
            ConnectError::TlsConfig(e) => {
                BackendError::Invalid(format!("invalid TLS configuration: {e}"))
            }
            e @ ConnectError::Tls { .. } => BackendError::Unavailable(Box::new(e)),
            ConnectError::Redis(e) => crate::backend_error(e),
        }
    }
}

impl From<ConnectError> for BackendError {
    fn from(e: ConnectError) -> Self {
        e.into_backend_error()
    }
}

/// Classifies a redis-rs error met while connecting with TLS: `Some` when the TLS layer
/// failed (walking the error's sources down to rustls's error, and the alerts the server
/// sent), `None` for anything else (refused connection, timeout, authentication).
///
/// | rustls error | failure |
/// |---|---|
/// | `InvalidCertificate(UnknownIssuer)`, `BadSignature`, alert `UnknownCA` | [`TlsFailure::UnknownCa`] |
/// | `InvalidCertificate(Expired..)`, `NotValidYet..` | [`TlsFailure::CertificateExpired`] |
/// | `InvalidCertificate(NotValidForName..)` | [`TlsFailure::NameMismatch`] |
/// | alert `CertificateRequired`, `BadCertificate`, `CertificateUnknown`, `HandshakeFailure` after a certificate request | [`TlsFailure::ClientCertificateRefused`] |
/// | `InvalidMessage(InvalidContentType)`, `InvalidMessage(..)`, `InappropriateMessage` before the handshake ends | [`TlsFailure::NotTls`] |
/// | (a handshake that timed out on a port that answers a plain `PING`: see `is_plain_redis`) | [`TlsFailure::NotTls`] |
/// | any other rustls error | [`TlsFailure::Handshake`] |
///
/// [`TlsFailure::PlainTcpToTlsPort`] cannot be seen in an error alone (a plain client sees
/// a closed connection or a garbled reply); [`connect_failure`] reports it for plain URLs.
pub fn tls_failure(e: &RedisError) -> Option<TlsFailure> {
    let mut found = None;
    visit(e, &mut |err| {
        if found.is_none() {
            found = classify_one(err);
        }
    });
    found
}

/// Turns a redis-rs error from a connection attempt into a [`ConnectError`]. `tls` says
/// whether the URL was `rediss://`: a TLS failure becomes [`ConnectError::Tls`]; on a plain
/// URL, a connection closed before any reply or a reply that is not RESP (what a TLS port
/// does with plain text) becomes [`TlsFailure::PlainTcpToTlsPort`].
pub fn connect_failure(e: RedisError, tls: bool) -> ConnectError {
    if let Some(failure) = tls_failure(&e) {
        return ConnectError::Tls { failure, source: e };
    }
    if !tls && looks_like_tls_port(&e) {
        return ConnectError::Tls {
            failure: TlsFailure::PlainTcpToTlsPort,
            source: e,
        };
    }
    if e.kind() == ErrorKind::InvalidClientConfig {
        return ConnectError::InvalidUrl(e.to_string());
    }
    ConnectError::Redis(e)
}

/// Connects to the Redis at `url` (`redis://`, or `rediss://` with the `tls` feature,
/// trusting the system's roots) with a self-healing [`HealingConnection`] and wraps it in a
/// standalone [`RedisBackend`]. See the module's timeout policy.
///
/// The backend has [`ReleaseNotices`] on the same server: followers and lock waiters are woken
/// when a lease is released, over one subscriber connection opened when a waiter first needs
/// it (see [`crate::notify`]).
///
/// The connection sets `TCP_NODELAY` (see [`tcp_settings`](crate::healing::tcp_settings)):
/// each request leaves at once, which a lease's latency wants over a network. Many requests
/// in flight at once to a server on the same host batch better with Nagle's algorithm
/// (redis-rs's default): 64 tasks locking in a loop over loopback ran 20–25 % faster over
/// a `MultiplexedConnection` without response timeout given to [`RedisBackend::new`]
/// (`docs/benchmarks.md`), which keeps every outcome the same but does not heal a silent
/// connection.
pub async fn connect(url: &str) -> Result<RedisBackend<HealingConnection>, ConnectError> {
    let client = redis::Client::open(url).map_err(|e| ConnectError::InvalidUrl(e.to_string()))?;
    let tls = is_tls_url(&client);
    managed(client, tls).await
}

/// Connects to the Redis Cluster whose seed nodes are `urls` (`redis://`, or `rediss://` with
/// the `tls` feature; credentials as given in the URLs) with a self-healing [`HealingCluster`]
/// (a silent slot's node makes it rebuild from the seeds, see [`crate::healing_cluster`]) and
/// wraps it in a cluster [`RedisBackend`] (hash slots checked before any round trip), with
/// [`ReleaseNotices`] over sharded pub/sub. The same timeout policy as [`connect`]; building
/// the first connection (seeds, `CLUSTER SLOTS`, the nodes) is bounded by three seconds.
///
/// For TLS with your own CA, or other client settings, build a `ClusterClientBuilder`, give it
/// to [`HealingCluster::connect`] and [`ReleaseNotices::cluster`], and use
/// [`RedisBackend::cluster`].
#[cfg(feature = "cluster")]
#[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
pub async fn connect_cluster<S: AsRef<str>>(
    urls: &[S],
) -> Result<RedisBackend<HealingCluster>, ConnectError> {
    use redis::IntoConnectionInfo;
    if urls.is_empty() {
        return Err(ConnectError::InvalidUrl(
            "a Redis Cluster needs at least one seed URL".to_owned(),
        ));
    }
    let mut infos = Vec::with_capacity(urls.len());
    for url in urls {
        infos.push(
            url.as_ref()
                .into_connection_info()
                .map_err(|e| ConnectError::InvalidUrl(e.to_string()))?,
        );
    }
    let tls = infos
        .iter()
        .any(|i| matches!(i.addr(), redis::ConnectionAddr::TcpTls { .. }));
    let builder = || redis::cluster::ClusterClientBuilder::new(infos.clone());
    let notices =
        ReleaseNotices::cluster(builder()).map_err(|e| ConnectError::InvalidUrl(e.to_string()))?;
    match HealingCluster::connect(builder()).await {
        Ok(conn) => Ok(RedisBackend::cluster(conn).with_release_notices(notices)),
        Err(e) => {
            let e = connect_failure(e, tls);
            tracing::debug!(error = %e, "connecting to the Redis Cluster failed");
            Err(e)
        }
    }
}

/// Connects to the Redis at `url`, which must be `rediss://`, with the CA and client
/// certificate of `config` (checked before any round trip), like [`connect`].
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
pub async fn connect_tls(
    url: &str,
    config: &TlsConfig,
) -> Result<RedisBackend<HealingConnection>, ConnectError> {
    let client = tls_client(url, config)?;
    managed(client, true).await
}

/// A redis-rs client for `url` (which must be `rediss://`) with the CA and client certificate
/// of `config`, checked before any round trip. For building your own connections (a
/// `MultiplexedConnection` for one-shot commands, say).
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
pub fn tls_client(url: &str, config: &TlsConfig) -> Result<redis::Client, ConnectError> {
    use redis::IntoConnectionInfo;
    let info = url
        .into_connection_info()
        .map_err(|e| ConnectError::InvalidUrl(e.to_string()))?;
    if !matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }) {
        return Err(ConnectError::InvalidUrl(
            "a TLS connection needs a rediss:// URL".to_owned(),
        ));
    }
    let certificates = config.certificates()?;
    redis::Client::build_with_tls(info, certificates)
        .map_err(|e| ConnectError::TlsConfig(TlsConfigError::Rejected(e.to_string())))
}

fn is_tls_url(client: &redis::Client) -> bool {
    #[cfg(feature = "tls")]
    {
        matches!(
            client.get_connection_info().addr(),
            redis::ConnectionAddr::TcpTls { .. }
        )
    }
    #[cfg(not(feature = "tls"))]
    {
        let _ = client;
        false
    }
}

async fn managed(
    client: redis::Client,
    tls: bool,
) -> Result<RedisBackend<HealingConnection>, ConnectError> {
    #[cfg(feature = "tls")]
    let addr = client.get_connection_info().addr().clone();
    // The first connection is opened here, once (no retries with backoff): a wrong password,
    // an unreachable server or a TLS failure is reported at once; later connections are opened
    // by the next call, which the driver retries within the lease's bounds anyway.
    match HealingConnection::connect(client.clone()).await {
        Ok(conn) => Ok(RedisBackend::new(conn).with_release_notices(ReleaseNotices::new(client))),
        Err(e) => {
            #[cfg(feature = "tls")]
            if tls && e.is_timeout() && is_plain_redis(&addr).await {
                return Err(ConnectError::Tls {
                    failure: TlsFailure::NotTls,
                    source: e,
                });
            }
            let e = connect_failure(e, tls);
            tracing::debug!(error = %e, "connecting to Redis failed");
            Err(e)
        }
    }
}

/// Whether the `rediss://` address `addr` answers plain RESP: a TLS handshake with a plain
/// Redis port does not fail, it times out (Redis waits for the end of an "inline command" that
/// never comes), so after a timed-out handshake [`connect_tls`] asks the port a plain `PING`
/// (bounded by 500 ms). `true` when the answer starts like a RESP reply (`+PONG`, or an error
/// such as `-NOAUTH`).
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
pub async fn is_plain_redis(addr: &redis::ConnectionAddr) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let redis::ConnectionAddr::TcpTls { host, port, .. } = addr else {
        return false;
    };
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect((host.as_str(), *port))
            .await
            .ok()?;
        stream.write_all(b"PING\r\n").await.ok()?;
        let mut reply = [0u8; 1];
        let n = stream.read(&mut reply).await.ok()?;
        Some(n == 1 && matches!(reply[0], b'+' | b'-'))
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(500), probe).await,
        Ok(Some(true))
    )
}

/// A plain connection that a TLS port met: Redis's TLS port reads the plain request as a
/// broken TLS record and closes the connection (or answers with a TLS alert, which is not
/// RESP).
fn looks_like_tls_port(e: &RedisError) -> bool {
    if e.kind() == ErrorKind::Parse {
        return true;
    }
    if e.is_connection_refusal() || e.is_timeout() {
        return false;
    }
    e.is_connection_dropped() || {
        let mut eof = false;
        visit(e, &mut |err| {
            if let Some(io) = err.downcast_ref::<std::io::Error>() {
                eof |= matches!(
                    io.kind(),
                    std::io::ErrorKind::UnexpectedEof
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::BrokenPipe
                        | std::io::ErrorKind::ConnectionAborted
                );
            }
        });
        eof
    }
}

/// Calls `f` on `e` and everything below it: `source()`, the error an `io::Error` wraps
/// (which `io::Error::source` skips), and the error behind an `Arc` (how redis-rs keeps
/// I/O errors).
fn visit<'a>(e: &'a (dyn StdError + 'static), f: &mut dyn FnMut(&'a (dyn StdError + 'static))) {
    let mut stack: Vec<&'a (dyn StdError + 'static)> = vec![e];
    let mut seen = 0;
    while let Some(err) = stack.pop() {
        seen += 1;
        if seen > 32 {
            return; // a cycle or an absurd chain: stop
        }
        f(err);
        if let Some(arc) = err.downcast_ref::<std::sync::Arc<dyn StdError + Send + Sync>>() {
            stack.push(&**arc);
        }
        if let Some(inner) = err
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            stack.push(inner);
        }
        if let Some(source) = err.source() {
            stack.push(source);
        }
    }
}

fn classify_one(err: &(dyn StdError + 'static)) -> Option<TlsFailure> {
    #[cfg(feature = "tls")]
    if let Some(e) = err.downcast_ref::<rustls::Error>() {
        return Some(classify_rustls(e));
    }
    // Without a rustls error to look at (another TLS backend, or an error kept only as
    // text): the messages rustls and redis-rs write.
    let text = err.to_string();
    classify_text(&text)
}

#[cfg(feature = "tls")]
fn classify_rustls(e: &rustls::Error) -> TlsFailure {
    use rustls::{AlertDescription as A, CertificateError as C, Error as E};
    match e {
        E::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => TlsFailure::UnknownCa,
        E::InvalidCertificate(
            C::Expired | C::ExpiredContext { .. } | C::NotValidYet | C::NotValidYetContext { .. },
        ) => TlsFailure::CertificateExpired,
        E::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
            TlsFailure::NameMismatch
        }
        E::AlertReceived(
            A::CertificateRequired
            | A::NoCertificate
            | A::BadCertificate
            | A::CertificateUnknown
            | A::UnsupportedCertificate
            | A::CertificateRevoked
            | A::CertificateExpired
            | A::AccessDenied
            // The server does not know the CA of our client certificate.
            | A::UnknownCA,
        ) => TlsFailure::ClientCertificateRefused,
        E::InvalidMessage(_) | E::InappropriateMessage { .. } => TlsFailure::NotTls,
        _ => TlsFailure::Handshake,
    }
}

fn classify_text(text: &str) -> Option<TlsFailure> {
    let t = text.to_ascii_lowercase();
    if t.contains("unknownissuer") || t.contains("unknown issuer") {
        Some(TlsFailure::UnknownCa)
    } else if t.contains("certificate expired")
        || (t.contains("expired") && t.contains("certificate"))
    {
        Some(TlsFailure::CertificateExpired)
    } else if t.contains("notvalidforname") || t.contains("not valid for name") {
        Some(TlsFailure::NameMismatch)
    } else if t.contains("certificaterequired") || t.contains("badcertificate") {
        Some(TlsFailure::ClientCertificateRefused)
    } else if t.contains("invalidcontenttype") || t.contains("corrupt message") {
        Some(TlsFailure::NotTls)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io_wrapped(inner: impl StdError + Send + Sync + 'static) -> RedisError {
        RedisError::from(std::io::Error::new(std::io::ErrorKind::InvalidData, inner))
    }

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
        let e = ConnectError::Redis(io_wrapped(std::io::Error::other("wire cut")));
        assert_eq!(count_in_chain(&e, "wire cut"), 1, "{e}");
        assert!(e.source().is_none());
        let e = ConnectError::Tls {
            failure: TlsFailure::UnknownCa,
            source: io_wrapped(std::io::Error::other("bad issuer")),
        };
        assert_eq!(count_in_chain(&e, "bad issuer"), 1, "{e}");
        // Wrapped again, as the driver sees it.
        let b = e.into_backend_error();
        assert_eq!(count_in_chain(&b, "bad issuer"), 1, "{b}");
        #[cfg(feature = "tls")]
        {
            let e = ConnectError::from(TlsConfigError::Unreadable {
                what: "CA certificate",
                path: "/nowhere/ca.crt".into(),
                source: std::io::Error::other("no such file"),
            });
            assert_eq!(count_in_chain(&e, "no such file"), 1, "{e}");
            assert_eq!(count_in_chain(&e, "/nowhere/ca.crt"), 1, "{e}");
        }
    }

    #[cfg(feature = "tls")]
    #[test]
    fn rustls_errors_inside_io_errors_are_classified() {
        use rustls::{AlertDescription, CertificateError, Error, InvalidMessage};
        let cases = [
            (
                Error::InvalidCertificate(CertificateError::UnknownIssuer),
                TlsFailure::UnknownCa,
            ),
            (
                Error::InvalidCertificate(CertificateError::Expired),
                TlsFailure::CertificateExpired,
            ),
            (
                Error::InvalidCertificate(CertificateError::NotValidForName),
                TlsFailure::NameMismatch,
            ),
            (
                Error::AlertReceived(AlertDescription::CertificateRequired),
                TlsFailure::ClientCertificateRefused,
            ),
            (
                Error::InvalidMessage(InvalidMessage::InvalidContentType),
                TlsFailure::NotTls,
            ),
            (Error::DecryptError, TlsFailure::Handshake),
        ];
        for (rustls_error, want) in cases {
            let e = io_wrapped(rustls_error);
            assert_eq!(tls_failure(&e), Some(want), "{e}");
            // The clone redis-rs hands to every waiter keeps the source.
            assert_eq!(tls_failure(&e.clone()), Some(want), "{e}");
        }
    }

    #[test]
    fn other_errors_are_not_tls() {
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(tls_failure(&refused), None);
        assert!(matches!(
            connect_failure(refused, false),
            ConnectError::Redis(_)
        ));
        let eof = RedisError::from(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
        assert_eq!(
            connect_failure(eof.clone(), false).tls_failure(),
            Some(TlsFailure::PlainTcpToTlsPort)
        );
        assert!(matches!(connect_failure(eof, true), ConnectError::Redis(_)));
    }

    #[test]
    fn into_backend_error_is_never_applied() {
        let e = ConnectError::InvalidUrl("x".to_owned()).into_backend_error();
        assert!(matches!(e, BackendError::Invalid(_)));
        let e = ConnectError::Tls {
            failure: TlsFailure::UnknownCa,
            source: io_wrapped(std::io::Error::other("x")),
        };
        assert!(matches!(
            BackendError::from(e),
            BackendError::Unavailable(_)
        ));
    }
}
