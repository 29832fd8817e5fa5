//! Redlock quorum math.
//!
//! - `quorum(n) = n/2 + 1`, for an odd `n >= 3` of independent primaries;
//! - validity of an acquisition: `ttl − elapsed − (ceil(ttl × drift) + 2 ms)`, accepted only if
//!   positive;
//! - the fenced-quorum token rule: the token of an acquisition is the **maximum** of the tokens
//!   minted by the nodes of its quorum. Any two successful acquisitions share at least one node
//!   (two majorities intersect); on that node the later acquisition's INCR happens after the
//!   earlier one's counter was raised to the earlier token (the raise round is part of success),
//!   so the later token is strictly greater. Assumption: no node loses its counter.
//!
//! The rules of a whole round live in this folder, one concern per file:
//!
//! | file | concern |
//! |---|---|
//! | `mod.rs` | the math above and the node-set checks ([`QuorumConfigError`]) |
//! | `nodes.rs` | the node set, [`Quorum`]: the maker of [`Round`]s |
//! | `wire.rs` | what a round and its driver exchange: [`NodeRequest`], [`NodeReply`], [`Verdict`] |
//! | `turn.rs` | the order of late requests on a node: [`TurnKey`], [`TurnLine`] |
//! | [`round`] | the round machine and its contract (poll, handle, early verdict, late replies) |
//! | `judge.rs` | one judge per phase over its replies; the error of a failed round |
//! | [`error`] | [`QuorumError`]: a failed round with every node's cause |

use std::time::Duration;

pub mod error;
mod judge;
mod nodes;
pub mod round;
mod turn;
mod wire;

pub use error::{NodeCause, NodeFailure, QuorumError, QuorumOp, RoundFailure};
pub use nodes::Quorum;
pub use round::{Phase, Round};
pub use turn::{TurnKey, TurnLine};
pub use wire::{NodeReply, NodeRequest, NodeRequestId, NodeRequestKind, RoundInputError, Verdict};

use crate::token::Token;

/// The fixed part of the drift allowance.
pub const DRIFT_FLOOR: Duration = Duration::from_millis(2);

/// An invalid node set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuorumConfigError {
    /// Fewer than three nodes.
    #[error("redlock needs at least 3 independent nodes, got {0}")]
    TooFew(usize),
    /// An even number of nodes.
    #[error("redlock needs an odd number of nodes, got {0}")]
    Even(usize),
    /// The same node twice.
    #[error("node {0:?} appears twice")]
    Duplicate(String),
}

/// The majority of `n`: `n/2 + 1`.
///
/// ```
/// assert_eq!(lease_core::quorum::quorum(3), 2);
/// assert_eq!(lease_core::quorum::quorum(5), 3);
/// ```
pub const fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// Validates a node set given by unique identities (addresses); returns the quorum.
pub fn validate_nodes<S: AsRef<str>>(nodes: &[S]) -> Result<usize, QuorumConfigError> {
    let n = nodes.len();
    if n < 3 {
        return Err(QuorumConfigError::TooFew(n));
    }
    if n.is_multiple_of(2) {
        return Err(QuorumConfigError::Even(n));
    }
    for (i, a) in nodes.iter().enumerate() {
        if nodes[..i].iter().any(|b| b.as_ref() == a.as_ref()) {
            return Err(QuorumConfigError::Duplicate(a.as_ref().to_owned()));
        }
    }
    Ok(quorum(n))
}

/// Validates a drift factor: finite, in `[0, 0.5)`.
pub fn validate_drift(factor: f64) -> Result<f64, crate::ConfigError> {
    if factor.is_finite() && (0.0..0.5).contains(&factor) {
        Ok(factor)
    } else {
        Err(crate::ConfigError::DriftFactor(factor))
    }
}

/// The drift allowance: `ceil(ttl_ms × factor)` ms + 2 ms.
pub fn drift(ttl: Duration, factor: f64) -> Duration {
    // Through u64 (a TTL's milliseconds fit): u128 to f64 is a library call, u64 to f64 one
    // instruction.
    let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX) as f64 * factor.max(0.0);
    let ceil = ms.ceil();
    let ceil = if ceil.is_finite() && ceil < u64::MAX as f64 {
        ceil as u64
    } else {
        u64::MAX
    };
    Duration::from_millis(ceil).saturating_add(DRIFT_FLOOR)
}

/// The validity left after an acquisition that took `elapsed`: `ttl − elapsed − drift`, or
/// `None` when not positive.
///
/// ```
/// use std::time::Duration;
/// use lease_core::quorum::validity;
/// let ttl = Duration::from_millis(1000);
/// assert_eq!(validity(ttl, Duration::from_millis(100), 0.01), Some(Duration::from_millis(888)));
/// assert_eq!(validity(ttl, Duration::from_millis(988), 0.01), None);
/// ```
pub fn validity(ttl: Duration, elapsed: Duration, factor: f64) -> Option<Duration> {
    let v = ttl.checked_sub(elapsed)?.checked_sub(drift(ttl, factor))?;
    (!v.is_zero()).then_some(v)
}

/// The outcome of a quorum round: success needs `successes >= quorum` and positive validity.
pub fn round_succeeds(successes: usize, n: usize, validity: Option<Duration>) -> bool {
    successes >= quorum(n) && validity.is_some()
}

/// The fenced-quorum token: the maximum of the tokens minted by the quorum's nodes.
pub fn fenced_quorum_token<I: IntoIterator<Item = Token>>(tokens: I) -> Option<Token> {
    tokens.into_iter().max()
}
