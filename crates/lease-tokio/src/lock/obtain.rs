//! [`Locker`]: drives one [`Obtain`] machine per obtain call.

use std::sync::Arc;
use std::time::Duration;

use lease_core::lock::{LockError, LockOptions, Obtain, ObtainPlan, Obtained, release_request};
use lease_core::notify::{NoticeMark, ReleaseWatch, WatchRole};
use lease_core::{AcquireOutcome, AcquireRequest, BackendError, LeaseBackend};

use crate::clock::Clock;
use crate::ids::{jitter_seed, random_owner_text};
use crate::lock::handle::{Lock, Shared};
use crate::lock::handoff::{Delivery, Lines, WaitSeat};
use crate::lock::renewals::Renewals;
use crate::lock::task::spawn_release;
use crate::observer::LockObserver;
use crate::telemetry;

/// Obtains locks over a backend. Cheap to clone.
///
/// ```
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use lease_tokio::{Locker, LockOptions};
/// use lease_tokio::lease_core::memory::{ManualClock, MemoryBackend};
///
/// let locker = Locker::new(MemoryBackend::new(ManualClock::new()));
/// let lock = locker.obtain("report", Duration::from_secs(10), LockOptions::new()).await?;
/// assert!(locker.obtain("report", Duration::from_secs(10), LockOptions::new()).await.is_err());
/// lock.release().await?;
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
/// ```
pub struct Locker<B> {
    backend: Arc<B>,
    observer: Option<Arc<dyn LockObserver>>,
    /// One renewal task for every lock of this locker and its clones.
    renewals: Arc<Renewals<Shared<B>>>,
    /// The obtains of this locker and its clones waiting behind its locks, for hand-offs.
    lines: Arc<Lines<B>>,
}

impl<B> Clone for Locker<B> {
    fn clone(&self) -> Self {
        Locker {
            backend: Arc::clone(&self.backend),
            observer: self.observer.clone(),
            renewals: Arc::clone(&self.renewals),
            lines: Arc::clone(&self.lines),
        }
    }
}

impl<B: std::fmt::Debug> std::fmt::Debug for Locker<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Locker")
            .field("backend", &self.backend)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

impl<B: LeaseBackend> Locker<B> {
    /// A locker over `backend`.
    pub fn new(backend: B) -> Self {
        Locker::from_arc(Arc::new(backend))
    }

    /// A locker over a shared backend.
    pub fn from_arc(backend: Arc<B>) -> Self {
        Locker {
            backend,
            observer: None,
            renewals: Arc::new(Renewals::new()),
            lines: Arc::new(Lines::new()),
        }
    }

    /// The same locker, reporting every lock it obtains to `observer`.
    pub fn with_observer(mut self, observer: impl LockObserver) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<B> {
        &self.backend
    }

    /// How many entries the auto-renewal task's timer queue held after its last step (live,
    /// stale and dead ones; 0 before the first auto-renewed lock). Bounded by twice the live
    /// auto-renewed locks plus 64 after each compaction (see `docs/production.md`, "Bounds").
    /// For tests and diagnostics; not a stable API.
    #[doc(hidden)]
    pub fn renewal_queue_len(&self) -> usize {
        self.renewals.queued()
    }

    /// How many obtains of this locker (and its clones) wait behind a lock of this locker on
    /// `key` now, to be handed the key at its release (see [`Lock::release`]). For tests and
    /// diagnostics; not a stable API.
    #[doc(hidden)]
    pub fn waiting_behind(&self, key: &str) -> usize {
        self.lines.waiting(key)
    }

    /// Obtains a lock on `key` for `ttl`.
    pub async fn obtain(
        &self,
        key: impl Into<String>,
        ttl: Duration,
        options: LockOptions,
    ) -> Result<Lock<B>, LockError> {
        // Not through `obtain_multi`: one future fewer to build and move on every obtain.
        let plan = options.plan_with([key.into()], ttl, random_owner_text)?;
        self.obtain_plan(plan).await
    }

