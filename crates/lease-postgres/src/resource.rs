//! Postgres as a [`FencedResource`]: statements run in one transaction after the fence.

use std::fmt;
use std::future::Future;
use std::ops::DerefMut;
use std::sync::Arc;

use async_trait::async_trait;
use lease_core::{FenceMark, FenceOutcome, FencedResource, Token};
use tokio_postgres::Client;
use tokio_postgres::types::ToSql;

use super::error::PgFenceError;
use super::marks::{BeginOutcome, MarkTable, check_name};

/// Where a [`PgFence`] gets a connection for each write.
///
/// Implemented for `tokio::sync::Mutex<Client>` (one connection, writes serialised) and for
/// `Arc<S>`. For a pool, implement it with the pool's checkout: the connection must
/// dereference mutably to a [`Client`] (bb8-postgres' `PooledConnection` does; wrap
/// deadpool's `Object`, whose `ClientWrapper` dereferences to `Client`), and map the pool's
/// error into [`PgFenceError::Connection`]. A hand-rolled round-robin "pool":
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use lease_postgres::{ClientSource, PgFenceError};
/// use tokio::sync::{Mutex, MutexGuard};
/// use tokio_postgres::Client;
///
/// struct RoundRobin {
///     clients: Vec<Mutex<Client>>,
///     next: AtomicUsize,
/// }
///
/// impl ClientSource for RoundRobin {
///     type Conn<'a> = MutexGuard<'a, Client>;
///
///     async fn connection(&self) -> Result<Self::Conn<'_>, PgFenceError> {
///         let i = self.next.fetch_add(1, Ordering::Relaxed);
///         let client = self
///             .clients
///             .get(i % self.clients.len().max(1))
///             .ok_or_else(|| PgFenceError::Connection("the pool is empty".into()))?;
///         Ok(client.lock().await)
///     }
/// }
/// ```
pub trait ClientSource: Send + Sync {
    /// A checked-out connection, exclusively ours while held.
    type Conn<'a>: DerefMut<Target = Client> + Send
    where
        Self: 'a;

    /// Checks out a connection.
    fn connection(&self) -> impl Future<Output = Result<Self::Conn<'_>, PgFenceError>> + Send;
}

impl ClientSource for tokio::sync::Mutex<Client> {
    type Conn<'a> = tokio::sync::MutexGuard<'a, Client>;

    async fn connection(&self) -> Result<Self::Conn<'_>, PgFenceError> {
        Ok(self.lock().await)
    }
}

impl<S: ClientSource> ClientSource for Arc<S> {
    type Conn<'a>
        = S::Conn<'a>
    where
        Self: 'a;

    fn connection(&self) -> impl Future<Output = Result<Self::Conn<'_>, PgFenceError>> + Send {
        (**self).connection()
    }
}

/// An owned bound parameter of a [`PgWrite`] statement.
pub type OwnedParam = Box<dyn ToSql + Send + Sync>;

/// A write for [`PgFence`]: SQL statements with bound parameters, run in order in one
/// transaction after the fence. All or nothing: a failing statement rolls back the others.
///
/// ```
/// use lease_postgres::PgWrite;
/// let write = PgWrite::new()
///     .statement(
///         "UPDATE reports SET state = $1 WHERE id = $2",
///         vec![Box::new("done".to_owned()), Box::new(7i64)],
///     )
///     .statement("INSERT INTO audit (msg) VALUES ($1)", vec![Box::new("report 7 done")]);
/// assert_eq!(write.len(), 2);
/// ```
#[derive(Default, Debug)]
pub struct PgWrite {
    statements: Vec<PgStatement>,
}

/// One statement of a [`PgWrite`].
pub struct PgStatement {
    sql: String,
    params: Vec<OwnedParam>,
}

impl PgStatement {
    /// The SQL text.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// The bound parameters (`$1`, `$2`, ...).
    pub fn params(&self) -> &[OwnedParam] {
        &self.params
    }
}

impl fmt::Debug for PgStatement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStatement")
            .field("sql", &self.sql)
            .field("params", &self.params.len())
            .finish()
    }
}

