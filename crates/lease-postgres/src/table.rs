//! Per-row fencing: a fence column on your table, checked by each conditional write.

use std::collections::HashSet;
use std::sync::Arc;

use lease_core::{FenceMark, FenceOutcome, Token};
use tokio_postgres::GenericClient;
use tokio_postgres::types::{ToSql, Type};

use super::error::PgFenceError;
use super::ident::{Ident, QualifiedName};
use super::mark_from_db;
use super::marks::has_unique_key;

/// The default name of the fence column.
pub const DEFAULT_FENCE_COLUMN: &str = "fence";

/// The most columns one fenced statement may set (Postgres binds at most 65535 parameters;
/// two are the token and the key).
pub const MAX_COLUMNS: usize = 65_533;

/// The alias of the target table inside the upsert.
const TARGET: &str = "\"lease_fence_target\"";

/// A bound parameter: a value of any type `tokio_postgres` can send.
pub type Param<'a> = &'a (dyn ToSql + Sync);

/// What a per-row fenced update found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[must_use = "a stale outcome means this holder was fenced out and must stop writing"]
pub enum RowOutcome {
    /// The row was updated and its fence set to the token.
    Applied,
    /// The row's fence is above the token: nothing was written.
    Stale {
        /// The row's fence (read right after the refusal).
        mark: FenceMark,
    },
    /// No row had the key when the update ran: nothing was written.
    NotFound,
}

impl RowOutcome {
    /// Whether the row was written.
    pub fn is_applied(self) -> bool {
        matches!(self, RowOutcome::Applied)
    }
}

/// A table whose rows carry their own fence: a `bigint` column holding the token of the last
/// write (0 for never).
///
/// Each write is one conditional statement, `... WHERE fence <= token`, so it is atomic on its
/// own (no transaction needed) and fences exactly the rows it writes. Identifiers are validated
/// at construction and always quoted; values are always bound parameters.
///
/// The key column must be unique (a primary key or unique constraint): the upsert names it in
/// `ON CONFLICT`.
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client, token: lease_core::Token)
/// # -> Result<(), lease_postgres::PgFenceError> {
/// use lease_postgres::{FencedTable, QualifiedName, RowOutcome};
///
/// let state = FencedTable::new(QualifiedName::new("state")?, "key")?; // fence column "fence"
/// state.migrate(client).await?; // ALTER TABLE ... ADD COLUMN IF NOT EXISTS "fence" ...
///
/// let outcome = state
///     .update(client, token, &"config", &[("value", &"v2")])
///     .await?;
/// if let RowOutcome::Stale { mark } = outcome {
///     println!("fenced out by {mark:?}");
/// }
/// // Insert or update:
/// let applied = state.upsert(client, token, &"config", &[("value", &"v3")]).await?;
/// # let _ = applied;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct FencedTable {
    inner: Arc<TableSql>,
}

#[derive(Debug)]
struct TableSql {
    table: QualifiedName,
    key: Ident,
    fence: Ident,
    mark: String,
}

impl FencedTable {
    /// A table keyed by `key_column`, fenced by the column [`DEFAULT_FENCE_COLUMN`].
    pub fn new(
        table: QualifiedName,
        key_column: impl Into<String>,
    ) -> Result<FencedTable, PgFenceError> {
        let key = Ident::new(key_column)?;
        FencedTable::with_columns(table, key, Ident::trusted(DEFAULT_FENCE_COLUMN))
    }

    /// The same table, fenced by `fence_column` instead.
    pub fn with_fence_column(
        &self,
        fence_column: impl Into<String>,
    ) -> Result<FencedTable, PgFenceError> {
        let fence = Ident::new(fence_column)?;
        FencedTable::with_columns(self.inner.table.clone(), self.inner.key.clone(), fence)
    }

    /// A table from validated parts. The key and fence columns must differ.
    pub fn with_columns(
        table: QualifiedName,
        key: Ident,
        fence: Ident,
    ) -> Result<FencedTable, PgFenceError> {
        if key == fence {
            return Err(PgFenceError::Shape(format!(
                "the key column and the fence column are both {key:?}"
            )));
        }
        let mark = format!("SELECT {fence} FROM {table} WHERE {key} = $1");
        Ok(FencedTable {
            inner: Arc::new(TableSql {
                table,
                key,
                fence,
                mark,
            }),
        })
    }

