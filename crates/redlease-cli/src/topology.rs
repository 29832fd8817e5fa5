//! `--cluster`, `--sentinel ... --service NAME` and `--redlock URL,URL,URL`: every subcommand
//! that talks to Redis (`run`, `lock`, `status`, `fence`) on every topology the library
//! supports, through the same options (global clap arguments, `cli.rs`) and the connect
//! functions below ([`with_backend!`] picks one per topology).
//!
//! - `--cluster`: `--redis` is a comma-separated list of seed URLs of a Redis Cluster. The
//!   keys of one election or lock must share a slot: give a hash-tagged name (`--name
//!   '{jobs}'`, `lock '{backup}'`). Release notices: sharded pub/sub (`SSUBSCRIBE`, Redis 7).
//! - `--sentinel HOST:PORT,...` (sentinels' addresses or `redis://`/`rediss://` URLs) with
//!   `--service NAME`: the primary the sentinels name, followed across failovers. Release
//!   notices: a subscriber on the primary found at start (a notice published after a failover
//!   still reaches it while it runs as a replica; if it is gone, waiters poll).
//! - `--redlock URL,URL,URL`: a quorum over independent primaries. Waiters poll (no notices).
//!   `fence` is refused (exit 64): a fenced write would need the mark advanced on a quorum
//!   atomically, which the library does not offer; fence through your own store instead.
//!
//! TLS: `rediss://` URLs on every topology, with the `--tls-*` options (for Sentinel, the
//! sentinels' scheme is the primary's too).

use std::time::Duration;

use redlease::redis::client::aio::MultiplexedConnection;
use redlease::redis::client::cluster::ClusterClientBuilder;
use redlease::redis::client::sentinel::{SentinelClientBuilder, SentinelServerType};
use redlease::redis::client::{ConnectionAddr, IntoConnectionInfo, TlsMode};
use redlease::redis::{
    HealingCluster, HealingConnection, RedisBackend, ReleaseNotices, SentinelConnection,
};
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

/// A subcommand that cannot be offered soundly on a topology (exit 64, before connecting).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unsupported {
    /// `fence` on `--redlock`: the applied mark lives on every node; advancing it on a quorum
    /// atomically with the write is not something Redlock offers.
    FenceOnRedlock,
}

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unsupported::FenceOnRedlock => f.write_str(
                "`fence` is not supported with --redlock: a fenced write would have to advance \
                 the applied mark on a quorum of independent servers atomically with the write, \
                 which Redlock cannot do (use REDLEASE_TOKEN to fence writes in your own store, \
                 or elect on a single server, Sentinel or Cluster)",
            ),
        }
    }
}

impl From<Unsupported> for Failure {
    fn from(u: Unsupported) -> Failure {
        Failure::new(INVALID, u.to_string())
    }
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
            if sentinels.is_empty() {
                return Err(Failure::new(
                    INVALID,
                    "invalid value: --sentinel names no sentinel",
                ));
            }
            return Ok(Topology::Sentinel { sentinels, service });
        }
        if ctx.cluster {
            let urls = list(&ctx.redis_url);
            if urls.is_empty() {
                return Err(Failure::new(
                    INVALID,
                    "invalid value: --cluster needs seed URLs in --redis",
                ));
            }
            return Ok(Topology::Cluster(urls));
        }
        Ok(Topology::Standalone)
    }

    /// Where the leases live, as printed (passwords redacted).
    pub(crate) fn shown(&self, ctx: &Ctx) -> String {
        match self {
            Topology::Standalone => ctx.shown_url.clone(),
            Topology::Cluster(urls) => format!("the cluster at {}", shown(urls)),
            Topology::Sentinel { sentinels, service } => {
                format!(
                    "primary {service:?} of the sentinels at {}",
                    shown(sentinels)
                )
            }
            Topology::Redlock(urls) => format!("a Redlock quorum of {}", shown(urls)),
        }
    }
}

/// Connects per the topology the options ask for, and evaluates `$body` with `$b` bound to
/// the backend (a different type per topology). `once`: a single-server connection for a
/// one-shot command (`status`, `fence`); `managed`: a self-healing one (`run`, `lock`).
/// `$notices` (a `bool`): subscribe to release notices where the topology has them (unless
/// `--poll-only`).
macro_rules! with_backend {
    ($ctx:expr, $kind:ident, $notices:expr, |$b:ident, $topo:ident| $body:expr) => {{
        let ctx: &$crate::Ctx = $ctx;
        let $topo = $crate::topology::Topology::of(ctx)?;
        match &$topo {
            $crate::topology::Topology::Standalone => {
                let $b = $crate::topology::with_backend!(@standalone $kind, ctx, $notices);
                $body
            }
            $crate::topology::Topology::Cluster(urls) => {
                let $b = $crate::topology::cluster(ctx, urls, $notices).await?;
                $body
            }
            $crate::topology::Topology::Sentinel { sentinels, service } => {
                let $b = $crate::topology::sentinel(ctx, sentinels, service, $notices).await?;
                $body
            }
            $crate::topology::Topology::Redlock(urls) => {
                let $b = $crate::topology::redlock(ctx, urls).await?;
                $body
            }
        }
    }};
    (@standalone once, $ctx:expr, $notices:expr) => {
        $crate::topology::standalone_once($ctx, $notices).await?
    };
    (@standalone managed, $ctx:expr, $notices:expr) => {
        $crate::topology::standalone_managed($ctx, $notices).await?
    };
}
pub(crate) use with_backend;

