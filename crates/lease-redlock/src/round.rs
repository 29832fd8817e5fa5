//! The I/O of a quorum round: the round machine's requests sent to every node concurrently,
//! each bounded by the phase's deadline, their replies fed back with the instant.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use lease_core::BackendError;
use lease_core::quorum::{
    NodeReply, NodeRequest, NodeRequestKind, Phase, QuorumOp, Round, Verdict,
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

/// Drives one quorum round: the round machine of `lease-core` ([`Round`]) decides, this does
/// the I/O. Each phase's requests go to their nodes concurrently, each bounded by the phase's
/// deadline (a reply ready when the deadline fires counts; none is [`NodeReply::TimedOut`]);
/// once every reply of the phase is in, they are fed to the machine at one instant read from
/// tokio's monotonic clock (the round's origin is the instant `make` is called at, which is
/// [`lease_core::Instant::ZERO`] for the machine). Returns the verdict.
pub(crate) async fn drive<N: QuorumNode>(
    nodes: &[N],
    make: impl FnOnce(lease_core::Instant) -> Round,
) -> Result<Verdict, BackendError> {
    let origin = Instant::now();
    let now = || lease_core::Instant::from_origin(origin.elapsed());
    let mut round = make(lease_core::Instant::ZERO);
    loop {
        if let Some(verdict) = round.poll_verdict() {
            return Ok(verdict);
        }
        let requests: Vec<NodeRequest> = std::iter::from_fn(|| round.poll_request()).collect();
        let Some(deadline) = requests.first().map(|r| origin + r.deadline.since_origin()) else {
            return Err(BackendError::Protocol(format!(
                "the {} round asked for nothing and decided nothing",
                round.op()
            )));
        };
        let phase = round.phase();
        let calls: Vec<Call<'_, NodeReply>> = requests
            .iter()
            .map(|r| {
                let node = nodes.get(r.node);
                let kind = &r.kind;
                Box::pin(async move {
                    tokio::time::timeout_at(deadline, call(node, r.node, kind))
                        .await
                        .unwrap_or(NodeReply::TimedOut)
                }) as Call<'_, NodeReply>
            })
            .collect();
        let replies = join_all(calls).await;
        let at = now();
        for (request, reply) in requests.iter().zip(replies) {
            trace_reply(round.op(), phase, request, &reply);
            if let Err(e) = round.handle_reply(request.id, reply, at) {
                return Err(BackendError::Protocol(format!("quorum round: {e}")));
            }
        }
        tracing::debug!(
            op = %round.op(),
            %phase,
            requests = requests.len(),
            elapsed = ?at.since_origin(),
            next = %round.phase(),
            "redlock: phase judged"
        );
    }
}

/// Logs a node's failed reply; an unanswered release (or cleanup) is a warning: that node's
/// key expires with its TTL.
fn trace_reply(op: QuorumOp, phase: Phase, request: &NodeRequest, reply: &NodeReply) {
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
    let Some(error) = error else { return };
    if matches!(request.kind, NodeRequestKind::Release(_)) {
        tracing::warn!(%op, %phase, node = request.node, %error, "redlock: release not answered; the key expires with its TTL");
    } else {
        tracing::debug!(%op, %phase, node = request.node, %error, "redlock: node failed");
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
