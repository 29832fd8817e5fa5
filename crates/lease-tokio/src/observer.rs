//! Observer hooks: election transitions for logs and metrics.

use lease_core::election::Op;
use lease_core::{BackendError, StepDownReason, Token};

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
}

/// An observer that does nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoopObserver;

impl Observer for NoopObserver {}
