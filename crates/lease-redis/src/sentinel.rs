//! [`SentinelConnection`]: a connection to the primary that Redis Sentinel names, following
//! failovers (feature `sentinel`).
//!
//! It asks the sentinels for the primary, checks that the server it names answers as a
//! primary, and keeps one multiplexed connection to it, shared by every clone. When a call
//! fails in a way that says the primary is gone or demoted (the connection dropped, refused
//! or timed out; `READONLY`, `MASTERDOWN`, `LOADING`), the connection is dropped and the next
//! call asks the sentinels again. The failed call itself is **not** retried: its error keeps
//! its truthful effect (a dropped connection after sending is *unknown*, a `READONLY` refusal
//! is *not applied*), and the driver retries within the lease's own bounds. When no sentinel
//! can name a reachable primary, calls fail with a not-applied, transient error (redis-rs's
//! [`ErrorKind::Client`]).
//!
//! A call abandoned before its reply (the caller's timeout fired: the driver bounds every
//! lease request) also drops the connection: a paused or partitioned primary is given up
//! instead of queueing every later call behind it.
//!
//! Each clone pins the underlying connection on its first call until an error: the backend
//! clones the connection once per operation. A script and the `WAIT` of a
//! [`ReplicaAck`](crate::ReplicaAck) that follows it share one server connection (a `WAIT` on
//! another connection would acknowledge nothing of ours): a dedicated one, discovered through
//! the same sentinels, so the `WAIT` holds up nothing else (see [`crate::replica`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use lease_redis::{RedisBackend, SentinelConnection};
//!
//! let conn = SentinelConnection::connect(
//!     ["redis://127.0.0.1:26379/", "redis://127.0.0.1:26380/"],
//!     "mymaster",
//! )
//! .await?;
//! let backend = RedisBackend::new(conn);
//! # let _ = backend;
//! # Ok(()) }
//! ```

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Cmd, ErrorKind, IntoConnectionInfo, RedisError, RedisFuture,
    RedisResult, ServerErrorKind, Value,
};

/// The default bound of one discovery (asking the sentinels and connecting to the primary).
pub const DEFAULT_DISCOVERY_TIMEOUT: Duration = Duration::from_secs(2);

/// A connection to the primary named by Redis Sentinel that follows failovers; see the
/// [module documentation](self). Cloning is cheap; clones share the connection.
pub struct SentinelConnection {
    shared: Arc<Shared>,
    /// The connection this clone uses, with its generation (pinned at the first call).
    pinned: Option<(u64, MultiplexedConnection)>,
}

struct Shared {
    service: String,
    /// Shared with the [`independent`](SentinelConnection::independent) connections.
    client: Arc<tokio::sync::Mutex<SentinelClient>>,
    current: Mutex<Current>,
    config: AsyncConnectionConfig,
    discovery_timeout: Duration,
}

#[derive(Default)]
struct Current {
    generation: u64,
    conn: Option<MultiplexedConnection>,
    /// `host:port` of the primary connected to.
    address: Option<String>,
    discoveries: u64,
}

impl Clone for SentinelConnection {
    fn clone(&self) -> SentinelConnection {
        SentinelConnection {
            shared: Arc::clone(&self.shared),
            pinned: None,
        }
    }
}

impl fmt::Debug for SentinelConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let current = self.shared.current.lock().ok();
        f.debug_struct("SentinelConnection")
            .field("service", &self.shared.service)
            .field("primary", &current.as_ref().and_then(|c| c.address.clone()))
            .finish_non_exhaustive()
    }
}

impl SentinelConnection {
    /// Asks the sentinels at `sentinels` (`redis://host:port/` URLs or other connection
    /// infos of **sentinels**, not of data servers) for the primary named `service` and
    /// connects to it, so a wrong name or no reachable sentinel is reported here, at once.
    /// The connection has no response timeout (the library bounds every call; see the crate
    /// documentation) and a connect timeout of 1 s.
    ///
    /// **Security as given, for both hops.** The sentinel URLs' TLS (`rediss://`, with
    /// `#insecure` or not), user name, password and database are what the connection to the
    /// *primary* uses too, and the user name and password are also sent to the sentinels: a
    /// `rediss://` sentinel list never yields a plaintext data connection, and credentials are
    /// never dropped. Every URL must agree on all four; sentinels that disagree are refused
    /// here, before any round trip ([`ErrorKind::InvalidClientConfig`]). For sentinels and
    /// data servers with different credentials, or a custom CA, build a `SentinelClient`
    /// yourself (redis-rs's `SentinelClientBuilder`: `set_client_to_sentinel_*` and
    /// `set_client_to_redis_*`) and use [`from_client`](Self::from_client).
    pub async fn connect<I, T>(sentinels: I, service: &str) -> RedisResult<SentinelConnection>
    where
        I: IntoIterator<Item = T>,
        T: IntoConnectionInfo,
    {
        let client = sentinel_client(sentinels, service)?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(None);
        let conn = SentinelConnection::from_client(client, service, config);
        conn.shared.discover().await?;
        Ok(conn)
    }

