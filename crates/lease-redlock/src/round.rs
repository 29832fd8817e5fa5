//! The I/O of a quorum round: each of the round machine's requests sent to its node on a task
//! of its own, in its turn ([`TurnKey`]), each reply fed back with the instant as it arrives;
//! requests still running at the verdict finish in the background.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;

use lease_core::BackendError;
use lease_core::quorum::{
    NodeReply, NodeRequestId, NodeRequestKind, Phase, QuorumOp, Round, TurnKey, TurnLine, Verdict,
};
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

use crate::node::QuorumNode;

/// How a round treats the requests it no longer waits for. **Only [`LateRequests::Ordered`]
/// is safe**; the others are negative controls that reproduce designs reverted in the past
/// (`tests/ordering.rs` shows that it detects each).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LateRequests {
    /// The shipped rule: every request waits for its turn ([`lease_core::quorum::TurnKey`])
    /// and is sent, also after its round's verdict.
    #[default]
    Ordered,
    /// No turns: every request is sent at once (the naive early-returning round). A late
    /// request's second step (`EVAL` after `NOSCRIPT`) can follow the next round's request of
    /// the same lease and owner on that node.
    UnorderedUnsafe,
    /// Turns, but a request still waiting for its turn at its round's deadline is dropped
    /// unsent: a release behind a slow request is never sent and its key stays behind.
    DroppedAtDeadlineUnsafe,
}

/// What a request asked, for its reply's log line.
#[derive(Clone, Copy)]
struct Asked {
    id: NodeRequestId,
    node: usize,
    phase: Phase,
    release: bool,
}

/// The requests of a backend (and its clones) that are still running, sent or waiting for
/// their turn, and the turns themselves ([`TurnKey`]: per node, lease and owner).
#[derive(Default)]
pub(crate) struct Flights {
    turns: Mutex<Turns>,
    running: AtomicUsize,
    idle: Notify,
}

/// Every turn's line: the completion of its last request (the sender is dropped when that
/// request's call finishes or is abandoned, which is all a successor waits for), and the
/// sequence numbers of its last request and last release.
#[derive(Default)]
struct Turns {
    lines: HashMap<TurnKey, Line>,
    next: u64,
    prune_at: usize,
}

struct Line {
    tail: oneshot::Receiver<()>,
    /// The line's sequence numbers: the skip rule's input.
    seqs: TurnLine,
}

/// A request's place in its turn.
struct Turn {
    key: TurnKey,
    seq: u64,
    release: bool,
    /// The completion of the request before it, if any.
    before: Option<oneshot::Receiver<()>>,
    /// This request's completion: dropped when its call is over.
    _done: oneshot::Sender<()>,
}

/// Held by a request's task while it runs: counts it in [`Flights::running`].
struct Running(Arc<Flights>);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Flights {
    /// Takes the next turn of `key` for a request (a release, or not).
    fn take_turn(&self, key: TurnKey, release: bool) -> Turn {
        let (done, tail) = oneshot::channel();
        let mut turns = self.turns.lock().unwrap_or_else(PoisonError::into_inner);
        if turns.lines.len() >= turns.prune_at {
            // Forget the turns whose last request is over (its sender dropped).
            turns.lines.retain(|_, line| {
                matches!(
                    line.tail.try_recv(),
                    Err(oneshot::error::TryRecvError::Empty)
                )
            });
            turns.prune_at = (turns.lines.len() * 2).max(64);
        }
        turns.next += 1;
        let seq = turns.next;
        let before = match turns.lines.get_mut(&key) {
            Some(line) => {
                line.seqs.push(seq, release);
                Some(std::mem::replace(&mut line.tail, tail))
            }
            None => {
                let seqs = TurnLine::new(seq, release);
                turns.lines.insert(key.clone(), Line { tail, seqs });
                None
            }
        };
        Turn {
            key,
            seq,
            release,
            before,
            _done: done,
        }
    }

