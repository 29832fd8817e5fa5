//! Connecting to Redis: fail fast (about one second) when it is unreachable.

use std::time::Duration;

use redlease::redis::client::aio::{
    ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};

use crate::exit::{Failure, UNAVAILABLE};

/// How long one connection attempt may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The bound of a one-shot command's round trip (`status`, `fence`).
pub(crate) const OP_TIMEOUT: Duration = Duration::from_secs(5);

/// Parses the URL (exit 64 when malformed).
pub(crate) fn client(url: &str) -> Result<redlease::redis::client::Client, Failure> {
    redlease::redis::client::Client::open(url).map_err(|e| Failure::invalid("--redis URL", e))
}

/// One multiplexed connection, checked with a PING (both bounded by [`CONNECT_TIMEOUT`]).
/// For one-shot commands.
pub(crate) async fn connect(url: &str) -> Result<MultiplexedConnection, Failure> {
    let client = client(url)?;
    let config = redlease::redis::client::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        // Every round trip is bounded by the library (or by OP_TIMEOUT here).
        .set_response_timeout(None);
    let attempt = client.get_multiplexed_async_connection_with_config(&config);
    let mut conn =
        match tokio::time::timeout(CONNECT_TIMEOUT + Duration::from_millis(250), attempt).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(Failure::redis(&format!("cannot connect to {url}"), &e)),
            Err(_) => {
                return Err(Failure::new(
                    UNAVAILABLE,
                    format!("cannot connect to {url}: timed out after {CONNECT_TIMEOUT:?}"),
                ));
            }
        };
    let ping_cmd = redlease::redis::client::cmd("PING");
    let ping = ping_cmd.query_async::<String>(&mut conn);
    match tokio::time::timeout(CONNECT_TIMEOUT, ping).await {
        Ok(Ok(_)) => Ok(conn),
        Ok(Err(e)) => Err(Failure::redis(&format!("Redis at {url}"), &e)),
        Err(_) => Err(Failure::new(
            UNAVAILABLE,
            format!("Redis at {url} did not answer PING within {CONNECT_TIMEOUT:?}"),
        )),
    }
}

/// A connection manager (reconnects after Redis restarts), for the long-running commands.
/// The server is checked first with [`connect`], so an unreachable server fails fast with
/// its real cause.
pub(crate) async fn connect_managed(url: &str) -> Result<ConnectionManager, Failure> {
    drop(connect(url).await?);
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(None)
        .set_number_of_retries(3)
        .set_max_delay(Duration::from_secs(1));
    let client = client(url)?;
    let attempt = client.get_connection_manager_with_config(config);
    match tokio::time::timeout(OP_TIMEOUT, attempt).await {
        Ok(Ok(m)) => Ok(m),
        Ok(Err(e)) => Err(Failure::redis(&format!("cannot connect to {url}"), &e)),
        Err(_) => Err(Failure::new(
            UNAVAILABLE,
            format!("cannot connect to {url}: timed out"),
        )),
    }
}
