//! One concurrent round over every node, each call bounded by the same deadline.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use lease_core::BackendError;
use tokio::time::Instant;

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

/// `call` bounded by `deadline`; no reply by then is [`BackendError::Timeout`] of `bound`.
///
/// `tokio::time::timeout_at` polls the call before its timer, so a reply that is ready when the
/// deadline fires counts as the reply.
pub(crate) async fn bounded<T>(
    deadline: Instant,
    bound: Duration,
    call: impl Future<Output = Result<T, BackendError>>,
) -> Result<T, BackendError> {
    match tokio::time::timeout_at(deadline, call).await {
        Ok(r) => r,
        Err(_) => Err(BackendError::Timeout(bound)),
    }
}

/// Runs `f` on every node concurrently, each call bounded by `bound` from now.
pub(crate) async fn on_all<'a, N, T, F, Fut>(
    nodes: &'a [N],
    bound: Duration,
    f: F,
) -> Vec<Result<T, BackendError>>
where
    N: Sync,
    F: Fn(&'a N) -> Fut,
    Fut: Future<Output = Result<T, BackendError>> + Send + 'a,
    T: Send + 'a,
{
    let deadline = Instant::now() + bound;
    let calls: Vec<Call<'a, Result<T, BackendError>>> = nodes
        .iter()
        .map(|n| Box::pin(bounded(deadline, bound, f(n))) as Call<'a, _>)
        .collect();
    join_all(calls).await
}

#[cfg(test)]
mod tests {
    use super::*;

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
            Ok::<_, BackendError>(7)
        };
        assert_eq!(bounded(deadline, bound, at_deadline).await.unwrap(), 7);
        let deadline = Instant::now() + bound;
        let late = async move {
            tokio::time::sleep_until(deadline + Duration::from_millis(1)).await;
            Ok::<_, BackendError>(7)
        };
        assert!(matches!(
            bounded(deadline, bound, late).await,
            Err(BackendError::Timeout(d)) if d == bound
        ));
    }
}
