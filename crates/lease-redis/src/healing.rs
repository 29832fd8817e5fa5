//! [`HealingConnection`]: a multiplexed connection to one server that is rebuilt when the
//! server goes silent, not only when TCP says it is gone.
//!
//! # Why
//!
//! A request the driver gave up on (its deadline passed) leaves the socket as it was. When the
//! path to the server was blackholed (a partition, a VM gone, a dropped NAT entry, a failover
//! that moved DNS), TCP keeps the unacknowledged bytes in retransmission backoff — up to two
//! minutes between tries, about fifteen before the kernel gives up — and every later request
//! queues behind them. A connection that reconnects only on hard errors (redis-rs's
//! `ConnectionManager`) therefore stays dead for minutes after the fault heals. Recovery must be
//! bounded by the lease, not by TCP.
//!
//! # The rule
//!
//! The connection is **given up** (and the next call opens a new one) when:
//!
//! - a call fails with an I/O error or a dropped connection (as `ConnectionManager` does); or
//! - the connection has been **silent** for [`DEFAULT_SILENCE`] (or
//!   [`HealingConnection::with_silence`]): a request sent at `t` was abandoned by its caller
//!   unanswered (its deadline fired and the future was dropped), no reply of any request
//!   arrived on this connection since `t`, and `t` is at least the silence bound ago. This
//!   is checked when a call is abandoned and when a call starts.
//!
//! A single caller that gives up early (a `select!` that lost, a short timeout) does not cost
//! a reconnect: the silence must last. One reply on the connection clears the suspicion, since
//! replies come back in order and any reply proves the path works.
//!
//! Giving a connection up drops only this handle's reference: calls already in flight on it
//! keep their own and finish (or are abandoned) as they would have. **A rebuild never changes
//! an outcome**: the abandoned call was already reported unknown to its caller by the driver;
//! a call that finds no connection and cannot open one was never sent and fails as not
//! applied (`ErrorKind::Client`, see [`crate::backend_error`]).
//!
//! The sockets also get TCP keepalive ([`KEEPALIVE_IDLE`], probes every
//! [`KEEPALIVE_INTERVAL`]) and, on Linux, `TCP_USER_TIMEOUT` ([`TCP_USER_TIMEOUT`]), so an
//! idle connection to a vanished server is closed by the kernel too.
//!
//! Each clone pins the connection on its first call (until an error), like
//! `SentinelConnection`: the backend clones the connection once per operation. A script and
//! the `WAIT` of a [`ReplicaAck`](crate::ReplicaAck) after it go over a dedicated connection
//! opened from the same client, not this shared one (see [`crate::replica`]).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::io::tcp::{TcpSettings, socket2};
use redis::{AsyncConnectionConfig, Cmd, ErrorKind, RedisError, RedisFuture, RedisResult, Value};

use crate::CONNECT_TIMEOUT;
use crate::lend::{Purge, PurgeHooks};

mod silence;
mod single_flight;

use silence::Replies;
pub(crate) use silence::Silence;
pub(crate) use single_flight::SingleFlight;

/// How long a connection may stay silent, with a request abandoned unanswered, before it is
/// given up. Shorter than any lease's renew slack in practice, longer than a reply from a busy
/// server normally takes.
pub const DEFAULT_SILENCE: Duration = Duration::from_secs(1);

/// Idle time before the first TCP keepalive probe.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(5);

/// Time between TCP keepalive probes (on Linux, `TCP_USER_TIMEOUT` bounds how long unanswered
/// probes may go on).
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);

/// `TCP_USER_TIMEOUT` (Linux): how long sent data may stay unacknowledged before the kernel
/// closes the connection.
pub const TCP_USER_TIMEOUT: Duration = Duration::from_secs(10);