    /// Wraps a `SentinelClient` built by the caller (TLS, credentials, database: see
    /// redis-rs's `SentinelClientBuilder`); `service` names the primary (for messages), and
    /// `config` configures each connection to it. Nothing is connected until the first call.
    pub fn from_client(
        client: SentinelClient,
        service: &str,
        config: AsyncConnectionConfig,
    ) -> SentinelConnection {
        SentinelConnection {
            shared: Arc::new(Shared {
                service: service.to_owned(),
                client: Arc::new(tokio::sync::Mutex::new(client)),
                current: Mutex::new(Current::default()),
                config,
                discovery_timeout: DEFAULT_DISCOVERY_TIMEOUT,
            }),
            pinned: None,
        }
    }

    /// A connection through the same sentinels (and the same sentinel client) that shares
    /// no connection with this one: it discovers the primary on its first call and follows
    /// failovers on its own. The dedicated connections of replica acknowledgement (see
    /// [`crate::replica`]).
    pub(crate) fn independent(&self) -> SentinelConnection {
        SentinelConnection {
            shared: Arc::new(Shared {
                service: self.shared.service.clone(),
                client: Arc::clone(&self.shared.client),
                current: Mutex::new(Current::default()),
                config: self.shared.config.clone(),
                discovery_timeout: self.shared.discovery_timeout,
            }),
            pinned: None,
        }
    }

    /// The service (primary) name.
    pub fn service(&self) -> &str {
        &self.shared.service
    }

    /// `host:port` of the primary currently connected to (`None` between a failure and the
    /// next call).
    pub fn primary_address(&self) -> Option<String> {
        let current = self.shared.current.lock().ok()?;
        current.conn.as_ref()?;
        current.address.clone()
    }

    /// How many times the primary was looked up through the sentinels (1 after
    /// [`connect`](Self::connect); each failover or lost connection adds one).
    pub fn discoveries(&self) -> u64 {
        self.shared
            .current
            .lock()
            .map(|c| c.discoveries)
            .unwrap_or(0)
    }

    async fn conn(&mut self) -> RedisResult<(u64, MultiplexedConnection)> {
        if let Some(pinned) = &self.pinned {
            return Ok(pinned.clone());
        }
        let found = self.shared.snapshot();
        let pinned = match found {
            Some(found) => found,
            None => self.shared.discover().await?,
        };
        self.pinned = Some(pinned.clone());
        Ok(pinned)
    }

    fn after(&mut self, generation: u64, result: &RedisResult<Value>) {
        let lost = match result {
            Err(e) => primary_lost(e),
            // A server's error reply arrives as a value; it becomes an `Err` only when the
            // caller converts it.
            Ok(Value::ServerError(e)) => {
                e.kind().is_some_and(demoted) || e.details().is_some_and(demoted_in_script)
            }
            Ok(_) => false,
        };
        if lost {
            self.pinned = None;
            let cause = match result {
                Err(e) => e.clone(),
                Ok(v) => RedisError::from((ErrorKind::Client, "primary lost", format!("{v:?}"))),
            };
            self.shared.forget(generation, &cause);
        }
    }

    fn after_all(&mut self, generation: u64, result: &RedisResult<Vec<Value>>) {
        match result {
            Err(e) => self.after(generation, &Err(e.clone())),
            Ok(values) => {
                if let Some(v) = values.iter().find(|v| {
                    matches!(v, Value::ServerError(e)
                            if e.kind().is_some_and(demoted)
                                || e.details().is_some_and(demoted_in_script))
                }) {
                    self.after(generation, &Ok(v.clone()));
                }
            }
        }
    }
}

impl Shared {
    fn snapshot(&self) -> Option<(u64, MultiplexedConnection)> {
        let current = self.current.lock().ok()?;
        current.conn.clone().map(|c| (current.generation, c))
    }

