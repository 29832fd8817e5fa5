//! The turn rule of late requests: [`TurnKey`] orders, per node, the requests of one lease and
//! owner; [`TurnLine`] is the bookkeeping of one key's line, and says when a request whose
//! round no longer awaits it may be skipped. The driver (`lease-redlock`) keeps the lines and
//! does the waiting; the rule is here.

use std::sync::Arc;

#[cfg(doc)]
use super::NodeRequest;
use crate::backend::{LeaseSpec, Owner};

/// The ordering key of a request that changes a node's state (acquire, raise, renew, release
/// and cleanup): the node, the lease and the owner. Reads (remaining, inspect) have none.
///
/// **The turn rule**, which a driver that returns before every reply is in must keep: on
/// one node, the requests of one key are executed in the order the rounds asked for them.
/// A request's call may take more than one round trip at the node (lease-redis: `EVALSHA`,
/// then `EVAL` on `NOSCRIPT`; the unfenced fast path's `SET NX`, then the acquire script; a
/// `WAIT`), so pipelining them on one connection is not enough: a request whose round
/// returned without it could send its second step after the next round's request of the same
/// key. The driver therefore sends a request only once every earlier request of its key on
/// that node has finished (answered) or been abandoned (its call dropped at
/// [`NodeRequest::expires_at`]: nothing more is written for it, and what was written is ahead
/// on the connection); and it sends every request it took from a round, also after the
/// round's verdict and if the caller stopped waiting.
///
/// Why the key is (node, lease, owner): only requests of the same owner on the same lease can
/// undo each other (a late compare-and-delete of owner A deletes A's next grant; a late grant
/// of A outlives A's release). Requests of different owners are owner-checked against each
/// other at the node, as they are against other clients: their order is the ordinary
/// concurrency the rules already allow for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct TurnKey {
    /// The node's index.
    pub node: usize,
    /// The lease.
    pub spec: Arc<LeaseSpec>,
    /// The owner.
    pub owner: Owner,
}

/// The bookkeeping of one [`TurnKey`]'s line of requests: the sequence numbers of its last
/// request and last release. The driver takes a sequence number (increasing over all lines)
/// for each request it takes from a round, records it with [`TurnLine::push`], and asks
/// [`TurnLine::may_skip`] when a request's turn comes but its round no longer awaits it.
///
/// **The skip rule.** A request its round no longer awaits may be skipped, unsent, only when
/// a later request of its line is already waiting (which will be sent, in order) and, for a
/// release, that later request includes a release (which deletes whatever this one would
/// have): a cleanup or a release is never dropped in favour of a later acquire.
///
/// ```
/// use lease_core::quorum::TurnLine;
/// let mut line = TurnLine::new(1, false); // an acquire, #1
/// line.push(2, true); // its cleanup, #2
/// assert!(line.may_skip(1, false)); // the acquire, no longer awaited, behind a later request
/// assert!(!line.may_skip(2, true)); // the last release is always sent
/// line.push(3, false); // the next acquire, #3
/// assert!(!line.may_skip(2, true)); // no later release: the cleanup is sent before #3
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TurnLine {
    last: u64,
    last_release: u64,
}

impl TurnLine {
    /// A line whose first request is `seq` (a release, or not).
    pub fn new(seq: u64, release: bool) -> TurnLine {
        TurnLine {
            last: seq,
            last_release: if release { seq } else { 0 },
        }
    }

    /// Records request `seq` (later than every request of the line) at the line's end.
    pub fn push(&mut self, seq: u64, release: bool) {
        self.last = self.last.max(seq);
        if release {
            self.last_release = self.last_release.max(seq);
        }
    }

    /// Whether request `seq` of this line (a release, or not), whose round no longer awaits
    /// it, may be skipped: see the skip rule above.
    pub fn may_skip(&self, seq: u64, release: bool) -> bool {
        self.last > seq && (!release || self.last_release > seq)
    }
}
