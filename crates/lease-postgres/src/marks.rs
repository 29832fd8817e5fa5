//! The per-name mark: one row per fenced name, raised inside the caller's transaction.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use lease_core::token::MAX_TOKEN;
use lease_core::{FenceMark, FenceOutcome, Token};
use tokio_postgres::types::Type;
use tokio_postgres::{GenericClient, Transaction};

use super::error::PgFenceError;
use super::ident::{Ident, QualifiedName};
use super::mark_from_db;

/// The default name of the marks table.
pub const DEFAULT_MARKS_TABLE: &str = "lease_fence_marks";

/// The longest fence name accepted, in bytes (the same limit as election names).
pub const MAX_FENCE_NAME_LEN: usize = lease_core::config::MAX_NAME_LEN;

/// The future a [`MarkTable::run`] closure returns: boxed, so it may borrow the transaction.
pub type TxFuture<'t, T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 't>>;

/// A table of per-name fence marks (`name text PRIMARY KEY`, `mark bigint`), and the
/// statements that fence a transaction with it.
///
/// [`fence`](MarkTable::fence) raises the mark of a name to the token inside the caller's
/// transaction, or refuses when the token is below the mark. The conditional upsert locks the
/// mark row until the transaction ends, so every write in that transaction (to any table)
/// commits only if the fence held, and fenced transactions of one name are serialised.
///
/// Cheap to clone; build it once.
///
/// ```no_run
/// # async fn demo(client: &mut tokio_postgres::Client, token: lease_core::Token)
/// # -> Result<(), lease_postgres::PgFenceError> {
/// use lease_postgres::FenceOutcome;
/// use lease_postgres::MarkTable;
///
/// let marks = MarkTable::default();
/// marks.migrate(&*client).await?; // once, at deploy time
///
/// let tx = client.transaction().await?;
/// match marks.fence(&tx, "report-builder", token).await? {
///     FenceOutcome::Applied => {
///         tx.execute("UPDATE reports SET state = 'done' WHERE id = 7", &[]).await?;
///         tx.commit().await?;
///     }
///     FenceOutcome::Stale { mark } => {
///         // A newer term exists; the transaction is aborted at the server: stop writing.
///         let _ = mark;
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct MarkTable {
    inner: Arc<MarkSql>,
}

#[derive(Debug)]
struct MarkSql {
    table: QualifiedName,
    create: String,
    fence: String,
    read: String,
}

/// What [`MarkTable::begin`] found.
#[must_use = "a stale outcome means this holder was fenced out and must stop writing"]
pub enum BeginOutcome<'c> {
    /// The fence held: write in this transaction, then commit. The mark row stays locked until
    /// the transaction ends, so no newer term can commit in between and no older one after.
    Fenced(Transaction<'c>),
    /// The token is below the mark: the transaction was rolled back.
    Stale {
        /// The mark that refused the token.
        mark: FenceMark,
    },
}

/// What [`MarkTable::run`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "a stale outcome means this holder was fenced out and must stop writing"]
pub enum TxOutcome<T> {
    /// The fence held, the closure succeeded and the transaction committed.
    Applied(T),
    /// The token is below the mark: the closure did not run and nothing was written.
    Stale {
        /// The mark that refused the token.
        mark: FenceMark,
    },
}

impl std::fmt::Debug for BeginOutcome<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BeginOutcome::Fenced(_) => f.write_str("Fenced(..)"),
            BeginOutcome::Stale { mark } => f.debug_struct("Stale").field("mark", mark).finish(),
        }
    }
}

impl<T> TxOutcome<T> {
    /// Whether the transaction committed.
    pub fn is_applied(&self) -> bool {
        matches!(self, TxOutcome::Applied(_))
    }

    /// The closure's value, if the transaction committed.
    pub fn applied(self) -> Option<T> {
        match self {
            TxOutcome::Applied(v) => Some(v),
            TxOutcome::Stale { .. } => None,
        }
    }
}

impl Default for MarkTable {
    /// The table [`DEFAULT_MARKS_TABLE`] on the `search_path`.
    fn default() -> MarkTable {
        MarkTable::new(QualifiedName::from(Ident::trusted(DEFAULT_MARKS_TABLE)))
    }
}

