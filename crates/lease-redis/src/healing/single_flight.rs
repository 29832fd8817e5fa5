//! [`SingleFlight`]: one connection attempt at a time, owned by the connection.

use std::sync::Mutex;

use redis::{RedisError, RedisResult};

/// One connection attempt at a time, shared by every caller that needs it, and owned by the
/// connection rather than by a call: the attempt runs as a task, so a caller dropped at its
/// deadline (shorter than a slow dial) does not cancel it, and callers arriving meanwhile wait
/// for the same attempt instead of starting (or queueing) their own. At most one task per
/// connection exists.
pub(crate) struct SingleFlight<T> {
    current: Mutex<Option<tokio::sync::watch::Receiver<Option<RedisResult<T>>>>>,
}

impl<T> Default for SingleFlight<T> {
    fn default() -> Self {
        SingleFlight {
            current: Mutex::new(None),
        }
    }
}

impl<T: Clone + Send + Sync + 'static> SingleFlight<T> {
    /// Joins the attempt in flight, or starts `start()` as one; its result.
    pub(crate) async fn run<F, Fut>(&self, start: F) -> RedisResult<T>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = RedisResult<T>> + Send + 'static,
    {
        let mut rx = {
            let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
            match &*current {
                Some(rx) if rx.borrow().is_none() => rx.clone(),
                _ => {
                    let (tx, rx) = tokio::sync::watch::channel(None);
                    let attempt = start();
                    tokio::spawn(async move {
                        let _ = tx.send(Some(attempt.await));
                    });
                    *current = Some(rx.clone());
                    rx
                }
            }
        };
        let outcome = rx.wait_for(Option::is_some).await.map(|done| done.clone());
        match outcome {
            Ok(Some(result)) => result,
            // The task ended without a result (the runtime is shutting down).
            _ => Err(RedisError::from(std::io::Error::other(
                "the connection attempt was abandoned",
            ))),
        }
    }
}
