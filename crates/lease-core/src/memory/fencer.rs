//! The in-memory fencer: fenced writes to a [`MemoryBackend`] under one term's token.

use async_trait::async_trait;

use super::MemoryBackend;
use crate::backend::{BackendError, FenceOutcome, FencedResource, Fencing};
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