impl MarkTable {
    /// A marks table named `table` (created by [`migrate`](MarkTable::migrate)).
    pub fn new(table: QualifiedName) -> MarkTable {
        let t = table.quoted();
        let create = format!(
            "CREATE TABLE IF NOT EXISTS {t} (\
             \"name\" text PRIMARY KEY, \
             \"mark\" bigint NOT NULL CHECK (\"mark\" BETWEEN 1 AND {MAX_TOKEN}))"
        );
        // One statement: insert the first mark, or raise an existing one iff token >= mark.
        // ON CONFLICT DO UPDATE locks the conflicting row even when the WHERE is false, and
        // under READ COMMITTED re-evaluates the WHERE on the latest committed version after
        // waiting for a concurrent holder of the lock.
        let fence = format!(
            "INSERT INTO {t} AS m (\"name\", \"mark\") VALUES ($1, $2) \
             ON CONFLICT (\"name\") DO UPDATE SET \"mark\" = EXCLUDED.\"mark\" \
             WHERE m.\"mark\" <= EXCLUDED.\"mark\" \
             RETURNING m.\"mark\""
        );
        let read = format!("SELECT \"mark\" FROM {t} WHERE \"name\" = $1");
        MarkTable {
            inner: Arc::new(MarkSql {
                table,
                create,
                fence,
                read,
            }),
        }
    }

    /// The table's name.
    pub fn table(&self) -> &QualifiedName {
        &self.inner.table
    }

    /// The idempotent DDL that creates the table, for your own migration tool.
    pub fn create_sql(&self) -> &str {
        &self.inner.create
    }

    /// Creates the table if it does not exist (idempotent; the schema must exist), then checks
    /// that the table has the shape the fence needs (an existing table of that name with other
    /// columns, or without a unique `name`, is [`PgFenceError::Shape`]).
    ///
    /// Two sessions creating the same table for the first time at the same instant can make
    /// one of them fail with a unique violation (a Postgres limitation of
    /// `CREATE TABLE IF NOT EXISTS`); run migrations from one place, or retry.
    pub async fn migrate<C>(&self, client: &C) -> Result<(), PgFenceError>
    where
        C: GenericClient + Sync,
    {
        client.batch_execute(&self.inner.create).await?;
        // A table of that name that predates us must have the shape the fence needs: parse
        // the fence statement (no execution) and check its types.
        let stmt = client
            .prepare(&self.inner.fence)
            .await
            .map_err(|e| shape_error(e, &self.inner.table))?;
        let columns: Vec<&Type> = stmt.columns().iter().map(|c| c.type_()).collect();
        if stmt.params() != [Type::TEXT, Type::INT8] || columns != [&Type::INT8] {
            return Err(PgFenceError::Shape(format!(
                "marks table {} exists with other column types (want \"name\" text, \"mark\" bigint)",
                self.inner.table
            )));
        }
        if !has_unique_key(client, &self.inner.table, "name").await? {
            return Err(PgFenceError::Shape(format!(
                "marks table {} has no unique, non-deferrable index on \"name\"",
                self.inner.table
            )));
        }
        tracing::debug!(table = %self.inner.table, "lease-postgres: marks table ready");
        Ok(())
    }

    /// Fences the transaction `tx` for `name` with `token`.
    ///
    /// Raises the mark to `token` if `token >= mark` (or inserts it), in one statement, and
    /// returns [`FenceOutcome::Applied`]: the mark row is then locked until `tx` ends, so the
    /// writes of `tx` commit only under a token no lower than any committed mark, and any
    /// concurrent fence of `name` waits for `tx` and re-checks against its outcome.
    ///
    /// Otherwise returns [`FenceOutcome::Stale`] with the current mark **and aborts `tx` at the
    /// server** (it executes a statement that fails), so nothing written in `tx` — before or
    /// after this call — can commit even if the outcome is ignored: a later `COMMIT` rolls
    /// back. Roll it back (or drop it) and stop writing.
    ///
    /// Call it first in the transaction (fewer wasted writes, and the lock order is the same in
    /// every fenced transaction); anywhere before `COMMIT` is correct. `tx` may be a
    /// savepoint (a nested [`Transaction`]): rolling it back (or dropping it) then restores the
    /// enclosing transaction; releasing it fails and leaves the whole transaction aborted. Pooled
    /// transactions (e.g. deadpool's) dereference to a [`Transaction`].
    pub async fn fence(
        &self,
        tx: &Transaction<'_>,
        name: &str,
        token: Token,
    ) -> Result<FenceOutcome, PgFenceError> {
        let outcome = self.upsert(tx, name, token).await?;
        if let FenceOutcome::Stale { .. } = outcome {
            poison(tx).await;
        }
        Ok(outcome)
    }

