//! [`Renewals`]: one task per [`Locker`](crate::Locker) that keeps every auto-renewed lock of
//! that locker alive, sending the renewals that fall due together as one batch
//! ([`LeaseBackend::renew_many`]: one pipeline on Redis).
//!
//! Each lock keeps its own machine ([`HeldLock`](lease_core::lock::HeldLock)) and its own
//! deadline rules; the task only decides *when* to ask each machine, and *with whom* its
//! renewal travels:
//!
//! - a timer queue holds, per lock, the instant its machine next needs attention
//!   ([`HeldLock::poll_timeout`](lease_core::lock::HeldLock::poll_timeout): its next renewal
//!   or its deadline); stale entries are skipped by generation, and dropped in one pass
//!   whenever the queue holds more than twice its live entries plus [`COMPACT_SLACK`] (so the
//!   queue is bounded by the live locks, not by how often they were woken, and a released or
//!   dropped lock's entry does not linger until its due time);
//! - when the earliest entry is due, every lock whose renewal is due within its
//!   [coalesce window](lease_core::lock::HeldLock::coalesce_window) is asked for its renewal
//!   ([`poll_renew_within`](lease_core::lock::HeldLock::poll_renew_within)), and those renewals
//!   go out together, on a task of their own, bounded by the earliest of their deadlines;
//! - each reply is fed to its own lock's machine, which decides (renewed, tolerated failure,
//!   lost), and the batch comes back to the task as one message (not one wake per lock),
//!   which reads each of its machines again; while its renewal is in flight a lock has no
//!   queue entry (the batch is bounded by the earliest deadline in it, so it comes back by
//!   then), and a lock whose deadline passes while its batch is in flight is lost at its
//!   deadline like any other;
//! - a refresh, a release or a drop wakes the task for that lock, which reads its machine
//!   again.
//!
//! A process holding thousands of auto-renewed locks runs this one task (plus one short task
//! per batch in flight) instead of one task and one round trip per lock per interval.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use lease_core::lease::RenewOrder;
use lease_core::{BackendError, LeaseBackend, RenewOutcome, RenewRequest};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// What the renewal task needs of a lock: its machine, read and fed through the lock's own
/// mutex. The lock's shared state implements it (`handle.rs`); this task knows nothing else of
/// the lock, so the handle depends on the task and not the other way round.
pub(crate) trait Renewable: Send + Sync + 'static {
    /// The backend the lock's renewals go to.
    type Backend: LeaseBackend;
    /// Reads the machine now: how early this lock's renewal may join a batch (its
    /// [coalesce window](lease_core::lock::HeldLock::coalesce_window)), the renewal due
    /// within that window (taken), and the instant it next needs attention (none: lost or
    /// released).
    fn poll_renewal(&self) -> (Duration, Option<RenewOrder>, Option<lease_core::Instant>);
    /// The lock is gone from the task's view (lost or released): fires its loss signal.
    fn cancel(&self);
    /// The generation of this lock's entry in the timer queue (older entries are stale).
    fn schedule(&self) -> &AtomicU64;
    /// `at` on tokio's clock.
    fn to_tokio(&self, at: lease_core::Instant) -> Instant;
    /// The backend.
    fn backend(&self) -> &Arc<Self::Backend>;
    /// The renewal to send.
    fn renew_request(&self) -> &RenewRequest;
    /// Feeds a renewal's reply to the machine and wakes whoever waits on it (a refresh
    /// waiting for the slot), but not the renewal task: the batch's answer reads every
    /// machine of the batch again.
    fn handle_renew(&self, reply: Result<RenewOutcome, BackendError>);
}

/// The renewal task of one locker (and of every clone of it): started on the first
/// auto-renewed lock, on that caller's runtime; it ends once the locker and all its locks are
/// gone.
pub(crate) struct Renewals<L> {
    tx: Mutex<Option<mpsc::UnboundedSender<Msg<L>>>>,
    /// The timer queue's length after the task's last step (for tests and diagnostics).
    queued: Arc<AtomicUsize>,
}

impl<L> std::fmt::Debug for Renewals<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let running = self
            .tx
            .lock()
            .map(|tx| tx.as_ref().is_some_and(|tx| !tx.is_closed()))
            .unwrap_or(false);
        f.debug_struct("Renewals")
            .field("running", &running)
            .finish()
    }
}

