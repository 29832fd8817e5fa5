//! The silence rule's bookkeeping: [`Silence`] for one path (a connection, or one slot of a
//! cluster) under its owner's lock, and [`Replies`], the marks a [`super::HealingConnection`]
//! keeps outside its lock so a reply costs no lock while nothing is suspect.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The silence rule's bookkeeping for one path (a connection, or one slot of a cluster): when
/// it last delivered a reply, and the send time of the oldest request abandoned unanswered
/// with no reply since.
///
/// A `HealingConnection` keeps its replies' count outside ([`Replies`]) and tells this one
/// of a reply only while something is suspect: its `last_reply` then lags, which can only make
/// [`Silence::abandoned`] more lenient, never count a request that a reply answered.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Silence {
    last_reply: Option<Instant>,
    silent_since: Option<Instant>,
}

impl Silence {
    /// A reply arrived at `now`: the path works.
    pub(crate) fn replied(&mut self, now: Instant) {
        self.last_reply = Some(now);
        self.silent_since = None;
    }

    /// A request sent at `sent` was abandoned unanswered; it counts unless a reply came after
    /// it was sent.
    pub(crate) fn abandoned(&mut self, sent: Instant) {
        if self.last_reply.is_some_and(|r| r >= sent) {
            return;
        }
        self.silent_since = Some(self.silent_since.map_or(sent, |s| s.min(sent)));
    }

    /// Whether a request was abandoned with no reply since.
    pub(crate) fn is_suspect(&self) -> bool {
        self.silent_since.is_some()
    }

    /// Whether the path has been silent for `bound` at `now`.
    pub(crate) fn is_silent(&self, now: Instant, bound: Duration) -> bool {
        self.silent_since
            .is_some_and(|since| now.saturating_duration_since(since) >= bound)
    }
}

/// The silence rule's shared marks, read and written without the state's lock: whether a
/// request of the current generation was abandoned with no reply since (`state.silence` is
/// suspect), and how many replies that generation has delivered. A call notes the count when
/// it sends; abandoned, it counts as unanswered only if the count has not moved since (a reply
/// after the send proves the path, as a reply's time after the send would).
pub(super) struct Replies {
    /// `state.silence.is_suspect()` as of the last time the state's lock was released (while
    /// an abandonment holds the lock it may be true without cause, never wrongly false).
    pub(super) suspect: AtomicBool,
    /// The generation (its low 32 bits, high half) and its replies (low half, wrapping): one
    /// word, so a late reply of a connection given up can never count for its successor.
    pub(super) count: AtomicU64,
}

/// The replies' half of [`Replies::count`].
pub(super) const REPLIES: u64 = u32::MAX as u64;

impl Replies {
    pub(super) fn new() -> Replies {
        Replies {
            suspect: AtomicBool::new(false),
            count: AtomicU64::new(0),
        }
    }

    /// `generation`'s half of [`Replies::count`].
    pub(super) fn tag(generation: u64) -> u64 {
        (generation & REPLIES) << 32
    }

    /// A new generation (the state is locked by the caller): no suspicion, no reply yet.
    pub(super) fn reset(&self, generation: u64) {
        self.suspect.store(false, Ordering::SeqCst);
        self.count.store(Replies::tag(generation), Ordering::SeqCst);
    }

    /// A reply on `generation` arrived: counted if it is still the current one.
    pub(super) fn mark(&self, generation: u64) {
        let tag = Replies::tag(generation);
        let mut now = self.count.load(Ordering::Relaxed);
        while now & !REPLIES == tag {
            let next = tag | (now.wrapping_add(1) & REPLIES);
            match self
                .count
                .compare_exchange_weak(now, next, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(seen) => now = seen,
            }
        }
    }

    /// The count a call sending now notes.
    pub(super) fn seen(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }

    /// Whether `generation` is still the current one and no request is suspect: what a new
    /// clone's first call would find (it would pin that generation's connection).
    pub(super) fn is_current_and_calm(&self, generation: u64) -> bool {
        !self.suspect.load(Ordering::SeqCst)
            && self.count.load(Ordering::SeqCst) & !REPLIES == Replies::tag(generation)
    }
}