    /// Whether a request whose round no longer awaits it may be skipped when its turn comes:
    /// the core's skip rule ([`TurnLine::may_skip`]).
    fn superseded(&self, turn: &Turn) -> bool {
        let turns = self.turns.lock().unwrap_or_else(PoisonError::into_inner);
        turns
            .lines
            .get(&turn.key)
            .is_some_and(|line| line.seqs.may_skip(turn.seq, turn.release))
    }

    fn running(self: &Arc<Self>) -> Running {
        self.running.fetch_add(1, Ordering::AcqRel);
        Running(Arc::clone(self))
    }

    /// How many requests are running (sent and unanswered, or waiting for their turn).
    pub(crate) fn count(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }

    /// Waits until no request is running.
    pub(crate) async fn settled(&self) {
        loop {
            let mut idle = std::pin::pin!(self.idle.notified());
            idle.as_mut().enable();
            if self.count() == 0 {
                return;
            }
            idle.await;
        }
    }
}

/// Drives one quorum round: the round machine of `lease-core` ([`Round`]) decides, this does
/// the I/O. Every request the machine asks for is handed at once to a task of its own, which
/// waits for the request's turn on its node ([`TurnKey`]; `late` other than
/// [`LateRequests::Ordered`] are the tests' negative controls), sends it, and reports the reply — or
/// [`NodeReply::TimedOut`] at the request's deadline (a reply ready when the deadline fires
/// counts) — back to the round. Each reply is fed to the machine **as it arrives**, with an
/// instant read from tokio's monotonic clock (the round's origin is the instant `make` is
/// called at, which is [`lease_core::Instant::ZERO`] for the machine), so the machine can
/// decide as soon as a quorum is reached or out of reach. Returns the verdict.
///
/// A request whose reply the round no longer awaits (decided early, timed out while it
/// waited for its turn, or the caller dropped the round) keeps running on its task until it
/// is answered or abandoned at [`NodeRequest::expires_at`](lease_core::quorum::NodeRequest::expires_at); its reply is logged. Every
/// request the machine asked for is therefore sent, and never ahead of an earlier request of
/// its turn (see [`TurnKey`] for why both matter).
///
/// `reads` says how a node's inspect request is sent: [`Reads::Inspect`] (reads only) or
/// [`Reads::Observe`] ([`LeaseBackend::observe`](lease_core::LeaseBackend::observe): a watcher's
/// read, which may also tell the node that someone waits for the release).
pub(crate) async fn drive<N: QuorumNode>(
    nodes: &Arc<[N]>,
    flights: &Arc<Flights>,
    late: LateRequests,
    reads: Reads,
    make: impl FnOnce(lease_core::Instant) -> Round,
) -> Result<Verdict, BackendError> {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return Err(BackendError::Invalid(
            "the Redlock backend runs on a tokio runtime".into(),
        ));
    };
    let origin = Instant::now();
    let now = move || lease_core::Instant::from_origin(origin.elapsed());
    let mut round = make(lease_core::Instant::ZERO);
    let op = round.op();
    let mut awaited: Vec<(Asked, oneshot::Receiver<NodeReply>)> = Vec::new();
    loop {
        if let Some(verdict) = round.poll_outcome() {
            return Ok(verdict);
        }
        let phase = round.phase();
        while let Some(r) = round.poll_request() {
            let asked = Asked {
                id: r.id,
                node: r.node,
                phase,
                release: matches!(r.kind, NodeRequestKind::Release(_)),
            };
            // The turn is taken here, in the order the machine asks, not when the task runs.
            let turn = r
                .turn_key()
                .filter(|_| late != LateRequests::UnorderedUnsafe)
                .map(|k| flights.take_turn(k, asked.release));
            let (reply_tx, reply_rx) = oneshot::channel();
            let running = flights.running();
            let nodes = Arc::clone(nodes);
            let flights = Arc::clone(flights);
            runtime.spawn(async move {
                let _running = running;
                let deadline = origin + r.deadline.since_origin();
                // The round's end of the reply: taken by the first report (the reply, or a
                // timeout at the deadline).
                let slot = Mutex::new(Some(reply_tx));
                let take = || slot.lock().unwrap_or_else(PoisonError::into_inner).take();
                let awaited = || {
                    slot.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .as_ref()
                        .is_some_and(|tx| !tx.is_closed())
                };
                let work = async {
                    // Dropped when this request's call is over: its successor may go.
                    let mut done = turn;
                    if let Some(turn) = &mut done {
                        if let Some(before) = turn.before.take() {
                            // Err: the earlier request's sender is gone, which is its end.
                            if late == LateRequests::DroppedAtDeadlineUnsafe {
                                if tokio::time::timeout_at(deadline, before).await.is_err() {
                                    return Some(NodeReply::TimedOut);
                                }
                            } else {
                                let _ = before.await;
                            }
                        }
                        if late == LateRequests::Ordered && !awaited() && flights.superseded(turn) {
                            return None;
                        }
                    }
                    let expires = origin + r.expires_at(now()).since_origin();
                    let reply =
                        tokio::time::timeout_at(expires, call(nodes.get(r.node), r.node, &r.kind, reads))
                            .await
                            .unwrap_or(NodeReply::TimedOut);
                    drop(done);
                    Some(reply)
                };
                let mut work = std::pin::pin!(work);
                // `timeout_at` polls the work before its timer: a reply ready at the deadline
                // counts.
                let result = match tokio::time::timeout_at(deadline, work.as_mut()).await {
                    Ok(result) => result,
                    Err(_) => {
                        if let Some(tx) = take() {
                            let _ = tx.send(NodeReply::TimedOut);
                        }
                        work.await
                    }
                };
                match result {
                    Some(reply) => {
                        let reply = match take() {
                            Some(tx) => match tx.send(reply) {
                                Ok(()) => return,
                                Err(reply) => reply,
                            },
                            None => reply,
                        };
                        trace_reply(op, &asked, &reply, true);
                    }
                    None => {
                        drop(take());
                        tracing::debug!(%op, phase = %asked.phase, node = asked.node, "redlock: late request skipped: a later one of its turn supersedes it");
                    }
                }
            });
            awaited.push((asked, reply_rx));
        }
        if awaited.is_empty() {
            return Err(BackendError::Protocol(format!(
                "the {op} round asked for nothing and decided nothing"
            )));
        }
        let replies = next_replies(&mut awaited).await;
        let at = now();
        for (asked, reply) in replies {
            trace_reply(op, &asked, &reply, false);
            if let Err(e) = round.handle_reply(at, asked.id, reply) {
                return Err(BackendError::Protocol(format!("quorum round: {e}")));
            }
        }
        if round.phase() != phase {
            tracing::debug!(
                %op,
                %phase,
                elapsed = ?at.since_origin(),
                next = %round.phase(),
                awaited = awaited.len(),
                "redlock: phase judged"
            );
        }
    }
}

