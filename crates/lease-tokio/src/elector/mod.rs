//! Leader election: the generic loop that drives [`lease_core::Election`] on tokio.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_core::election::Op;
use lease_core::preflight::StoreReport;
use lease_core::{BackendError, ElectionConfig, Fencing, LeaseBackend, LeaseSpec, Role, Token};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::ids::random_u64;
use crate::observer::{NoopObserver, Observer};

mod run;

/// Errors of [`Elector`] operations.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ElectorError {
    /// [`Elector::run`] (or [`Elector::hold`]) is already running for this elector.
    #[error("this elector is already running; run it once at a time")]
    AlreadyRunning,
    /// A query to the backend failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The store refused a request of the election with a permanent error (`NOPERM`,
    /// `WRONGTYPE`, ...): retrying cannot help, so the run stopped at once (after
    /// releasing what it held) instead of retrying forever.
    #[error("election stopped: {op:?} refused: {error}")]
    Refused {
        /// Which operation was refused.
        op: Op,
        /// The refusal (in the message; not repeated as `source()`).
        error: BackendError,
    },
    /// The store's settings let the fence keys be evicted or lost, and the elector was built
    /// with [`ElectorBuilder::require_durable_store`]: it did not contend.
    #[error("refusing to run on this store: {}", risks(.report))]
    UnsafeStore {
        /// What the store disclosed.
        report: StoreReport,
    },
}

fn risks(report: &StoreReport) -> String {
    let risks: Vec<String> = report.risks().iter().map(ToString::to_string).collect();
    risks.join("; ")
}

/// The observable state of an elector, published to [`Elector::subscribe`] on every role
/// change.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ElectorState {
    /// The role.
    pub role: Role,
    /// The leader's instance id when known (ours when leading; the holder reported by the
    /// last acquire attempt when following).
    pub leader: Option<String>,
}

/// Who holds an election's lease now, as stored in the backend.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderInfo {
    /// The leader's instance id.
    pub instance_id: String,
    /// The leader's term token (the latest minted), when known.
    pub token: Option<Token>,
    /// The lease's remaining TTL at the backend.
    pub remaining: Option<Duration>,
}

impl LeaderInfo {
    /// A leader's description (for views that know it without asking the backend, such as
    /// a sidecar answering from the elector's own term).
    pub fn new(
        instance_id: impl Into<String>,
        token: Option<Token>,
        remaining: Option<Duration>,
    ) -> LeaderInfo {
        LeaderInfo {
            instance_id: instance_id.into(),
            token,
            remaining,
        }
    }
}

/// One leadership term, handed to the leader callback.
#[derive(Debug)]
pub struct Term<B> {
    token: Token,
    cancel: CancellationToken,
    backend: Arc<B>,
    mark_key: Arc<str>,
}

impl<B> Clone for Term<B> {
    fn clone(&self) -> Self {
        Term {
            token: self.token,
            cancel: self.cancel.clone(),
            backend: Arc::clone(&self.backend),
            mark_key: Arc::clone(&self.mark_key),
        }
    }
}

impl<B> Term<B> {
    /// This term's fencing token.
    pub fn token(&self) -> Token {
        self.token
    }

    /// Completes the instant the term ends (loss, deadline, resign, shutdown).
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.cancel.cancelled()
    }

    /// Whether the term has ended.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// The term's cancellation token, to hand to other tasks.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.cancel.clone()
    }
}

impl<B: Fencing> Term<B> {
    /// A fencer for this term: fenced writes under this term's token. Writes are refused at
    /// the store as soon as a successor is elected, even if this process has not noticed.
    pub fn fencer(&self) -> B::Fencer {
        self.backend.fencer(&self.mark_key, self.token)
    }
}

#[derive(Debug)]
enum Command {
    Resign(Token),
}

struct Inner<B> {
    backend: Arc<B>,
    config: ElectionConfig,
    mark_key: Arc<str>,
    observer: Arc<dyn Observer>,
    seed: u64,
    running: AtomicBool,
    state: watch::Sender<ElectorState>,
    /// The current term and its local deadline, read by `token()` from any task.
    lease: Mutex<Option<(Token, tokio::time::Instant)>>,
    commands_tx: mpsc::UnboundedSender<Command>,
    commands_rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<Command>>,
    /// Refuse to contend on a store whose settings put the fence keys at risk.
    require_durable_store: bool,
    /// A floor for the next terms' tokens given from outside ([`Elector::raise_floor`]); 0: none.
    floor: std::sync::atomic::AtomicU64,
}

