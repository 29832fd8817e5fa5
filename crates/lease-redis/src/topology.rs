//! The server topology and the mark-key rule it implies, shared by [`RedisBackend`] and
//! [`RedisFencer`].
//!
//! [`RedisBackend`]: crate::RedisBackend
//! [`RedisFencer`]: crate::RedisFencer

use crate::slot::{self, SlotError};

/// Whether the server is a Redis Cluster, which decides whether hash-slot checks apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Topology {
    /// A single server (or a primary with replicas): no slot checks.
    Standalone,
    /// A Redis Cluster: every script's keys must share a hash slot, checked locally before any
    /// round trip (see [`crate::slot`]).
    Cluster,
}

/// On Redis Cluster a mark key must carry a hash tag (so target keys can share its slot).
pub(crate) fn check_mark_key(mark_key: &str, topology: Topology) -> Result<(), SlotError> {
    if topology == Topology::Cluster && slot::hash_tag(mark_key.as_bytes()).is_none() {
        return Err(SlotError::NoHashTag {
            key: mark_key.to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mark_key_checks() {
        assert!(check_mark_key("{j}:fence:applied", Topology::Cluster).is_ok());
        assert!(check_mark_key("j:fence:applied", Topology::Cluster).is_err());
        assert!(check_mark_key("j:fence:applied", Topology::Standalone).is_ok());
    }
}
