//! [`HealingCluster`]: a Redis Cluster connection that is rebuilt from its seeds when a slot's
//! node goes silent, with the rule of [`crate::healing`] applied per hash slot.
//!
//! # Why
//!
//! redis-rs's `ClusterConnection` reconnects a node after an I/O error and refreshes its slot
//! map after `MOVED` or a failed connect, but a node whose path was blackholed says nothing:
//! its multiplexed socket sits in TCP's retransmission backoff, requests routed to it queue
//! behind the unacknowledged bytes, and a response timeout is retried on the same socket. After
//! the heal (or after the cluster promoted the node's replica elsewhere) the slots of that node
//! stay unreachable until TCP gives up, for minutes.
//!
//! # The rule
//!
//! The [silence rule](crate::healing#the-rule), judged **per hash slot** (and one bucket for
//! commands without a key): a request for slot `s` sent at `t` was abandoned by its caller
//! unanswered, no reply for slot `s` arrived since `t`, and `t` is at least the silence bound
//! ago. Then the whole cluster connection is given up, and the next call builds a new one from
//! the client's seeds: new node connections and a fresh slot map (`CLUSTER SLOTS`), so a slot
//! served by a promoted replica is found at its new address. Replies for other slots do not
//! clear a slot's suspicion (another node answering proves nothing about this one).
//!
//! I/O errors are left to redis-rs, which reconnects that node itself. As with
//! [`HealingConnection`](crate::HealingConnection), calls in flight keep the connection they
//! started on, so a rebuild never changes an outcome, and a call that cannot build a
//! connection was never sent and fails as not applied (`ErrorKind::Client`).
//!
//! The per-slot bookkeeping holds at most [`SLOT_BOOK_LIMIT`] slots; past it, slots with no
//! pending suspicion are forgotten (which can cost at most one needless rebuild, never a
//! missed one).

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, RedisError, RedisFuture, RedisResult, Value};

use crate::CONNECT_TIMEOUT;
use crate::healing::{
    DEFAULT_SILENCE, HealingStats, Silence, SingleFlight, not_connected, tcp_settings,
};
use crate::slot::key_slot;

/// How many slots' reply times a [`HealingCluster`] remembers before it forgets the
/// unsuspected ones.
pub const SLOT_BOOK_LIMIT: usize = 1024;

/// How long building a cluster connection (seeds, `CLUSTER SLOTS`, the nodes) may take.
const BUILD_TIMEOUT: Duration = Duration::from_secs(3);

/// A self-healing Redis Cluster connection; see the [module documentation](self). Cloning is
/// cheap; clones share the connection. Use it with
/// [`RedisBackend::cluster`](crate::RedisBackend::cluster), or [`crate::connect_cluster`].
pub struct HealingCluster {
    shared: Arc<Shared>,
    pinned: Option<(u64, ClusterConnection)>,
}

/// Where a command goes, as far as the silence rule cares: a hash slot, or `None` for commands
/// without a key.
type Bucket = Option<u16>;

struct Shared {
    client: ClusterClient,
    silence_ms: AtomicU64,
    /// One build at a time.
    build: SingleFlight<(u64, ClusterConnection)>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    generation: u64,
    conn: Option<ClusterConnection>,
    slots: HashMap<Bucket, Silence>,
    dials: u64,
    given_up: u64,
}

impl Clone for HealingCluster {
    fn clone(&self) -> HealingCluster {
        HealingCluster {
            shared: Arc::clone(&self.shared),
            pinned: None,
        }
    }
}

impl fmt::Debug for HealingCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.state();
        f.debug_struct("HealingCluster")
            .field("connected", &state.conn.is_some())
            .field("dials", &state.dials)
            .field("given_up", &state.given_up)
            .finish_non_exhaustive()
    }
}

