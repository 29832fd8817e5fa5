//! Fencing enforced at the resource for redlease: Redis fenced writes and a Postgres conditional-write adapter.
#![forbid(unsafe_code)]
