//! The group's waits and probes: a new primary after a failover, a settled group, replication
//! links up, sentinels aware of each other and of every replica.

use std::net::SocketAddr;
use std::time::Duration;

use super::{POLL_SENTINELS, PROBE_TIMEOUT, SentinelGroup};
use crate::poll::{Look, poll_every, poll_until, with_detail};
use crate::process::log_tail;
use crate::resp::{self, ProbeAuth, Reply};
use crate::{Error, Result};

impl SentinelGroup {
    /// Waits until every sentinel names a primary other than server `old`, and that server
    /// answers `ROLE` as a primary; returns its index.
    pub async fn wait_new_primary(&self, old: usize, deadline: Duration) -> Result<usize> {
        let what = format!("a new primary for {} (old: server {old})", self.name);
        poll_until(deadline, what, || async move {
            match self.agreed_primary().await {
                Ok(i) if i != old => match self.role(i).await {
                    Ok(role) if role == "master" => Look::Done(i),
                    Ok(role) => Look::NotYet(format!("server {i} answers ROLE {role}")),
                    Err(e) => Look::NotYet(format!("server {i}: {e}")),
                },
                Ok(i) => Look::NotYet(format!("the sentinels still name server {i}")),
                Err(e) => Look::NotYet(e),
            }
        })
        .await
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
        let what = format!("sentinel group {} settled", self.name);
        poll_until(deadline, what, || async move {
            match self.agreed_primary().await {
                Ok(p) => match self.settle_step(p).await {
                    Ok(true) => Look::Done(p),
                    Ok(false) => Look::NotYet("replicas not yet settled".to_owned()),
                    Err(e) => Look::NotYet(e),
                },
                Err(e) => Look::NotYet(e),
            }
        })
        .await
    }

    async fn settle_step(&self, primary: usize) -> std::result::Result<bool, String> {
        if self.role(primary).await.map_err(|e| e.to_string())? != "master" {
            return Ok(false);
        }
        // With TLS, replication goes to the primary's TLS port.
        let p = match self.servers[primary].tls_addr() {
            Some(tls) if self.tls => tls,
            _ => self.servers[primary].addr(),
        };
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

    pub(super) async fn wait_links_up(&self, primary: usize, deadline: Duration) -> Result<()> {
        poll_until(deadline, "replication links", || async move {
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
            match last {
                None => Look::Done(()),
                Some(last) => Look::NotYet(last),
            }
        })
        .await
    }

    /// Waits until every sentinel knows every replica (link ok) and every other sentinel,
    /// so a failover can be authorised.
    pub(super) async fn wait_sentinels_settled(&self, deadline: Duration) -> Result<()> {
        let others = &(self.sentinels.len() - 1).to_string();
        poll_every(POLL_SENTINELS, deadline, "sentinels", || async move {
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
                if known != *others {
                    last = Some(format!("{}: num-other-sentinels {known:?}", s.addr()));
                    break;
                }
            }
            match last {
                None => Look::Done(()),
                Some(last) => Look::NotYet(last),
            }
        })
        .await
        .map_err(|e| {
            with_detail(e, || {
                let logs: Vec<String> = self
                    .sentinels
                    .iter()
                    .map(|s| log_tail(&s.dir.path().join("sentinel.log")))
                    .collect();
                format!("; sentinel logs:\n{}", logs.join("\n---\n"))
            })
        })
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
