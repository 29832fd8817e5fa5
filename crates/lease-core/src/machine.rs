//! The one contract every machine of this crate keeps with its driver, stated once.
//!
//! Every machine is sans-IO in the manner of quinn-proto's `Connection`: it decides *what* to
//! send, *when*, and what each reply means; the driver sends, waits, reads the clock, and
//! feeds back. Time enters only as [`Instant`](crate::Instant) arguments (`now` always comes
//! first), randomness only as a seed.
//!
//! | step | method | what the driver does |
//! |---|---|---|
//! | what to send | `poll_request(now)` | send every request it returns, each bounded by its `deadline` |
//! | a reply | `handle_reply(now, id, reply)` | feed each reply **as it arrives**, with the instant; every polled request gets exactly one |
//! | no reply in time | the same `handle_reply`, with the reply *timed out* | at the request's deadline (a reply ready when the deadline fires counts as the reply) |
//! | time passing | `poll_timeout()` → `handle_timeout(now)` | sleep until the instant (or a reply, or a command), then call it |
//! | what happened | `poll_event()` (a running machine) or `poll_outcome()` (one that ends) | act on each, until `None` |
//!
//! The machines and how each spells a step:
//!
//! | machine | requests | "timed out" | outcome |
//! |---|---|---|---|
//! | [`Election`](crate::Election) | [`Request`](crate::Request), id [`RequestId`] | [`Reply::TimedOut`](crate::Reply::TimedOut) | `poll_event` |
//! | [`quorum::Round`](crate::quorum::Round) | [`NodeRequest`](crate::quorum::NodeRequest), id [`NodeRequestId`](crate::quorum::NodeRequestId) (one per node) | [`NodeReply::TimedOut`](crate::quorum::NodeReply::TimedOut) | `poll_outcome` (a [`Verdict`](crate::quorum::Verdict)) |
//! | [`lock::Obtain`](crate::lock::Obtain) | [`Attempt`](crate::lock::Attempt) (one at a time: no id) | `Err(BackendError::Timeout)` | `poll_outcome` |
//! | [`lock::HeldLock`](crate::lock::HeldLock), [`HeldLease`](crate::lease::HeldLease) | [`RenewOrder`](crate::lease::RenewOrder) (one at a time: no id), and for a lock the refresh turn | `Err(BackendError::Timeout)` | `poll_event` |
//!
//! Two vocabularies remain, by design: a machine whose replies are a typed enum (one variant
//! per request kind) has a `TimedOut` variant; a machine whose reply is a store call's
//! `Result` takes "no reply in time" as [`BackendError::Timeout`](crate::BackendError::Timeout),
//! whose effect is unknown like any unanswered request. The held machines name their two
//! request kinds (`poll_renew`/`handle_renew`, `begin_refresh`/`handle_refresh`) instead of one
//! `poll_request`, because a driver performs them on different paths (the batched renewal
//! task, the caller's refresh).
//!
//! Only a machine's own driver calls it, always behind one lock and never across a round
//! trip; every rule is a method of one machine and is tested by property against a model in
//! `tests/`.

/// Identifies a request within its machine, to match its reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);
