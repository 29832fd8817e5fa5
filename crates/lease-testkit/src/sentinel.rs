//! A Redis Sentinel topology as processes: one primary, replicas and sentinels, with the
//! faults a replicated deployment meets (a forced failover, a killed or paused primary, the
//! primary cut off from its replicas).
//!
//! Every server runs as a `redis-server` process on 127.0.0.1 without persistence (a failover
//! to a replica that had not received the last writes loses them, as asynchronous
//! replication does). The sentinels decide failovers with a quorum of 2 and consider a
//! primary down after [`SentinelGroupBuilder::down_after`] (default 1 s).
//!
//! With [`SentinelGroupBuilder::tls`], every server and sentinel also serves TLS, replication
//! and the sentinels' own links use it, and the sentinels name the primary's TLS port to
//! clients ([`SentinelGroup::sentinel_tls_urls`]).
//!
//! With [`SentinelGroupBuilder::replication_proxy`], the replicas follow the first primary
//! through a [`FaultProxy`], so [`SentinelGroup::partition_replication`] can cut the
//! replication links while clients still reach the primary (until the first failover: after
//! it the sentinels point the replicas at the new primary directly).
//!
//! ```no_run
//! use lease_testkit::sentinel::SentinelGroup;
//!
//! # async fn demo() -> lease_testkit::Result<()> {
//! let group = SentinelGroup::start("mymaster").await?;
//! let first = group.primary_index().await?;
//! group.failover().await?;
//! let second = group.wait_new_primary(first, std::time::Duration::from_secs(30)).await?;
//! assert_ne!(first, second);
//! # Ok(())
//! # }
//! ```

use std::net::SocketAddr;
use std::time::Duration;

use crate::process::{log_tail, loopback};
use crate::proxy::{FaultProxy, Mode};
use crate::redis::RedisServer;
use crate::resp::{self, ProbeAuth, Reply};
use crate::{Error, Result};

mod builder;
mod process;
mod settle;

pub use builder::SentinelGroupBuilder;
use process::Sentinel;

/// How long to wait for the topology to settle (replication links up, sentinels aware of
/// each other and of every replica).
const SETTLE_DEADLINE: Duration = Duration::from_secs(60);
/// A probe's bound.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the sentinels are asked whether they know each other.
const POLL_SENTINELS: Duration = Duration::from_millis(100);

/// A primary with replicas and sentinels, owned by the test; dropping it kills every
/// process and removes their files.
#[derive(Debug)]
pub struct SentinelGroup {
    name: String,
    // Sentinels first: they are killed before the servers, so no failover starts while
    // the group is torn down.
    sentinels: Vec<Sentinel>,
    servers: Vec<RedisServer>,
    proxy: Option<FaultProxy>,
    /// Built with [`SentinelGroupBuilder::tls`].
    tls: bool,
}

impl SentinelGroup {
    /// Starts a group named `name` with the defaults (1 primary, 2 replicas, 3 sentinels).
    pub async fn start(name: &str) -> Result<SentinelGroup> {
        SentinelGroup::builder(name).start().await
    }

    /// A builder for a group whose primary is monitored under `name`.
    pub fn builder(name: &str) -> SentinelGroupBuilder {
        SentinelGroupBuilder {
            name: name.to_owned(),
            replicas: 2,
            sentinels: 3,
            down_after: Duration::from_millis(1000),
            failover_timeout: Duration::from_secs(5),
            replication_proxy: false,
            tls: None,
        }
    }