fn shown(urls: &[String]) -> String {
    urls.iter().map(|u| redact(u)).collect::<Vec<_>>().join(",")
}

fn notices_wanted(ctx: &Ctx, notices: bool) -> bool {
    notices && !ctx.poll_only
}

/// One server, one multiplexed connection (checked with a PING), for one-shot commands.
pub(crate) async fn standalone_once(
    ctx: &Ctx,
    notices: bool,
) -> Result<RedisBackend<MultiplexedConnection>, Failure> {
    let backend = RedisBackend::new(conn::connect(ctx).await?);
    if notices_wanted(ctx, notices) {
        return conn::with_notices(ctx, backend);
    }
    Ok(backend)
}

/// One server, a self-healing connection, for the long-running commands.
pub(crate) async fn standalone_managed(
    ctx: &Ctx,
    notices: bool,
) -> Result<RedisBackend<HealingConnection>, Failure> {
    let backend = RedisBackend::new(conn::connect_managed(ctx).await?);
    if notices_wanted(ctx, notices) {
        return conn::with_notices(ctx, backend);
    }
    Ok(backend)
}

/// The TLS certificates for `rediss://` seeds or sentinels (`--tls-*`, the system's roots).
fn certificates(
    ctx: &Ctx,
    urls: &[String],
) -> Result<Option<redlease::redis::client::TlsCertificates>, Failure> {
    let tls = urls.iter().filter(|u| conn::is_tls(u)).count();
    if tls == 0 {
        if ctx.tls_given {
            return Err(Failure::new(
                INVALID,
                "--tls-ca, --tls-cert and --tls-key need rediss:// URLs",
            ));
        }
        return Ok(None);
    }
    if tls != urls.len() {
        return Err(Failure::new(
            INVALID,
            "invalid value: mixed redis:// and rediss:// URLs (all or none use TLS)",
        ));
    }
    match ctx.tls.certificates() {
        Ok(c) => Ok(Some(c)),
        Err(
            e @ (redlease::redis::TlsConfigError::NoTrustAnchors
            | redlease::redis::TlsConfigError::SystemRoots(_)),
        ) => Err(Failure::new(
            UNAVAILABLE,
            format!("cannot connect over TLS: {e} (give --tls-ca)"),
        )),
        Err(e) => Err(Failure::new(INVALID, e.to_string())),
    }
}

fn cluster_builder(ctx: &Ctx, urls: &[String]) -> Result<ClusterClientBuilder, Failure> {
    let mut builder = ClusterClientBuilder::new(urls.to_vec()).connection_timeout(CONNECT_TIMEOUT);
    if let Some(certs) = certificates(ctx, urls)? {
        builder = builder.certs(certs);
    }
    Ok(builder)
}

/// A Redis Cluster connection (slots discovered from the seeds), rebuilt from the seeds when
/// a slot's node goes silent ([`HealingCluster`]), with release notices over sharded pub/sub
/// when `notices`.
pub(crate) async fn cluster(
    ctx: &Ctx,
    urls: &[String],
    notices: bool,
) -> Result<RedisBackend<HealingCluster>, Failure> {
    let builder = cluster_builder(ctx, urls)?;
    let attempt = HealingCluster::connect(builder);
    let backend = match tokio::time::timeout(OP_TIMEOUT, attempt).await {
        Ok(Ok(conn)) => RedisBackend::cluster(conn),
        Ok(Err(e)) if e.kind() == redlease::redis::client::ErrorKind::InvalidClientConfig => {
            return Err(Failure::invalid("--redis URL", e));
        }
        Ok(Err(e)) => {
            return Err(conn::connect_error(
                &urls[0],
                &format!("cannot connect to the cluster at {}", shown(urls)),
                e,
            ));
        }
        Err(_) => {
            return Err(Failure::new(
                UNAVAILABLE,
                format!(
                    "cannot connect to the cluster at {}: timed out after {OP_TIMEOUT:?}",
                    shown(urls)
                ),
            ));
        }
    };
    if !notices_wanted(ctx, notices) {
        return Ok(backend);
    }
    let notices = ReleaseNotices::cluster(cluster_builder(ctx, urls)?)
        .map_err(|e| Failure::invalid("--redis URL", e))?;
    Ok(backend.with_release_notices(notices))
}

/// Everything the sentinel URLs agree on (clap gives them; `SentinelConnection` would refuse
/// disagreeing ones): TLS, user name, password, database.
struct SentinelSecurity {
    tls: bool,
    username: Option<String>,
    password: Option<String>,
    db: i64,
}

