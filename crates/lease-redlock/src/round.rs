//! The I/O of a quorum round: the round machine's requests sent to every node concurrently,
//! each bounded by its deadline, each reply fed back with the instant as it arrives; requests
//! still in flight at the verdict finish in the background.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use lease_core::BackendError;
use lease_core::quorum::{
    NodeReply, NodeRequestId, NodeRequestKind, Phase, QuorumOp, Round, Verdict,
};
use tokio::time::Instant;

use crate::node::QuorumNode;

/// A boxed per-node call.
pub(crate) type Call<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Polls every future concurrently (on the calling task: no spawn, so dropping the round drops
/// every call) and returns their outputs in order.
pub(crate) async fn join_all<T>(calls: Vec<Call<'_, T>>) -> Vec<T> {
    let mut slots: Vec<Option<Call<'_, T>>> = calls.into_iter().map(Some).collect();
    let mut outputs: Vec<Option<T>> = slots.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (slot, out) in slots.iter_mut().zip(outputs.iter_mut()) {
            if let Some(call) = slot {
                match call.as_mut().poll(cx) {
                    Poll::Ready(v) => {
                        *out = Some(v);
                        *slot = None;
                    }
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    // Every slot completed, so every output is set.
    outputs.into_iter().flatten().collect()
}

/// One request in flight: what was asked, and its call (bounded by its deadline).
struct InFlight {
    request: Asked,
    call: Call<'static, NodeReply>,
}

/// What a request in flight asked, for its reply's log line.
struct Asked {
    id: NodeRequestId,
    node: usize,
    phase: Phase,
    release: bool,
}

/// Drives one quorum round: the round machine of `lease-core` ([`Round`]) decides, this does
/// the I/O. Every request the machine asks for goes to its node at once, bounded by its
/// deadline (a reply ready when the deadline fires counts; none is [`NodeReply::TimedOut`]).
/// Each reply is fed to the machine **as it arrives**, with an instant read from tokio's
/// monotonic clock (the round's origin is the instant `make` is called at, which is
/// [`lease_core::Instant::ZERO`] for the machine), so the machine can decide as soon as a
/// quorum is reached or out of reach. Returns the verdict.
///
/// Requests still in flight when the verdict comes keep running on a spawned task until they
/// are answered or reach their deadline: a late reply is logged and otherwise dropped (the
/// machine's rules say why that is safe: a late grant after a granted acquire is ours and the
/// release goes to every node). Each node's requests go over that node's connection in the
/// order the machine asks for them, so a request of a later phase (a cleanup, the next
/// operation's release) is executed by the node after the earlier one.
pub(crate) async fn drive<N: QuorumNode>(
    nodes: &Arc<[N]>,
    make: impl FnOnce(lease_core::Instant) -> Round,
) -> Result<Verdict, BackendError> {
    let origin = Instant::now();
    let now = || lease_core::Instant::from_origin(origin.elapsed());
    let mut round = make(lease_core::Instant::ZERO);
    let op = round.op();
    let mut in_flight: Vec<InFlight> = Vec::new();
    loop {
        if let Some(verdict) = round.poll_verdict() {
            finish_in_background(op, in_flight);
            return Ok(verdict);
        }
        let phase = round.phase();
        while let Some(r) = round.poll_request() {
            let deadline = origin + r.deadline.since_origin();
            let request = Asked {
                id: r.id,
                node: r.node,
                phase,
                release: matches!(r.kind, NodeRequestKind::Release(_)),
            };
            let nodes = Arc::clone(nodes);
            let call = Box::pin(async move {
                tokio::time::timeout_at(deadline, call(nodes.get(r.node), r.node, &r.kind))
                    .await
                    .unwrap_or(NodeReply::TimedOut)
            }) as Call<'static, NodeReply>;
            in_flight.push(InFlight { request, call });
        }
        if in_flight.is_empty() {
            return Err(BackendError::Protocol(format!(
                "the {op} round asked for nothing and decided nothing"
            )));
        }
        let replies = next_replies(&mut in_flight).await;
        let at = now();
        for (request, reply) in replies {
            trace_reply(op, &request, &reply, false);
            if let Err(e) = round.handle_reply(request.id, reply, at) {
                return Err(BackendError::Protocol(format!("quorum round: {e}")));
            }
        }
        if round.phase() != phase {
            tracing::debug!(
                %op,
                %phase,
                elapsed = ?at.since_origin(),
                next = %round.phase(),
                in_flight = in_flight.len(),
                "redlock: phase judged"
            );
        }
    }
}

/// Waits until at least one call is ready; removes and returns every ready one, oldest first
/// (so a node's earlier request is fed before its later one when both are ready).
async fn next_replies(in_flight: &mut Vec<InFlight>) -> Vec<(Asked, NodeReply)> {
    let mut ready: Vec<(usize, NodeReply)> = Vec::new();
    std::future::poll_fn(|cx| {
        for (i, f) in in_flight.iter_mut().enumerate() {
            if let Poll::Ready(reply) = f.call.as_mut().poll(cx) {
                ready.push((i, reply));
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
        out.push((in_flight.remove(i).request, reply));
    }
    out.reverse();
    out
}

/// Lets the requests still in flight after the verdict finish on their own task (each is
/// bounded by its deadline), logging their late replies. Without a runtime to spawn on (the
/// round ran inside one, so this does not happen) they are dropped: a Redis command already
/// written still runs at the server.
fn finish_in_background(op: QuorumOp, in_flight: Vec<InFlight>) {
    if in_flight.is_empty() {
        return;
    }
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    handle.spawn(async move {
        let (requests, calls): (Vec<Asked>, Vec<_>) =
            in_flight.into_iter().map(|f| (f.request, f.call)).unzip();
        for (request, reply) in requests.iter().zip(join_all(calls).await) {
            trace_reply(op, request, &reply, true);
        }
    });
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

/// One node request as the node's call; a node index the machine made up (impossible: the
/// machine only names nodes it was given) is a protocol error of that request.
async fn call<N: QuorumNode>(node: Option<&N>, index: usize, kind: &NodeRequestKind) -> NodeReply {
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
        NodeRequestKind::Inspect { spec } => NodeReply::Inspect(node.inspect(spec).await),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn join_all_keeps_order_and_runs_concurrently() {
        let start = Instant::now();
        let calls: Vec<Call<'_, u32>> = (0..3u32)
            .map(|i| {
                Box::pin(async move {
                    tokio::time::sleep(Duration::from_millis(u64::from(30 - 10 * i))).await;
                    i
                }) as Call<'_, u32>
            })
            .collect();
        assert_eq!(join_all(calls).await, [0, 1, 2]);
        // Concurrent: the longest sleep, not the sum (paused clock: exact).
        assert_eq!(start.elapsed(), Duration::from_millis(30));
    }

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