    /// The table's name.
    pub fn table(&self) -> &QualifiedName {
        &self.inner.table
    }

    /// The key column.
    pub fn key_column(&self) -> &Ident {
        &self.inner.key
    }

    /// The fence column.
    pub fn fence_column(&self) -> &Ident {
        &self.inner.fence
    }

    /// The idempotent DDL that adds the fence column, for your own migration tool:
    /// `ALTER TABLE t ADD COLUMN IF NOT EXISTS fence bigint NOT NULL DEFAULT 0` (a metadata-only
    /// change since Postgres 11; existing rows read as 0, "never fenced").
    pub fn migrate_sql(&self) -> String {
        let TableSql { table, fence, .. } = &*self.inner;
        format!("ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {fence} bigint NOT NULL DEFAULT 0")
    }

    /// Adds the fence column if missing (idempotent), then checks that it is a `NOT NULL
    /// bigint` (an existing column of another shape is reported, not altered) and that the key
    /// column is unique (a primary key or unique constraint, as the upsert needs); a mismatch
    /// is [`PgFenceError::Shape`].
    pub async fn migrate<C>(&self, client: &C) -> Result<(), PgFenceError>
    where
        C: GenericClient + Sync,
    {
        client.batch_execute(&self.migrate_sql()).await?;
        let TableSql { table, fence, .. } = &*self.inner;
        let row = client
            .query_typed_one(
                "SELECT format_type(a.atttypid, a.atttypmod), a.attnotnull \
                 FROM pg_catalog.pg_attribute a \
                 WHERE a.attrelid = $1::text::regclass AND a.attname = $2 AND NOT a.attisdropped",
                &[(&table.quoted(), Type::TEXT), (&fence.as_str(), Type::TEXT)],
            )
            .await?;
        let (ty, not_null): (String, bool) = (row.try_get(0)?, row.try_get(1)?);
        if ty != "bigint" || !not_null {
            return Err(PgFenceError::Shape(format!(
                "fence column {fence} of {table} is {ty}{}; it must be bigint NOT NULL",
                if not_null { " NOT NULL" } else { "" }
            )));
        }
        // The upsert names the key in ON CONFLICT, which needs a unique index on it.
        let key = &self.inner.key;
        if !has_unique_key(client, table, key.as_str()).await? {
            return Err(PgFenceError::Shape(format!(
                "{table} has no unique, non-deferrable index on {key} alone \
                 (add a primary key or unique constraint)"
            )));
        }
        tracing::debug!(table = %table, column = %fence, "lease-postgres: fence column ready");
        Ok(())
    }

    /// The conditional update setting `columns` (built once, reuse it):
    /// `UPDATE t SET c1 = $3, .., fence = $1 WHERE key = $2 AND fence <= $1`.
    pub fn update_statement(&self, columns: &[&str]) -> Result<FencedUpdate, PgFenceError> {
        let columns = self.check_columns(columns)?;
        let TableSql {
            table, key, fence, ..
        } = &*self.inner;
        let mut sql = format!("UPDATE {table} SET ");
        for (i, c) in columns.iter().enumerate() {
            sql.push_str(&format!("{c} = ${}, ", i + 3));
        }
        sql.push_str(&format!("{fence} = $1 WHERE {key} = $2 AND {fence} <= $1"));
        Ok(FencedUpdate {
            table: self.clone(),
            sql,
            columns,
        })
    }