fn sentinel_security(
    sentinels: &[String],
) -> Result<(Vec<ConnectionAddr>, SentinelSecurity), Failure> {
    let mut addrs = Vec::new();
    let mut first: Option<(bool, Option<String>, Option<String>, i64)> = None;
    for s in sentinels {
        let info = s
            .as_str()
            .into_connection_info()
            .map_err(|e| Failure::invalid("--sentinel address", e))?;
        let settings = info.redis_settings();
        let this = (
            matches!(info.addr(), ConnectionAddr::TcpTls { .. }),
            settings.username().map(str::to_owned),
            settings.password().map(str::to_owned),
            settings.db(),
        );
        match &first {
            None => first = Some(this),
            Some(f) if *f == this => {}
            Some(_) => {
                return Err(Failure::new(
                    INVALID,
                    "invalid value: the --sentinel URLs disagree on TLS, user name, password or \
                     database (they are the primary's too)",
                ));
            }
        }
        addrs.push(info.addr().clone());
    }
    let Some((tls, username, password, db)) = first else {
        return Err(Failure::new(
            INVALID,
            "invalid value: --sentinel names no sentinel",
        ));
    };
    Ok((
        addrs,
        SentinelSecurity {
            tls,
            username,
            password,
            db,
        },
    ))
}

/// The primary named `service`, through the sentinels (checked with a PING), with release
/// notices on the primary found now when `notices`.
pub(crate) async fn sentinel(
    ctx: &Ctx,
    sentinels: &[String],
    service: &str,
    notices: bool,
) -> Result<RedisBackend<SentinelConnection>, Failure> {
    let (addrs, security) = sentinel_security(sentinels)?;
    let certs = certificates(ctx, sentinels)?;
    let mut builder = SentinelClientBuilder::new(addrs, service, SentinelServerType::Master)
        .map_err(|e| Failure::invalid("--sentinel", e))?;
    if security.tls {
        builder = builder
            .set_client_to_redis_tls_mode(TlsMode::Secure)
            .set_client_to_sentinel_tls_mode(TlsMode::Secure);
        if let Some(certs) = &certs {
            builder = builder
                .set_client_to_redis_certificates(certs.clone())
                .set_client_to_sentinel_certificates(certs.clone());
        }
    }
    if let Some(user) = &security.username {
        builder = builder
            .set_client_to_sentinel_username(user)
            .set_client_to_redis_username(user);
    }
    if let Some(password) = &security.password {
        builder = builder
            .set_client_to_sentinel_password(password)
            .set_client_to_redis_password(password);
    }
    if security.db != 0 {
        builder = builder.set_client_to_redis_db(security.db);
    }
    let client = builder
        .build()
        .map_err(|e| Failure::invalid("--sentinel", e))?;
    let config = redlease::redis::client::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(None);
    let mut connection = SentinelConnection::from_client(client, service, config);
    // The first call looks the primary up: a wrong name or no reachable sentinel fails here.
    let ping = redlease::redis::client::cmd("PING");
    let attempt = ping.query_async::<String>(&mut connection);
    match tokio::time::timeout(OP_TIMEOUT, attempt).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            return Err(conn::connect_error(
                &sentinels[0],
                &format!(
                    "cannot find the primary {service:?} through the sentinels at {}",
                    shown(sentinels)
                ),
                e,
            ));
        }
        Err(_) => {
            return Err(Failure::new(
                UNAVAILABLE,
                format!(
                    "cannot find the primary {service:?} through the sentinels at {}: timed out",
                    shown(sentinels)
                ),
            ));
        }
    }
    let backend = RedisBackend::new(connection.clone());
    if !notices_wanted(ctx, notices) {
        return Ok(backend);
    }
    // Notices are an optimisation (waiters still poll): without a known primary, none.
    let Some(primary) = connection.primary_address() else {
        return Ok(backend);
    };
    let (host, port) = match primary.rsplit_once(':').map(|(h, p)| (h, p.parse::<u16>())) {
        Some((h, Ok(p))) => (h.trim_matches(['[', ']']).to_owned(), p),
        _ => return Ok(backend),
    };
    let addr = if security.tls {
        ConnectionAddr::TcpTls {
            host,
            port,
            insecure: false,
            tls_params: None,
        }
    } else {
        ConnectionAddr::Tcp(host, port)
    };
    let mut redis = redlease::redis::client::RedisConnectionInfo::default().set_db(security.db);
    if let Some(user) = &security.username {
        redis = redis.set_username(user);
    }
    if let Some(password) = &security.password {
        redis = redis.set_password(password);
    }
    let info = addr
        .into_connection_info()
        .map(|i| i.set_redis_settings(redis));
    let client = match (info, certs) {
        (Ok(info), Some(certs)) => redlease::redis::client::Client::build_with_tls(info, certs),
        (Ok(info), None) => redlease::redis::client::Client::open(info),
        (Err(e), _) => Err(e),
    };
    match client {
        Ok(client) => Ok(backend.with_release_notices(ReleaseNotices::new(client))),
        Err(_) => Ok(backend),
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