impl<L: Renewable> Renewals<L> {
    /// No task yet.
    pub(crate) fn new() -> Renewals<L> {
        Renewals {
            tx: Mutex::new(None),
            queued: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// How many entries the timer queue held after the task's last step (live, stale and
    /// dead ones).
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Asks the task to read `lock`'s machine now (a new lock, or its deadline or slot
    /// moved). Starts the task if it is not running (first lock, or its runtime is gone).
    /// Returns `false` when there is no tokio runtime to run it on.
    pub(crate) fn wake(&self, lock: &Arc<L>) -> bool {
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sender) = tx.as_ref()
            && sender.send(Msg::Wake(Arc::downgrade(lock))).is_ok()
        {
            return true;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let (sender, rx) = mpsc::unbounded_channel();
        let sent = sender.send(Msg::Wake(Arc::downgrade(lock))).is_ok();
        handle.spawn(run(rx, sender.downgrade(), Arc::clone(&self.queued)));
        *tx = Some(sender);
        sent
    }
}

/// What the renewal task is told.
enum Msg<L> {
    /// Read this lock's machine now (a new lock, or its deadline or slot moved).
    Wake(Weak<L>),
    /// A batch's replies were fed to its machines: read each of them again.
    Answered(Vec<Order<L>>),
}

/// The timer queue is compacted (stale and dead entries dropped) once it holds more than twice
/// its live entries plus this many.
pub(crate) const COMPACT_SLACK: usize = 64;

/// A lock's place in the timer queue: valid while `generation` is the lock's current one.
/// 24 bytes: the queue holds up to twice the auto-renewed locks between compactions.
struct Entry<L> {
    /// When, in nanoseconds since the queue's origin (entries at the same instant come out
    /// in any order).
    at: u64,
    generation: u64,
    lock: Weak<L>,
}

impl<L> PartialEq for Entry<L> {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}
impl<L> Eq for Entry<L> {}
impl<L> PartialOrd for Entry<L> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<L> Ord for Entry<L> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.at.cmp(&other.at)
    }
}

/// The timer queue and the batch being gathered.
struct Queue<L> {
    heap: BinaryHeap<Reverse<Entry<L>>>,
    /// The instant entries count from.
    origin: Instant,
    /// The widest coalesce window of the locks seen: how far past `now` a due batch looks.
    horizon: Duration,
    /// Compact when the heap grows past this (twice the live entries of the last compaction,
    /// plus [`COMPACT_SLACK`]).
    compact_at: usize,
}

/// A renewal to send, with its lock.
type Order<L> = (Arc<L>, RenewOrder);

impl<L: Renewable> Queue<L> {
    /// Reads `lock`'s machine at `now`: takes its renewal if one is due within its window,
    /// else queues it at the instant it next needs attention (or lets it go: lost, released).
    ///
    /// A lock whose renewal was taken is not queued: its batch comes back to the task once
    /// answered, at the latest at the earliest deadline in the batch (the batch's bound), and
    /// is read again then. A queue entry for it would only go stale (one heap push and one
    /// pop of a stale entry per lock and renewal).
    fn visit(&mut self, lock: Arc<L>, batch: &mut Vec<Order<L>>) {
        let (window, order, next) = lock.poll_renewal();
        self.horizon = self.horizon.max(window);
        let Some(next) = next else {
            // Lost (the loss signal fired in `poll_renewal`) or released: nothing more to do.
            lock.cancel();
            return;
        };
        // Any entry the lock still has in the queue is stale from here on.
        let generation = lock.schedule().fetch_add(1, Ordering::AcqRel) + 1;
        if let Some(order) = order {
            batch.push((lock, order));
            return;
        }
        let at = self.since_origin(lock.to_tokio(next));
        self.heap.push(Reverse(Entry {
            at,
            generation,
            lock: Arc::downgrade(&lock),
        }));
        if self.heap.len() > self.compact_at {
            self.compact();
        }
    }

    /// Drops every entry that is stale (a later visit queued its lock again) or dead (its lock
    /// is gone).
    fn compact(&mut self) {
        self.heap.retain(|Reverse(e)| {
            e.lock
                .upgrade()
                .is_some_and(|l| l.schedule().load(Ordering::Acquire) == e.generation)
        });
        self.compact_at = self.heap.len() * 2 + COMPACT_SLACK;
        tracing::trace!(
            entries = self.heap.len(),
            "lock renewals: timer queue compacted"
        );
    }

