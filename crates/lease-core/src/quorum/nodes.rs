//! The node set: [`Quorum`], a validated set of node addresses and a drift factor, and the
//! maker of [`Round`]s (one per backend operation).

use std::sync::Arc;
use std::time::Duration;

use super::round::{AcquireRound, Cleanup, Round, Stage};
use super::wire::NodeRequestKind;
use super::{validate_drift, validate_nodes};
use crate::backend::{AcquireRequest, LeaseSpec, Owner, ReleaseRequest, RenewRequest};
use crate::config::ConfigError;
use crate::time::Instant;

/// A validated node set and drift factor: the maker of [`Round`]s.
///
/// Cheap to clone (the addresses are shared).
#[derive(Clone, Debug, PartialEq)]
pub struct Quorum {
    addresses: Arc<[String]>,
    quorum: usize,
    drift_factor: f64,
}

impl Quorum {
    /// A quorum over nodes known by `addresses` (an odd number, at least 3, no address twice;
    /// node `i` of every request is `addresses[i]`), with a drift factor in `[0, 0.5)`.
    ///
    /// ```
    /// use lease_core::ConfigError;
    /// use lease_core::quorum::{Quorum, QuorumConfigError};
    /// assert_eq!(Quorum::new(&["a", "b", "c"], 0.01)?.quorum(), 2);
    /// assert_eq!(
    ///     Quorum::new(&["a", "b"], 0.01),
    ///     Err(ConfigError::Quorum(QuorumConfigError::TooFew(2)))
    /// );
    /// assert_eq!(Quorum::new(&["a", "b", "c"], 0.5), Err(ConfigError::DriftFactor(0.5)));
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn new<S: AsRef<str>>(addresses: &[S], drift_factor: f64) -> Result<Self, ConfigError> {
        let quorum = validate_nodes(addresses)?;
        let drift_factor = validate_drift(drift_factor)?;
        Ok(Quorum {
            addresses: addresses.iter().map(|a| a.as_ref().to_owned()).collect(),
            quorum,
            drift_factor,
        })
    }

    /// The number of nodes.
    pub fn nodes(&self) -> usize {
        self.addresses.len()
    }

    /// The quorum: `nodes / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// The drift factor.
    pub fn drift_factor(&self) -> f64 {
        self.drift_factor
    }

    /// The address of node `index`, if there is one.
    pub fn address(&self, index: usize) -> Option<&str> {
        self.addresses.get(index).map(String::as_str)
    }

    /// An acquire round for `req` started at `now`, each phase's requests bounded by `bound`
    /// from the phase's start.
    pub fn acquire(&self, req: AcquireRequest, bound: Duration, now: Instant) -> Round {
        let fenced = req.spec.fence_key().is_some();
        let ttl = req.ttl.get();
        let kinds = self.every(|| NodeRequestKind::Acquire(req.clone()));
        let cleanup = Cleanup {
            spec: Arc::clone(&req.spec),
            owner: req.owner.clone(),
        };
        let acquire = AcquireRound {
            fenced,
            ttl,
            cleanup,
            held: Vec::new(),
            acquire_elapsed: Duration::ZERO,
        };
        Round::new(self, Stage::Acquire(acquire), kinds, bound, now)
    }

    /// A renew round for `req` started at `now`.
    pub fn renew(&self, req: RenewRequest, bound: Duration, now: Instant) -> Round {
        let ttl = req.ttl.get();
        let kinds = self.every(|| NodeRequestKind::Renew(req.clone()));
        let cleanup = Cleanup {
            spec: Arc::clone(&req.spec),
            owner: req.owner.clone(),
        };
        Round::new(self, Stage::Renew { ttl, cleanup }, kinds, bound, now)
    }

    /// A release round for `req` started at `now`; `req.term_token` is ignored (the nodes' counters
    /// differ, so a term cannot be checked per node).
    pub fn release(&self, req: ReleaseRequest, bound: Duration, now: Instant) -> Round {
        let req = ReleaseRequest {
            term_token: None,
            ..req
        };
        let kinds = self.every(|| NodeRequestKind::Release(req.clone()));
        Round::new(self, Stage::Release, kinds, bound, now)
    }

    /// A round asking every node how long `owner` still holds `spec`, started at `now`.
    pub fn remaining(
        &self,
        spec: Arc<LeaseSpec>,
        owner: Owner,
        bound: Duration,
        now: Instant,
    ) -> Round {
        let kinds = self.every(|| NodeRequestKind::Remaining {
            spec: Arc::clone(&spec),
            owner: owner.clone(),
        });
        Round::new(self, Stage::Remaining, kinds, bound, now)
    }

    /// A round inspecting `spec` on every node, started at `now`.
    pub fn inspect(&self, spec: Arc<LeaseSpec>, bound: Duration, now: Instant) -> Round {
        let kinds = self.every(|| NodeRequestKind::Inspect {
            spec: Arc::clone(&spec),
        });
        Round::new(self, Stage::Inspect, kinds, bound, now)
    }

    /// One request per node.
    pub(super) fn every(
        &self,
        mut kind: impl FnMut() -> NodeRequestKind,
    ) -> Vec<(usize, NodeRequestKind)> {
        (0..self.nodes()).map(|i| (i, kind())).collect()
    }
}
