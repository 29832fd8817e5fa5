//! A Redis Sentinel topology as processes: one primary, replicas and sentinels, with the
//! faults a replicated deployment meets (a forced failover, a killed or paused primary, the
//! primary cut off from its replicas).
//!
//! Every server runs as a `redis-server` process on 127.0.0.1 without persistence (a failover
//! to a replica that had not received the last writes loses them, as asynchronous
//! replication does). The sentinels decide failovers with a quorum of 2 and consider a
//! primary down after [`SentinelGroupBuilder::down_after`] (default 1 s).
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
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::mode::ServerMode;
use crate::process::{ServerProcess, free_port, log_stdio, log_tail, loopback};
use crate::proxy::{FaultProxy, Mode};
use crate::redis::RedisServer;
use crate::resp::{self, ProbeAuth, Reply};
use crate::tempdir::TempDir;
use crate::tls::ServerCert;
use crate::{Error, Result};

/// How long to wait for the topology to settle (replication links up, sentinels aware of
/// each other and of every replica).
const SETTLE_DEADLINE: Duration = Duration::from_secs(60);
/// A probe's bound.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a wait polls.
const POLL: Duration = Duration::from_millis(50);

/// Builder for a [`SentinelGroup`].
#[derive(Debug, Clone)]
#[must_use]
pub struct SentinelGroupBuilder {
    name: String,
    replicas: usize,
    sentinels: usize,
    down_after: Duration,
    failover_timeout: Duration,
    replication_proxy: bool,
    tls: Option<ServerCert>,
}

impl SentinelGroupBuilder {
    /// Every server and sentinel also serves TLS with `cert`, and replication and the
    /// sentinels' own links run over TLS (`tls-replication yes`): the sentinels name the
    /// primary's TLS port. See [`SentinelGroup::sentinel_tls_urls`]. Not with
    /// [`replication_proxy`](Self::replication_proxy).
    pub fn tls(mut self, cert: &ServerCert) -> Self {
        self.tls = Some(cert.clone());
        self
    }

    /// Number of replicas (default 2, at least 1).
    pub fn replicas(mut self, replicas: usize) -> Self {
        self.replicas = replicas;
        self
    }

    /// Number of sentinels (default 3, at least 2: the quorum is 2).
    pub fn sentinels(mut self, sentinels: usize) -> Self {
        self.sentinels = sentinels;
        self
    }

    /// `down-after-milliseconds`: how long the primary must not answer before a sentinel
    /// considers it down (default 1 s).
    pub fn down_after(mut self, down_after: Duration) -> Self {
        self.down_after = down_after;
        self
    }

    /// `failover-timeout` (default 5 s; also the pause before a failed failover is retried).
    pub fn failover_timeout(mut self, timeout: Duration) -> Self {
        self.failover_timeout = timeout;
        self
    }

    /// The replicas follow the first primary through a [`FaultProxy`] (see
    /// [`SentinelGroup::partition_replication`]).
    pub fn replication_proxy(mut self, on: bool) -> Self {
        self.replication_proxy = on;
        self
    }

    /// Starts the primary, the replicas (waiting until their links are up) and the
    /// sentinels (waiting until each knows every replica and every other sentinel).
    pub async fn start(self) -> Result<SentinelGroup> {
        if self.replicas == 0 || self.sentinels < 2 {
            return Err(Error::Config(
                "a sentinel group needs at least 1 replica and 2 sentinels".to_owned(),
            ));
        }
        if self.name.is_empty() || self.name.contains(char::is_whitespace) {
            return Err(Error::Config(format!(
                "invalid sentinel service name {:?}",
                self.name
            )));
        }
        let program = crate::server::program()?;
        // Redis 7 delays a diskless full sync by 5 s to wait for more replicas; every server
        // may become a primary that syncs a demoted one, so none waits.
        if self.tls.is_some() && self.replication_proxy {
            return Err(Error::Config(
                "a TLS sentinel group has no replication proxy".to_owned(),
            ));
        }
        let server = || {
            let b = RedisServer::builder()
                .mode(ServerMode::Process)
                .config("repl-diskless-sync-delay", "0");
            match &self.tls {
                Some(cert) => b.tls(cert).config("tls-replication", "yes"),
                None => b,
            }
        };
        let primary = server().start().await?;
        let proxy = if self.replication_proxy {
            Some(FaultProxy::start(primary.addr()).await?)
        } else {
            None
        };
        let upstream = match (&self.tls, primary.tls_addr()) {
            (Some(_), Some(tls)) => tls,
            _ => proxy.as_ref().map_or(primary.addr(), FaultProxy::addr),
        };
        let mut servers = vec![primary];
        for _ in 0..self.replicas {
            let replica = server()
                .config(
                    "replicaof",
                    format!("{} {}", upstream.ip(), upstream.port()),
                )
                .start()
                .await?;
            servers.push(replica);
        }
        let mut group = SentinelGroup {
            name: self.name.clone(),
            servers,
            sentinels: Vec::new(),
            proxy,
        };
        group.wait_links_up(0, SETTLE_DEADLINE).await?;
        let primary_port = match &self.tls {
            Some(_) => group.servers[0]
                .tls_port()
                .unwrap_or(group.servers[0].port()),
            None => group.servers[0].port(),
        };
        for _ in 0..self.sentinels {
            let sentinel = Sentinel::start(&program, &self, primary_port).await?;
            group.sentinels.push(sentinel);
        }
        group.wait_sentinels_settled(SETTLE_DEADLINE).await?;
        Ok(group)
    }
}

