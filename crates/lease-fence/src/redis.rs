//! Redis fenced writes (feature `redis`): the fencer of `lease-redis`.
//!
//! `lease-redis` is being written; its fencer types are re-exported here once they exist.
