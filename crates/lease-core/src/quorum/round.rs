//! The Redlock round as a sans-IO machine: [`Quorum`] makes [`Round`]s.
//!
//! Sans-IO in the manner of quinn-proto's `Connection` (and of [`crate::Election`]): the
//! machine decides what to send to which node and what the replies mean; the driver (for
//! example `lease-redlock`'s `RedlockBackend`) does the I/O and reads the clock. One
//! [`Round`] is one backend operation (acquire, renew, release, remaining, inspect) over every
//! node, made of one or more **phases**: an acquire of a fenced lease is the acquire phase,
//! then the raise phase; a failed acquire ends with a cleanup phase on every node.
//!
//! The driver loops:
//!
//! 1. send every request [`Round::poll_request`] returns, concurrently, to the node it names
//!    ([`NodeRequest::node`]), each bounded by its [`NodeRequest::deadline`];
//! 2. feed each request's reply — or [`NodeReply::TimedOut`] at its deadline — to
//!    [`Round::handle_reply`] **as it arrives**, with the current instant; **every** polled
//!    request gets exactly one reply (or [`Round::handle_timeout`] once [`Round::poll_timeout`]
//!    has passed, which times out every request whose deadline it is);
//! 3. when [`Round::poll_outcome`] returns the verdict, the round is over; otherwise go to 1
//!    (a phase may have ended and the next phase's requests be ready).
//!
//! **Early verdict.** A phase is judged as soon as the replies still missing can no longer change
//! its outcome, never earlier: acquire and raise when a quorum succeeded (validity judged at
//! that instant: waiting only shrinks it) or can no longer succeed; renew and release when a
//! quorum succeeded, a quorum said "not ours", or neither can still happen (two quorums of
//! opposite answers cannot both exist). The cleanup, remaining and inspect phases wait for
//! every reply (the cleanup must report each node's effect truthfully; remaining and inspect
//! combine every answer). The verdict is the one waiting for every reply gives.
//!
//! **Late replies.** A request unanswered when its phase is judged stays outstanding
//! ([`Round::outstanding`]); the driver keeps it running (in its turn, see below; bounded once
//! sent, [`NodeRequest::expires_at`]) and may feed
//! its reply at any time, also after the verdict: [`Round::handle_reply`] accepts it. Before the
//! verdict (a failed acquire cleaning up) it replaces the node's [`NodeCause::Unanswered`] with
//! what the node said; after the verdict it changes nothing (a late grant after a granted
//! acquire is ours and goes with the release, which is sent to every node). A cause still
//! [`NodeCause::Unanswered`] at the verdict never counts as "not applied".
//!
//! **Turns.** Because a round may return while a node's request still runs, the next round of
//! the same lease and owner can reach that node first. A driver that returns early must keep
//! the turn rule ([`TurnKey`]): on a node, the requests of one (lease, owner) are sent one
//! after another, a request only once the one before it was answered or abandoned
//! ([`NodeRequest::expires_at`]), and every request the round asked for is sent (or, when its
//! round no longer awaits it and a later request of its turn already waits, skipped — a
//! release only for a later release), so a cleanup or a later release runs at the node after
//! a late acquire, and a late release never after the next acquire. Pipelining on one
//! connection is not enough: a request may take several round trips at the node (`NOSCRIPT`
//! then `EVAL`), and its second step would follow the next round's request.
//!
//! The rules (each tested by property in `tests/round_props.rs`, and the whole protocol by the
//! drifting-clock simulation in `tests/quorum_simulation.rs`):
//!
//! - every phase sends one request to every node, except the raise phase, which asks only the
//!   nodes that granted the acquisition before the acquire phase was judged;
//! - validity is `ttl − elapsed − drift` ([`super::validity`]), with `elapsed` measured from
//!   the round's single start instant (the `now` given when the round was made) to the end of
//!   the phase being judged;
//! - acquire: granted iff at least a quorum of nodes granted it and validity is left; for a
//!   fenced lease, the token is the maximum the granting nodes (judged) minted
//!   ([`super::fenced_quorum_token`]), and the raise phase (those nodes raise their counter
//!   and mark to the token where the lease is still ours) must also reach a quorum with
//!   validity left;
//! - a failed acquire runs a cleanup phase (compare-and-delete) on **every** node, including
//!   those that timed out or failed (their request may have taken effect); then a quorum of
//!   nodes held by others is [`AcquireOutcome::Held`] (the most frequent holder), anything else
//!   a [`QuorumError`];
//! - renew: renewed iff a quorum renewed with validity left; a quorum saying "not ours" is
//!   [`RenewOutcome::NotHeld`] after a cleanup phase on every node; anything else is an
//!   inconclusive [`QuorumError`] and deletes nothing;
//! - release: compare-and-delete on every node with the term ignored (node counters differ);
//!   released or not held by a quorum, else a [`QuorumError`];
//! - remaining, inspect: answers from a quorum; remaining times are the `q`-th largest of the
//!   nodes' values, minus the round's duration and the drift allowance;
//! - a failed round keeps every node's cause; a quorum of permanent refusals stays a
//!   permanent error, anything else is a [`QuorumError`] in [`BackendError::Unavailable`]
//!   when it provably left nothing applied ([`QuorumError::effect`]), else in
//!   [`BackendError::OutcomeUnknown`].
//!
//! No clock is read and nothing is random: time enters as [`Instant`] arguments.
//!
//! ```
//! use std::{sync::Arc, time::Duration};
//! use lease_core::quorum::{NodeReply, NodeRequestKind, Quorum, Verdict};
//! use lease_core::{
//!     AcquireOutcome, AcquireRequest, FenceState, Instant, LeaseSpec, Owner, Token, Ttl,
//! };
//!
//! let quorum = Quorum::new(&["a:6379", "b:6379", "c:6379"], 0.01)?;
//! let req = AcquireRequest::new(
//!     Arc::new(LeaseSpec::election("jobs")),
//!     Owner::new("host-1")?,
//!     Ttl::new(Duration::from_secs(1))?,
//! );
//! let bound = Duration::from_millis(200);
//! let mut round = quorum.acquire(req, bound, Instant::ZERO);
//! let t = Instant::ZERO + Duration::from_millis(10);
//! // Acquire phase: one request per node; nodes 0 and 1 grant with tokens 4 and 7, which
//! // decides the phase: node 2's reply (here a timeout) comes late and changes nothing.
//! let requests: Vec<_> = std::iter::from_fn(|| round.poll_request()).collect();
//! assert_eq!(requests.len(), 3);
//! for r in &requests {
//!     let reply = match r.node {
//!         0 => NodeReply::Acquire(Ok(AcquireOutcome::Acquired {
//!             token: Token::new(4).ok(),
//!             fence: FenceState::new(Token::new(3).ok(), None),
//!         })),
//!         1 => NodeReply::Acquire(Ok(AcquireOutcome::Acquired {
//!             token: Token::new(7).ok(),
//!             fence: FenceState::new(Token::new(6).ok(), None),
//!         })),
//!         _ => NodeReply::TimedOut,
//!     };
//!     round.handle_reply(t, r.id, reply)?;
//! }
//! // Raise phase: the granting nodes raise their counters to the maximum, 7.
//! let raises: Vec<_> = std::iter::from_fn(|| round.poll_request()).collect();
//! assert_eq!(raises.iter().map(|r| r.node).collect::<Vec<_>>(), [0, 1]);
//! assert!(matches!(&raises[0].kind, NodeRequestKind::Raise { token, .. } if token.get() == 7));
//! for r in &raises {
//!     round.handle_reply(t, r.id, NodeReply::Raise(Ok(true)))?;
//! }
//! let verdict = round.poll_outcome().expect("decided");
//! assert!(matches!(
//!     verdict,
//!     Verdict::Acquire(Ok(AcquireOutcome::Acquired { token: Some(t), fence }))
//!         if t.get() == 7 && fence.counter == Token::new(6).ok()
//! ));
//! // Valid until start + ttl − (ceil(1000 × 0.01) + 2) ms.
//! assert_eq!(round.valid_until(), Some(Instant::ZERO + Duration::from_millis(988)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