/// A sentinel process.
#[derive(Debug)]
struct Sentinel {
    // Field order matters: the process is killed before the directory is removed.
    process: ServerProcess,
    port: u16,
    tls_port: Option<u16>,
    dir: TempDir,
}

impl Sentinel {
    async fn start(
        program: &PathBuf,
        opts: &SentinelGroupBuilder,
        primary_port: u16,
    ) -> Result<Sentinel> {
        let dir = TempDir::new("sentinel")?;
        let mut last_error = None;
        for _ in 0..5 {
            let port = free_port()?;
            let conf = dir.path().join("sentinel.conf");
            let tls_port = match &opts.tls {
                Some(_) => Some(free_port()?),
                None => None,
            };
            let tls = match (&opts.tls, tls_port) {
                (Some(cert), Some(tls_port)) => format!(
                    "tls-port {tls_port}\ntls-cert-file {cert}\ntls-key-file {key}\n\
                     tls-ca-cert-file {ca}\ntls-auth-clients no\ntls-replication yes\n",
                    cert = cert.cert_file().display(),
                    key = cert.key_file().display(),
                    ca = cert.ca_file().display(),
                ),
                _ => String::new(),
            };
            let text = tls
                + &format!(
                    "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {dir}\n\
                 sentinel monitor {name} 127.0.0.1 {primary_port} 2\n\
                 sentinel down-after-milliseconds {name} {down}\n\
                 sentinel failover-timeout {name} {failover}\n\
                 sentinel parallel-syncs {name} 2\n",
                    dir = dir.path().display(),
                    name = opts.name,
                    down = opts.down_after.as_millis(),
                    failover = opts.failover_timeout.as_millis(),
                );
            std::fs::write(&conf, text)
                .map_err(|e| Error::io(format!("writing {}", conf.display()), e))?;
            let log = dir.path().join("sentinel.log");
            let (out, err) = log_stdio(&log)?;
            let mut cmd = Command::new(program);
            cmd.arg(&conf)
                .arg("--sentinel")
                .current_dir(dir.path())
                .stdout(out)
                .stderr(err);
            let mut process = ServerProcess::spawn(cmd, "redis-sentinel")?;
            let started = Instant::now();
            loop {
                if let Some(status) = process.try_exited() {
                    let text = log_tail(&log);
                    let conflict = text.to_ascii_lowercase().contains("address already in use");
                    last_error = Some(Error::Exited {
                        what: format!("redis-sentinel on port {port}"),
                        status: status.to_string(),
                        log: text,
                    });
                    if conflict {
                        break;
                    }
                    return Err(last_error.unwrap_or_else(|| Error::Config("exited".into())));
                }
                if resp::ping(loopback(port), &ProbeAuth::default())
                    .await
                    .is_ok()
                {
                    return Ok(Sentinel {
                        process,
                        port,
                        tls_port,
                        dir,
                    });
                }
                if started.elapsed() > Duration::from_secs(20) {
                    return Err(Error::NotReady {
                        what: format!("redis-sentinel on port {port}"),
                        waited: started.elapsed(),
                        last_error: log_tail(&log),
                    });
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
        Err(last_error.unwrap_or_else(|| Error::Config("no port attempts".to_owned())))
    }

    fn addr(&self) -> SocketAddr {
        loopback(self.port)
    }
}

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
            .map(|port| format!("rediss://127.0.0.1:{port}/"))
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

    /// Waits until every sentinel names a primary other than server `old`, and that server
    /// answers `ROLE` as a primary; returns its index.
    pub async fn wait_new_primary(&self, old: usize, deadline: Duration) -> Result<usize> {
        let started = Instant::now();
        loop {
            let last = match self.agreed_primary().await {
                Ok(i) if i != old => match self.role(i).await {
                    Ok(role) if role == "master" => return Ok(i),
                    Ok(role) => format!("server {i} answers ROLE {role}"),
                    Err(e) => format!("server {i}: {e}"),
                },
                Ok(i) => format!("the sentinels still name server {i}"),
                Err(e) => e,
            };
            if started.elapsed() > deadline {
                return Err(Error::NotReady {
                    what: format!("a new primary for {} (old: server {old})", self.name),
                    waited: started.elapsed(),
                    last_error: last,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The primary every sentinel names, if they agree.
    async fn agreed_primary(&self) -> std::result::Result<usize, String> {
        let mut agreed = None;
        for s in &self.sentinels {
            let port = self.primary_port_from(s.addr()).await?;
            let i = self.index_of_port(port).map_err(|e| e.to_string())?;
            match agreed {
                None => agreed = Some(i),
                Some(a) if a == i => {}
                Some(a) => return Err(format!("sentinels disagree: server {a} / server {i}")),
            }
        }
        agreed.ok_or_else(|| "no sentinels".to_owned())
    }

    /// The first word of server `i`'s `ROLE` reply (`master` or `slave`).
    pub async fn role(&self, i: usize) -> Result<String> {
        let server = self.server(i)?;
        let reply = resp::probe(
            server.addr(),
            &ProbeAuth::default(),
            &["ROLE"],
            PROBE_TIMEOUT,
        )
        .await
        .map_err(|e| Error::NotReady {
            what: format!("ROLE of server {i}"),
            waited: PROBE_TIMEOUT,
            last_error: e,
        })?;
        match reply {
            Reply::Array(Some(items)) => items
                .first()
                .and_then(Reply::text)
                .ok_or_else(|| Error::InvalidState(format!("unexpected ROLE reply {items:?}"))),
            other => Err(Error::InvalidState(format!(
                "unexpected ROLE reply {other:?}"
            ))),
        }
    }

    /// Waits until the sentinels agree on a primary that answers as one, every other
    /// running server replicates from it with its link up (a server still a primary is
    /// pointed at it with `REPLICAOF`, as the sentinels would do a few seconds later), and
    /// every sentinel knows at least one replica in good health, so the next failover finds
    /// one. Returns the primary's index.
    pub async fn wait_settled(&self, deadline: Duration) -> Result<usize> {
        let started = Instant::now();
        loop {
            let last = match self.agreed_primary().await {
                Ok(p) => match self.settle_step(p).await {
                    Ok(true) => return Ok(p),
                    Ok(false) => "replicas not yet settled".to_owned(),
                    Err(e) => e,
                },
                Err(e) => e,
            };
            if started.elapsed() > deadline {
                return Err(Error::NotReady {
                    what: format!("sentinel group {} settled", self.name),
                    waited: started.elapsed(),
                    last_error: last,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn settle_step(&self, primary: usize) -> std::result::Result<bool, String> {
        if self.role(primary).await.map_err(|e| e.to_string())? != "master" {
            return Ok(false);
        }
        let p = self.servers[primary].addr();
        for (i, server) in self.servers.iter().enumerate() {
            if i == primary || server.state() != crate::redis::ServerState::Running {
                continue;
            }
            let info = info_replication(server.addr()).await?;
            let field = |name: &str| field(&info, name);
            if field("role") == "master" {
                // Left behind by the failover: point it at the new primary.
                let port = p.port().to_string();
                let _ = resp::probe(
                    server.addr(),
                    &ProbeAuth::default(),
                    &["REPLICAOF", "127.0.0.1", &port],
                    PROBE_TIMEOUT,
                )
                .await?;
                return Ok(false);
            }
            if field("master_port") != p.port().to_string() || field("master_link_status") != "up" {
                return Ok(false);
            }
        }
        let running = self
            .servers
            .iter()
            .enumerate()
            .filter(|(i, s)| *i != primary && s.state() == crate::redis::ServerState::Running)
            .count();
        // Sentinels refresh a primary's replica list every 10 s; one good replica known to
        // each of them is what the next failover needs.
        let wanted = running.min(1);
        for s in &self.sentinels {
            let good = self.good_replicas(s.addr()).await?;
            if good < wanted {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// How many replicas sentinel `addr` lists for the group as connected, with their link
    /// up and no down flags.
    async fn good_replicas(&self, addr: SocketAddr) -> std::result::Result<usize, String> {
        let reply = resp::probe(
            addr,
            &ProbeAuth::default(),
            &["SENTINEL", "REPLICAS", &self.name],
            PROBE_TIMEOUT,
        )
        .await?;
        let Reply::Array(Some(replicas)) = reply else {
            return Err(format!("SENTINEL REPLICAS answered {reply:?}"));
        };
        Ok(replicas
            .iter()
            .filter(|r| {
                let Reply::Array(Some(kv)) = r else {
                    return false;
                };
                let get = |k: &str| {
                    kv.chunks(2)
                        .find(|c| c[0].text().as_deref() == Some(k))
                        .and_then(|c| c.get(1).and_then(Reply::text))
                        .unwrap_or_default()
                };
                get("flags") == "slave" && get("master-link-status") == "ok"
            })
            .count())
    }

    async fn wait_links_up(&self, primary: usize, deadline: Duration) -> Result<()> {
        let started = Instant::now();
        loop {
            let mut last = None;
            for (i, server) in self.servers.iter().enumerate() {
                if i == primary {
                    continue;
                }
                match info_replication(server.addr()).await {
                    Ok(info) if field(&info, "master_link_status") == "up" => {}
                    Ok(info) => {
                        last = Some(format!(
                            "server {i}: master_link_status:{}",
                            field(&info, "master_link_status")
                        ))
                    }
                    Err(e) => last = Some(format!("server {i}: {e}")),
                }
            }
            let Some(last) = last else { return Ok(()) };
            if started.elapsed() > deadline {
                return Err(Error::NotReady {
                    what: "replication links".to_owned(),
                    waited: started.elapsed(),
                    last_error: last,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until every sentinel knows every replica (link ok) and every other sentinel,
    /// so a failover can be authorised.
    async fn wait_sentinels_settled(&self, deadline: Duration) -> Result<()> {
        let started = Instant::now();
        let others = (self.sentinels.len() - 1).to_string();
        loop {
            let mut last = None;
            for s in &self.sentinels {
                match self.good_replicas(s.addr()).await {
                    Ok(n) if n == self.servers.len() - 1 => {}
                    Ok(n) => last = Some(format!("{}: {n} good replicas", s.addr())),
                    Err(e) => last = Some(e),
                }
                if last.is_some() {
                    break;
                }
                let reply = resp::probe(
                    s.addr(),
                    &ProbeAuth::default(),
                    &["SENTINEL", "MASTER", &self.name],
                    PROBE_TIMEOUT,
                )
                .await;
                let known = match &reply {
                    Ok(Reply::Array(Some(kv))) => kv
                        .chunks(2)
                        .find(|c| c[0].text().as_deref() == Some("num-other-sentinels"))
                        .and_then(|c| c.get(1).and_then(Reply::text))
                        .unwrap_or_default(),
                    _ => String::new(),
                };
                if known != others {
                    last = Some(format!("{}: num-other-sentinels {known:?}", s.addr()));
                    break;
                }
            }
            let Some(last) = last else { return Ok(()) };
            if started.elapsed() > deadline {
                let logs: Vec<String> = self
                    .sentinels
                    .iter()
                    .map(|s| log_tail(&s.dir.path().join("sentinel.log")))
                    .collect();
                return Err(Error::NotReady {
                    what: "sentinels".to_owned(),
                    waited: started.elapsed(),
                    last_error: format!("{last}; sentinel logs:\n{}", logs.join("\n---\n")),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
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

async fn info_replication(addr: SocketAddr) -> std::result::Result<String, String> {
    let reply = resp::probe(
        addr,
        &ProbeAuth::default(),
        &["INFO", "replication"],
        PROBE_TIMEOUT,
    )
    .await?;
    reply
        .text()
        .ok_or_else(|| format!("INFO replication answered {reply:?}"))
}

fn field(info: &str, name: &str) -> String {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
        .unwrap_or("")
        .to_owned()
}