    /// Raises the mark of `name` to `token` if `token >= mark`: the successor calls this at
    /// election, so a deposed term is fenced out of Postgres before the successor writes.
    ///
    /// On a plain [`tokio_postgres::Client`] it commits at once. It never lowers a mark:
    /// [`FenceOutcome::Stale`] means the mark is already above `token` (a newer term exists).
    /// Unlike [`fence`](MarkTable::fence) it does not abort an enclosing transaction.
    ///
    /// ```no_run
    /// # async fn demo(client: &tokio_postgres::Client, term_token: lease_core::Token)
    /// # -> Result<(), lease_postgres::PgFenceError> {
    /// use lease_postgres::MarkTable;
    /// let marks = MarkTable::default();
    /// // At the start of each term (e.g. first thing in the elector's leader callback):
    /// if !marks.raise_mark(client, "report-builder", term_token).await?.is_applied() {
    ///     return Ok(()); // already superseded
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn raise_mark<C>(
        &self,
        client: &C,
        name: &str,
        token: Token,
    ) -> Result<FenceOutcome, PgFenceError>
    where
        C: GenericClient + Sync,
    {
        self.upsert(client, name, token).await
    }

    /// The current mark of `name` ([`FenceMark::NONE`] if it was never fenced).
    pub async fn mark<C>(&self, client: &C, name: &str) -> Result<FenceMark, PgFenceError>
    where
        C: GenericClient + Sync,
    {
        check_name(name)?;
        let row = client
            .query_typed_opt(&self.inner.read, &[(&name, Type::TEXT)])
            .await?;
        match row {
            Some(row) => mark_from_db(row.try_get(0)?),
            None => Ok(FenceMark::NONE),
        }
    }

    /// Opens a transaction on `client` and fences it for `name` with `token` as its first
    /// statement.
    ///
    /// On [`BeginOutcome::Fenced`], write through the transaction and commit it. On
    /// [`BeginOutcome::Stale`] the transaction has been rolled back. `client` may be a
    /// [`tokio_postgres::Client`], a pooled client (`&mut *pooled`), or a
    /// [`Transaction`] (the fenced transaction is then a savepoint).
    ///
    /// ```no_run
    /// # async fn demo(client: &mut tokio_postgres::Client, token: lease_core::Token)
    /// # -> Result<(), lease_postgres::PgFenceError> {
    /// use lease_postgres::{BeginOutcome, MarkTable};
    /// let marks = MarkTable::default();
    /// match marks.begin(client, "report-builder", token).await? {
    ///     BeginOutcome::Fenced(tx) => {
    ///         tx.execute("INSERT INTO audit (msg) VALUES ($1)", &[&"done"]).await?;
    ///         tx.commit().await?;
    ///     }
    ///     BeginOutcome::Stale { mark } => println!("fenced out by {mark:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn begin<'c, C>(
        &self,
        client: &'c mut C,
        name: &str,
        token: Token,
    ) -> Result<BeginOutcome<'c>, PgFenceError>
    where
        C: GenericClient + Send + Sync,
    {
        check_name(name)?;
        let tx = client.transaction().await?;
        match self.upsert(&tx, name, token).await? {
            FenceOutcome::Applied => Ok(BeginOutcome::Fenced(tx)),
            FenceOutcome::Stale { mark } => {
                if let Err(e) = tx.rollback().await {
                    // Nothing was committed either way; the connection is probably gone.
                    tracing::warn!(error = %e, "lease-postgres: rollback of a stale transaction failed");
                }
                Ok(BeginOutcome::Stale { mark })
            }
        }
    }

    /// Runs `work` in a transaction fenced for `name` with `token`, and commits it.
    ///
    /// The fence is the first statement; if it is refused, `work` does not run and the result
    /// is [`TxOutcome::Stale`]. If `work` fails, the transaction is rolled back and its error
    /// returned. If the `COMMIT` itself fails, the error is returned and the outcome is
    /// unknown only if the connection broke during it.
    ///
    /// The closure returns a boxed future so that it may borrow the transaction:
    ///
    /// ```no_run
    /// # async fn demo(client: &mut tokio_postgres::Client, token: lease_core::Token)
    /// # -> Result<(), lease_postgres::PgFenceError> {
    /// use lease_postgres::{MarkTable, PgFenceError, TxOutcome};
    /// let marks = MarkTable::default();
    /// let outcome = marks
    ///     .run(client, "report-builder", token, |tx| {
    ///         Box::pin(async move {
    ///             let n = tx.execute("UPDATE reports SET state = 'done' WHERE id = $1", &[&7i64]).await?;
    ///             Ok::<_, PgFenceError>(n)
    ///         })
    ///     })
    ///     .await?;
    /// if let TxOutcome::Stale { mark } = outcome {
    ///     println!("fenced out by {mark:?}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn run<'c, C, F, T, E>(
        &self,
        client: &'c mut C,
        name: &str,
        token: Token,
        work: F,
    ) -> Result<TxOutcome<T>, E>
    where
        C: GenericClient + Send + Sync,
        F: for<'t> FnOnce(&'t Transaction<'c>) -> TxFuture<'t, T, E> + Send,
        E: From<PgFenceError>,
    {
        let tx = match self.begin(client, name, token).await? {
            BeginOutcome::Fenced(tx) => tx,
            BeginOutcome::Stale { mark } => return Ok(TxOutcome::Stale { mark }),
        };
        let value = match work(&tx).await {
            Ok(v) => v,
            Err(e) => {
                if let Err(re) = tx.rollback().await {
                    tracing::warn!(error = %re, "lease-postgres: rollback after a failed fenced write failed");
                }
                return Err(e);
            }
        };
        tx.commit().await.map_err(PgFenceError::from)?;
        Ok(TxOutcome::Applied(value))
    }

    /// The conditional upsert, then (only if refused) a read of the current mark.
    async fn upsert<C>(
        &self,
        client: &C,
        name: &str,
        token: Token,
    ) -> Result<FenceOutcome, PgFenceError>
    where
        C: GenericClient + Sync,
    {
        check_name(name)?;
        let raw = token.as_i64();
        let rows = client
            .query_typed(
                &self.inner.fence,
                &[(&name, Type::TEXT), (&raw, Type::INT8)],
            )
            .await?;
        if !rows.is_empty() {
            tracing::debug!(name, token = %token, "lease-postgres: mark raised");
            return Ok(FenceOutcome::Applied);
        }
        // Refused: the row exists with a higher mark. Inside a transaction the refused upsert
        // holds the row lock, so this read (a fresh snapshot under READ COMMITTED) sees the
        // mark that refused us.
        let mark = self.mark(client, name).await?;
        tracing::debug!(name, token = %token, mark = ?mark, "lease-postgres: stale token refused");
        Ok(FenceOutcome::Stale { mark })
    }
}