#[cfg(doc)]
use super::error::QuorumError;
use super::error::{NodeCause, NodeFailure, QuorumOp, RoundFailure};
use super::nodes::Quorum;
#[cfg(doc)]
use super::turn::TurnKey;
use super::wire::{
    Asked, NodeReply, NodeRequest, NodeRequestId, NodeRequestKind, RoundInputError, Verdict,
};
#[cfg(doc)]
use crate::backend::{AcquireOutcome, RenewOutcome};
use crate::backend::{BackendError, LeaseSpec, Owner};
use crate::time::Instant;
use crate::token::Token;

/// Which phase a round is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Phase {
    /// The acquire requests.
    Acquire,
    /// The raise requests of a fenced acquisition, to the nodes that granted it.
    Raise,
    /// Compare-and-delete on every node after a failed acquire, or a renew that found the
    /// lease lost.
    Cleanup,
    /// The renew requests.
    Renew,
    /// The release requests.
    Release,
    /// The remaining-time requests.
    Remaining,
    /// The inspect requests.
    Inspect,
    /// Decided: the verdict is (or was) available from [`Round::poll_outcome`].
    Done,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Acquire => "acquire",
            Phase::Raise => "raise",
            Phase::Cleanup => "cleanup",
            Phase::Renew => "renew",
            Phase::Release => "release",
            Phase::Remaining => "remaining",
            Phase::Inspect => "inspect",
            Phase::Done => "done",
        })
    }
}