impl HealingCluster {
    /// Builds the client from `builder` with this crate's [`tcp_settings`] (keepalive,
    /// `TCP_USER_TIMEOUT`), a [`CONNECT_TIMEOUT`] per node connection and **no retries**, and
    /// opens the first cluster connection, so wrong seeds or a wrong password are reported
    /// here.
    ///
    /// Every request is sent at most once: redis-rs's cluster client would otherwise re-send
    /// a request whose connection broke after the server ran it (a release that succeeded
    /// then reads "not held", an acquire becomes a takeover with a skipped token, a fenced
    /// body runs twice). A lost reply is [`OutcomeUnknown`](lease_core::BackendError::OutcomeUnknown)
    /// instead, and a redirection (`MOVED`, `ASK`) or `TRYAGAIN` is a transient "not applied"
    /// that the lease's own rules retry (the slot map is refreshed meanwhile). Everything else
    /// of the builder is kept: credentials, TLS.
    pub async fn connect(builder: ClusterClientBuilder) -> RedisResult<HealingCluster> {
        let conn = HealingCluster::lazy(builder)?;
        Shared::build_raw(&conn.shared).await?;
        Ok(conn)
    }

    /// Like [`connect`](Self::connect), but nothing is connected until the first call.
    pub fn lazy(builder: ClusterClientBuilder) -> RedisResult<HealingCluster> {
        let client = builder
            .tcp_settings(tcp_settings())
            .connection_timeout(CONNECT_TIMEOUT)
            .retries(0)
            .build()?;
        Ok(HealingCluster {
            shared: Arc::new(Shared {
                client,
                silence_ms: AtomicU64::new(
                    u64::try_from(DEFAULT_SILENCE.as_millis()).unwrap_or(u64::MAX),
                ),
                build: SingleFlight::default(),
                state: Mutex::new(State::default()),
            }),
            pinned: None,
        })
    }

    /// Sets the silence bound (default [`DEFAULT_SILENCE`]; at least 10 ms), for this
    /// connection and every clone of it.
    pub fn with_silence(self, silence: Duration) -> HealingCluster {
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

    /// The client this connection builds from.
    pub fn client(&self) -> &ClusterClient {
        &self.shared.client
    }

    /// How many cluster connections were built and given up so far.
    pub fn stats(&self) -> HealingStats {
        let state = self.shared.state();
        HealingStats::new(state.dials, state.given_up)
    }

    async fn conn(&mut self) -> RedisResult<(u64, ClusterConnection)> {
        if let Some(pinned) = &self.pinned {
            return Ok(pinned.clone());
        }
        self.shared.give_up_if_silent(Instant::now());
        let pinned = match self.shared.current() {
            Some(found) => found,
            None => Shared::build(&self.shared).await?,
        };
        self.pinned = Some(pinned.clone());
        Ok(pinned)
    }
}

impl Shared {
    fn silence(&self) -> Duration {
        Duration::from_millis(self.silence_ms.load(Ordering::Relaxed))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn current(&self) -> Option<(u64, ClusterConnection)> {
        let state = self.state();
        state.conn.clone().map(|c| (state.generation, c))
    }

    /// A reply (a server error included) for `bucket` proves the path to its node.
    fn replied(&self, generation: u64, bucket: Bucket) {
        let mut state = self.state();
        if state.generation != generation {
            return;
        }
        if state.slots.len() >= SLOT_BOOK_LIMIT && !state.slots.contains_key(&bucket) {
            state.slots.retain(|_, s| s.is_suspect());
        }
        state
            .slots
            .entry(bucket)
            .or_default()
            .replied(Instant::now());
    }

    /// A request for `bucket` sent at `sent` on `generation` was abandoned before its reply.
    fn abandoned(&self, generation: u64, bucket: Bucket, sent: Instant) {
        {
            let mut state = self.state();
            if state.generation != generation {
                return;
            }
            state.slots.entry(bucket).or_default().abandoned(sent);
        }
        self.give_up_if_silent(Instant::now());
    }

    fn give_up_if_silent(&self, now: Instant) {
        let bound = self.silence();
        let mut state = self.state();
        let silent = state
            .slots
            .iter()
            .find(|(_, s)| s.is_silent(now, bound))
            .map(|(bucket, _)| *bucket);
        let Some(bucket) = silent else { return };
        if state.conn.is_none() {
            return;
        }
        tracing::info!(
            slot = ?bucket,
            silence = ?bound,
            "lease-redis: a cluster slot went silent with a request abandoned unanswered; \
             giving up the cluster connection, the next call builds another from the seeds"
        );
        state.conn = None;
        state.generation += 1;
        state.slots.clear();
        state.given_up += 1;
    }

    /// Builds a cluster connection unless another caller did meanwhile, as the one attempt in
    /// flight ([`SingleFlight`]); a failure is redis-rs's own error.
    async fn build_raw(this: &Arc<Shared>) -> RedisResult<(u64, ClusterConnection)> {
        let shared = Arc::clone(this);
        this.build
            .run(move || async move { shared.open().await })
            .await
    }

    /// One build, bounded by [`BUILD_TIMEOUT`].
    async fn open(&self) -> RedisResult<(u64, ClusterConnection)> {
        if let Some(found) = self.current() {
            return Ok(found);
        }
        let conn = tokio::time::timeout(BUILD_TIMEOUT, self.client.get_async_connection())
            .await
            .map_err(|_| {
                RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no cluster connection within {BUILD_TIMEOUT:?}"),
                ))
            })??;
        let mut state = self.state();
        state.generation += 1;
        state.dials += 1;
        state.conn = Some(conn.clone());
        state.slots.clear();
        Ok((state.generation, conn))
    }

