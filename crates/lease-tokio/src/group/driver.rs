//! The task of an [`ElectionGroup`](super::ElectionGroup): every name's (and roster slot's)
//! [`Election`] machine on one task, one timer queue, renewals batched.
//!
//! One turn of the loop:
//!
//! 1. the share rule ([`Driver::apply_policy`]): hold one roster slot, resign extras; from the
//!    last roster read, this member's target; contend for names below it, resign above it;
//! 2. every machine that needs attention (a reply, its timer, a policy change) is visited
//!    ([`Driver::visit`]): its requests are polled with the coalesce window, renewals join
//!    the turn's batch, acquires and releases go out on their own short tasks (at most
//!    `max_in_flight` at once), its events are acted on, and it is queued again at its
//!    [`Election::poll_timeout`] (older queue entries of it become stale, skipped by
//!    generation), unless its renewal is in flight: then it has no queue entry, and the
//!    batch's answer visits it again (the batch is bounded by the earliest deadline in it, so
//!    it comes back by then; a queue entry would only go stale);
//! 3. the batch goes out as one [`LeaseBackend::renew_many`], bounded by the earliest of its
//!    deadlines; it comes back to the task as one message (a batch whose task failed gets
//!    [`Reply::TimedOut`] for every renewal in it), and each reply is fed to its own machine;
//! 4. the owned names are published (once per turn);
//! 5. the task waits for the first of: a finished request, the earliest queued instant (then
//!    every machine due within the coalesce window is visited), the next roster read, or the
//!    stop signal.
//!
//! On stop, every machine is shut down (each releases what it may hold) and the task ends
//! once all have stopped and nothing is in flight.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use lease_core::election::{Event, Reply, Request, RequestId, RequestKind};
use lease_core::{
    BackendError, Election, ElectionConfig, LeaseBackend, RenewOutcome, RenewRequest, Token,
};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Owned, Shared, lock, until_nanos};
use crate::clock::Clock;
use crate::ids::random_u64;

mod roster;

/// One election of the group.
struct Slot {
    name: Arc<str>,
    election: Election,
    /// Bumped each time the slot is queued: older queue entries are stale.
    generation: u64,
    /// The term being led, as last reported by the machine's events.
    leading: Option<Token>,
    /// Already in the turn's list of slots to visit.
    dirty: bool,
    /// Its renewal is in a batch in flight: no queue entry until the batch's answer.
    renewing: bool,
    /// The local deadline last written to the shared map (written again only when it moves).
    published_until: Option<lease_core::Instant>,
}

/// What a short task brings back.
enum Done {
    /// One acquire or release.
    One {
        idx: usize,
        id: RequestId,
        reply: Reply,
    },
    /// A batch of renewals' answers, in the order of the batch's entry in
    /// [`Driver::in_flight`] (`None`: no answer by the earliest deadline).
    Renewals(Option<Vec<Result<RenewOutcome, BackendError>>>),
    /// A roster read: which slots are held (`None`: the read failed or timed out).
    Roster(Option<Vec<bool>>),
}

/// What a task in flight answers for, kept by the driver (not on the task) so that a task
/// that fails (a backend that panics) still answers: its machines as timed out, the roster
/// as not read. Without it they would wait for good.
enum InFlight {
    /// An acquire or release of one machine.
    One(usize, RequestId),
    /// A batch of renewals, in the batch's order.
    Renewals(Vec<(usize, RequestId)>),
    /// A roster read, started while the member's roster slots were as in this epoch.
    Roster(u64),
}

/// A renewal waiting for the turn's batch.
type Renewal = (usize, RequestId, RenewRequest, lease_core::Instant);

/// The state of the group's task.
pub(super) struct Driver<B> {
    backend: Arc<B>,
    clock: Clock,
    slots: Vec<Slot>,
    /// `slots[..names]` are the names, `slots[names..]` the roster slots.
    names: usize,
    /// The timer queue: `(at, slot, generation)`, `at` in nanoseconds on the machines' clock
    /// ([`until_nanos`]): small entries, compared as integers (a pop costs a few dozen
    /// comparisons with a thousand slots queued).
    heap: BinaryHeap<Reverse<(u64, usize, u64)>>,
    window: Duration,
    acquire_interval: Duration,
    acquire_timeout: Duration,
    permits: Arc<Semaphore>,
    tasks: JoinSet<Done>,
    /// What each task in flight answers for (by its task id).
    in_flight: HashMap<tokio::task::Id, InFlight>,
    dirty: Vec<usize>,
    /// Names are contended for (below target).
    contend: bool,
    /// Roster slots are contended for (none held).
    roster_contend: bool,
    /// Which roster slots were held at the last read.
    roster_live: Option<Vec<bool>>,
    reading_roster: bool,
    next_roster_read: Instant,
    owned_changed: bool,
    /// How many names are led (as the machines' events said; a lapse is reported by the
    /// machine's own timer, on this task).
    owned: usize,
    /// The roster slots led, lowest first.
    roster_held: std::collections::BTreeSet<usize>,
    /// Counts changes of `roster_held`: a roster read started before the last change is not
    /// used (it may count this member's old slot as another member).
    roster_epoch: u64,
    stopping: bool,
    shared: Arc<Shared>,
    tx: watch::Sender<Owned>,
}