    /// The service (primary) name the sentinels monitor.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `redis://127.0.0.1:<port>/` of each sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("redis://{}/", s.addr()))
            .collect()
    }

    /// `rediss://127.0.0.1:<tls port>/` of each sentinel (groups built with
    /// [`SentinelGroupBuilder::tls`]; empty otherwise).
    pub fn sentinel_tls_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .filter_map(|s| s.tls_port)
            .map(|p| format!("rediss://{}/", loopback(p)))
            .collect()
    }

    /// The sentinels' addresses.
    pub fn sentinel_addrs(&self) -> Vec<SocketAddr> {
        self.sentinels.iter().map(Sentinel::addr).collect()
    }

    /// The data servers; index 0 was the first primary. Use them for faults (`kill`,
    /// `pause`, `restart`) and for direct connections.
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    /// Server `i` (see [`servers`](Self::servers)).
    pub fn server(&self, i: usize) -> Result<&RedisServer> {
        self.servers
            .get(i)
            .ok_or_else(|| Error::Config(format!("no server {i} in the group")))
    }

    /// The index of the server the sentinels name as primary (asked of the first sentinel
    /// that answers).
    pub async fn primary_index(&self) -> Result<usize> {
        let mut last = String::new();
        for s in &self.sentinels {
            match self.primary_port_from(s.addr()).await {
                Ok(port) => return self.index_of_port(port),
                Err(e) => last = e,
            }
        }
        Err(Error::NotReady {
            what: "a sentinel naming the primary".to_owned(),
            waited: Duration::ZERO,
            last_error: last,
        })
    }

    /// The server the sentinels name as primary.
    pub async fn primary(&self) -> Result<&RedisServer> {
        let i = self.primary_index().await?;
        self.server(i)
    }

    fn index_of_port(&self, port: u16) -> Result<usize> {
        self.servers
            .iter()
            .position(|s| s.port() == port || s.tls_port() == Some(port))
            .ok_or_else(|| Error::InvalidState(format!("no server of the group on port {port}")))
    }

    async fn primary_port_from(&self, sentinel: SocketAddr) -> std::result::Result<u16, String> {
        let reply = resp::probe(
            sentinel,
            &ProbeAuth::default(),
            &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", &self.name],
            PROBE_TIMEOUT,
        )
        .await?;
        match reply {
            Reply::Array(Some(items)) if items.len() == 2 => items[1]
                .text()
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| format!("unexpected port in {items:?}")),
            other => Err(format!("GET-MASTER-ADDR-BY-NAME answered {other:?}")),
        }
    }

    /// `SENTINEL FAILOVER`: forces a failover now (no agreement needed). Returns once a
    /// sentinel accepted it; see [`wait_new_primary`](Self::wait_new_primary) and
    /// [`wait_settled`](Self::wait_settled).
    pub async fn failover(&self) -> Result<()> {
        let mut last = String::new();
        for s in &self.sentinels {
            match resp::probe(
                s.addr(),
                &ProbeAuth::default(),
                &["SENTINEL", "FAILOVER", &self.name],
                PROBE_TIMEOUT,
            )
            .await
            {
                Ok(Reply::Simple(ok)) if ok == "OK" => return Ok(()),
                Ok(other) => last = format!("{}: {other:?}", s.addr()),
                Err(e) => last = format!("{}: {e}", s.addr()),
            }
        }
        Err(Error::Command {
            command: format!("SENTINEL FAILOVER {}", self.name),
            output: last,
        })
    }

    /// Cuts (`true`) or restores (`false`) the replication links of the first primary
    /// (needs [`SentinelGroupBuilder::replication_proxy`]): the proxy drops traffic both
    /// ways and resets the open links, so the replicas stop receiving writes while clients
    /// still reach the primary directly.
    pub async fn partition_replication(&self, cut: bool) -> Result<()> {
        let proxy = self.proxy.as_ref().ok_or_else(|| {
            Error::Config("partition_replication needs replication_proxy(true)".to_owned())
        })?;
        if cut {
            proxy.set_mode(Mode::Blackhole);
        } else {
            proxy.set_mode(Mode::Pass);
            proxy.reset_all().await;
        }
        Ok(())
    }

    /// The sentinels' log tails, for diagnostics.
    pub fn sentinel_logs(&self) -> String {
        self.sentinels
            .iter()
            .map(|s| {
                format!(
                    "sentinel {}:\n{}",
                    s.addr(),
                    log_tail(&s.dir.path().join("sentinel.log"))
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Kills a sentinel's process (a fault of the monitoring itself).
    pub fn kill_sentinel(&mut self, i: usize) -> Result<()> {
        let s = self
            .sentinels
            .get_mut(i)
            .ok_or_else(|| Error::Config(format!("no sentinel {i}")))?;
        s.process.kill();
        Ok(())
    }
}