    /// The conditional upsert setting `columns` (built once, reuse it):
    /// `INSERT INTO t AS x (key, c1, .., fence) VALUES ($2, $3, .., $1) ON CONFLICT (key) DO
    /// UPDATE SET c1 = EXCLUDED.c1, .., fence = EXCLUDED.fence WHERE x.fence <= EXCLUDED.fence`.
    pub fn upsert_statement(&self, columns: &[&str]) -> Result<FencedUpsert, PgFenceError> {
        let columns = self.check_columns(columns)?;
        let TableSql {
            table, key, fence, ..
        } = &*self.inner;
        let mut names = format!("{key}, ");
        let mut values = String::from("$2, ");
        let mut sets = String::new();
        for (i, c) in columns.iter().enumerate() {
            names.push_str(&format!("{c}, "));
            values.push_str(&format!("${}, ", i + 3));
            sets.push_str(&format!("{c} = EXCLUDED.{c}, "));
        }
        let sql = format!(
            "INSERT INTO {table} AS {TARGET} ({names}{fence}) VALUES ({values}$1) \
             ON CONFLICT ({key}) DO UPDATE SET {sets}{fence} = EXCLUDED.{fence} \
             WHERE {TARGET}.{fence} <= EXCLUDED.{fence}"
        );
        Ok(FencedUpsert {
            table: self.clone(),
            sql,
            columns,
        })
    }