    /// [`build_raw`](Self::build_raw) for a call: a failure means nothing of the call was
    /// sent, so it is not applied (server refusals keep their kind).
    ///
    /// The build belongs to the connection, not to the call ([`SingleFlight`]): a caller whose
    /// deadline is shorter than the build (one blackholed seed costs a connect timeout) does
    /// not cancel it, and the next call finds the connection ready.
    async fn build(this: &Arc<Shared>) -> RedisResult<(u64, ClusterConnection)> {
        Shared::build_raw(this).await.map_err(|e| {
            if matches!(e.kind(), redis::ErrorKind::Server(_))
                || e.kind() == redis::ErrorKind::InvalidClientConfig
            {
                e
            } else {
                not_connected(&e.to_string())
            }
        })
    }
}

/// The slot a command is routed by: the first key of `EVAL`-like commands (after `numkeys`),
/// the first argument of keyed commands, `None` for commands without a key.
fn bucket_of(cmd: &Cmd) -> Bucket {
    let mut args = cmd.args_iter().filter_map(|a| match a {
        redis::Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let name = args.next()?;
    let upper = name.to_ascii_uppercase();
    match upper.as_slice() {
        b"EVAL" | b"EVALSHA" | b"EVAL_RO" | b"EVALSHA_RO" | b"FCALL" | b"FCALL_RO" => {
            let _body = args.next()?;
            let numkeys: usize = std::str::from_utf8(args.next()?).ok()?.parse().ok()?;
            (numkeys > 0).then(|| args.next().map(key_slot))?
        }
        b"PING" | b"INFO" | b"TIME" | b"CONFIG" | b"SCRIPT" | b"CLUSTER" | b"WAIT" | b"CLIENT"
        | b"HELLO" | b"AUTH" | b"PUBLISH" | b"FUNCTION" | b"ACL" | b"COMMAND" | b"ROLE" => None,
        _ => args.next().map(key_slot),
    }
}

/// The bucket of a pipeline: its first command's that has a key.
fn pipeline_bucket(pipeline: &redis::Pipeline) -> Bucket {
    pipeline.cmd_iter().find_map(bucket_of)
}

/// Reports a call abandoned before its reply.
struct Abandoned<'a> {
    shared: &'a Shared,
    generation: u64,
    bucket: Bucket,
    sent: Instant,
    armed: bool,
}

impl Abandoned<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.shared
                .abandoned(self.generation, self.bucket, self.sent);
        }
    }
}

