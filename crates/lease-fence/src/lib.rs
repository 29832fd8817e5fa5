//! Fencing enforced at the resource for redlease: Redis fenced writes and a Postgres
//! conditional-write adapter.
//!
//! A fencing token is only as good as the resource that checks it. This crate puts the check
//! where you write:
//!
//! - [`FencedResource`] (re-exported from `lease-core`): the small trait of a fenced resource —
//!   apply a write under a token, atomically with the check `token >= mark`; the outcome is
//!   [`FenceOutcome::Applied`] or [`FenceOutcome::Stale`] with the mark that refused it.
//!   Implement it for your own store.
//! - module `postgres` (feature `postgres`): the per-name mark raised inside your transaction, and
//!   per-row conditional updates and upserts.
//! - module `redis` (feature `redis`): the Redis fencer (fenced `SET`/`HSET`/`DEL`/`EVAL`).
//!
//! See `docs/fencing.md` for which mode to use and the correctness boundary.
//!
//! ```
//! use lease_fence::{FenceMark, Token};
//! let mark = FenceMark::at(Token::new(5)?);
//! assert!(mark.accepts(Token::new(5)?), "equal tokens pass: one term writes many times");
//! assert!(!mark.accepts(Token::new(4)?));
//! # Ok::<(), lease_fence::TokenError>(())
//! ```
#![forbid(unsafe_code)]

pub use lease_core::{FenceMark, FenceOutcome, FencedResource, Token, TokenError};

#[cfg(feature = "postgres")]
pub mod postgres;

#[cfg(feature = "redis")]
pub mod redis;