    /// `at` as an entry's instant (nanoseconds since the origin; an instant centuries away
    /// saturates, and one before the origin is the origin).
    fn since_origin(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX)
    }

    /// The earliest queued instant.
    fn next_at(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse(e)| {
            self.origin
                .checked_add(Duration::from_nanos(e.at))
                .unwrap_or_else(|| self.origin + Duration::from_secs(86400 * 365))
        })
    }

    /// Visits every lock queued at or before `now + horizon` (those not due are queued again
    /// at their own instant); the renewals due.
    fn due(&mut self, now: Instant) -> Vec<Order<L>> {
        let mut batch = Vec::new();
        let until = self.since_origin(now + self.horizon);
        while let Some(Reverse(e)) = self.heap.peek() {
            if e.at > until {
                break;
            }
            let Some(Reverse(e)) = self.heap.pop() else {
                break;
            };
            let Some(lock) = e.lock.upgrade() else {
                continue;
            };
            if lock.schedule().load(Ordering::Acquire) != e.generation {
                continue; // a later visit queued it again
            }
            self.visit(lock, &mut batch);
        }
        batch
    }
}

/// The task: wakes at the earliest queued instant or when a lock asks, and sends what is due.
///
/// `me` is the task's own channel, for the batches' answers; weak, so that the task still ends
/// once the locker and its locks are gone.
async fn run<L: Renewable>(
    mut rx: mpsc::UnboundedReceiver<Msg<L>>,
    me: mpsc::WeakUnboundedSender<Msg<L>>,
    queued: Arc<AtomicUsize>,
) {
    let mut queue = Queue {
        heap: BinaryHeap::new(),
        origin: Instant::now(),
        horizon: Duration::ZERO,
        compact_at: COMPACT_SLACK,
    };
    loop {
        let batch = match queue.next_at() {
            Some(at) => tokio::select! {
                biased;
                msg = rx.recv() => match msg {
                    Some(msg) => woken(&mut queue, &mut rx, msg),
                    None => return,
                },
                () = tokio::time::sleep_until(at) => queue.due(Instant::now()),
            },
            None => match rx.recv().await {
                Some(msg) => woken(&mut queue, &mut rx, msg),
                None => return,
            },
        };
        queued.store(queue.heap.len(), Ordering::Relaxed);
        send(batch, &me);
    }
}

/// The locks that asked to be read and those of answered batches (this message's and any
/// others already waiting), read now; the renewals due among them.
fn woken<L: Renewable>(
    queue: &mut Queue<L>,
    rx: &mut mpsc::UnboundedReceiver<Msg<L>>,
    first: Msg<L>,
) -> Vec<Order<L>> {
    let mut batch = Vec::new();
    let mut next = Some(first);
    while let Some(msg) = next {
        match msg {
            Msg::Wake(weak) => {
                if let Some(lock) = weak.upgrade() {
                    queue.visit(lock, &mut batch);
                }
            }
            Msg::Answered(answered) => {
                for (lock, _) in answered {
                    queue.visit(lock, &mut batch);
                }
            }
        }
        next = rx.try_recv().ok();
    }
    batch
}

/// Sends `batch` on a task of its own (the queue keeps running meanwhile), bounded by the
/// earliest deadline among its renewals, and feeds each reply to its own lock. A batch that
/// got no answer in time gives every renewal in it [`BackendError::Timeout`] (outcome
/// unknown; each machine tolerates it until its own deadline). Then the batch goes back to the
/// task (`me`), which reads its machines again.
fn send<L: Renewable>(batch: Vec<Order<L>>, me: &mpsc::WeakUnboundedSender<Msg<L>>) {
    let Some((first, _)) = batch.first() else {
        return;
    };
    let backend = Arc::clone(first.backend());
    let me = me.clone();
    tokio::spawn(async move {
        let deadline = batch
            .iter()
            .map(|(lock, order)| lock.to_tokio(order.deadline))
            .min()
            .unwrap_or_else(Instant::now);
        let requests: Vec<_> = batch.iter().map(|(lock, _)| lock.renew_request()).collect();
        let sent = Instant::now();
        let replies = tokio::time::timeout_at(deadline, backend.renew_many(&requests)).await;
        let mut replies = match replies {
            Ok(replies) => replies.into_iter(),
            Err(_) => {
                let waited = deadline.saturating_duration_since(sent);
                (0..batch.len())
                    .map(|_| Err(BackendError::Timeout(waited)))
                    .collect::<Vec<_>>()
                    .into_iter()
            }
        };
        tracing::trace!(renewals = batch.len(), "lock renewals answered");
        for (lock, _) in &batch {
            let reply = replies.next().unwrap_or_else(|| {
                Err(BackendError::Protocol(
                    "a batch of renewals got fewer answers than renewals".into(),
                ))
            });
            lock.handle_renew(reply);
        }
        // The task is gone only once the locker and every lock are: nothing left to read.
        if let Some(task) = me.upgrade() {
            let _ = task.send(Msg::Answered(batch));
        }
    });
}