/// Waits until at least one awaited reply is in; removes and returns every one that is, in
/// the order asked (so a node's earlier request is fed before its later one when both are
/// in). A task that ended without reporting (its runtime shutting down) is a timeout.
async fn next_replies(
    awaited: &mut Vec<(Asked, oneshot::Receiver<NodeReply>)>,
) -> Vec<(Asked, NodeReply)> {
    let mut ready: Vec<(usize, NodeReply)> = Vec::new();
    std::future::poll_fn(|cx| {
        for (i, (_, rx)) in awaited.iter_mut().enumerate() {
            if let Poll::Ready(reply) = Pin::new(rx).poll(cx) {
                ready.push((i, reply.unwrap_or(NodeReply::TimedOut)));
            }
        }
        if ready.is_empty() {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    let mut out = Vec::with_capacity(ready.len());
    // Remove from the back so the earlier indices stay valid; then restore the order.
    for (i, reply) in ready.into_iter().rev() {
        out.push((awaited.remove(i).0, reply));
    }
    out.reverse();
    out
}

/// Logs a node's reply: a failure, and any reply that came after the verdict (`late`). An
/// unanswered release (or cleanup) is a warning: that node's key expires with its TTL.
fn trace_reply(op: QuorumOp, request: &Asked, reply: &NodeReply, late: bool) {
    let error = match reply {
        NodeReply::TimedOut => Some("no reply in time".to_owned()),
        NodeReply::Acquire(Err(e))
        | NodeReply::Raise(Err(e))
        | NodeReply::Renew(Err(e))
        | NodeReply::Release(Err(e))
        | NodeReply::Remaining(Err(e))
        | NodeReply::Inspect(Err(e)) => Some(e.to_string()),
        _ => None,
    };
    let phase = request.phase;
    let node = request.node;
    match error {
        Some(error) if request.release => {
            tracing::warn!(%op, %phase, node, late, %error, "redlock: release not answered; the key expires with its TTL");
        }
        Some(error) => tracing::debug!(%op, %phase, node, late, %error, "redlock: node failed"),
        None if late => tracing::trace!(%op, %phase, node, ?reply, "redlock: late reply"),
        None => {}
    }
}

/// How a round's inspect requests reach the nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reads {
    /// [`LeaseBackend::inspect`](lease_core::LeaseBackend::inspect).
    Inspect,
    /// [`LeaseBackend::observe`](lease_core::LeaseBackend::observe).
    Observe,
}

/// One node request as the node's call; a node index the machine made up (impossible: the
/// machine only names nodes it was given) is a protocol error of that request.
async fn call<N: QuorumNode>(
    node: Option<&N>,
    index: usize,
    kind: &NodeRequestKind,
    reads: Reads,
) -> NodeReply {
    let Some(node) = node else {
        let e = BackendError::Protocol(format!("no node {index}"));
        return match kind {
            NodeRequestKind::Acquire(_) => NodeReply::Acquire(Err(e)),
            NodeRequestKind::Raise { .. } => NodeReply::Raise(Err(e)),
            NodeRequestKind::Renew(_) => NodeReply::Renew(Err(e)),
            NodeRequestKind::Release(_) => NodeReply::Release(Err(e)),
            NodeRequestKind::Remaining { .. } => NodeReply::Remaining(Err(e)),
            NodeRequestKind::Inspect { .. } => NodeReply::Inspect(Err(e)),
        };
    };
    match kind {
        NodeRequestKind::Acquire(req) => NodeReply::Acquire(node.acquire(req).await),
        NodeRequestKind::Raise { spec, owner, token } => {
            NodeReply::Raise(node.raise_counter(spec, owner, *token).await)
        }
        NodeRequestKind::Renew(req) => NodeReply::Renew(node.renew(req).await),
        NodeRequestKind::Release(req) => NodeReply::Release(node.release(req).await),
        NodeRequestKind::Remaining { spec, owner } => {
            NodeReply::Remaining(node.remaining(spec, owner).await)
        }
        NodeRequestKind::Inspect { spec } => NodeReply::Inspect(match reads {
            Reads::Inspect => node.inspect(spec).await,
            Reads::Observe => node.observe(spec).await,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_reply_ready_at_the_deadline_counts() {
        let bound = Duration::from_millis(100);
        let deadline = Instant::now() + bound;
        let at_deadline = async move {
            tokio::time::sleep_until(deadline).await;
            7
        };
        assert_eq!(
            tokio::time::timeout_at(deadline, at_deadline).await.ok(),
            Some(7)
        );
        let deadline = Instant::now() + bound;
        let late = async move {
            tokio::time::sleep_until(deadline + Duration::from_millis(1)).await;
            7
        };
        assert_eq!(tokio::time::timeout_at(deadline, late).await.ok(), None);
    }
}