/// A leader elector over any [`LeaseBackend`].
///
/// Cheap to clone; clones share the same election. Run it with [`Elector::run`] (with a
/// leader callback) or [`Elector::hold`] (token-driven style), and query it from any task.
///
/// ```
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use lease_tokio::{Elector, CancellationToken};
/// use lease_tokio::lease_core::{ElectionConfig, memory::{ManualClock, MemoryBackend}};
///
/// let backend = MemoryBackend::new(ManualClock::new());
/// let config = ElectionConfig::builder("jobs", "instance-a").ttl(Duration::from_secs(5)).build()?;
/// let elector = Elector::new(backend, config);
/// let shutdown = CancellationToken::new();
/// let stop = shutdown.clone();
/// elector
///     .run(shutdown, move |term| {
///         let stop = stop.clone();
///         async move {
///             // Lead until the term ends; here, stop at once.
///             assert!(term.token().get() >= 1);
///             stop.cancel();
///             term.cancelled().await;
///         }
///     })
///     .await?;
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
/// ```
pub struct Elector<B> {
    inner: Arc<Inner<B>>,
}

impl<B> Clone for Elector<B> {
    fn clone(&self) -> Self {
        Elector {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<B> std::fmt::Debug for Elector<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elector")
            .field("name", &self.inner.config.name())
            .field("instance_id", &self.inner.config.instance_id())
            .field("state", &*self.inner.state.borrow())
            .finish()
    }
}

/// Builder of [`Elector`] with an observer and a jitter seed.
pub struct ElectorBuilder<B> {
    backend: Arc<B>,
    config: ElectionConfig,
    observer: Arc<dyn Observer>,
    seed: Option<u64>,
    require_durable_store: bool,
}

impl<B: LeaseBackend> ElectorBuilder<B> {
    /// Observer hooks for transitions.
    pub fn observer(mut self, observer: impl Observer) -> Self {
        self.observer = Arc::new(observer);
        self
    }

    /// The jitter seed (default: random). Fix it to make a test reproducible.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Refuse to contend when the store's settings let the fence keys be evicted or lost
    /// ([`StoreReport::fence_keys_at_risk`]: no or lagging persistence, an `allkeys` eviction
    /// policy, a replica, an unsupported server version): `run` and `hold` then return
    /// [`ElectorError::UnsafeStore`]. A setting the store does not disclose (`CONFIG` refused)
    /// cannot be confirmed, so it is refused too. Default: off (the risks are logged as
    /// `tracing` warnings when a run starts).
    pub fn require_durable_store(mut self, require: bool) -> Self {
        self.require_durable_store = require;
        self
    }