/// The TCP settings every connection of this crate uses: `TCP_NODELAY`, keepalive after
/// [`KEEPALIVE_IDLE`] every [`KEEPALIVE_INTERVAL`], and `TCP_USER_TIMEOUT` where the
/// platform has it.
pub fn tcp_settings() -> TcpSettings {
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL);
    let settings = TcpSettings::default()
        .set_nodelay(true)
        .set_keepalive(keepalive);
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "fuchsia"))]
    let settings = settings.set_user_timeout(TCP_USER_TIMEOUT);
    settings
}

/// `client` with [`tcp_settings`] applied to its address (a new client with the same
/// connection info otherwise).
pub fn with_tcp_settings(client: &redis::Client) -> RedisResult<redis::Client> {
    let info = client
        .get_connection_info()
        .clone()
        .set_tcp_settings(tcp_settings());
    redis::Client::open(info)
}

/// A self-healing multiplexed connection to one server; see the [module documentation](self).
/// Cloning is cheap; clones share the connection.
pub struct HealingConnection {
    shared: Arc<Shared>,
    pinned: Option<(u64, MultiplexedConnection)>,
}

struct Shared {
    client: redis::Client,
    config: AsyncConnectionConfig,
    /// The silence bound, in milliseconds.
    silence_ms: AtomicU64,
    /// One dial at a time.
    dial: SingleFlight<(u64, MultiplexedConnection)>,
    state: Mutex<State>,
    /// What every reply must tell the silence rule, kept outside the lock: a reply takes
    /// the lock only while a request is suspect ([`Shared::replied`]).
    replies: Replies,
    /// The backends' kept clones, purged when a connection is given up (`lend.rs`).
    purges: Arc<PurgeHooks>,
}

#[derive(Default)]
struct State {
    generation: u64,
    conn: Option<MultiplexedConnection>,
    /// The silence rule's bookkeeping for the current connection.
    silence: Silence,
    dials: u64,
    given_up: u64,
}

impl HealingConnection {
    /// Makes a clone that served calls what a new clone is (a backend keeps clones for its
    /// calls, `lend.rs`): the connection it pinned is kept only while a new clone's first
    /// call would get that same one, that is while it is still the current generation and no
    /// request is suspect (two atomic loads, no lock); otherwise it is forgotten, and the next
    /// call looks at the shared state as a new clone's does.
    pub(crate) fn refresh(&mut self) {
        if let Some((generation, _)) = &self.pinned
            && !self.shared.replies.is_current_and_calm(*generation)
        {
            self.pinned = None;
        }
    }

    /// Where a backend over this connection registers its kept clones, to be purged when a
    /// connection is given up (`lend.rs`).
    pub(crate) fn purge_hooks(&self) -> Arc<PurgeHooks> {
        Arc::clone(&self.shared.purges)
    }
}

impl Clone for HealingConnection {
    fn clone(&self) -> HealingConnection {
        HealingConnection {
            shared: Arc::clone(&self.shared),
            pinned: None,
        }
    }
}

impl fmt::Debug for HealingConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.state();
        f.debug_struct("HealingConnection")
            .field("addr", &self.shared.client.get_connection_info().addr())
            .field("connected", &state.conn.is_some())
            .field("dials", &state.dials)
            .field("given_up", &state.given_up)
            .finish_non_exhaustive()
    }
}

/// Counters of a [`HealingConnection`] or a `HealingCluster` (feature `cluster`), shared by
/// its clones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HealingStats {
    /// Connections opened (the first, then every rebuild).
    pub dials: u64,
    /// Connections given up (an I/O error, or silence past the bound).
    pub given_up: u64,
}

impl HealingStats {
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn new(dials: u64, given_up: u64) -> HealingStats {
        HealingStats { dials, given_up }
    }
}

impl HealingConnection {
    /// Opens the first connection to `client`'s server, so a wrong address or password is
    /// reported here. Each connection attempt is bounded by [`CONNECT_TIMEOUT`]; the connection
    /// has no response timeout (the library bounds every call) and the [`tcp_settings`].
    pub async fn connect(client: redis::Client) -> RedisResult<HealingConnection> {
        let conn = HealingConnection::lazy(client)?;
        Shared::dial_raw(&conn.shared).await?;
        Ok(conn)
    }