/// Whether `column` alone is the key of a unique, non-partial, non-deferrable index of `table`:
/// what `ON CONFLICT (column)` needs. (Parsing the upsert does not check it: the arbiter index
/// is inferred when the statement is planned.)
pub(crate) async fn has_unique_key<C>(
    client: &C,
    table: &QualifiedName,
    column: &str,
) -> Result<bool, PgFenceError>
where
    C: GenericClient + Sync,
{
    let row = client
        .query_typed_one(
            "SELECT EXISTS (\
               SELECT 1 FROM pg_catalog.pg_index i \
               JOIN pg_catalog.pg_attribute a \
                 ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] \
               WHERE i.indrelid = $1::text::regclass AND a.attname = $2 \
                 AND i.indisunique AND i.indimmediate AND i.indisvalid \
                 AND i.indpred IS NULL AND i.indnkeyatts = 1)",
            &[(&table.quoted(), Type::TEXT), (&column, Type::TEXT)],
        )
        .await?;
    Ok(row.try_get(0)?)
}

/// A server-side refusal to parse a statement against an existing table is a shape problem;
/// anything else (a broken connection) stays a Postgres error.
pub(crate) fn shape_error(e: tokio_postgres::Error, table: &QualifiedName) -> PgFenceError {
    match e.as_db_error() {
        Some(db) => PgFenceError::Shape(format!("{table}: {}", db.message())),
        None => PgFenceError::Postgres(e),
    }
}

/// Makes the current transaction (or savepoint) fail, so that it cannot commit.
async fn poison(tx: &Transaction<'_>) {
    let result = tx
        .batch_execute(
            "DO $lease_postgres$ BEGIN RAISE EXCEPTION \
             'lease-postgres: stale fencing token; this transaction is aborted and cannot commit'; \
             END $lease_postgres$",
        )
        .await;
    if result.is_ok() {
        // Unreachable unless the server ignores RAISE; say so loudly.
        tracing::error!("lease-postgres: could not abort a transaction whose fence was refused");
    }
}

/// Validates a fence name: non-empty, no NUL, at most [`MAX_FENCE_NAME_LEN`] bytes.
pub(crate) fn check_name(name: &str) -> Result<(), PgFenceError> {
    if name.is_empty() {
        return Err(PgFenceError::InvalidName("the fence name is empty"));
    }
    if name.contains('\0') {
        return Err(PgFenceError::InvalidName(
            "the fence name contains a NUL byte",
        ));
    }
    if name.len() > MAX_FENCE_NAME_LEN {
        return Err(PgFenceError::InvalidName(
            "the fence name is longer than 1024 bytes",
        ));
    }
    Ok(())
}
