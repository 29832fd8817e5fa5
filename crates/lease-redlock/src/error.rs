//! [`QuorumError`]: a quorum round that failed, with the cause on every node.
//!
//! The types live in `lease-core` ([`lease_core::quorum::error`]), next to the round machine
//! that makes them; they are re-exported here unchanged.

pub use lease_core::quorum::error::{NodeCause, NodeFailure, QuorumError, QuorumOp, RoundFailure};