impl<B: LeaseBackend> Driver<B> {
    pub(super) fn new(
        backend: Arc<B>,
        names: Vec<ElectionConfig>,
        roster: Vec<ElectionConfig>,
        max_in_flight: usize,
        shared: Arc<Shared>,
        tx: watch::Sender<Owned>,
    ) -> Driver<B> {
        let clock = shared.clock;
        let now = clock.now();
        let n = names.len();
        let mut window = Duration::ZERO;
        let mut acquire_interval = Duration::from_secs(1);
        let mut acquire_timeout = Duration::from_secs(1);
        let slots: Vec<Slot> = names
            .into_iter()
            .chain(roster)
            .map(|config| {
                let name: Arc<str> = Arc::from(config.name());
                let margin = backend.validity_margin(config.ttl());
                acquire_interval = config.acquire_interval();
                acquire_timeout = config.acquire_timeout();
                let mut election = Election::new(config, random_u64(), now);
                election.set_validity_margin(margin);
                window = election.coalesce_window();
                Slot {
                    name,
                    election,
                    generation: 0,
                    leading: None,
                    dirty: false,
                    renewing: false,
                    published_until: None,
                }
            })
            .collect();
        let share = slots.len() > n;
        Driver {
            backend,
            clock,
            dirty: (0..slots.len()).collect(),
            slots,
            names: n,
            heap: BinaryHeap::new(),
            window,
            acquire_interval,
            acquire_timeout,
            permits: Arc::new(Semaphore::new(max_in_flight)),
            tasks: JoinSet::new(),
            in_flight: HashMap::new(),
            // With the share rule, nothing is contended for before the roster is read.
            contend: !share,
            roster_contend: true,
            roster_live: None,
            reading_roster: false,
            next_roster_read: Instant::now(),
            owned_changed: false,
            owned: 0,
            roster_held: std::collections::BTreeSet::new(),
            roster_epoch: 0,
            stopping: false,
            shared,
            tx,
        }
    }

    fn mark(&mut self, idx: usize) {
        if let Some(slot) = self.slots.get_mut(idx)
            && !slot.dirty
        {
            slot.dirty = true;
            self.dirty.push(idx);
        }
    }

    fn mark_range(&mut self, range: std::ops::Range<usize>) {
        for idx in range {
            self.mark(idx);
        }
    }