/// Whose keys a cleanup deletes (compare-and-delete): the round's lease and owner.
#[derive(Debug)]
pub(super) struct Cleanup {
    pub(super) spec: Arc<LeaseSpec>,
    pub(super) owner: Owner,
}

/// An acquire round's own data, carried from stage to stage (acquire, raise, cleanup).
#[derive(Debug)]
pub(super) struct AcquireRound {
    pub(super) fenced: bool,
    pub(super) ttl: Duration,
    pub(super) cleanup: Cleanup,
    /// The `Held` replies (of the acquire phase, and late ones): holder and remaining time.
    pub(super) held: Vec<(Option<String>, Option<Duration>)>,
    /// How long the acquire phase took (to make the holder's remaining time conservative).
    pub(super) acquire_elapsed: Duration,
}

/// The phase a round is in, **with its operation's data**: a phase of one operation cannot be
/// paired with another's, so every stage has exactly one judge ([`super::judge`]).
#[derive(Debug)]
pub(super) enum Stage {
    Acquire(AcquireRound),
    /// A fenced acquire's raise phase, for the fenced quorum `token`.
    Raise {
        acquire: AcquireRound,
        token: Token,
    },
    /// The cleanup after a failed acquire: why it failed, and how many nodes had succeeded in
    /// the failed phase (grants, or raises) — late successes still count.
    AcquireCleanup {
        acquire: AcquireRound,
        failure: RoundFailure,
        successes: usize,
    },
    Renew {
        ttl: Duration,
        cleanup: Cleanup,
    },
    /// The cleanup after a renew that a quorum said is not ours.
    RenewCleanup,
    Release,
    Remaining,
    Inspect,
    Done,
}

impl Stage {
    fn phase(&self) -> Phase {
        match self {
            Stage::Acquire(_) => Phase::Acquire,
            Stage::Raise { .. } => Phase::Raise,
            Stage::AcquireCleanup { .. } | Stage::RenewCleanup => Phase::Cleanup,
            Stage::Renew { .. } => Phase::Renew,
            Stage::Release => Phase::Release,
            Stage::Remaining => Phase::Remaining,
            Stage::Inspect => Phase::Inspect,
            Stage::Done => Phase::Done,
        }
    }

    fn op(&self) -> QuorumOp {
        match self {
            Stage::Acquire(_) | Stage::Raise { .. } | Stage::AcquireCleanup { .. } => {
                QuorumOp::Acquire
            }
            Stage::Renew { .. } | Stage::RenewCleanup => QuorumOp::Renew,
            Stage::Release => QuorumOp::Release,
            Stage::Remaining => QuorumOp::Remaining,
            // `Done` is never a round's first stage.
            Stage::Inspect | Stage::Done => QuorumOp::Inspect,
        }
    }

    /// The acquire round's data, in any of its stages.
    pub(super) fn acquire_mut(&mut self) -> Option<&mut AcquireRound> {
        match self {
            Stage::Acquire(a) | Stage::Raise { acquire: a, .. } => Some(a),
            Stage::AcquireCleanup { acquire, .. } => Some(acquire),
            _ => None,
        }
    }
}

/// One request of a phase.
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) id: NodeRequestId,
    pub(super) node: usize,
    /// `Some` until polled.
    pub(super) kind: Option<NodeRequestKind>,
    /// What it asked, to check the reply.
    pub(super) asked: Asked,
    pub(super) reply: Option<NodeReply>,
    /// When it times out.
    pub(super) deadline: Instant,
}

