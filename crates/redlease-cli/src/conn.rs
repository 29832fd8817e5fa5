//! Connecting to Redis: fail fast (about one second) when it is unreachable; over TLS for
//! `rediss://` URLs (the system's roots or `SSL_CERT_FILE`, plus `--tls-ca`; `--tls-cert` and
//! `--tls-key` for mutual TLS), naming a TLS failure when there is one.

use std::time::Duration;

use redlease::redis::client::RedisError;
use redlease::redis::client::aio::MultiplexedConnection;
use redlease::redis::{
    ConnectError, HealingConnection, TlsConfigError, TlsFailure, connect_failure, is_plain_redis,
};

use crate::Ctx;
use crate::exit::{Failure, INVALID, UNAVAILABLE};

/// How long one connection attempt may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The bound of a one-shot command's round trip (`status`, `fence`).
pub(crate) const OP_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether `url` asks for TLS.
pub(crate) fn is_tls(url: &str) -> bool {
    url.get(..9)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("rediss://"))
}

/// Parses the URL (exit 64 when malformed) and, for `rediss://`, reads and checks the TLS
/// files (exit 64 when one is unusable).
pub(crate) fn client(ctx: &Ctx) -> Result<redlease::redis::client::Client, Failure> {
    client_for(ctx, &ctx.redis_url)
}

/// [`client`] for another URL (a Redlock node), with the same TLS options.
pub(crate) fn client_for(ctx: &Ctx, url: &str) -> Result<redlease::redis::client::Client, Failure> {
    let shown = crate::secret::redact(url);
    if !is_tls(url) {
        if ctx.tls_given {
            return Err(Failure::new(
                INVALID,
                "--tls-ca, --tls-cert and --tls-key need a rediss:// URL",
            ));
        }
        return redlease::redis::client::Client::open(url)
            .map_err(|e| Failure::invalid("--redis URL", e));
    }
    match redlease::redis::tls_client(url, &ctx.tls) {
        Ok(client) => Ok(client),
        Err(ConnectError::InvalidUrl(m)) => Err(Failure::invalid("--redis URL", m)),
        // Nothing to verify the server with (no --tls-ca, and no system roots): as with an
        // untrusted server, the connection cannot be made.
        Err(
            e @ ConnectError::TlsConfig(
                TlsConfigError::NoTrustAnchors | TlsConfigError::SystemRoots(_),
            ),
        ) => Err(Failure::new(
            UNAVAILABLE,
            format!("cannot connect to {shown}: {e} (give --tls-ca)"),
        )),
        Err(e) => Err(Failure::new(INVALID, e.to_string())),
    }
}

/// A failed connection attempt: a TLS failure is named (exit 69), anything else as before.
pub(crate) fn connect_error(url: &str, context: &str, e: RedisError) -> Failure {
    match connect_failure(e, is_tls(url)) {
        ConnectError::Tls { failure, source } => {
            Failure::new(UNAVAILABLE, format!("{context}: TLS: {failure}: {source}"))
        }
        ConnectError::InvalidUrl(m) => Failure::invalid("--redis URL", m),
        ConnectError::Redis(e) => Failure::redis(context, &e),
        other => Failure::new(UNAVAILABLE, format!("{context}: {other}")),
    }
}

/// One multiplexed connection, checked with a PING (both bounded by [`CONNECT_TIMEOUT`]).
/// For one-shot commands.
pub(crate) async fn connect(ctx: &Ctx) -> Result<MultiplexedConnection, Failure> {
    let url = ctx.redis_url.as_str();
    let shown = ctx.shown_url.as_str();
    let client = client(ctx)?;
    let config = redlease::redis::client::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        // Every round trip is bounded by the library (or by OP_TIMEOUT here).
        .set_response_timeout(None);
    let attempt = client.get_multiplexed_async_connection_with_config(&config);
    let outcome = tokio::time::timeout(CONNECT_TIMEOUT + Duration::from_millis(250), attempt).await;
    let timed_out = match &outcome {
        Ok(Err(e)) => e.is_timeout(),
        Err(_) => true,
        Ok(Ok(_)) => false,
    };
    // A TLS handshake with a plain Redis port times out: say so when the port answers a plain
    // PING.
    if timed_out && is_tls(url) && is_plain_redis(client.get_connection_info().addr()).await {
        return Err(Failure::new(
            UNAVAILABLE,
            format!("cannot connect to {shown}: TLS: {}", TlsFailure::NotTls),
        ));
    }
    let mut conn = match outcome {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return Err(connect_error(url, &format!("cannot connect to {shown}"), e)),
        Err(_) => {
            return Err(Failure::new(
                UNAVAILABLE,
                format!("cannot connect to {shown}: timed out after {CONNECT_TIMEOUT:?}"),
            ));
        }
    };
    let ping_cmd = redlease::redis::client::cmd("PING");
    let ping = ping_cmd.query_async::<String>(&mut conn);
    match tokio::time::timeout(CONNECT_TIMEOUT, ping).await {
        Ok(Ok(_)) => Ok(conn),
        Ok(Err(e)) => Err(connect_error(url, &format!("Redis at {shown}"), e)),
        Err(_) => Err(Failure::new(
            UNAVAILABLE,
            format!("Redis at {shown} did not answer PING within {CONNECT_TIMEOUT:?}"),
        )),
    }
}

/// A self-healing connection (reconnects after Redis restarts, and when the server goes
/// silent: see `redlease::redis::healing`), for the long-running commands.
/// The server is checked first with [`connect`], so an unreachable server fails fast with
/// its real cause.
pub(crate) async fn connect_managed(ctx: &Ctx) -> Result<HealingConnection, Failure> {
    let url = ctx.redis_url.as_str();
    let shown = ctx.shown_url.as_str();
    drop(connect(ctx).await?);
    let client = client(ctx)?;
    let attempt = HealingConnection::connect(client);
    match tokio::time::timeout(OP_TIMEOUT, attempt).await {
        Ok(Ok(m)) => Ok(m),
        Ok(Err(e)) => Err(connect_error(url, &format!("cannot connect to {shown}"), e)),
        Err(_) => Err(Failure::new(
            UNAVAILABLE,
            format!("cannot connect to {shown}: timed out"),
        )),
    }
}

/// Release notices over their own subscriber connection (opened when a waiter first needs
/// it), so that `run` followers, `lock` waiters and `status --watch` react to a release at
/// once instead of at their next poll; `None` with `--poll-only`.
pub(crate) fn notices(ctx: &Ctx) -> Result<Option<redlease::redis::ReleaseNotices>, Failure> {
    if ctx.poll_only {
        return Ok(None);
    }
    Ok(Some(redlease::redis::ReleaseNotices::new(client(ctx)?)))
}

/// `backend` with release notices unless `--poll-only`.
pub(crate) fn with_notices<C>(
    ctx: &Ctx,
    backend: redlease::redis::RedisBackend<C>,
) -> Result<redlease::redis::RedisBackend<C>, Failure>
where
    C: redlease::redis::client::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    Ok(match notices(ctx)? {
        Some(n) => backend.with_release_notices(n),
        None => backend,
    })
}