    /// Like [`connect`](Self::connect), but nothing is connected until the first call.
    pub fn lazy(client: redis::Client) -> RedisResult<HealingConnection> {
        let client = with_tcp_settings(&client)?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(None);
        Ok(HealingConnection {
            shared: Arc::new(Shared {
                client,
                config,
                silence_ms: AtomicU64::new(DEFAULT_SILENCE.as_millis() as u64),
                dial: SingleFlight::default(),
                state: Mutex::new(State::default()),
                replies: Replies::new(),
                purges: Arc::default(),
            }),
            pinned: None,
        })
    }

    /// A connection to the same server with the same settings that shares nothing with this
    /// one (nothing dialled until its first call): the dedicated connections of replica
    /// acknowledgement (see [`crate::replica`]).
    pub(crate) fn independent(&self) -> HealingConnection {
        HealingConnection {
            shared: Arc::new(Shared {
                client: self.shared.client.clone(),
                config: self.shared.config.clone(),
                silence_ms: AtomicU64::new(self.shared.silence_ms.load(Ordering::Relaxed)),
                dial: SingleFlight::default(),
                state: Mutex::new(State::default()),
                replies: Replies::new(),
                purges: Arc::default(),
            }),
            pinned: None,
        }
    }

    /// Sets the silence bound (default [`DEFAULT_SILENCE`]; at least 10 ms), for this
    /// connection and every clone of it.
    pub fn with_silence(self, silence: Duration) -> HealingConnection {
        let silence = silence.max(Duration::from_millis(10));
        self.shared.silence_ms.store(
            u64::try_from(silence.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        self
    }

    /// The silence bound.
    pub fn silence(&self) -> Duration {
        self.shared.silence()
    }

    /// The client this connection dials.
    pub fn client(&self) -> &redis::Client {
        &self.shared.client
    }

    /// How many connections were opened and given up so far.
    pub fn stats(&self) -> HealingStats {
        let state = self.shared.state();
        HealingStats {
            dials: state.dials,
            given_up: state.given_up,
        }
    }

    /// The connection to send on and its generation: the pinned one, else the shared one
    /// (unless it has been silent too long), else a dial; pinned from now on. Takes the two
    /// fields apart so the caller may send on the connection and still reach `shared`.
    async fn pin<'c>(
        shared: &Arc<Shared>,
        pinned: &'c mut Option<(u64, MultiplexedConnection)>,
    ) -> RedisResult<(u64, &'c mut MultiplexedConnection)> {
        if pinned.is_none() {
            let found = match shared.current_unless_silent() {
                Some(found) => found,
                None => Shared::dial(shared).await?,
            };
            *pinned = Some(found);
        }
        match pinned {
            Some((generation, conn)) => Ok((*generation, conn)),
            // Set just above.
            None => Err(not_connected("no connection")),
        }
    }

    /// After a call on `generation`: a lost connection is given up (and unpinned); any other
    /// result, a server's error reply included, proves the path works.
    fn after<T>(
        shared: &Shared,
        pinned: &mut Option<(u64, MultiplexedConnection)>,
        generation: u64,
        result: &RedisResult<T>,
    ) {
        match result {
            Err(e) if lost(e) => {
                *pinned = None;
                shared.give_up(generation, &e.to_string());
            }
            _ => shared.replied(generation),
        }
    }
}

impl Shared {
    fn silence(&self) -> Duration {
        Duration::from_millis(self.silence_ms.load(Ordering::Relaxed))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn current(&self) -> Option<(u64, MultiplexedConnection)> {
        let state = self.state();
        state.conn.clone().map(|c| (state.generation, c))
    }

    /// [`Shared::current`], after giving the connection up if it has been silent (what
    /// [`Shared::give_up_if_silent`] does), under one lock: every call asks (the clock only
    /// while a request is suspect).
    fn current_unless_silent(&self) -> Option<(u64, MultiplexedConnection)> {
        let silence = self.silence();
        let mut state = self.state();
        if state.conn.is_some()
            && state.silence.is_suspect()
            && state.silence.is_silent(Instant::now(), silence)
        {
            let cause = format!("no reply for {silence:?} to a request abandoned unanswered");
            self.give_up_locked(&mut state, &cause);
            drop(state);
            self.purge_kept();
            return None;
        }
        state.conn.clone().map(|c| (state.generation, c))
    }

    /// A reply on `generation` arrived. The lock (and the clock) only while a request is
    /// suspect: the reply counts itself before it reads the flag, and an abandonment raises
    /// the flag before it reads the count, so one of the two sees the other.
    fn replied(&self, generation: u64) {
        self.replies.mark(generation);
        if self.replies.suspect.load(Ordering::SeqCst) {
            let mut state = self.state();
            if state.generation == generation {
                state.silence.replied(Instant::now());
                self.replies.suspect.store(false, Ordering::SeqCst);
            }
        }
    }

    /// A request sent at `sent` on `generation`, when the generation had delivered `seen`
    /// replies, was abandoned before its reply.
    fn abandoned(&self, generation: u64, sent: Instant, seen: u64) {
        let now = Instant::now();
        {
            let mut state = self.state();
            if state.generation != generation {
                return;
            }
            self.replies.suspect.store(true, Ordering::SeqCst);
            if self.replies.seen() == seen {
                state.silence.abandoned(sent);
            }
            self.replies
                .suspect
                .store(state.silence.is_suspect(), Ordering::SeqCst);
        }
        self.give_up_if_silent(now);
    }

    fn give_up_if_silent(&self, now: Instant) {
        let generation = {
            let state = self.state();
            if !state.silence.is_silent(now, self.silence()) {
                return;
            }
            state.generation
        };
        self.give_up(
            generation,
            &format!(
                "no reply for {:?} to a request abandoned unanswered",
                self.silence()
            ),
        );
    }

    /// Drops the connection of `generation` (if it is still the current one).
    fn give_up(&self, generation: u64, cause: &str) {
        let mut state = self.state();
        if state.generation == generation && state.conn.is_some() {
            self.give_up_locked(&mut state, cause);
            drop(state);
            self.purge_kept();
        }
    }

    /// After a connection was given up (the state unlocked): the backends drop their idle
    /// kept clones, which may pin it, so it closes now (its socket, its driver task, the
    /// server's client slot) rather than when an idle clone is next lent.
    fn purge_kept(&self) {
        let hooks: Vec<Arc<dyn Purge>> = self
            .purges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for hook in hooks {
            hook.purge();
        }
    }

    /// Drops the current connection (the state is locked by the caller).
    fn give_up_locked(&self, state: &mut State, cause: &str) {
        tracing::info!(
            addr = %self.client.get_connection_info().addr(),
            %cause,
            "lease-redis: giving up the connection; the next call opens another"
        );
        state.conn = None;
        state.generation += 1;
        state.silence = Silence::default();
        self.replies.reset(state.generation);
        state.given_up += 1;
    }

    /// Opens a connection unless another caller did meanwhile, as the one attempt in flight
    /// ([`SingleFlight`]); a failure is redis-rs's own error (for the first connection, whose
    /// errors are classified).
    async fn dial_raw(this: &Arc<Shared>) -> RedisResult<(u64, MultiplexedConnection)> {
        let shared = Arc::clone(this);
        this.dial
            .run(move || async move { shared.open().await })
            .await
    }

    /// One dial, bounded by twice [`CONNECT_TIMEOUT`].
    async fn open(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        if let Some(found) = self.current() {
            return Ok(found);
        }
        // The config bounds the connect; the outer bound covers HELLO/AUTH/SELECT too.
        let bound = CONNECT_TIMEOUT * 2;
        let conn = tokio::time::timeout(
            bound,
            self.client
                .get_multiplexed_async_connection_with_config(&self.config),
        )
        .await
        .map_err(|_| {
            RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no connection within {bound:?}"),
            ))
        })??;
        let mut state = self.state();
        state.generation += 1;
        state.dials += 1;
        state.conn = Some(conn.clone());
        state.silence = Silence::default();
        self.replies.reset(state.generation);
        Ok((state.generation, conn))
    }

