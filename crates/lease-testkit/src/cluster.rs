//! A Redis Cluster of primaries (process mode), created with
//! `redis-cli --cluster create` and ready when every node reports
//! `cluster_state:ok` with all 16384 slots covered.
//!
//! ```no_run
//! use lease_testkit::cluster::RedisCluster;
//!
//! # async fn demo() -> lease_testkit::Result<()> {
//! let cluster = RedisCluster::start().await?;
//! let client = redis::cluster::ClusterClient::new(cluster.urls())?;
//! let mut conn = client.get_async_connection().await?;
//! let _: () = redis::cmd("SET").arg("{t}a").arg(1).query_async(&mut conn).await?;
//! # Ok(())
//! # }
//! ```

use std::process::Command;
use std::time::Duration;

use crate::mode::ServerMode;
use crate::poll::{Look, poll_until};
use crate::process::{describe_output, display_command, require_program, run_with_timeout_async};
use crate::proxy::FaultProxy;
use crate::redis::{RedisOptions, RedisServer};
use crate::resp::{self, Reply};
use crate::tls::{ClientCert, ServerCert};
use crate::{Error, Result};

/// How long to wait for `cluster_state:ok` on every node.
const CLUSTER_DEADLINE: Duration = Duration::from_secs(90);
/// The number of hash slots.
const SLOTS: u32 = 16384;

/// Builder for a [`RedisCluster`].
#[derive(Debug, Clone)]
#[must_use]
pub struct RedisClusterBuilder {
    primaries: usize,
    replicas: usize,
    node_timeout: Option<Duration>,
    tls: Option<(ServerCert, ClientCert)>,
}

impl Default for RedisClusterBuilder {
    fn default() -> Self {
        RedisClusterBuilder {
            primaries: 3,
            replicas: 0,
            node_timeout: None,
            tls: None,
        }
    }
}

impl RedisClusterBuilder {
    /// Number of primaries (default 3, minimum 3 as required by `redis-cli`).
    pub fn primaries(mut self, primaries: usize) -> Self {
        self.primaries = primaries;
        self
    }

    /// Replicas per primary (default 0): with replicas, the cluster promotes one when its
    /// primary is unreachable for the node timeout (a failover).
    pub fn replicas(mut self, replicas: usize) -> Self {
        self.replicas = replicas;
        self
    }

    /// `cluster-node-timeout` (default 5 s): how long a node may be unreachable before the
    /// others flag it as failing (and, with replicas, fail it over). At least 100 ms.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout.max(Duration::from_millis(100)));
        self
    }

    /// Every node also serves TLS with `cert` (`tls-cluster yes`: the cluster bus runs over
    /// TLS, and TLS clients are told the nodes' TLS ports); see [`RedisCluster::tls_urls`].
    /// The bus asks for client certificates whatever `tls-auth-clients` says: the nodes
    /// present `bus` (a client certificate of the same CA) to each other.
    pub fn tls(mut self, cert: &ServerCert, bus: &ClientCert) -> Self {
        self.tls = Some((cert.clone(), bus.clone()));
        self
    }

    /// Starts the nodes, creates the cluster and waits until all slots are served.
    pub async fn start(self) -> Result<RedisCluster> {
        if self.primaries < 3 {
            return Err(Error::Config(
                "a Redis Cluster needs at least 3 primaries".to_owned(),
            ));
        }
        static ANNOUNCED: std::sync::Once = std::sync::Once::new();
        ANNOUNCED.call_once(|| {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "lease-testkit: Redis Cluster nodes run as redis-server processes \
                 (clusters have no container mode)"
            );
        });
        let redis_cli = require_program(
            "redis-cli",
            &[],
            "install redis-tools (Debian/Ubuntu: `apt-get install redis-tools`, or run scripts/install-deps.sh)",
        )?;
        let count = self.primaries * (1 + self.replicas);
        let mut nodes = Vec::with_capacity(count);
        for _ in 0..count {
            let mut opts = match &self.tls {
                Some((cert, bus)) => RedisServer::builder()
                    .tls(cert)
                    .config("tls-cluster", "yes")
                    .config("tls-replication", "yes")
                    .config("tls-client-cert-file", path_str(bus.cert_file())?)
                    .config("tls-client-key-file", path_str(bus.key_file())?)
                    .into_options(),
                None => RedisOptions::default(),
            };
            opts.cluster = true;
            if let Some(timeout) = self.node_timeout {
                opts.push_config("cluster-node-timeout", &timeout.as_millis().to_string());
            }
            if self.replicas > 0 {
                // A replica's first sync starts at once (the default waits 5 s for more).
                opts.push_config("repl-diskless-sync-delay", "0");
            }
            nodes.push(RedisServer::start_with(opts).await?);
        }
        let mut cmd = Command::new(redis_cli);
        if let Some((cert, _)) = &self.tls {
            cmd.arg("--tls").arg("--cacert").arg(cert.ca_file());
        }
        cmd.args(["--cluster", "create"]);
        for node in &nodes {
            match (&self.tls, node.tls_addr()) {
                (Some(_), Some(addr)) => cmd.arg(addr.to_string()),
                _ => cmd.arg(node.addr().to_string()),
            };
        }
        let replicas = self.replicas.to_string();
        cmd.args(["--cluster-replicas", &replicas, "--cluster-yes"]);
        let shown = display_command(&cmd);
        let out = run_with_timeout_async(cmd, CLUSTER_DEADLINE).await?;
        if !out.status.success() {
            return Err(Error::Command {
                command: shown,
                output: describe_output(&out.status, &out.stdout, &out.stderr),
            });
        }
        let cluster = RedisCluster { nodes };
        cluster.wait_ready(CLUSTER_DEADLINE).await?;
        Ok(cluster)
    }
}