impl PgWrite {
    /// An empty write (it still fences: applying it raises the mark).
    pub fn new() -> PgWrite {
        PgWrite::default()
    }

    /// Appends a statement (`$1`, `$2`, ... bind `params`).
    pub fn statement(mut self, sql: impl Into<String>, params: Vec<OwnedParam>) -> PgWrite {
        self.push(sql, params);
        self
    }

    /// Appends a statement in place.
    pub fn push(&mut self, sql: impl Into<String>, params: Vec<OwnedParam>) {
        self.statements.push(PgStatement {
            sql: sql.into(),
            params,
        });
    }

    /// The statements, in order.
    pub fn statements(&self) -> &[PgStatement] {
        &self.statements
    }

    /// The number of statements.
    pub fn len(&self) -> usize {
        self.statements.len()
    }

    /// Whether there are no statements.
    pub fn is_empty(&self) -> bool {
        self.statements.is_empty()
    }
}

/// Postgres as a [`FencedResource`]: each [`apply`](FencedResource::apply) opens a
/// transaction, fences it with the per-name mark ([`MarkTable::fence`] semantics), runs the
/// [`PgWrite`]'s statements, and commits.
///
/// ```no_run
/// # async fn demo(client: tokio_postgres::Client, token: lease_core::Token)
/// # -> Result<(), lease_postgres::PgFenceError> {
/// use lease_postgres::FencedResource;
/// use lease_postgres::{MarkTable, PgFence, PgWrite};
///
/// let fence = PgFence::new(tokio::sync::Mutex::new(client), MarkTable::default(), "reports")?;
/// let write = PgWrite::new().statement("UPDATE reports SET state = 'done' WHERE id = 7", vec![]);
/// if !fence.apply(token, write).await?.is_applied() {
///     // fenced out: stop writing
/// }
/// # Ok(()) }
/// ```
pub struct PgFence<S> {
    source: S,
    marks: MarkTable,
    name: String,
}

impl<S> fmt::Debug for PgFence<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgFence")
            .field("marks", self.marks.table())
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<S: ClientSource> PgFence<S> {
    /// A fenced resource for `name` in `marks`, writing through connections from `source`.
    pub fn new(
        source: S,
        marks: MarkTable,
        name: impl Into<String>,
    ) -> Result<PgFence<S>, PgFenceError> {
        let name = name.into();
        check_name(&name)?;
        Ok(PgFence {
            source,
            marks,
            name,
        })
    }

    /// The fence name (the key of the mark row).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The marks table.
    pub fn marks(&self) -> &MarkTable {
        &self.marks
    }

    /// The connection source.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// Raises the mark to `token` without writing (at election): see
    /// [`MarkTable::raise_mark`].
    pub async fn raise_mark(&self, token: Token) -> Result<FenceOutcome, PgFenceError> {
        let conn = self.source.connection().await?;
        self.marks.raise_mark(&*conn, &self.name, token).await
    }

    /// The current mark.
    pub async fn mark(&self) -> Result<FenceMark, PgFenceError> {
        let conn = self.source.connection().await?;
        self.marks.mark(&*conn, &self.name).await
    }
}

#[async_trait]
impl<S: ClientSource> FencedResource for PgFence<S> {
    type Write = PgWrite;
    type Error = PgFenceError;

    async fn apply(&self, token: Token, write: PgWrite) -> Result<FenceOutcome, PgFenceError> {
        let mut conn = self.source.connection().await?;
        let client: &mut Client = &mut conn;
        let tx = match self.marks.begin(client, &self.name, token).await? {
            BeginOutcome::Fenced(tx) => tx,
            BeginOutcome::Stale { mark } => return Ok(FenceOutcome::Stale { mark }),
        };
        for stmt in &write.statements {
            let params: Vec<&(dyn ToSql + Sync)> = stmt
                .params
                .iter()
                .map(|p| &**p as &(dyn ToSql + Sync))
                .collect();
            // On error `tx` is dropped, which rolls the transaction back.
            tx.execute(stmt.sql.as_str(), &params).await?;
        }
        tx.commit().await?;
        Ok(FenceOutcome::Applied)
    }
}
