//! `--cluster`, `--sentinel ... --service NAME` and `--redlock URL,URL,URL`: the same `run`
//! on every topology the library supports, through its own connect functions.
//!
//! - `--cluster`: `--redis` is a comma-separated list of seed URLs of a Redis Cluster. The
//!   election's keys must share a slot: give a hash-tagged name (`--name '{jobs}'`).
//! - `--sentinel HOST:PORT,...` (sentinels' addresses or `redis://` URLs) with `--service
//!   NAME`: the primary the sentinels name, followed across failovers.
//! - `--redlock URL,URL,URL`: a quorum over independent primaries (`rediss://` URLs use TLS
//!   with the `--tls-*` options, as for a single server).
//!
//! Release notices are used on a single server only; these topologies poll. `--cluster` and
//! `--sentinel` with `rediss://` are refused (exit 64): the command does not carry TLS to
//! them yet.

use std::time::Duration;

use redlease::redis::SentinelConnection;
use redlease::redis::client::cluster::ClusterClientBuilder;
use redlease::redis::{HealingCluster, RedisBackend};
use redlease::redlock::{RedisNode, RedlockBackend, RedlockConfig};

use crate::Ctx;
use crate::conn::{self, CONNECT_TIMEOUT, OP_TIMEOUT};
use crate::exit::{Failure, INVALID, UNAVAILABLE};
use crate::secret::redact;

/// Where the leases live.
#[derive(Debug)]
pub(crate) enum Topology {
    /// One server (`--redis URL`).
    Standalone,
    /// A Redis Cluster from these seed URLs.
    Cluster(Vec<String>),
    /// The primary `service` named by these sentinels.
    Sentinel {
        sentinels: Vec<String>,
        service: String,
    },
    /// A Redlock quorum over these primaries.
    Redlock(Vec<String>),
}

fn list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect()
}

impl Topology {
    /// The topology the options ask for (clap refuses conflicting ones).
    pub(crate) fn of(ctx: &Ctx) -> Result<Topology, Failure> {
        if let Some(nodes) = &ctx.redlock {
            let urls = list(nodes);
            if urls.len() < 3 || urls.len().is_multiple_of(2) {
                return Err(Failure::new(
                    INVALID,
                    format!(
                        "invalid value: --redlock needs an odd number of servers, at least 3 (got {})",
                        urls.len()
                    ),
                ));
            }
            return Ok(Topology::Redlock(urls));
        }
        if let Some(sentinels) = &ctx.sentinel {
            let Some(service) = ctx.service.clone() else {
                return Err(Failure::new(
                    INVALID,
                    "--sentinel needs --service NAME (the primary the sentinels watch)",
                ));
            };
            let sentinels: Vec<String> = list(sentinels)
                .into_iter()
                .map(|s| {
                    if s.contains("://") {
                        s
                    } else {
                        format!("redis://{s}/")
                    }
                })
                .collect();
            if sentinels.iter().any(|s| conn::is_tls(s)) {
                return Err(Failure::new(
                    INVALID,
                    "--sentinel with rediss:// is not supported by the command yet",
                ));
            }
            return Ok(Topology::Sentinel { sentinels, service });
        }
        if ctx.cluster {
            let urls = list(&ctx.redis_url);
            if urls.iter().any(|u| conn::is_tls(u)) {
                return Err(Failure::new(
                    INVALID,
                    "--cluster with rediss:// is not supported by the command yet",
                ));
            }
            return Ok(Topology::Cluster(urls));
        }
        Ok(Topology::Standalone)
    }
}

fn shown(urls: &[String]) -> String {
    urls.iter().map(|u| redact(u)).collect::<Vec<_>>().join(",")
}

/// A Redis Cluster connection (slots discovered from the seeds), rebuilt from the seeds when
/// a slot's node goes silent ([`HealingCluster`]).
pub(crate) async fn cluster(
    _ctx: &Ctx,
    urls: &[String],
) -> Result<RedisBackend<HealingCluster>, Failure> {
    let builder = ClusterClientBuilder::new(urls.to_vec());
    match tokio::time::timeout(OP_TIMEOUT, HealingCluster::connect(builder)).await {
        Ok(Ok(conn)) => Ok(RedisBackend::cluster(conn)),
        Ok(Err(e)) if e.kind() == redlease::redis::client::ErrorKind::InvalidClientConfig => {
            Err(Failure::invalid("--redis URL", e))
        }
        Ok(Err(e)) => Err(Failure::redis(
            &format!("cannot connect to the cluster at {}", shown(urls)),
            &e,
        )),
        Err(_) => Err(Failure::new(
            UNAVAILABLE,
            format!(
                "cannot connect to the cluster at {}: timed out after {OP_TIMEOUT:?}",
                shown(urls)
            ),
        )),
    }
}

/// The primary named `service`, through the sentinels.
pub(crate) async fn sentinel(
    _ctx: &Ctx,
    sentinels: &[String],
    service: &str,
) -> Result<RedisBackend<SentinelConnection>, Failure> {
    let attempt = SentinelConnection::connect(sentinels.iter().map(String::as_str), service);
    match tokio::time::timeout(OP_TIMEOUT, attempt).await {
        Ok(Ok(conn)) => Ok(RedisBackend::new(conn)),
        Ok(Err(e)) => Err(Failure::redis(
            &format!(
                "cannot find the primary {service:?} through the sentinels at {}",
                shown(sentinels)
            ),
            &e,
        )),
        Err(_) => Err(Failure::new(
            UNAVAILABLE,
            format!(
                "cannot find the primary {service:?} through the sentinels at {}: timed out",
                shown(sentinels)
            ),
        )),
    }
}

/// A Redlock quorum: one self-healing connection per primary, each checked first.
pub(crate) async fn redlock(
    ctx: &Ctx,
    urls: &[String],
) -> Result<RedlockBackend<RedisNode<redlease::redis::HealingConnection>>, Failure> {
    let mut nodes = Vec::with_capacity(urls.len());
    for url in urls {
        let client = conn::client_for(ctx, url)?;
        let attempt = RedisNode::connect(client);
        match tokio::time::timeout(CONNECT_TIMEOUT + Duration::from_secs(1), attempt).await {
            Ok(Ok(node)) => nodes.push(node),
            Ok(Err(e)) => {
                return Err(Failure::redis(
                    &format!("cannot connect to {}", redact(url)),
                    &e,
                ));
            }
            Err(_) => {
                return Err(Failure::new(
                    UNAVAILABLE,
                    format!("cannot connect to {}: timed out", redact(url)),
                ));
            }
        }
    }
    RedlockBackend::new(nodes, RedlockConfig::default()).map_err(|e| Failure::config(&e))
}
