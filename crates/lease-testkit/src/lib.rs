//! Test kit for redlease: real Redis, Redis Cluster and Postgres servers, and a TCP
//! fault proxy, torn down on drop.
//!
//! Every server is owned by the test that started it. Dropping it — also while the
//! test panics — kills the process or removes the container (even a paused one)
//! and deletes its temporary directory, synchronously.
//!
//! * [`redis::RedisServer`]: a Redis server, as a testcontainers container or a
//!   `redis-server` process (see [`mode`] for how the kit chooses, and [`server`] for which
//!   server binary: Redis 7.0, Redis 6.2 or Valkey 9), with faults:
//!   `pause`/`resume`, `kill`, `stop`, `restart`.
//! * [`cluster::RedisCluster`]: a 3-primary Redis Cluster (processes).
//! * [`postgres::Postgres`]: a Postgres server (`initdb` + `postgres`).
//! * [`sentinel::SentinelGroup`]: a primary, replicas and sentinels (processes), with
//!   forced failovers and a cut replication link.
//! * [`proxy::FaultProxy`]: a TCP proxy with pass / latency / blackhole modes and
//!   connection resets, for partition and slow-node tests.
//! * [`blackhole::Blackhole`]: a loopback port silenced in the kernel (iptables), so TCP
//!   backs off as on a real vanished path; healed on drop.
//! * [`tls::TestPki`]: a test CA, server certificates (current or expired) and client
//!   certificates; [`redis::RedisServerBuilder::tls`] starts a server with a TLS port.
//! * [`wrap::Wrapped`]: a `LeaseBackend` that forwards every call to another and runs
//!   [`wrap::Hooks`] around each (count calls, delay a request or a reply, watch errors).
//!
//! ```no_run
//! use lease_testkit::redis::RedisServer;
//!
//! #[tokio::test]
//! async fn answers() {
//!     let server = RedisServer::start().await.unwrap();
//!     let mut conn = server.connection().await.unwrap();
//!     let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
//!     assert_eq!(pong, "PONG");
//! }
//! ```
#![forbid(unsafe_code)]

pub mod blackhole;
pub mod cluster;
mod docker;
mod error;
pub mod mode;
pub mod poll;
pub mod postgres;
mod process;
pub mod proxy;
pub mod reaper;
pub mod redis;
mod resp;
pub mod sentinel;
pub mod server;
pub mod tempdir;
pub mod tls;
pub mod wrap;

pub use crate::blackhole::Blackhole;
pub use crate::cluster::RedisCluster;
pub use crate::error::{Error, Result};
pub use crate::mode::ServerMode;
pub use crate::postgres::Postgres;
pub use crate::proxy::{FaultProxy, Mode};
pub use crate::redis::{Persistence, RedisServer};
pub use crate::sentinel::SentinelGroup;
pub use crate::wrap::{Hooks, Wrapped};

#[cfg(test)]
mod tests {
    fn assert_send_sync<T: Send + Sync + 'static>() {}

    #[test]
    fn handles_can_be_shared_across_tasks() {
        // Servers are often put in an Arc and faulted from another task.
        assert_send_sync::<crate::RedisServer>();
        assert_send_sync::<crate::RedisCluster>();
        assert_send_sync::<crate::Postgres>();
        assert_send_sync::<crate::FaultProxy>();
        assert_send_sync::<crate::Error>();
    }
}