    /// The task's loop: see the module docs.
    pub(super) async fn run(mut self, stop: CancellationToken) {
        loop {
            if stop.is_cancelled() && !self.stopping {
                self.begin_stop();
            }
            let now = self.clock.now();
            let mut batch = Vec::new();
            loop {
                self.apply_policy(now);
                if self.dirty.is_empty() {
                    break;
                }
                for idx in std::mem::take(&mut self.dirty) {
                    if let Some(slot) = self.slots.get_mut(idx) {
                        slot.dirty = false;
                    }
                    self.visit(idx, now, &mut batch);
                }
            }
            self.send_renewals(batch);
            self.publish();
            if self.stopping
                && self.tasks.is_empty()
                && self.slots.iter().all(|s| s.election.is_stopped())
            {
                break;
            }
            self.maybe_read_roster();
            let wake = self.next_wake();
            tokio::select! {
                biased;
                Some(joined) = self.tasks.join_next_with_id() => {
                    self.finished(joined);
                    while let Some(joined) = self.tasks.try_join_next_with_id() {
                        self.finished(joined);
                    }
                }
                () = stop.cancelled(), if !self.stopping => {}
                () = async {
                    match wake {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                } => self.due(),
            }
        }
        lock(&self.shared.leases).clear();
        self.tx.send_replace(Owned::default());
        tracing::debug!("election group stopped");
    }

    fn begin_stop(&mut self) {
        self.stopping = true;
        tracing::debug!(
            names = self.names,
            "election group stopping: releasing everything"
        );
        let now = self.clock.now();
        for slot in &mut self.slots {
            slot.election.shutdown(now);
        }
        self.mark_range(0..self.slots.len());
    }

    /// Polls slot `idx`'s requests (renewals join `batch`), acts on its events, queues it.
    fn visit(&mut self, idx: usize, now: lease_core::Instant, batch: &mut Vec<Renewal>) {
        let contend = if idx < self.names {
            self.contend
        } else {
            self.roster_contend
        };
        let window = self.window;
        let Some(slot) = self.slots.get_mut(idx) else {
            return;
        };
        slot.election.pause_contention(!contend);
        let mut singles = Vec::new();
        while let Some(req) = slot.election.poll_request_within(now, window) {
            match req.kind {
                RequestKind::Renew(r) => {
                    slot.renewing = true;
                    batch.push((idx, req.id, r, req.deadline));
                }
                _ => singles.push(req),
            }
        }
        while let Some(event) = slot.election.poll_event() {
            match event {
                Event::Elected { token, valid_until } => {
                    tracing::debug!(name = %slot.name, %token, "elected");
                    slot.leading = Some(token);
                    slot.published_until = Some(valid_until);
                    if idx >= self.names {
                        self.roster_held.insert(idx);
                        // The last roster view may count the old slot as another member
                        // (its epoch moves: a read started before is not used).
                        self.roster_epoch += 1;
                        self.roster_live = None;
                        self.next_roster_read = Instant::now();
                    } else {
                        self.owned += 1;
                        self.owned_changed = true;
                        // The deadline first: a reader finds it with the entry.
                        if let Some(until) = self.shared.until.get(idx) {
                            until.store(until_nanos(valid_until), Ordering::Release);
                        }
                        lock(&self.shared.leases).insert(Arc::clone(&slot.name), (token, idx));
                    }
                }
                Event::SteppedDown { token, reason } => {
                    tracing::debug!(name = %slot.name, %token, ?reason, "stepped down");
                    slot.leading = None;
                    slot.published_until = None;
                    if idx >= self.names {
                        self.roster_held.remove(&idx);
                        // The last roster view may count the old slot as another member
                        // (its epoch moves: a read started before is not used).
                        self.roster_epoch += 1;
                        self.roster_live = None;
                        self.next_roster_read = Instant::now();
                    } else {
                        self.owned = self.owned.saturating_sub(1);
                        self.owned_changed = true;
                        lock(&self.shared.leases).remove(&slot.name);
                    }
                }
                Event::Error { op, error } => {
                    tracing::debug!(name = %slot.name, ?op, %error, "election backend error (handled)");
                }
                Event::Failed { op, error } => {
                    tracing::error!(name = %slot.name, ?op, %error, "election refused with a permanent error; this name stops");
                }
                Event::StoreLost(loss) => {
                    tracing::error!(name = %slot.name, %loss, "the store lost fence state");
                }
                _ => {}
            }
        }
        if idx < self.names
            && slot.leading.is_some()
            && let Some(until) = slot.election.valid_until()
            && slot.published_until != Some(until)
        {
            slot.published_until = Some(until);
            if let Some(shared) = self.shared.until.get(idx) {
                shared.store(until_nanos(until), Ordering::Release);
            }
        }
        // Any queue entry it still has is stale from here on.
        slot.generation += 1;
        // While its renewal is in flight the machine needs nothing before its deadline
        // ([`Election::poll_timeout`] is that deadline, or nothing), and the batch comes back
        // by then.
        if !slot.renewing
            && let Some(at) = slot.election.poll_timeout()
        {
            self.heap
                .push(Reverse((until_nanos(at), idx, slot.generation)));
        }
        for req in singles {
            self.send_one(idx, req);
        }
    }

    /// An acquire or release on its own task, bounded by its deadline (waiting for a permit
    /// included).
    fn send_one(&mut self, idx: usize, req: Request) {
        let backend = Arc::clone(&self.backend);
        let permits = Arc::clone(&self.permits);
        let deadline = self.clock.to_tokio(req.deadline);
        let id = req.id;
        let task = self.tasks.spawn(async move {
            let call = async {
                let _permit = permits.acquire().await.ok();
                match &req.kind {
                    RequestKind::Acquire(r) => Reply::Acquire(backend.acquire(r).await),
                    RequestKind::Release(r) => Reply::Release(backend.release(r).await),
                    RequestKind::Renew(r) => Reply::Renew(backend.renew(r).await),
                    _ => Reply::TimedOut,
                }
            };
            let reply = tokio::time::timeout_at(deadline, call)
                .await
                .unwrap_or(Reply::TimedOut);
            Done::One {
                idx,
                id: req.id,
                reply,
            }
        });
        self.in_flight.insert(task.id(), InFlight::One(idx, id));
    }

    /// The turn's renewals as one [`LeaseBackend::renew_many`], bounded by the earliest deadline.
    fn send_renewals(&mut self, batch: Vec<Renewal>) {
        let Some(deadline) = batch.iter().map(|r| r.3).min() else {
            return;
        };
        let deadline = self.clock.to_tokio(deadline);
        let backend = Arc::clone(&self.backend);
        tracing::trace!(renewals = batch.len(), "election group: renewing a batch");
        let ids = batch.iter().map(|r| (r.0, r.1)).collect();
        let task = self.tasks.spawn(async move {
            let requests: Vec<&RenewRequest> = batch.iter().map(|r| &r.2).collect();
            let replies = tokio::time::timeout_at(deadline, backend.renew_many(&requests))
                .await
                .ok();
            Done::Renewals(replies)
        });
        self.in_flight.insert(task.id(), InFlight::Renewals(ids));
    }

    fn finished(&mut self, joined: Result<(tokio::task::Id, Done), tokio::task::JoinError>) {
        let (task, done) = match joined {
            Ok(done) => done,
            Err(e) => {
                // A request task cannot panic short of a backend bug. Its machines are
                // answered as timed out (the outcome is unknown), a roster read as failed.
                tracing::error!(error = %e, "election group: a request task failed");
                let done = match self.in_flight.get(&e.id()) {
                    Some(InFlight::One(idx, id)) => Done::One {
                        idx: *idx,
                        id: *id,
                        reply: Reply::TimedOut,
                    },
                    Some(InFlight::Renewals(_)) => Done::Renewals(None),
                    Some(InFlight::Roster(_)) => Done::Roster(None),
                    None => return,
                };
                (e.id(), done)
            }
        };
        let in_flight = self.in_flight.remove(&task);
        let now = self.clock.now();
        match done {
            Done::One { idx, id, reply } => {
                if let Some(slot) = self.slots.get_mut(idx) {
                    slot.election.handle_reply(now, id, reply);
                }
                self.mark(idx);
            }
            Done::Renewals(replies) => {
                let Some(InFlight::Renewals(ids)) = in_flight else {
                    return;
                };
                let mut replies = replies.map(Vec::into_iter);
                for (idx, id) in ids {
                    let reply = match replies.as_mut() {
                        Some(r) => Reply::Renew(r.next().unwrap_or_else(|| {
                            Err(BackendError::Protocol(
                                "a batch of renewals got fewer answers than renewals".into(),
                            ))
                        })),
                        None => Reply::TimedOut,
                    };
                    if let Some(slot) = self.slots.get_mut(idx) {
                        slot.renewing = false;
                        slot.election.handle_reply(now, id, reply);
                    }
                    self.mark(idx);
                }
            }
            Done::Roster(view) => {
                self.reading_roster = false;
                self.next_roster_read = Instant::now() + self.acquire_interval;
                if !matches!(in_flight, Some(InFlight::Roster(epoch)) if epoch == self.roster_epoch)
                {
                    // Read before this member's slots last changed: it may count a slot this
                    // member held then as another member. Read again at once.
                    self.next_roster_read = Instant::now();
                    return;
                }
                match view {
                    Some(live) => {
                        if self.roster_live.as_ref() != Some(&live) {
                            tracing::debug!(
                                members = live.iter().filter(|l| **l).count(),
                                "election group: roster changed"
                            );
                        }
                        self.roster_live = Some(live);
                    }
                    None => {
                        tracing::debug!("election group: roster read failed; keeping the last view")
                    }
                }
            }
        }
    }

    /// The earliest of the queue's live entries and the next roster read.
    fn next_wake(&mut self) -> Option<Instant> {
        while let Some(Reverse((_, idx, generation))) = self.heap.peek() {
            if self
                .slots
                .get(*idx)
                .is_some_and(|s| s.generation == *generation)
            {
                break;
            }
            self.heap.pop();
        }
        let timer = self.heap.peek().map(|Reverse((at, ..))| {
            self.clock
                .to_tokio(lease_core::Instant::from_origin(Duration::from_nanos(*at)))
        });
        let roster = (!self.stopping && !self.reading_roster && self.slots.len() > self.names)
            .then_some(self.next_roster_read);
        match (timer, roster) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Every slot queued at or before now plus the coalesce window needs a visit.
    fn due(&mut self) {
        let until = until_nanos(self.clock.now() + self.window);
        while let Some(Reverse((at, idx, generation))) = self.heap.peek().copied() {
            if at > until {
                break;
            }
            self.heap.pop();
            if self
                .slots
                .get(idx)
                .is_some_and(|s| s.generation == generation)
            {
                self.mark(idx);
            }
        }
    }

    /// Publishes the owned names when they changed this turn.
    fn publish(&mut self) {
        if !std::mem::take(&mut self.owned_changed) {
            return;
        }
        let owned: BTreeMap<String, Token> = self.slots[..self.names]
            .iter()
            .filter_map(|s| s.leading.map(|t| (s.name.to_string(), t)))
            .collect();
        self.tx.send_replace(Arc::new(owned));
    }
}