/// One quorum operation over every node. See the [module docs](self) for the contract.
#[derive(Debug)]
pub struct Round {
    pub(super) quorum: Quorum,
    pub(super) op: QuorumOp,
    pub(super) stage: Stage,
    pub(super) bound: Duration,
    pub(super) start: Instant,
    next_id: u64,
    pub(super) slots: Vec<Slot>,
    /// Requests of phases already judged (early) that are still unanswered: their replies are
    /// still accepted (see [`Round::handle_reply`]).
    late: Vec<Slot>,
    deadline: Instant,
    /// Causes of the nodes that did not succeed, over the acquire (and raise) phases, or the
    /// single phase of other operations.
    pub(super) causes: Vec<NodeFailure>,
    verdict: Option<Verdict>,
    /// For a granted acquire or renew: `(decided at, validity)`.
    pub(super) granted: Option<(Instant, Duration)>,
    pub(super) token: Option<Token>,
    /// The highest counter any node reported in the acquire phase (granted: before minting;
    /// refused: the holder's). Per-node epochs are not comparable across nodes: not kept.
    pub(super) fence_seen: Option<Token>,
    pub(super) elapsed: Option<Duration>,
}

impl Round {
    /// A round in its first `stage`, asking `kinds` (node, request) at `now`.
    pub(super) fn new(
        quorum: &Quorum,
        stage: Stage,
        kinds: Vec<(usize, NodeRequestKind)>,
        bound: Duration,
        now: Instant,
    ) -> Round {
        let mut round = Round {
            quorum: quorum.clone(),
            op: stage.op(),
            stage,
            bound,
            start: now,
            next_id: 0,
            slots: Vec::new(),
            late: Vec::new(),
            deadline: now,
            causes: Vec::new(),
            verdict: None,
            granted: None,
            token: None,
            fence_seen: None,
            elapsed: None,
        };
        round.start_phase(kinds, now);
        round
    }

    /// Starts a phase at `now`: its requests, one deadline.
    pub(super) fn start_phase(&mut self, kinds: Vec<(usize, NodeRequestKind)>, now: Instant) {
        self.deadline = now + self.bound;
        let deadline = self.deadline;
        self.slots = kinds
            .into_iter()
            .map(|(node, kind)| {
                self.next_id += 1;
                Slot {
                    id: NodeRequestId(self.next_id),
                    node,
                    asked: kind.asked(),
                    kind: Some(kind),
                    reply: None,
                    deadline,
                }
            })
            .collect();
    }

    /// The operation.
    pub fn op(&self) -> QuorumOp {
        self.op
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        self.stage.phase()
    }

    /// The round's start instant (the `now` it was made at): validity is measured from it.
    pub fn started_at(&self) -> Instant {
        self.start
    }

    /// The bound on each node's reply.
    pub fn bound(&self) -> Duration {
        self.bound
    }

    /// The next request to send, if any: every request of the current phase once, in node
    /// order. Each must get exactly one reply ([`Round::handle_reply`]) or time out.
    ///
    /// Takes no `now` (unlike the other machines' `poll_request`): a phase's requests are
    /// made, with their deadline, when the phase starts.
    pub fn poll_request(&mut self) -> Option<NodeRequest> {
        let deadline = self.deadline;
        let bound = self.bound;
        self.slots.iter_mut().find_map(|s| {
            s.kind.take().map(|kind| NodeRequest {
                id: s.id,
                node: s.node,
                kind,
                deadline,
                bound,
            })
        })
    }