    /// Obtains a lock on every key of `keys` at once, or on none: every key is checked before
    /// any is changed.
    ///
    /// Cancellation-safe: dropping the returned future while an attempt is in flight (or after
    /// one whose outcome is unknown) starts the same background cleanup as
    /// [`LockError::OutcomeUnknown`] does, so a cancelled obtain does not leave a lock behind
    /// until its TTL.
    pub async fn obtain_multi<I, S>(
        &self,
        keys: I,
        ttl: Duration,
        options: LockOptions,
    ) -> Result<Lock<B>, LockError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        // Everything is validated before the first round trip.
        let plan = options.plan_with(keys, ttl, random_owner_text)?;
        self.obtain_plan(plan).await
    }

    /// The observer every lock of this locker is reported to.
    pub(crate) fn observer(&self) -> Option<Arc<dyn LockObserver>> {
        self.observer.clone()
    }

    /// A locker over `backend` reporting to `observer`.
    pub(crate) fn with_observer_arc(
        backend: Arc<B>,
        observer: Option<Arc<dyn LockObserver>>,
    ) -> Self {
        Locker {
            backend,
            observer,
            renewals: Arc::new(Renewals::new()),
            lines: Arc::new(Lines::new()),
        }
    }

    /// A locker over `backend` reporting to `observer`, sharing `renewals` (a fair lock's
    /// per-obtain views share one renewal task).
    pub(crate) fn from_parts(
        backend: Arc<B>,
        observer: Option<Arc<dyn LockObserver>>,
        renewals: Arc<Renewals<Shared<B>>>,
    ) -> Self {
        Locker {
            backend,
            observer,
            renewals,
            lines: Arc::new(Lines::new()),
        }
    }

    /// Obtains the lock of a validated `plan` (the rest of [`Locker::obtain_multi`]).
    pub(crate) async fn obtain_plan(&self, plan: ObtainPlan) -> Result<Lock<B>, LockError> {
        self.backend
            .check_spec(&plan.request.spec)
            .map_err(LockError::Refused)?;
        let clock = Clock::new();
        // The release watch: registered once an attempt found the lock held when the backend
        // counts its notices (a mark taken before each attempt says what the watch missed),
        // else before the first attempt (no lost wake-up either way); subscribed only once an
        // attempt found the lock held.
        let lazy = self.backend.notice_mark(&plan.request.spec).is_some();
        let watch = if lazy {
            None
        } else {
            self.backend
                .release_watch(&plan.request.spec, WatchRole::Contender)
        };
        // Waits behind a lock of this locker on the same key, when the backend can hand off.
        let lines = self
            .backend
            .can_hand_off(&plan.request.spec)
            .then_some(&self.lines);
        let obtained = ObtainRun {
            // The clock's origin is this obtain's start: no reading needed for it.
            obtain: Obtain::new(&plan, jitter_seed(), lease_core::Instant::ZERO),
            backend: &self.backend,
            request: &plan.request,
            watch,
            lazy,
            contending: true,
            seat: lines.map(|lines| lines.seat(&plan.request)),
            replied_at: None,
        }
        .drive(clock)
        .await;
        let label = plan.request.spec.keys().first().map_or("", String::as_str);
        let now = obtained.1.unwrap_or_else(|| clock.now());
        let obtained = obtained.0;
        let obtained = match obtained {
            Ok(obtained) => {
                // The clock started with this obtain: its "now" is the time the call took.
                telemetry::lock_obtained(label, now.since_origin());
                obtained
            }
            Err(e) => {
                if e.is_not_obtained() {
                    telemetry::lock_not_obtained(label);
                }
                return Err(e);
            }
        };
        let lock = Lock::new(
            Arc::clone(&self.backend),
            plan,
            obtained,
            (clock, now),
            self.observer.clone(),
            Arc::clone(&self.renewals),
            lines.cloned(),
        );
        lock.obtained();
        Ok(lock)
    }
}

/// One obtain in progress. Dropped — at the end, or because the caller abandoned the obtain —
/// it sends the cleanup release the machine asks for ([`Obtain::needs_cleanup`]), and leaves
/// its locker's lines (see `handoff.rs`).
struct ObtainRun<'a, B: LeaseBackend> {
    obtain: Obtain,
    /// Borrowed, not cloned: a count every obtain of every task would touch (cloned only for
    /// a cleanup that outlives the obtain).
    backend: &'a Arc<B>,
    request: &'a AcquireRequest,
    watch: Option<ReleaseWatch>,
    /// Whether the watch is registered only after an attempt that did not win (the backend
    /// gives a [`NoticeMark`] before each attempt).
    lazy: bool,
    /// Whether the watch is contending (not while queued behind a lock of the locker: a
    /// winner at the store then does not mark its value for this obtain).
    contending: bool,
    /// Its place behind the locker's locks, when the backend can hand this lock off.
    seat: Option<WaitSeat<'a, B>>,
    /// The clock's reading that dated the last reply, while nothing has been awaited since
    /// (the obtain's end reuses it instead of reading the clock again).
    replied_at: Option<lease_core::Instant>,
}

