//! [`SentinelGroupBuilder`]: the group's shape and timings, and its start (servers, links,
//! sentinels).

use std::time::Duration;

use super::process::Sentinel;
use super::{SETTLE_DEADLINE, SentinelGroup};
use crate::mode::ServerMode;
use crate::proxy::FaultProxy;
use crate::redis::RedisServer;
use crate::tls::ServerCert;
use crate::{Error, Result};

/// Builder for a [`SentinelGroup`].
#[derive(Debug, Clone)]
#[must_use]
pub struct SentinelGroupBuilder {
    pub(super) name: String,
    pub(super) replicas: usize,
    pub(super) sentinels: usize,
    pub(super) down_after: Duration,
    pub(super) failover_timeout: Duration,
    pub(super) replication_proxy: bool,
    pub(super) tls: Option<ServerCert>,
}

impl SentinelGroupBuilder {
    /// TLS everywhere, with `cert` (from a [`TestPki`](crate::tls::TestPki); name it
    /// `127.0.0.1`): every data server gets a TLS port besides its plain one
    /// ([`RedisServer::tls_port`]), replicas replicate from the primary's TLS port, the
    /// sentinels serve a TLS port too ([`SentinelGroup::sentinel_tls_urls`]), reach the
    /// servers and each other over TLS (`tls-replication yes`) and monitor the primary's TLS
    /// port — so the address they name to clients is a TLS port, where plaintext cannot work.
    /// The plain ports stay, for the kit's own probes. Not with
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
        if self.replication_proxy && self.tls.is_some() {
            return Err(Error::Config(
                "a sentinel group cannot have both TLS and a replication proxy".to_owned(),
            ));
        }
        let program = crate::server::program()?;
        // Redis 7 delays a diskless full sync by 5 s to wait for more replicas; every server
        // may become a primary that syncs a demoted one, so none waits.
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
        let upstream = match (&proxy, primary.tls_addr()) {
            (Some(proxy), _) => proxy.addr(),
            (None, Some(tls)) if self.tls.is_some() => tls,
            (None, _) => primary.addr(),
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
            tls: self.tls.is_some(),
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