    /// The earliest deadline of the requests awaited (the current phase's, and late requests
    /// of judged phases while the round is undecided): call [`Round::handle_timeout`] then.
    /// `None` when nothing is awaited (in particular once decided).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.is_done() {
            return None;
        }
        self.slots
            .iter()
            .filter(|s| s.reply.is_none())
            .chain(self.late.iter())
            .map(|s| s.deadline)
            .min()
    }

    /// How many polled requests are still unanswered: those of the current phase and those
    /// of phases judged early (their replies are still accepted, also after the verdict).
    pub fn outstanding(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.kind.is_none() && s.reply.is_none())
            .count()
            + self.late.len()
    }

    /// Feeds the reply to request `id`, received at `now`. When it is the phase's last
    /// awaited reply, the phase is judged at `now`: the next phase's requests, or the verdict,
    /// become available.
    ///
    /// The phase is judged as soon as it is decidable (see the [module docs](self)): a quorum
    /// reached or out of reach, even with requests still unanswered; those become late
    /// requests, whose replies are still accepted here (also after the verdict; see the module
    /// docs for what they change).
    ///
    /// Errors (nothing recorded): a request that is not outstanding (unknown, already
    /// answered, or timed out), or a reply of the wrong kind.
    pub fn handle_reply(
        &mut self,
        now: Instant,
        id: NodeRequestId,
        reply: NodeReply,
    ) -> Result<(), RoundInputError> {
        if let Some(pos) = self.late.iter().position(|s| s.id == id) {
            check_reply(id, self.late[pos].asked, &reply)?;
            let slot = self.late.swap_remove(pos);
            self.absorb_late(&slot, reply);
            return Ok(());
        }
        let slot = self
            .slots
            .iter_mut()
            .find(|s| s.id == id && s.reply.is_none())
            .ok_or(RoundInputError::UnknownRequest(id))?;
        check_reply(id, slot.asked, &reply)?;
        slot.kind = None;
        slot.reply = Some(reply);
        self.advance(now);
        Ok(())
    }

    /// At `now`: every outstanding request whose deadline has passed gets
    /// [`NodeReply::TimedOut`] (late requests of judged phases included), and the current phase
    /// is judged if that decides it.
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.late.len() {
            if self.late[i].deadline <= now {
                let slot = self.late.swap_remove(i);
                self.absorb_late(&slot, NodeReply::TimedOut);
            } else {
                i += 1;
            }
        }
        if now < self.deadline {
            return;
        }
        let mut any = false;
        for s in self.slots.iter_mut().filter(|s| s.reply.is_none()) {
            s.kind = None;
            s.reply = Some(NodeReply::TimedOut);
            any = true;
        }
        if any {
            self.advance(now);
        }
    }

    /// The verdict, once decided (returned once). The round's outcome: the other machines
    /// call it `poll_outcome`.
    pub fn poll_outcome(&mut self) -> Option<Verdict> {
        self.verdict.take()
    }

    /// Whether the round is decided.
    pub fn is_done(&self) -> bool {
        matches!(self.stage, Stage::Done)
    }

    /// For a granted acquire or renew: the validity left when it was decided.
    pub fn validity(&self) -> Option<Duration> {
        self.granted.map(|(_, v)| v)
    }

    /// For a granted acquire or renew: the end of its validity on the caller's clock,
    /// `start + ttl − drift`.
    pub fn valid_until(&self) -> Option<Instant> {
        self.granted.map(|(at, v)| at + v)
    }

    /// For a fenced acquire that reached a quorum: the fenced quorum token (established only
    /// if the verdict is `Acquired`).
    pub fn token(&self) -> Option<Token> {
        self.token
    }

    /// How long the round had taken when its last judged phase was judged (for an acquire
    /// or renew: the elapsed time its validity was computed from).
    pub fn elapsed(&self) -> Option<Duration> {
        self.elapsed
    }

    /// Ends the round with `verdict`.
    pub(super) fn decide(&mut self, verdict: Verdict) {
        self.stage = Stage::Done;
        self.slots.clear();
        self.verdict = Some(verdict);
    }

    /// Judges the phase as soon as it is decidable ([`Round::decidable`]); its requests still
    /// unanswered then become late ones (judged as [`NodeCause::Unanswered`]).
    fn advance(&mut self, now: Instant) {
        if self.is_done() || !self.decidable() {
            return;
        }
        let mut replies: Vec<(usize, Option<NodeReply>)> = Vec::new();
        for mut s in std::mem::take(&mut self.slots) {
            match s.reply.take() {
                Some(r) => replies.push((s.node, Some(r))),
                None => {
                    replies.push((s.node, None));
                    // Only a request the driver has taken is in flight.
                    if s.kind.take().is_none() {
                        self.late.push(s);
                    }
                }
            }
        }
        let stage = std::mem::replace(&mut self.stage, Stage::Done);
        self.judge(stage, replies, now);
    }

    /// Node `index`'s failure with `cause`.
    pub(super) fn failure(&self, index: usize, cause: NodeCause) -> NodeFailure {
        NodeFailure::new(index, self.quorum.address(index).unwrap_or(""), cause)
    }

    /// A request without a reply by its deadline: a timeout of the round's bound.
    pub(super) fn timeout(&self) -> BackendError {
        BackendError::Timeout(self.bound)
    }
}

/// Refuses a reply that does not answer what `asked` asked (a timeout answers anything).
fn check_reply(id: NodeRequestId, asked: Asked, reply: &NodeReply) -> Result<(), RoundInputError> {
    match reply.answers() {
        Some(a) if a != asked => Err(RoundInputError::WrongReply {
            id,
            expected: asked.name(),
        }),
        _ => Ok(()),
    }
}