    /// [`dial_raw`](Self::dial_raw) for a call: a failure means nothing of the call was sent,
    /// so it is not applied (server refusals such as `WRONGPASS` keep their kind).
    ///
    /// The dial belongs to the connection, not to the call ([`SingleFlight`]): a caller whose
    /// deadline is shorter than the dial does not cancel it, and the next call finds the
    /// connection ready.
    async fn dial(this: &Arc<Shared>) -> RedisResult<(u64, MultiplexedConnection)> {
        Shared::dial_raw(this).await.map_err(|e| {
            if is_refusal(&e) || e.kind() == ErrorKind::InvalidClientConfig {
                e
            } else {
                not_connected(&e.to_string())
            }
        })
    }
}

/// Errors the server sent (a wrong password) keep their kind; the rest become "not connected".
fn is_refusal(e: &RedisError) -> bool {
    matches!(e.kind(), ErrorKind::Server(_)) || e.is_connection_refusal()
}

/// A connection could not be opened: nothing was sent, so the call did not apply.
pub(crate) fn not_connected(detail: &str) -> RedisError {
    RedisError::from((
        ErrorKind::Client,
        "cannot connect to Redis",
        detail.to_owned(),
    ))
}

/// Whether `e` says the connection itself is gone.
fn lost(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() || e.is_timeout()
}

