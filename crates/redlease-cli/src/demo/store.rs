//! The stores the story runs on: the in-memory store or Redis, with fenced writes and reads.

use std::future::Future;

use redlease::core::LeaseSpec;
use redlease::memory::{MemoryBackend, MemoryWrite};
use redlease::redis::RedisBackend;
use redlease::redis::client::aio::MultiplexedConnection;
use redlease::{FenceOutcome, FencedResource, Fencing, LeaseBackend, Token};

use super::model::report_key;
use crate::conn;

/// The store the story runs on: its lease backend and fenced writes.
pub(super) trait Store: Send + Sync + 'static {
    type Backend: LeaseBackend + Clone;
    fn backend(&self) -> Self::Backend;
    /// A fenced `SET key value` under `token` against the mark at `mark_key`.
    fn fenced_set(
        &self,
        mark_key: &str,
        token: Token,
        key: &str,
        value: &str,
    ) -> impl Future<Output = Result<FenceOutcome, String>> + Send + 'static;
    /// `GET key`.
    fn get(&self, key: &str) -> impl Future<Output = Result<Option<String>, String>> + Send;
}

pub(super) struct MemoryStore {
    pub(super) backend: MemoryBackend,
}

impl Store for MemoryStore {
    type Backend = MemoryBackend;
    fn backend(&self) -> MemoryBackend {
        self.backend.clone()
    }
    fn fenced_set(
        &self,
        mark_key: &str,
        token: Token,
        key: &str,
        value: &str,
    ) -> impl Future<Output = Result<FenceOutcome, String>> + Send + 'static {
        let fencer = self.backend.fencer(mark_key, token);
        let write = MemoryWrite::Set {
            key: key.to_owned(),
            value: value.to_owned(),
        };
        async move { fencer.apply(token, write).await.map_err(|e| e.to_string()) }
    }
    fn get(&self, key: &str) -> impl Future<Output = Result<Option<String>, String>> + Send {
        let v = self.backend.get(key);
        async move { Ok(v) }
    }
}

pub(super) struct RedisStore {
    pub(super) backend: RedisBackend<MultiplexedConnection>,
}

impl RedisStore {
    pub(super) async fn cleanup(&self, name: &str) {
        let mut conn = self.backend.connection().clone();
        let spec = LeaseSpec::election(name);
        let mut cmd = redlease::redis::client::cmd("DEL");
        for k in spec.keys() {
            cmd.arg(k);
        }
        cmd.arg(format!("{name}:fence"))
            .arg(LeaseSpec::election_mark_key(name))
            .arg(format!("{name}:fence:epoch"))
            .arg(report_key(name));
        let _ = tokio::time::timeout(conn::OP_TIMEOUT, cmd.query_async::<i64>(&mut conn)).await;
    }
}

impl Store for RedisStore {
    type Backend = RedisBackend<MultiplexedConnection>;
    fn backend(&self) -> Self::Backend {
        self.backend.clone()
    }
    fn fenced_set(
        &self,
        mark_key: &str,
        token: Token,
        key: &str,
        value: &str,
    ) -> impl Future<Output = Result<FenceOutcome, String>> + Send + 'static {
        let fencer = self.backend.fencer(mark_key, token);
        let (key, value) = (key.to_owned(), value.to_owned());
        async move { fencer.set(key, value).await.map_err(|e| e.to_string()) }
    }
    fn get(&self, key: &str) -> impl Future<Output = Result<Option<String>, String>> + Send {
        let mut conn = self.backend.connection().clone();
        let key = key.to_owned();
        async move {
            redlease::redis::client::cmd("GET")
                .arg(key)
                .query_async::<Option<String>>(&mut conn)
                .await
                .map_err(|e| e.to_string())
        }
    }
}