    /// Drops the connection of `generation` (if it is still the current one).
    fn forget(&self, generation: u64, cause: &RedisError) {
        if let Ok(mut current) = self.current.lock()
            && current.generation == generation
            && current.conn.is_some()
        {
            tracing::info!(
                service = %self.service,
                primary = current.address.as_deref().unwrap_or("?"),
                error = %cause,
                "lease-redis: dropping the primary's connection; the next call asks the sentinels"
            );
            current.conn = None;
            current.generation += 1;
        }
    }

    /// Looks the primary up and connects, unless another caller did so meanwhile (one
    /// discovery at a time).
    async fn discover(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        let mut client = self.client.lock().await;
        if let Some(found) = self.snapshot() {
            return Ok(found);
        }
        let looked_up = tokio::time::timeout(self.discovery_timeout, async {
            let primary = client.async_get_client().await?;
            let address = primary.get_connection_info().addr().to_string();
            let conn = primary
                .get_multiplexed_async_connection_with_config(&self.config)
                .await?;
            Ok::<_, RedisError>((address, conn))
        })
        .await;
        let (address, conn) = match looked_up {
            Ok(Ok(found)) => found,
            Ok(Err(e)) => return Err(unavailable(&self.service, e.to_string())),
            Err(_) => {
                return Err(unavailable(
                    &self.service,
                    format!("no answer within {:?}", self.discovery_timeout),
                ));
            }
        };
        let mut current = self
            .current
            .lock()
            .map_err(|_| unavailable(&self.service, "a poisoned lock".to_owned()))?;
        current.generation += 1;
        current.discoveries += 1;
        if current.address.as_deref() != Some(address.as_str()) {
            tracing::info!(
                service = %self.service,
                primary = %address,
                previous = current.address.as_deref().unwrap_or("none"),
                "lease-redis: connected to the primary named by the sentinels"
            );
        }
        current.address = Some(address);
        current.conn = Some(conn.clone());
        Ok((current.generation, conn))
    }
}

/// A discovery failure: nothing was sent to a primary, so the call provably did not apply.
fn unavailable(service: &str, detail: String) -> RedisError {
    RedisError::from((
        ErrorKind::Client,
        "no primary reachable through the sentinels",
        format!("{service}: {detail}"),
    ))
}

/// Whether `e` says the connection's server is gone or no longer the primary.
fn primary_lost(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
        || matches!(e.kind(), ErrorKind::Server(kind) if demoted(kind))
        || e.detail().is_some_and(demoted_in_script)
}

/// Whether a script error wraps a demotion (Redis 6.2 reports `READONLY` raised by a
/// script's write as `ERR Error running script ...: -READONLY ...`).
fn demoted_in_script(detail: &str) -> bool {
    crate::error::script_wrapped_code(detail)
        .is_some_and(|code| matches!(code, "READONLY" | "MASTERDOWN" | "LOADING"))
}

/// Whether a server's error says it is no longer (or not yet) a usable primary.
fn demoted(kind: ServerErrorKind) -> bool {
    matches!(
        kind,
        ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown | ServerErrorKind::BusyLoading
    )
}

/// Drops the connection of a call abandoned before its reply (the caller's timeout fired):
/// a primary that stopped answering (paused, partitioned) is given up, so the next call asks
/// the sentinels instead of queueing behind it. What the abandoned call did stays unknown to
/// its caller either way.
struct Abandoned<'a> {
    shared: &'a Shared,
    generation: u64,
    armed: bool,
}

impl<'a> Abandoned<'a> {
    fn new(shared: &'a Shared, generation: u64) -> Abandoned<'a> {
        Abandoned {
            shared,
            generation,
            armed: true,
        }
    }

    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if self.armed {
            let cause = RedisError::from((ErrorKind::Io, "a call was abandoned before its reply"));
            self.shared.forget(self.generation, &cause);
        }
    }
}

impl ConnectionLike for SentinelConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (generation, mut conn) = self.conn().await?;
            let guard = Abandoned::new(&self.shared, generation);
            let result = conn.req_packed_command(cmd).await;
            guard.disarm();
            self.after(generation, &result);
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (generation, mut conn) = self.conn().await?;
            let guard = Abandoned::new(&self.shared, generation);
            let result = conn.req_packed_commands(pipeline, offset, count).await;
            guard.disarm();
            self.after_all(generation, &result);
            result
        })
    }

    fn get_db(&self) -> i64 {
        self.pinned
            .as_ref()
            .map(|(_, c)| c.get_db())
            .or_else(|| self.shared.snapshot().map(|(_, c)| c.get_db()))
            .unwrap_or(0)
    }
}