    /// Updates the row `key` with `values` iff `token >=` its fence, and sets its fence to
    /// `token`. Builds the statement on each call; for a hot path build it once with
    /// [`update_statement`](FencedTable::update_statement).
    ///
    /// Zero rows updated is told apart with one extra read, only on that path: the row exists
    /// with a higher fence ([`RowOutcome::Stale`]) or it does not exist
    /// ([`RowOutcome::NotFound`]; this includes a row inserted concurrently after the update
    /// ran, whose fence does not refuse the token).
    pub async fn update<C>(
        &self,
        client: &C,
        token: Token,
        key: Param<'_>,
        values: &[(&str, Param<'_>)],
    ) -> Result<RowOutcome, PgFenceError>
    where
        C: GenericClient + Sync,
    {
        let (columns, params) = split(values);
        self.update_statement(&columns)?
            .execute(client, token, key, &params)
            .await
    }

    /// Inserts the row `key` with `values` and fence `token`, or updates it iff `token >=` its
    /// fence. Builds the statement on each call; for a hot path build it once with
    /// [`upsert_statement`](FencedTable::upsert_statement).
    pub async fn upsert<C>(
        &self,
        client: &C,
        token: Token,
        key: Param<'_>,
        values: &[(&str, Param<'_>)],
    ) -> Result<FenceOutcome, PgFenceError>
    where
        C: GenericClient + Sync,
    {
        let (columns, params) = split(values);
        self.upsert_statement(&columns)?
            .execute(client, token, key, &params)
            .await
    }

    /// The fence of the row `key` (`None` if there is no such row; [`FenceMark::NONE`] if it was
    /// never written under a token).
    pub async fn row_mark<C>(
        &self,
        client: &C,
        key: Param<'_>,
    ) -> Result<Option<FenceMark>, PgFenceError>
    where
        C: GenericClient + Sync,
    {
        let row = client.query_opt(&self.inner.mark, &[key]).await?;
        match row {
            None => Ok(None),
            Some(row) => match row.try_get::<_, Option<i64>>(0)? {
                Some(v) => mark_from_db(v).map(Some),
                None => Err(PgFenceError::Shape(format!(
                    "the fence column {} holds NULL; make it NOT NULL DEFAULT 0",
                    self.inner.fence
                ))),
            },
        }
    }

    fn check_columns(&self, columns: &[&str]) -> Result<Vec<Ident>, PgFenceError> {
        if columns.len() > MAX_COLUMNS {
            return Err(PgFenceError::Shape(format!(
                "{} columns; at most {MAX_COLUMNS} fit in one statement",
                columns.len()
            )));
        }
        let mut seen = HashSet::with_capacity(columns.len());
        let mut out = Vec::with_capacity(columns.len());
        for c in columns {
            let ident = Ident::new(*c)?;
            if ident == self.inner.key || ident == self.inner.fence {
                return Err(PgFenceError::Shape(format!(
                    "column {ident:?} is the key or the fence column; it is set by the statement"
                )));
            }
            if !seen.insert(ident.clone()) {
                return Err(PgFenceError::Shape(format!(
                    "column {ident:?} is listed twice"
                )));
            }
            out.push(ident);
        }
        Ok(out)
    }
}

fn split<'a, 'p>(values: &'a [(&'a str, Param<'p>)]) -> (Vec<&'a str>, Vec<Param<'p>>) {
    values.iter().copied().unzip()
}

fn params<'p>(token: &'p i64, key: Param<'p>, values: &[Param<'p>]) -> Vec<Param<'p>> {
    let mut all: Vec<Param<'p>> = Vec::with_capacity(values.len() + 2);
    all.push(token);
    all.push(key);
    all.extend_from_slice(values);
    all
}

fn check_arity(columns: &[Ident], values: &[Param<'_>]) -> Result<(), PgFenceError> {
    if columns.len() != values.len() {
        return Err(PgFenceError::Arity {
            expected: columns.len(),
            got: values.len(),
        });
    }
    Ok(())
}

/// A per-row conditional update for one set of columns, built by
/// [`FencedTable::update_statement`].
#[derive(Clone, Debug)]
pub struct FencedUpdate {
    table: FencedTable,
    sql: String,
    columns: Vec<Ident>,
}

impl FencedUpdate {
    /// The SQL text (`$1` is the token, `$2` the key, `$3..` the values).
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// The columns set, in the order of the values.
    pub fn columns(&self) -> &[Ident] {
        &self.columns
    }

    /// Updates the row `key` with `values` (one per column, in order) iff `token >=` its
    /// fence. See [`FencedTable::update`] for the outcomes.
    pub async fn execute<C>(
        &self,
        client: &C,
        token: Token,
        key: Param<'_>,
        values: &[Param<'_>],
    ) -> Result<RowOutcome, PgFenceError>
    where
        C: GenericClient + Sync,
    {
        check_arity(&self.columns, values)?;
        let raw = token.as_i64();
        let n = client
            .execute(self.sql.as_str(), &params(&raw, key, values))
            .await?;
        if n > 0 {
            tracing::debug!(table = %self.table.table(), token = %token, rows = n, "lease-postgres: row written");
            return Ok(RowOutcome::Applied);
        }
        let outcome = match self.table.row_mark(client, key).await? {
            Some(mark) if !mark.accepts(token) => RowOutcome::Stale { mark },
            _ => RowOutcome::NotFound,
        };
        tracing::debug!(table = %self.table.table(), token = %token, ?outcome, "lease-postgres: row not written");
        Ok(outcome)
    }
}

/// A per-row conditional upsert for one set of columns, built by
/// [`FencedTable::upsert_statement`].
#[derive(Clone, Debug)]
pub struct FencedUpsert {
    table: FencedTable,
    sql: String,
    columns: Vec<Ident>,
}

impl FencedUpsert {
    /// The SQL text (`$1` is the token, `$2` the key, `$3..` the values).
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// The columns set, in the order of the values.
    pub fn columns(&self) -> &[Ident] {
        &self.columns
    }

    /// Inserts the row `key` with `values` (one per column, in order) and fence `token`, or
    /// updates it iff `token >=` its fence.
    ///
    /// [`FenceOutcome::Stale`] carries the row's fence read right after the refusal (inside a
    /// transaction the refused upsert keeps the row locked, so it is exactly the refusing mark;
    /// [`FenceMark::NONE`] if the row was deleted in between, outside a transaction).
    pub async fn execute<C>(
        &self,
        client: &C,
        token: Token,
        key: Param<'_>,
        values: &[Param<'_>],
    ) -> Result<FenceOutcome, PgFenceError>
    where
        C: GenericClient + Sync,
    {
        check_arity(&self.columns, values)?;
        let raw = token.as_i64();
        let n = client
            .execute(self.sql.as_str(), &params(&raw, key, values))
            .await?;
        if n > 0 {
            tracing::debug!(table = %self.table.table(), token = %token, "lease-postgres: row upserted");
            return Ok(FenceOutcome::Applied);
        }
        let mark = self
            .table
            .row_mark(client, key)
            .await?
            .unwrap_or(FenceMark::NONE);
        tracing::debug!(table = %self.table.table(), token = %token, ?mark, "lease-postgres: stale upsert refused");
        Ok(FenceOutcome::Stale { mark })
    }
}