impl ConnectionLike for HealingCluster {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (generation, mut conn) = self.conn().await?;
            let bucket = bucket_of(cmd);
            let guard = Abandoned {
                shared: &self.shared,
                generation,
                bucket,
                sent: Instant::now(),
                armed: true,
            };
            let result = conn.req_packed_command(cmd).await;
            guard.disarm();
            if replied(&result) {
                self.shared.replied(generation, bucket);
            }
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
            let bucket = pipeline_bucket(pipeline);
            let guard = Abandoned {
                shared: &self.shared,
                generation,
                bucket,
                sent: Instant::now(),
                armed: true,
            };
            let result = conn.req_packed_commands(pipeline, offset, count).await;
            guard.disarm();
            if replied(&result) {
                self.shared.replied(generation, bucket);
            }
            result
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// Whether a result came from the node (a value or a server error reply), not from the
/// client side (I/O, a timeout, a closed connection).
fn replied<T>(result: &RedisResult<T>) -> bool {
    match result {
        Ok(_) => true,
        Err(e) => {
            !(e.is_io_error()
                || e.is_timeout()
                || e.is_connection_dropped()
                || e.is_unrecoverable_error())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> Shared {
        let client = ClusterClient::new(vec!["redis://127.0.0.1:1/"]).expect("seeds");
        Shared {
            client,
            silence_ms: AtomicU64::new(100),
            build: SingleFlight::default(),
            state: Mutex::new(State::default()),
        }
    }

    /// Marks generation 1 as live without a server (the rule needs no connection, but the
    /// give-up needs one to drop; tests check the generation only when one is set).
    fn live(s: &Shared) {
        let mut state = s.state();
        state.generation = 1;
        state.dials = 1;
    }

    #[test]
    fn buckets_follow_keys() {
        let mut eval = redis::cmd("EVALSHA");
        eval.arg("abc")
            .arg(2)
            .arg("{job}:a")
            .arg("{job}:b")
            .arg("x");
        assert_eq!(bucket_of(&eval), Some(key_slot("{job}")));
        let mut no_keys = redis::cmd("EVAL");
        no_keys.arg("return 1").arg(0);
        assert_eq!(bucket_of(&no_keys), None);
        let mut set = redis::cmd("set");
        set.arg("k").arg("v");
        assert_eq!(bucket_of(&set), Some(key_slot("k")));
        assert_eq!(bucket_of(&redis::cmd("PING")), None);
        let mut info = redis::cmd("INFO");
        info.arg("server");
        assert_eq!(bucket_of(&info), None);
        let mut bad = redis::cmd("EVAL");
        bad.arg("return 1").arg("not a number").arg("k");
        assert_eq!(bucket_of(&bad), None);
    }

    #[test]
    fn only_a_reply_for_the_same_slot_clears_its_suspicion() {
        let s = shared();
        live(&s);
        let t0 = Instant::now();
        s.abandoned(1, Some(7), t0);
        s.replied(1, Some(8));
        assert!(
            s.state().slots[&Some(7)].is_suspect(),
            "another slot's reply"
        );
        s.replied(1, Some(7));
        assert!(!s.state().slots[&Some(7)].is_suspect());
    }

    #[test]
    fn a_silent_slot_is_found_after_the_bound_only() {
        let s = shared();
        live(&s);
        let t0 = Instant::now();
        s.abandoned(1, Some(7), t0);
        let state = s.state();
        let bound = Duration::from_millis(100);
        assert!(!state.slots[&Some(7)].is_silent(t0 + Duration::from_millis(50), bound));
        assert!(state.slots[&Some(7)].is_silent(t0 + bound, bound));
    }

    #[test]
    fn an_old_generation_does_not_count() {
        let s = shared();
        live(&s);
        s.abandoned(0, Some(1), Instant::now());
        assert!(s.state().slots.is_empty());
    }

    #[test]
    fn the_slot_book_is_bounded() {
        let s = shared();
        live(&s);
        s.abandoned(1, Some(0), Instant::now());
        for slot in 1..=(SLOT_BOOK_LIMIT as u16 * 2) {
            s.replied(1, Some(slot));
        }
        let state = s.state();
        assert!(
            state.slots.len() <= SLOT_BOOK_LIMIT + 1,
            "{}",
            state.slots.len()
        );
        assert!(
            state.slots[&Some(0)].is_suspect(),
            "the suspect slot is kept"
        );
    }
}