/// What a sentinel URL says about security: TLS (`Some(insecure)`), user name, password and
/// database.
#[derive(PartialEq, Eq)]
struct Security {
    tls: Option<bool>,
    username: Option<String>,
    password: Option<String>,
    db: i64,
}

/// The sentinel client of [`SentinelConnection::connect`]: every URL's security must agree,
/// and it is given to the sentinels and to the primary alike.
fn sentinel_client<I, T>(sentinels: I, service: &str) -> RedisResult<SentinelClient>
where
    I: IntoIterator<Item = T>,
    T: IntoConnectionInfo,
{
    let mut addrs = Vec::new();
    let mut security: Option<Security> = None;
    for s in sentinels {
        let info = s.into_connection_info()?;
        let tls = match info.addr() {
            redis::ConnectionAddr::TcpTls { insecure, .. } => Some(*insecure),
            _ => None,
        };
        let settings = info.redis_settings();
        let this = Security {
            tls,
            username: settings.username().map(str::to_owned),
            password: settings.password().map(str::to_owned),
            db: settings.db(),
        };
        match &security {
            None => security = Some(this),
            Some(first) if *first == this => {}
            Some(_) => {
                return Err(RedisError::from((
                    ErrorKind::InvalidClientConfig,
                    "sentinel URLs disagree on TLS, user name, password or database",
                    "every sentinel URL must give the same (they are the primary's too); \
                     build a SentinelClient for separate settings"
                        .to_owned(),
                )));
            }
        }
        addrs.push(info.addr().clone());
    }
    let Some(security) = security else {
        return Err(RedisError::from((
            ErrorKind::InvalidClientConfig,
            "no sentinel given",
        )));
    };
    let mut builder = SentinelClientBuilder::new(addrs, service, SentinelServerType::Master)?;
    if let Some(insecure) = security.tls {
        let mode = if insecure {
            redis::TlsMode::Insecure
        } else {
            redis::TlsMode::Secure
        };
        builder = builder.set_client_to_redis_tls_mode(mode);
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
    builder.build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inconsistent_sentinel_urls_are_refused_before_any_round_trip() {
        for urls in [
            ["redis://127.0.0.1:1/", "redis://u:p@127.0.0.1:2/"],
            ["redis://:a@127.0.0.1:1/", "redis://:b@127.0.0.1:2/"],
            ["redis://127.0.0.1:1/", "redis://127.0.0.1:2/3"],
        ] {
            let Err(e) = sentinel_client(urls, "m") else {
                panic!("{urls:?} accepted");
            };
            assert_eq!(e.kind(), ErrorKind::InvalidClientConfig, "{urls:?}: {e}");
            assert!(!e.to_string().contains(":a@") && !e.to_string().contains("p@"));
        }
        assert!(sentinel_client(Vec::<String>::new(), "m").is_err());
        assert!(
            sentinel_client(
                ["redis://u:p@127.0.0.1:1/", "redis://u:p@127.0.0.1:2/"],
                "m"
            )
            .is_ok()
        );
    }

    #[test]
    fn tls_sentinels_are_refused_with_plain_ones() {
        let Err(e) = sentinel_client(["rediss://127.0.0.1:1/", "redis://127.0.0.1:2/"], "m") else {
            panic!("mixed TLS accepted");
        };
        assert_eq!(e.kind(), ErrorKind::InvalidClientConfig, "{e}");
    }

    #[test]
    fn lost_primaries_are_recognised() {
        let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert!(primary_lost(&io));
        let readonly = redis::make_extension_error(
            "READONLY".to_owned(),
            Some("You can't write against a read only replica.".to_owned()),
        );
        // An extension error with a known code parses to its server kind.
        let _ = readonly;
        let wrongtype = redis::make_extension_error("WRONGTYPE".to_owned(), None);
        assert!(!primary_lost(&wrongtype));
    }

    #[test]
    fn discovery_failures_are_not_applied() {
        let e = unavailable("m", "down".to_owned());
        let b = crate::backend_error(e);
        assert_eq!(b.effect(), lease_core::Effect::NotApplied);
        assert!(b.is_transient());
    }
}
