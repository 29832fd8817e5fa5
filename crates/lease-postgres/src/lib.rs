//! The Postgres adapter for redlease: fencing enforced at the resource, inside your
//! transactions.
//!
//! A fencing token is only as good as the resource that checks it. This crate puts the check
//! where you write, for Postgres (the Redis fencer is `lease-redis`'s `RedisFencer`); both
//! implement [`FencedResource`].
//!
//! Two modes, both one conditional statement at the server:
//!
//! - **Per-name mark** ([`MarkTable`]): a table `name → mark`. [`MarkTable::fence`] raises the
//!   mark of a name to the token inside your transaction, or refuses (and aborts the
//!   transaction) when the token is below the mark. The mark row stays locked until the
//!   transaction ends, so *every* write in that transaction, to any table, commits only if the
//!   fence held. [`MarkTable::raise_mark`] is what a successor calls at election;
//!   [`MarkTable::begin`] and [`MarkTable::run`] open the fenced transaction for you;
//!   [`PgFence`] wraps it all as a [`FencedResource`].
//! - **Per-row fence** ([`FencedTable`]): a `bigint` fence column on your own table, and
//!   conditional updates / upserts `... WHERE fence <= token`. No extra table, no transaction
//!   needed, but only the rows written carry the fence.
//!
//! Everything works on a [`tokio_postgres::Client`], a [`tokio_postgres::Transaction`] and
//! anything that dereferences to them (pooled clients), through
//! [`tokio_postgres::GenericClient`].
//!
//! # Isolation
//!
//! `READ COMMITTED` (the Postgres default) is enough. `INSERT .. ON CONFLICT DO UPDATE ..
//! WHERE mark <= token` takes the row lock of the conflicting mark row (even when the `WHERE` is
//! false) and holds it until the transaction ends. A concurrent fence of the same name waits
//! for that lock; when the holder commits or aborts, Postgres re-evaluates the `WHERE` against
//! the newest committed mark (not the statement's snapshot), so a lower token is refused and
//! a higher one raises the mark. Commits of fenced transactions of one name are therefore
//! serialised in mark order: a writer's transaction commits only if no higher token had
//! committed before it took the lock, and none can commit a lower token after. The same holds
//! for the per-row update and upsert (Postgres re-checks the row's fence after waiting).
//!
//! Under `REPEATABLE READ` or `SERIALIZABLE`, a fence racing a concurrent raise of the same
//! name fails with a serialization failure instead (it never commits a stale write);
//! [`PgFenceError::is_retryable_conflict`] tells you to retry the transaction.
//!
//! # Identifiers and values
//!
//! Table and column names are [`Ident`]s / [`QualifiedName`]s, validated when built (non-empty,
//! no NUL, at most 63 bytes, so never truncated by the server) and always emitted quoted with
//! every `"` doubled: any name works and none can inject SQL. Values, names of marks and
//! tokens are always bound parameters. Tokens are [`Token`]s (`1..=2^53`);
//! convert raw input with [`Token::from_i64`] or `str::parse`,
//! whose [`TokenError`] converts into
//! [`PgFenceError::TokenOutOfRange`].

#![forbid(unsafe_code)]
// docs.rs builds with `--cfg docsrs` on nightly: items behind a feature show a badge naming it.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use lease_core::{FenceMark, FenceOutcome, FencedResource, Token, TokenError};

mod error;
mod ident;
mod marks;
mod resource;
mod table;

pub use error::{BoxError, PgFenceError};
pub use ident::{Ident, IdentError, MAX_IDENT_LEN, QualifiedName};
pub use marks::{
    BeginOutcome, DEFAULT_MARKS_TABLE, MAX_FENCE_NAME_LEN, MarkTable, TxFuture, TxOutcome,
};
pub use resource::{ClientSource, OwnedParam, PgFence, PgStatement, PgWrite};
pub use table::{
    DEFAULT_FENCE_COLUMN, FencedTable, FencedUpdate, FencedUpsert, MAX_COLUMNS, Param, RowOutcome,
};

/// Re-exported so users need not depend on `tokio-postgres` separately for the types in this
/// API.
pub use tokio_postgres;

/// A stored mark or fence value: 0 is "never fenced", anything else must be a valid token.
fn mark_from_db(value: i64) -> Result<FenceMark, PgFenceError> {
    if value == 0 {
        return Ok(FenceMark::NONE);
    }
    Token::from_i64(value)
        .map(FenceMark::at)
        .map_err(|_| PgFenceError::InvalidStoredMark { value })
}