/// The node ports named by a `CLUSTER SLOTS` reply: each slot range is `[start, end, [ip,
/// port, id, ...], ...]`.
fn slot_ports(reply: &Reply, out: &mut Vec<i64>) {
    let Reply::Array(Some(ranges)) = reply else {
        return;
    };
    for range in ranges {
        let Reply::Array(Some(items)) = range else {
            continue;
        };
        for node in items.iter().skip(2) {
            if let Reply::Array(Some(fields)) = node
                && let Some(Reply::Int(port)) = fields.get(1)
            {
                out.push(*port);
            }
        }
    }
}

fn path_str(p: &std::path::Path) -> Result<String> {
    p.to_str()
        .map(str::to_owned)
        .ok_or_else(|| Error::Config(format!("path {} is not UTF-8", p.display())))
}

/// A Redis Cluster owned by the test; dropping it kills every node.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts a 3-primary cluster (process mode: needs `redis-server` and `redis-cli`).
    pub async fn start() -> Result<Self> {
        Self::builder().start().await
    }

    /// A builder (number of primaries).
    pub fn builder() -> RedisClusterBuilder {
        RedisClusterBuilder::default()
    }

    /// The seed list for `redis::cluster::ClusterClient::new`: one
    /// `redis://127.0.0.1:<port>/` per node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// `rediss://127.0.0.1:<tls port>/` per node (clusters built with
    /// [`RedisClusterBuilder::tls`]; empty otherwise).
    pub fn tls_urls(&self) -> Vec<String> {
        self.nodes.iter().filter_map(RedisServer::tls_url).collect()
    }

    /// The nodes' addresses.
    pub fn addrs(&self) -> Vec<std::net::SocketAddr> {
        self.nodes.iter().map(RedisServer::addr).collect()
    }

    /// The nodes, for per-node faults (`pause`, `kill`, `restart`, ...).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Cluster nodes always run as processes.
    pub fn mode(&self) -> ServerMode {
        ServerMode::Process
    }

    /// A redis-rs cluster client for [`urls`](Self::urls).
    pub fn client(&self) -> Result<redis::cluster::ClusterClient> {
        Ok(redis::cluster::ClusterClient::new(self.urls())?)
    }

    /// A new async cluster connection.
    pub async fn connection(&self) -> Result<redis::cluster_async::ClusterConnection> {
        Ok(self.client()?.get_async_connection().await?)
    }

    /// Puts a [`FaultProxy`] in front of every node and makes each node announce its proxy's
    /// port to clients (`cluster-announce-port`; the cluster bus keeps the nodes' own ports),
    /// so a cluster client seeded with the proxies' URLs reaches every node through them:
    /// per-node faults (lost replies, resets) for a cluster client. Waits until every node's
    /// `CLUSTER SLOTS` names proxy ports only. The proxies come in the nodes' order; the
    /// announcement stays when they are dropped (the cluster is the test's own).
    pub async fn behind_proxies(&self) -> Result<Vec<FaultProxy>> {
        let mut proxies = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            let proxy = FaultProxy::start(node.addr()).await?;
            let port = proxy.addr().port().to_string();
            let reply = resp::probe(
                node.addr(),
                &node.probe_auth(),
                &["CONFIG", "SET", "cluster-announce-port", &port],
                Duration::from_secs(2),
            )
            .await
            .map_err(|e| Error::InvalidState(format!("{}: {e}", node.addr())))?;
            if let Reply::Error(e) = reply {
                return Err(Error::InvalidState(format!(
                    "{}: CONFIG SET cluster-announce-port: {e}",
                    node.addr()
                )));
            }
            proxies.push(proxy);
        }
        let ports: Vec<i64> = proxies.iter().map(|p| i64::from(p.addr().port())).collect();
        let ports = &ports;
        poll_until(
            CLUSTER_DEADLINE,
            "cluster nodes announcing their proxies",
            || async move {
                for node in &self.nodes {
                    let reply = match resp::probe(
                        node.addr(),
                        &node.probe_auth(),
                        &["CLUSTER", "SLOTS"],
                        Duration::from_secs(2),
                    )
                    .await
                    {
                        Ok(reply) => reply,
                        Err(e) => return Look::NotYet(format!("{}: {e}", node.addr())),
                    };
                    let mut seen = Vec::new();
                    slot_ports(&reply, &mut seen);
                    if seen.is_empty() || seen.iter().any(|p| !ports.contains(p)) {
                        return Look::NotYet(format!("{} announces ports {seen:?}", node.addr()));
                    }
                }
                Look::Done(())
            },
        )
        .await?;
        Ok(proxies)
    }

    /// Waits until every node reports `cluster_state:ok`, all slots ok and knows
    /// every other node, and every replica's link to its primary is up (a replica that never
    /// synced cannot be promoted); also usable after restarting a node.
    pub async fn wait_ready(&self, deadline: Duration) -> Result<()> {
        poll_until(deadline, "redis cluster", || async move {
            for node in &self.nodes {
                if let Err(e) = self.node_ready(node).await {
                    return Look::NotYet(format!("{}: {e}", node.addr()));
                }
            }
            Look::Done(())
        })
        .await
    }

    /// `Ok` for a primary, or a replica whose link to its primary is up.
    async fn replica_linked(&self, node: &RedisServer) -> std::result::Result<(), String> {
        let reply = resp::probe(
            node.addr(),
            &node.probe_auth(),
            &["INFO", "replication"],
            Duration::from_secs(2),
        )
        .await?;
        let text = reply
            .text()
            .ok_or_else(|| format!("unexpected INFO reply {reply:?}"))?;
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        match (field("role"), field("master_link_status")) {
            (Some("slave"), Some(status)) if status != "up" => {
                Err(format!("replica link to its primary: {status}"))
            }
            _ => Ok(()),
        }
    }

    async fn node_ready(&self, node: &RedisServer) -> std::result::Result<(), String> {
        let reply = resp::probe(
            node.addr(),
            &node.probe_auth(),
            &["CLUSTER", "INFO"],
            Duration::from_secs(2),
        )
        .await?;
        let text = match &reply {
            Reply::Error(e) => return Err(e.clone()),
            other => other
                .text()
                .ok_or_else(|| format!("unexpected CLUSTER INFO reply {other:?}"))?,
        };
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
                .unwrap_or("")
                .to_owned()
        };
        let state = field("cluster_state");
        let slots_ok = field("cluster_slots_ok");
        let known = field("cluster_known_nodes");
        if state == "ok" && slots_ok == SLOTS.to_string() && known == self.nodes.len().to_string() {
            self.replica_linked(node).await
        } else {
            Err(format!(
                "cluster_state:{state} cluster_slots_ok:{slots_ok} cluster_known_nodes:{known}"
            ))
        }
    }
}