/// Reports a call abandoned before its reply to the shared state.
struct Abandoned<'a> {
    shared: &'a Shared,
    generation: u64,
    sent: Instant,
    /// The generation's replies when the call was sent.
    seen: u64,
    armed: bool,
}

impl<'a> Abandoned<'a> {
    /// Armed for a call sent now on `generation`.
    fn sending(shared: &'a Shared, generation: u64) -> Abandoned<'a> {
        Abandoned {
            shared,
            generation,
            sent: Instant::now(),
            seen: shared.replies.seen(),
            armed: true,
        }
    }
}

impl Abandoned<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.shared.abandoned(self.generation, self.sent, self.seen);
        }
    }
}

impl ConnectionLike for HealingConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let HealingConnection { shared, pinned } = self;
            let (generation, conn) = HealingConnection::pin(shared, pinned).await?;
            let guard = Abandoned::sending(shared, generation);
            // The inherent call: its future lives in this one box.
            let result = conn.send_packed_command(cmd).await;
            guard.disarm();
            HealingConnection::after(shared, pinned, generation, &result);
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
            let HealingConnection { shared, pinned } = self;
            let (generation, conn) = HealingConnection::pin(shared, pinned).await?;
            let guard = Abandoned::sending(shared, generation);
            let result = conn.send_packed_commands(pipeline, offset, count).await;
            guard.disarm();
            HealingConnection::after(shared, pinned, generation, &result);
            result
        })
    }

    fn get_db(&self) -> i64 {
        self.shared
            .client
            .get_connection_info()
            .redis_settings()
            .db()
    }
}

#[cfg(test)]
mod tests {
    use super::silence::REPLIES;
    use super::*;

    fn shared() -> Shared {
        let client = redis::Client::open("redis://127.0.0.1:1/").expect("url");
        Shared {
            client,
            config: AsyncConnectionConfig::new(),
            silence_ms: AtomicU64::new(100),
            dial: SingleFlight::default(),
            state: Mutex::new(State::default()),
            replies: Replies::new(),
            purges: Arc::default(),
        }
    }