/// What ended a wait.
enum Woken {
    Delivery(Delivery),
    Notice,
    Timer,
}

impl<B: LeaseBackend> ObtainRun<'_, B> {
    /// Runs the obtain to its outcome, with the clock's reading at its end when one was taken
    /// with nothing awaited since. The first attempt is dated at the clock's origin (read just
    /// before, nothing awaited in between).
    async fn drive(
        mut self,
        clock: Clock,
    ) -> (Result<Obtained, LockError>, Option<lease_core::Instant>) {
        let mut first = Some(lease_core::Instant::ZERO);
        loop {
            self.take_delivery(clock).await;
            if let Some(outcome) = self.poll_outcome() {
                return (outcome, None);
            }
            let now = first.take().unwrap_or_else(|| clock.now());
            if let Some(attempt) = self.obtain.poll_request(now) {
                // A lock of this locker has the key's turn: wait behind it, not at the store
                // — unless the obtain would end on that answer (only the store's is final).
                let local = self.seat.as_mut().and_then(WaitSeat::local_hold);
                let waits = local.is_some_and(|hold| {
                    let until = hold.until.map(|t| clock.to_core(t));
                    self.obtain.handle_local_hold(clock.now(), until)
                });
                if waits {
                    self.contend(false);
                } else if local.is_some() && !self.seat.as_mut().is_some_and(WaitSeat::step_out) {
                    // Being handed the key meanwhile: the hand-off answers this attempt (it
                    // was sent after the attempt was polled, so the lock is dated no later
                    // than it began).
                    let delivery = self.delivery().await;
                    match delivery {
                        Delivery::Transfer { reply, .. } => {
                            self.obtain.handle_reply(clock.now(), reply);
                        }
                        Delivery::Go => {
                            self.contend(true);
                            self.attempt(clock, attempt.deadline).await;
                        }
                    }
                } else {
                    self.contend(true);
                    self.attempt(clock, attempt.deadline).await;
                }
            }
            if let Some(outcome) = self.poll_outcome() {
                return (outcome, self.replied_at.take());
            }
            self.replied_at = None;
            if let Some(at) = self.obtain.poll_timeout() {
                match self.wait(clock.to_tokio(at)).await {
                    Woken::Delivery(d) => self.handle_delivery(clock, d),
                    Woken::Notice => {
                        self.obtain.handle_notice(clock.now());
                    }
                    Woken::Timer => {}
                }
            }
        }
    }

    /// The machine's outcome; a won obtain keeps the key's turn in the lines for the lock it
    /// becomes (which takes it over when it is made).
    fn poll_outcome(&mut self) -> Option<Result<Obtained, LockError>> {
        let outcome = self.obtain.poll_outcome()?;
        if outcome.is_ok()
            && let Some(seat) = self.seat.as_mut()
        {
            seat.won();
        }
        Some(outcome)
    }

    /// The machine's attempt (polled just now, due by `deadline`), at the store.
    async fn attempt(&mut self, clock: Clock, deadline: lease_core::Instant) {
        // Without a watch yet: what the notices looked like before this attempt.
        let mark = match &self.watch {
            None if self.lazy => self.backend.notice_mark(&self.request.spec),
            _ => None,
        };
        // Others of this process waiting on the key: if this attempt wins, the store must
        // know they wait (they will not attempt until woken).
        let others_wait = match (&self.watch, mark) {
            (Some(watch), _) => watch.others_wait(),
            (None, Some(mark)) => mark.others_wait(),
            (None, None) => false,
        };
        let with_waiters;
        let request = if others_wait {
            with_waiters = self.request.clone().with_waiters(true);
            &with_waiters
        } else {
            self.request
        };
        let reply =
            crate::bound::within(clock.to_tokio(deadline), self.backend.acquire(request)).await;
        if let Some(mark) = mark
            && !matches!(reply, Some(Ok(AcquireOutcome::Acquired { .. })))
        {
            self.register_watch(clock, mark);
        }
        // While notices arrive, a lost race waits for the release's notice.
        self.obtain
            .set_notices_live(self.watch.as_ref().is_some_and(ReleaseWatch::is_live));
        // No reply by the deadline is a timeout of the attempt's bound: its outcome is
        // unknown (it may have won at the store).
        let bound = self.obtain.attempt_bound();
        let reply = reply.unwrap_or(Err(BackendError::Timeout(bound)));
        let now = clock.now();
        self.obtain.handle_reply(now, reply);
        self.replied_at = Some(now);
    }

    /// Registers the watch after an attempt (taken with `mark` before it) that did not win,
    /// while the machine still has it in flight: a notice or resynchronisation the backend
    /// received since the mark, which the new watch cannot have seen, counts as a notice
    /// (kept for the attempt's failure: the next attempt is due at once).
    fn register_watch(&mut self, clock: Clock, mark: NoticeMark) {
        let spec = &self.request.spec;
        self.watch = self.backend.release_watch(spec, WatchRole::Contender);
        if let Some(watch) = &self.watch
            && !self.contending
        {
            watch.set_contending(false);
        }
        if self
            .backend
            .notice_mark(spec)
            .is_some_and(|now| now.moved_since(mark))
        {
            self.obtain.handle_notice(clock.now());
        }
    }

    /// Waits until `at`, a release notice (while contending at the store) or a delivery from
    /// the lines (while queued in them).
    async fn wait(&mut self, at: tokio::time::Instant) -> Woken {
        let seat = self.seat.as_ref().filter(|s| s.waiting());
        let watch = self.watch.as_mut().filter(|_| self.contending);
        let delivery = async {
            match seat {
                Some(seat) => seat.delivered().await,
                None => std::future::pending().await,
            }
        };
        let notice = async {
            match watch {
                Some(watch) => {
                    watch.activate();
                    watch.notified().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            d = delivery => Woken::Delivery(d),
            () = notice => Woken::Notice,
            () = tokio::time::sleep_until(at) => Woken::Timer,
        }
    }

    /// Takes a delivery from the lines, if one is there — and waits for it while a hand-off
    /// to this obtain is in flight (bounded: its releaser delivers within its own bound, or
    /// its guard does when dropped; past this obtain's attempt bound it counts as an attempt
    /// of unknown outcome).
    async fn take_delivery(&mut self, clock: Clock) {
        let Some(seat) = &self.seat else {
            return;
        };
        let delivery = match seat.take_delivery() {
            Some(d) => d,
            None if seat.claimed() => self.delivery().await,
            None => return,
        };
        self.handle_delivery(clock, delivery);
    }

    /// The delivery of a hand-off in flight to this obtain, bounded by the obtain's attempt
    /// bound (past it, an attempt of unknown outcome).
    async fn delivery(&self) -> Delivery {
        let bound = self.obtain.attempt_bound();
        let sent_at = tokio::time::Instant::now();
        let Some(seat) = &self.seat else {
            return Delivery::Go;
        };
        tokio::time::timeout(bound, seat.delivered())
            .await
            .unwrap_or(Delivery::Transfer {
                sent_at,
                reply: Err(BackendError::Timeout(bound)),
            })
    }

    fn handle_delivery(&mut self, clock: Clock, delivery: Delivery) {
        match delivery {
            Delivery::Transfer { sent_at, reply } => {
                let won = matches!(reply, Ok(AcquireOutcome::Acquired { .. }));
                let taken = self
                    .obtain
                    .handle_transfer(clock.now(), clock.to_core(sent_at), reply);
                if !taken && won {
                    // Not waiting for it (never the case: deliveries are taken between
                    // attempts): the key handed over goes back.
                    spawn_release(
                        Arc::clone(self.backend),
                        release_request(&self.request.spec, &self.request.owner),
                        self.obtain.cleanup_bound(),
                    );
                }
            }
            Delivery::Go => {
                self.obtain.handle_notice(clock.now());
            }
        }
    }

    /// Whether the watch takes part in the release notices' wakes.
    fn contend(&mut self, contending: bool) {
        if self.contending != contending {
            self.contending = contending;
            if let Some(watch) = &self.watch {
                watch.set_contending(contending);
            }
        }
    }
}

impl<B: LeaseBackend> Drop for ObtainRun<'_, B> {
    fn drop(&mut self) {
        if let Some(seat) = self.seat.as_mut() {
            seat.abandon(self.backend, self.obtain.cleanup_bound());
        }
        if self.obtain.needs_cleanup() {
            spawn_release(
                Arc::clone(self.backend),
                release_request(&self.request.spec, &self.request.owner),
                self.obtain.cleanup_bound(),
            );
        }
    }
}
