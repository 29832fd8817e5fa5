//! Observer hooks: election and lock transitions for logs and metrics.

use lease_core::election::Op;
use lease_core::{BackendError, LossReason, StepDownReason, StoreLoss, Token};

/// Hooks called on election transitions.
///
/// Hooks run on a dedicated task, in order, never on the election loop: a slow hook cannot
/// delay a renewal. Every method has an empty default; implement the ones you need. The same
/// transitions are also emitted as `tracing` events.
///
/// ```
/// use lease_tokio::Observer;
/// use lease_tokio::lease_core::Token;
/// struct Log;
/// impl Observer for Log {
///     fn on_elected(&self, token: Token) {
///         // e.g. metrics::counter!("elected").increment(1)
///         let _ = token;
///     }
/// }
/// ```
pub trait Observer: Send + Sync + 'static {
    /// This instance was elected with `token`.
    fn on_elected(&self, token: Token) {
        let _ = token;
    }
    /// The term with `token` ended.
    fn on_stepped_down(&self, token: Token, reason: StepDownReason) {
        let _ = (token, reason);
    }
    /// This instance became a follower (once per transition); `holder` is the leader's id when
    /// known.
    fn on_follower(&self, holder: Option<&str>) {
        let _ = holder;
    }
    /// A failure the election handled (retried, backed off, stepped down from). Never requires
    /// action; it shows trouble before it costs leadership.
    fn on_error(&self, op: Op, error: &BackendError) {
        let _ = (op, error);
    }
    /// The store refused `op` with a permanent error: the election stops (its run returns
    /// [`crate::ElectorError::Refused`] with the same error).
    fn on_refused(&self, op: Op, error: &BackendError) {
        let _ = (op, error);
    }
    /// The leader work of term `token` panicked with `message`. The term ended (its lease is
    /// released) and the elector re-contends; see [`crate::Elector::run`].
    fn on_leader_panic(&self, token: Token, message: &str) {
        let _ = (token, message);
    }
    /// The store lost fence state this instance had seen: a new fence epoch (restart without
    /// persistence, flush, eviction) or a counter below a token seen before (failover to a
    /// lagging replica). The election goes on; its next acquire mints above the highest token
    /// this instance has seen. Alert on it: fenced resources may refuse a term whose token was
    /// minted by a store in that state elsewhere.
    fn on_store_lost(&self, loss: &StoreLoss) {
        let _ = loss;
    }
}

/// An observer that does nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoopObserver;

impl Observer for NoopObserver {}

/// Hooks called on lock transitions: obtained, a renewal failed, lost.
///
/// Set with [`crate::Locker::with_observer`]; every lock that locker obtains reports to it.
/// Hooks run inline, on the task that saw the transition (the obtaining task, or the lock's
/// background task), so keep them short and non-blocking (count, log, send on a channel). Every
/// method has an empty default. The same transitions are also `tracing` events inside the
/// lock's span (`lock`, with its keys and fencing token).
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use lease_tokio::LockObserver;
/// use lease_tokio::lease_core::LossReason;
/// #[derive(Default)]
/// struct Lost(AtomicU64);
/// impl LockObserver for Lost {
///     fn on_lost(&self, keys: &[String], reason: LossReason) {
///         let _ = (keys, reason);
///         self.0.fetch_add(1, Ordering::Relaxed);
///     }
/// }
/// ```
pub trait LockObserver: Send + Sync + 'static {
    /// A lock on `keys` was obtained, with `fence_token` when fenced.
    fn on_obtained(&self, keys: &[String], fence_token: Option<Token>) {
        let _ = (keys, fence_token);
    }
    /// An auto-renewal of the lock on `keys` failed (tolerated until the deadline when
    /// transient; a permanent one is followed by [`LockObserver::on_lost`]).
    fn on_renew_failed(&self, keys: &[String], error: &BackendError) {
        let _ = (keys, error);
    }
    /// The lock on `keys` is lost (not released: a release is the owner's own act), or its
    /// hold reached its cap ([`LockOptions::max_hold`](crate::LockOptions::max_hold)):
    /// `reason` is then [`LossReason::MaxHoldReached`], which is no loss to anyone.
    fn on_lost(&self, keys: &[String], reason: LossReason) {
        let _ = (keys, reason);
    }
}
