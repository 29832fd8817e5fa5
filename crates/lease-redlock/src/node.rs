//! The nodes of a quorum: [`QuorumNode`], and [`Node`], which gives any backend that can
//! raise a fence counter ([`RaiseCounter`]) an identity.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lease_core::memory::MemoryBackend;
use lease_core::{
    AcquireOutcome, AcquireRequest, BackendError, LeaseBackend, LeaseInfo, LeaseSpec, Owner,
    ReleaseOutcome, ReleaseRequest, RenewOutcome, RenewRequest, Token,
};
use lease_redis::RedisBackend;

/// A lease store that can run the second round of a fenced quorum acquisition.
///
/// Semantics (those of lease-redis's `raise.lua` and lease-core's in-memory backend): if every
/// lock key of `spec` holds `owner`, set the fence counter to `max(counter, token)` and the
/// applied mark to `max(mark, token)`, and return `true`; otherwise change nothing and return
/// `false`. One atomic step at the store; `spec` must be fenced.
#[async_trait]
pub trait RaiseCounter: LeaseBackend {
    /// Raises the counter and mark to at least `token` where the lease is still `owner`'s.
    async fn raise_counter(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
        token: Token,
    ) -> Result<bool, BackendError>;
}

#[async_trait]
impl<C> RaiseCounter for RedisBackend<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn raise_counter(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
        token: Token,
    ) -> Result<bool, BackendError> {
        RedisBackend::raise_counter(self, spec, owner, token).await
    }
}

#[async_trait]
impl RaiseCounter for MemoryBackend {
    async fn raise_counter(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
        token: Token,
    ) -> Result<bool, BackendError> {
        MemoryBackend::raise_counter(self, spec, owner, token).await
    }
}

#[async_trait]
impl<B: RaiseCounter + ?Sized> RaiseCounter for Arc<B> {
    async fn raise_counter(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
        token: Token,
    ) -> Result<bool, BackendError> {
        (**self).raise_counter(spec, owner, token).await
    }
}

/// One independent primary of a Redlock quorum.
///
/// Its identity ([`QuorumNode::id`], an address) is how [`crate::RedlockBackend::new`] refuses
/// the same node twice and how errors name it. Use [`Node`] to give a backend an identity.
pub trait QuorumNode: RaiseCounter {
    /// The node's identity for duplicate detection and error reports: its address
    /// (`host:port`).
    fn id(&self) -> &str;
}

/// A backend with an identity: the usual [`QuorumNode`].
///
/// ```
/// use lease_core::memory::{ManualClock, MemoryBackend};
/// use lease_redlock::{Node, QuorumNode};
/// let node = Node::new("memory-a", MemoryBackend::new(ManualClock::new()));
/// assert_eq!(node.id(), "memory-a");
/// ```
#[derive(Clone, Debug)]
pub struct Node<B> {
    id: String,
    backend: B,
}

/// A Redis primary as a quorum node.
pub type RedisNode<C> = Node<RedisBackend<C>>;

impl<B> Node<B> {
    /// `backend`, known as `id` (its address: two nodes with the same id are refused).
    pub fn new(id: impl Into<String>, backend: B) -> Self {
        Node {
            id: id.into(),
            backend,
        }
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The backend, consuming the node.
    pub fn into_backend(self) -> B {
        self.backend
    }
}

impl<C> RedisNode<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// This node minting tokens by `scheme` (default [`lease_core::TokenScheme::ClockFloored`]:
    /// a node that restarts without its counter still mints above what it minted before, see
    /// [`RedisBackend::with_token_scheme`]).
    pub fn with_token_scheme(self, scheme: lease_core::TokenScheme) -> Self {
        Node {
            id: self.id,
            backend: self.backend.with_token_scheme(scheme),
        }
    }
}

/// The address of a client, as a node identity: `host:port` (or the socket path).
///
/// Two clients of the same server through different host names (or a proxy) are not detected
/// as duplicates: the node list is the caller's responsibility too.
pub fn client_address(client: &redis::Client) -> String {
    client.get_connection_info().addr().to_string()
}

impl RedisNode<lease_redis::HealingConnection> {
    /// Connects to one Redis primary with a [`lease_redis::HealingConnection`] (which
    /// reconnects after the server restarts, and also when the node goes silent: a request
    /// abandoned unanswered and no reply for a second, so a blackholed node that comes back
    /// is usable again at once, not after TCP's retransmission backoff), identified by the
    /// client's address.
    ///
    /// The connection has no response timeout of its own: every call is bounded by the
    /// quorum's operation timeout. Build the connection yourself and use [`Node::new`] for
    /// other settings.
    ///
    /// The node's backend has its own release-notice subscriber ([`lease_redis::ReleaseNotices`],
    /// opened when a waiter first needs it), so a [`crate::RedlockBackend`] over such nodes
    /// wakes its followers and waiters on a release (see [`crate::notify`]).
    pub async fn connect(client: redis::Client) -> Result<Self, redis::RedisError> {
        let id = client_address(&client);
        let conn = lease_redis::HealingConnection::connect(client.clone()).await?;
        let notices = lease_redis::ReleaseNotices::new(client);
        Ok(Node::new(
            id,
            RedisBackend::new(conn).with_release_notices(notices),
        ))
    }
}

impl RedisNode<redis::aio::MultiplexedConnection> {
    /// A node over a multiplexed connection (which does not reconnect: after the server
    /// restarts, every call fails until a new node is made), identified by the client's
    /// address; no response timeout of its own (the quorum bounds every call).
    pub async fn connect_multiplexed(client: redis::Client) -> Result<Self, redis::RedisError> {
        let id = client_address(&client);
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(None);
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        Ok(Node::new(id, RedisBackend::new(conn)))
    }
}

#[async_trait]
impl<B: LeaseBackend> LeaseBackend for Node<B> {
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        self.backend.acquire(req).await
    }
    async fn renew(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.backend.renew(req).await
    }
    async fn release(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.backend.release(req).await
    }
    async fn remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.backend.remaining(spec, owner).await
    }
    async fn inspect(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        self.backend.inspect(spec).await
    }
    async fn observe(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        self.backend.observe(spec).await
    }
    fn check_spec(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.backend.check_spec(spec)
    }
    fn release_watch(
        &self,
        spec: &LeaseSpec,
        role: lease_core::notify::WatchRole,
    ) -> Option<lease_core::notify::ReleaseWatch> {
        self.backend.release_watch(spec, role)
    }
    async fn preflight(&self) -> Result<lease_core::preflight::StoreReport, BackendError> {
        self.backend.preflight().await
    }
}

#[async_trait]
impl<B: RaiseCounter> RaiseCounter for Node<B> {
    async fn raise_counter(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
        token: Token,
    ) -> Result<bool, BackendError> {
        self.backend.raise_counter(spec, owner, token).await
    }
}

impl<B: RaiseCounter> QuorumNode for Node<B> {
    fn id(&self) -> &str {
        &self.id
    }
}

impl<N: QuorumNode + ?Sized> QuorumNode for Arc<N> {
    fn id(&self) -> &str {
        (**self).id()
    }
}