    fn fake_connected(s: &Shared) {
        // No real connection is needed to test the rule: mark generation 1 as live.
        let mut state = s.state();
        state.generation = 1;
        state.dials = 1;
        s.replies.reset(1);
    }

    #[test]
    fn silence_gives_up_only_after_the_bound_and_a_reply_clears_it() {
        let s = shared();
        fake_connected(&s);
        let t0 = Instant::now();
        s.abandoned(1, t0, s.replies.seen());
        assert!(s.state().silence.is_suspect());
        // A reply after the send proves the path: not silent.
        s.replied(1);
        assert!(!s.state().silence.is_suspect());
        // A request abandoned after a reply that came before it was sent is suspect again.
        let t1 = Instant::now() + Duration::from_millis(1);
        s.abandoned(1, t1, s.replies.seen());
        assert!(s.state().silence.is_suspect());
        assert!(
            !s.state()
                .silence
                .is_silent(t1 + Duration::from_millis(50), Duration::from_millis(100))
        );
        assert!(
            s.state()
                .silence
                .is_silent(t1 + Duration::from_millis(100), Duration::from_millis(100))
        );
        s.give_up_if_silent(t1 + Duration::from_millis(50));
        assert_eq!(s.state().generation, 1, "not before the bound");
    }

    #[test]
    fn a_reply_while_nothing_is_suspect_still_counts_for_an_earlier_send() {
        let s = shared();
        fake_connected(&s);
        let (sent, seen) = (Instant::now(), s.replies.seen());
        // Nothing suspect: the reply is counted without the lock.
        s.replied(1);
        assert_eq!(s.replies.seen(), seen + 1);
        // The request sent before that reply, abandoned now, proves nothing wrong.
        s.abandoned(1, sent, seen);
        assert!(!s.state().silence.is_suspect());
        assert!(!s.replies.suspect.load(Ordering::SeqCst));
        // One sent after it does, and the flag says so; a reply clears both.
        s.abandoned(1, Instant::now(), s.replies.seen());
        assert!(s.state().silence.is_suspect());
        assert!(s.replies.suspect.load(Ordering::SeqCst));
        s.replied(1);
        assert!(!s.state().silence.is_suspect());
        assert!(!s.replies.suspect.load(Ordering::SeqCst));
        // A reply of an older generation counts nothing, nor one of a connection given up
        // whose reply arrives after the next one was opened.
        let before = s.replies.seen();
        s.replied(0);
        assert_eq!(s.replies.seen(), before);
        s.replies.reset(2);
        s.replies.mark(1);
        assert_eq!(s.replies.seen(), Replies::tag(2));
        s.replies.mark(2);
        assert_eq!(s.replies.seen(), Replies::tag(2) + 1);
        // The count wraps within its half, never into the generation's.
        s.replies
            .count
            .store(Replies::tag(2) | REPLIES, Ordering::SeqCst);
        s.replies.mark(2);
        assert_eq!(s.replies.seen(), Replies::tag(2));
    }

    #[test]
    fn an_old_generation_does_not_count() {
        let s = shared();
        fake_connected(&s);
        s.abandoned(0, Instant::now(), 0);
        assert!(!s.state().silence.is_suspect());
    }

    #[test]
    fn dial_failures_are_not_applied() {
        let e = not_connected("refused");
        let b = crate::backend_error(e);
        assert_eq!(b.effect(), lease_core::Effect::NotApplied);
        assert!(b.is_transient());
    }

    #[test]
    fn tcp_settings_have_keepalive_and_user_timeout() {
        let s = tcp_settings();
        assert!(s.nodelay());
        assert!(s.keepalive().is_some());
        #[cfg(target_os = "linux")]
        assert_eq!(s.user_timeout(), Some(TCP_USER_TIMEOUT));
    }
}
