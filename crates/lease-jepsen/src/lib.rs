//! A Jepsen-style fault harness for redlease: real processes, real partitions, a checker.
//!
//! * N node processes (the `jepsen-node` binary, built on the `redlease` facade), each in its
//!   own network namespace ([`netns`]), run an `Elector`; while leader a node appends
//!   `token:node:seq` to a log at the resource through a fenced write, and keeps trying with
//!   its old token for one TTL after its term ended. Every attempt, election and step-down is
//!   recorded ([`history`]). Other workloads ([`Workload`]) hold a fenced lock, a semaphore's
//!   permits, or a read-write lock's reader or writer holds (readers read at the resource)
//!   instead of terms.
//! * A seeded nemesis ([`nemesis`]) pauses nodes (SIGSTOP beyond the TTL), partitions them
//!   from Redis with iptables in their namespace (both ways, requests only, replies only; for
//!   Redlock, from subsets of the servers), kills and restarts them, pauses Redis, and kills
//!   and restarts Redis.
//! * The [`checker`] judges the history and the resource's log by named properties; each
//!   [`scenario`] says which are asserted and which only reported, and why.
//! * [`harness::run`] does one run and writes its summary ([`report`]), its histories and a
//!   timeline picture ([`svg`]) under the output directory.
//!
//! Library code never prints: the `jepsen` binary and the tests do.
#![forbid(unsafe_code)]

pub mod checker;
pub mod error;
pub mod harness;
pub mod history;
pub mod nemesis;
pub mod netns;
pub mod report;
pub mod rng;
pub mod run;
pub mod scenario;
pub mod svg;

pub use crate::error::{JepsenError, Result};
pub use crate::run::{RunConfig, RunResult, RunSummary, Workload};
pub use crate::scenario::Scenario;

/// The election's name (its keys are `jepsen:leader`, `jepsen:fence`, ...).
pub const ELECTION: &str = "jepsen";
/// The log's key at the resource.
pub const LOG_KEY: &str = "jepsen:log";
/// The semaphore workload's semaphore (its keys `<name>:permits`, `<name>:size`, fenced by
/// `<name>:fence`).
pub const SEMAPHORE: &str = "jepsen:sem";
/// The semaphore workload's permit count: at most this many holders at once.
pub const SEMAPHORE_PERMITS: u32 = 2;
/// The lock workload's lock key.
pub const LOCK_KEY: &str = "jepsen:lock";
/// The lock workload's fence counter key (its mark is `<key>:applied`).
pub const LOCK_FENCE: &str = "jepsen:lock:fence";
/// The read-write workload's lock key: readers' holds (`Locker::shared`) and the writer's
/// (the plain lock of this key).
pub const RWLOCK_KEY: &str = "jepsen:rw";
/// The read-write workload's fence counter key, shared by readers and writers (its mark,
/// `<key>:applied`, fences the writers' writes; every obtain stamps it).
pub const RWLOCK_FENCE: &str = "jepsen:rw:fence";
/// The read-write workload's record, beside the log, of the token of the last write applied:
/// a read with a lower token is refused.
pub const RWLOCK_WRITTEN: &str = "jepsen:rw:written";
/// The resource's own mark key, when the resource is a separate server.
pub const RESOURCE_MARK: &str = "jepsen:resource:mark";
