//! The in-memory fencer: fenced writes to a [`MemoryBackend`] under one term's token.

use async_trait::async_trait;

use super::MemoryBackend;
use crate::backend::{BackendError, FenceOutcome, FencedResource, Fencing, LeaseSpec, Owner};
use crate::semaphore::{PermitFencing, PermitWriteOutcome, permit_mark_key, permits_key};
use crate::token::Token;

/// A write the in-memory fencer understands.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemoryWrite {
    /// `SET key value`.
    Set {
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// `HSET key field value`.
    HSet {
        /// The key.
        key: String,
        /// The field.
        field: String,
        /// The value.
        value: String,
    },
    /// `DEL keys...`.
    Del {
        /// The keys.
        keys: Vec<String>,
    },
}

/// Fenced writes to a [`MemoryBackend`] under one term's token.
#[derive(Clone, Debug)]
pub struct MemoryFencer {
    backend: MemoryBackend,
    mark_key: String,
    token: Token,
}

impl MemoryFencer {
    /// A fencer for `token` against the mark at `mark_key`.
    pub fn new(backend: MemoryBackend, mark_key: impl Into<String>, token: Token) -> Self {
        MemoryFencer {
            backend,
            mark_key: mark_key.into(),
            token,
        }
    }
    /// The token this fencer writes under.
    pub fn token(&self) -> Token {
        self.token
    }
    /// Applies several writes under one check (all-or-nothing).
    pub async fn apply_all(&self, writes: Vec<MemoryWrite>) -> Result<FenceOutcome, BackendError> {
        let (mark, token) = (self.mark_key.clone(), self.token);
        self.backend
            .delayed(move |s, now| s.fenced(&mark, token, &writes, now))
            .await
    }
}

#[async_trait]
impl FencedResource for MemoryFencer {
    type Write = MemoryWrite;
    type Error = BackendError;
    async fn apply(&self, token: Token, write: MemoryWrite) -> Result<FenceOutcome, BackendError> {
        let mark = self.mark_key.clone();
        self.backend
            .delayed(move |s, now| s.fenced(&mark, token, &[write], now))
            .await
    }
}

impl Fencing for MemoryBackend {
    type Fencer = MemoryFencer;
    fn fencer(&self, mark_key: &str, token: Token) -> MemoryFencer {
        MemoryFencer::new(self.clone(), mark_key, token)
    }
}

/// Permit-fenced writes to a [`MemoryBackend`]: each is applied only while the owner's permit
/// is current and the token is not below the owner's mark (the rule is stated in
/// [`crate::semaphore`], "Fenced writes").
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use lease_core::memory::{ManualClock, MemoryBackend, MemoryWrite};
/// use lease_core::semaphore::{PermitCount, PermitFencing, PermitRequest, semaphore_spec};
/// use lease_core::{AcquireOutcome, AcquireRequest, LeaseBackend, Owner, Ttl};
///
/// let clock = ManualClock::new();
/// let memory = MemoryBackend::new(clock.clone());
/// let spec = Arc::new(semaphore_spec("{jobs}", None)?);
/// let owner = Owner::new("a").unwrap();
/// let ttl = Ttl::new(Duration::from_secs(10))?;
/// let req = PermitRequest::new(AcquireRequest::new(Arc::clone(&spec), owner.clone(), ttl),
///     PermitCount::new(2)?);
/// # let acquired = poll(memory.acquire_permit(&req))?;
/// let AcquireOutcome::Acquired { token: Some(token), .. } = acquired else { panic!() };
/// let fencer = memory.permit_fencer(&spec, &owner, token).unwrap();
/// let write = || MemoryWrite::Set { key: "{jobs}:out".into(), value: "x".into() };
/// assert!(poll(fencer.apply(write()))?.is_applied());
/// clock.advance(Duration::from_secs(11)); // the permit expired: refused, whatever the token
/// assert!(!poll(fencer.apply(write()))?.is_applied());
/// # fn poll<F: std::future::Future>(f: F) -> F::Output {
/// #     let waker = std::task::Waker::noop();
/// #     let mut cx = std::task::Context::from_waker(&waker);
/// #     let mut f = std::pin::pin!(f);
/// #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
/// # }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct MemoryPermitFencer {
    backend: MemoryBackend,
    permits_key: String,
    owner: String,
    mark_key: String,
    token: Token,
}

impl MemoryPermitFencer {
    /// The token this fencer writes under.
    pub fn token(&self) -> Token {
        self.token
    }

    /// The owner's mark key.
    pub fn mark_key(&self) -> &str {
        &self.mark_key
    }

    /// The same fencer under another token (same permit).
    pub fn with_token(&self, token: Token) -> MemoryPermitFencer {
        MemoryPermitFencer {
            token,
            ..self.clone()
        }
    }

    /// Applies one write iff the permit is current and the token passes the owner's mark.
    pub async fn apply(&self, write: MemoryWrite) -> Result<PermitWriteOutcome, BackendError> {
        self.apply_all(vec![write]).await
    }

    /// Applies several writes under one check (all-or-nothing).
    pub async fn apply_all(
        &self,
        writes: Vec<MemoryWrite>,
    ) -> Result<PermitWriteOutcome, BackendError> {
        let me = self.clone();
        self.backend
            .delayed(move |s, now| {
                s.permit_fenced(
                    &me.permits_key,
                    &me.owner,
                    &me.mark_key,
                    me.token,
                    &writes,
                    now,
                )
            })
            .await
    }
}

impl PermitFencing for MemoryBackend {
    type PermitFencer = MemoryPermitFencer;
    fn permit_fencer(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
        token: Token,
    ) -> Option<MemoryPermitFencer> {
        Some(MemoryPermitFencer {
            backend: self.clone(),
            permits_key: permits_key(spec).ok()?.to_owned(),
            owner: owner.as_str().to_owned(),
            mark_key: permit_mark_key(spec, owner)?,
            token,
        })
    }
}