    /// Builds the elector.
    pub fn build(self) -> Elector<B> {
        let (commands_tx, commands_rx) = mpsc::unbounded_channel();
        let mark_key: Arc<str> = Arc::from(LeaseSpec::election_mark_key(self.config.name()));
        Elector {
            inner: Arc::new(Inner {
                backend: self.backend,
                mark_key,
                observer: self.observer,
                seed: self.seed.unwrap_or_else(random_u64),
                running: AtomicBool::new(false),
                state: watch::Sender::new(ElectorState {
                    role: Role::Candidate,
                    leader: None,
                }),
                lease: Mutex::new(None),
                commands_tx,
                commands_rx: tokio::sync::Mutex::new(commands_rx),
                require_durable_store: self.require_durable_store,
                floor: std::sync::atomic::AtomicU64::new(0),
                config: self.config,
            }),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<B: LeaseBackend> Elector<B> {
    /// An elector for `config` over `backend`.
    pub fn new(backend: B, config: ElectionConfig) -> Self {
        Self::builder(backend, config).build()
    }

    /// A builder, to set an [`Observer`] or a seed.
    pub fn builder(backend: B, config: ElectionConfig) -> ElectorBuilder<B> {
        ElectorBuilder {
            backend: Arc::new(backend),
            config,
            observer: Arc::new(NoopObserver),
            seed: None,
            require_durable_store: false,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ElectionConfig {
        &self.inner.config
    }

    /// This instance's id.
    pub fn instance_id(&self) -> &str {
        self.inner.config.instance_id()
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<B> {
        &self.inner.backend
    }

    /// The current term's token, if this instance leads now (before the lease's local
    /// deadline). Prefer this over [`Elector::is_leader`] for anything that writes: carry the
    /// token to a fenced write, which the resource refuses once a successor is elected.
    pub fn token(&self) -> Option<Token> {
        let lease = *lock(&self.inner.lease);
        match lease {
            Some((token, until)) if tokio::time::Instant::now() < until => Some(token),
            _ => None,
        }
    }

    /// The local deadline of the current term (tokio clock), if leading: the send instant of
    /// the last successful acquire/renew plus the TTL (minus the backend's drift margin). The
    /// elector is never leader at or after it.
    pub fn valid_until(&self) -> Option<tokio::time::Instant> {
        let lease = *lock(&self.inner.lease);
        lease
            .map(|(_, until)| until)
            .filter(|until| tokio::time::Instant::now() < *until)
    }

    /// Whether this instance leads now. **Advisory**: leadership can be lost the instant after
    /// this returns; never gate a correctness-sensitive write on it (use a fenced write).
    pub fn is_leader(&self) -> bool {
        self.token().is_some()
    }

    /// The current role state.
    pub fn state(&self) -> ElectorState {
        self.inner.state.borrow().clone()
    }

    /// A subscription to role changes (a `watch` receiver: it sees the latest state).
    pub fn subscribe(&self) -> watch::Receiver<ElectorState> {
        self.inner.state.subscribe()
    }

    /// Raises the floor of this elector's future terms: the store will mint their tokens above
    /// `floor`, whatever its counter says (see `docs/fencing.md`, "Tokens across a store that
    /// loses data"). Give it a durable floor, such as the highest token your fenced resource has
    /// accepted (a Postgres mark), before [`Elector::run`] and whenever you learn a higher one:
    /// a store that lost its counter, on a server whose clock went back, then cannot hand this
    /// elector a token the resource would refuse forever. Takes effect from the next acquire.
    pub fn raise_floor(&self, floor: Token) {
        self.inner
            .floor
            .fetch_max(floor.get(), std::sync::atomic::Ordering::Relaxed);
    }

    /// Ends the current term voluntarily: the lease is released and the elector re-contends
    /// after one acquire interval. Does nothing when not leading.
    pub fn resign(&self) {
        if let Some(token) = self.token() {
            // The loop checks the token, so a late command never ends a later term.
            let _ = self.inner.commands_tx.send(Command::Resign(token));
        }
    }

    /// Who holds the lease now (follower or not), as stored in the backend: one round trip,
    /// bounded by the acquire timeout ([`ElectionConfig::acquire_timeout`]).
    pub async fn leader(&self) -> Result<Option<LeaderInfo>, ElectorError> {
        let spec = self.inner.config.lease_spec();
        let bound = self.inner.config.acquire_timeout();
        let info = tokio::time::timeout(bound, self.inner.backend.inspect(&spec))
            .await
            .map_err(|_| BackendError::Timeout(bound))??;
        Ok(info.holder.map(|instance_id| LeaderInfo {
            instance_id,
            token: info.counter,
            remaining: info.remaining,
        }))
    }

    /// A [`crate::LeaderWatch`] of this election (polling every acquire interval): leader
    /// changes, whether or not this elector runs.
    pub fn watch(&self) -> crate::LeaderWatch<B> {
        crate::LeaderWatch::for_config(Arc::clone(&self.inner.backend), &self.inner.config)
    }

    /// What the store discloses about how long its tokens survive (see
    /// [`lease_core::preflight`]): one backend call, bounded by the acquire timeout. A run
    /// reads it when it starts, logs each risk as a `tracing` warning, and with
    /// [`ElectorBuilder::require_durable_store`] refuses a store that puts the fence keys at
    /// risk.
    pub async fn preflight(&self) -> Result<StoreReport, ElectorError> {
        let bound = self.inner.config.acquire_timeout();
        Ok(tokio::time::timeout(bound, self.inner.backend.preflight())
            .await
            .map_err(|_| BackendError::Timeout(bound))??)
    }

    /// Reads the store's report when a run starts: logs the risks; refuses an unsafe store when
    /// asked to. A store that cannot be asked now is not a reason to stop (the election retries
    /// its calls anyway); nor is a setting it does not disclose.
    async fn check_store(&self) -> Result<(), ElectorError> {
        let name = self.inner.config.name();
        let report = match self.preflight().await {
            Ok(report) => report,
            Err(e) => {
                tracing::warn!(name, error = %e, "could not read the store's settings; its guarantees are unknown");
                return Ok(());
            }
        };
        for risk in report.risks() {
            tracing::warn!(name, %risk, "store risk: fencing tokens may regress");
        }
        if report.is_partial() {
            tracing::debug!(name, notes = ?report.notes, "some store settings are unknown");
        }
        if self.inner.require_durable_store && report.fence_keys_at_risk() {
            return Err(ElectorError::UnsafeStore { report });
        }
        Ok(())
    }

    /// Keeps this instance contending and, while elected, renewing — without a callback (the
    /// token-driven style: other tasks act via [`Elector::token`] / [`Elector::fencer`]).
    /// Returns after `shutdown` is cancelled and the lease is released, or with
    /// [`ElectorError::Refused`] after a permanent refusal (see [`Elector::run`]).
    ///
    /// **Dropping the future** ends what it started, as [`Elector::run`] describes.
    pub async fn hold(&self, shutdown: CancellationToken) -> Result<(), ElectorError> {
        self.run_inner(shutdown, None::<fn(Term<B>) -> std::future::Ready<()>>)
            .await
    }

    /// Contends until `shutdown` is cancelled. While leader, `leader_fn` runs (on its own task)
    /// with the [`Term`]; the term's cancellation token fires the instant leadership is lost.
    ///
    /// A term also ends when `leader_fn` returns: a leader that wants to stay elected awaits
    /// [`Term::cancelled`]. The elector re-contends only after the previous term's work has
    /// returned, so a process never runs two terms' work at once. Returns after shutdown, once
    /// the lease is released and the last term's work has returned.
    ///
    /// **Errors.** Transient failures (Redis unreachable, timeouts) are retried and reported
    /// to the [`Observer`]; a permanent refusal ends the run with [`ElectorError::Refused`]
    /// after releasing what it held.
    ///
    /// **A panic in `leader_fn`'s work** ends the term like a return does (the lease is
    /// released and the elector re-contends after one acquire interval), and is reported: a
    /// `tracing` error event with the panic message and [`Observer::on_leader_panic`]. It is
    /// not propagated: one failing term does not stop the elector.
    ///
    /// **Dropping the future** (a `select!` that took another branch, a `timeout` around it)
    /// ends what it started: the term's token is cancelled (the work is not awaited), requests
    /// in flight are abandoned, [`Elector::token`] turns `None`, watchers see
    /// [`Role::Stopped`], observers hear `on_stepped_down(_, Shutdown)`, and the lease is
    /// released best-effort on a task of its own (bounded by the release timeout), so another
    /// instance is elected at once rather than after the TTL. The elector can run again.
    pub async fn run<F, Fut>(
        &self,
        shutdown: CancellationToken,
        leader_fn: F,
    ) -> Result<(), ElectorError>
    where
        F: FnMut(Term<B>) -> Fut + Send,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.run_inner(shutdown, Some(leader_fn)).await
    }

    /// The run loop, a driver of small named steps (like quinn's `ConnectionDriver::poll`):
    /// each turn sends what the machine asks, acts on its events, publishes the state, then
    /// waits for whichever comes first — a reply, a timer, shutdown, a command, or the end of
    /// the term's work. See [`run::Run`].
    async fn run_inner<F, Fut>(
        &self,
        shutdown: CancellationToken,
        leader_fn: Option<F>,
    ) -> Result<(), ElectorError>
    where
        F: FnMut(Term<B>) -> Fut + Send,
        Fut: Future<Output = ()> + Send + 'static,
    {
        // Refuse a lease the backend can never serve before contending (e.g. an election name
        // without a hash tag on Redis Cluster), instead of retrying it forever.
        self.inner
            .backend
            .check_spec(&self.inner.config.lease_spec())?;
        if self.inner.running.swap(true, Ordering::AcqRel) {
            return Err(ElectorError::AlreadyRunning);
        }
        let _running = RunningGuard(&self.inner.running);
        self.check_store().await?;
        let mut commands = self.inner.commands_rx.lock().await;
        // Drop commands aimed at a previous run.
        while commands.try_recv().is_ok() {}

        let mut run = run::Run::start(self, leader_fn);
        loop {
            run.begin_shutdown_if_asked(&shutdown);
            run.send_requests();
            let stopped = run.handle_events();
            run.publish_state();
            if stopped {
                run.await_last_work().await;
                break;
            }
            run.wait(&shutdown, &mut commands).await;
        }
        run.finish().await
    }
}

impl<B: LeaseBackend + Fencing> Elector<B> {
    /// A fencer for the current term, if leading now.
    pub fn fencer(&self) -> Option<B::Fencer> {
        self.token().map(|t| self.fencer_for(t))
    }

    /// A fencer for an explicit `token` (the token-driven style: a token from
    /// [`Elector::token`], possibly carried to another task). Stale tokens are refused at the
    /// store.
    pub fn fencer_for(&self, token: Token) -> B::Fencer {
        self.inner.backend.fencer(&self.inner.mark_key, token)
    }
}

struct RunningGuard<'a>(&'a AtomicBool);

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod error_tests {
    use super::*;

    /// How many times `needle` appears in the messages of `e` and of everything below it
    /// (the chain a reporter prints by walking `source()`).
    fn count_in_chain(e: &(dyn std::error::Error + 'static), needle: &str) -> usize {
        let mut count = 0;
        let mut next = Some(e);
        while let Some(err) = next {
            count += err.to_string().matches(needle).count();
            next = err.source();
        }
        count
    }

    #[test]
    fn each_cause_is_printed_once() {
        let e = ElectorError::from(BackendError::Unavailable(Box::new(std::io::Error::other(
            "wire cut",
        ))));
        assert_eq!(count_in_chain(&e, "wire cut"), 1, "{e}");
        let e = ElectorError::Refused {
            op: Op::Acquire,
            error: BackendError::Refused("NOPERM no eval".into()),
        };
        assert_eq!(count_in_chain(&e, "NOPERM no eval"), 1, "{e}");
    }
}
