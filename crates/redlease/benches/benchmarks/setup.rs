//! The servers and connections shared by the benchmarks.

use lease_testkit::redis::RedisServer;
use redis::aio::MultiplexedConnection;
use redlease::redis::RedisBackend;

/// Redis servers from the test kit, and one multiplexed connection to each.
pub(crate) struct Env {
    pub(crate) servers: Vec<RedisServer>,
    pub(crate) conns: Vec<MultiplexedConnection>,
    pub(crate) redis_version: String,
    pub(crate) mode: String,
}

impl Env {
    /// Starts `n` servers (the first serves every single-node benchmark; the first 3 or 5
    /// make the Redlock node sets).
    pub(crate) async fn start(n: usize) -> Result<Env, Box<dyn std::error::Error>> {
        let mut servers = Vec::new();
        let mut conns = Vec::new();
        for _ in 0..n {
            let s = RedisServer::start().await?;
            conns.push(connect(&s).await?);
            servers.push(s);
        }
        let mut c = conns[0].clone();
        let info: String = redis::cmd("INFO").arg("server").query_async(&mut c).await?;
        let redis_version = info_field(&info, "redis_version").unwrap_or_else(|| "?".into());
        let mode = servers[0].mode().to_string();
        Ok(Env {
            servers,
            conns,
            redis_version,
            mode,
        })
    }

    /// The single-node backend (server 0).
    pub(crate) fn backend(&self) -> RedisBackend<MultiplexedConnection> {
        RedisBackend::new(self.conns[0].clone())
    }

    /// A raw connection to server 0.
    pub(crate) fn conn(&self) -> MultiplexedConnection {
        self.conns[0].clone()
    }
}

/// A multiplexed connection without a response timeout (the library bounds its own calls; the
/// raw baselines get the same connection settings).
pub(crate) async fn connect(s: &RedisServer) -> Result<MultiplexedConnection, redis::RedisError> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(std::time::Duration::from_secs(5)))
        .set_response_timeout(None);
    s.client()
        .map_err(|e| redis::RedisError::from(std::io::Error::other(e.to_string())))?
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// A field of an `INFO` reply.
pub(crate) fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines().find_map(|l| {
        l.strip_prefix(field)
            .and_then(|r| r.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    })
}
