//! Metrics through the `metrics` facade (feature `metrics`; without it every function here is
//! empty and compiles away). The library installs no recorder or exporter: your binary does.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `redlease_election_is_leader` | gauge (1 leading, 0 not; 0 from the start of a run) | `election` |
//! | `redlease_election_token` | gauge (the current term's token) | `election` |
//! | `redlease_elections_won_total` | counter | `election` |
//! | `redlease_election_stepdowns_total` | counter | `election`, `reason` |
//! | `redlease_election_renew_seconds` | histogram (renewal round trip) | `election` |
//! | `redlease_election_renew_failures_total` | counter | `election` |
//! | `redlease_election_store_lost_total` | counter (a store that lost fence state, see `Observer::on_store_lost`) | `election`, `kind` (`new_epoch`, `counter_behind`) |
//! | `redlease_lock_obtain_seconds` | histogram (obtain call, waiting included) | `lock` |
//! | `redlease_lock_not_obtained_total` | counter | `lock` |
//! | `redlease_lock_lost_total` | counter | `lock`, `reason` |
//! | `redlease_lock_max_hold_total` | counter (holds ended at their `LockOptions::max_hold`: not losses) | `lock` |
//! | `redlease_lock_refresh_failures_total` | counter (auto-renewals and refreshes) | `lock` |
//!
//! Labels are names, never values: `election` is the election's name; `lock` is the first
//! key's prefix — its hash tag (`{jobs}`) when it starts with one, else the text before its
//! first `:` (`jobs:42` → `jobs`), cut to [`LOCK_LABEL_MAX_LEN`] bytes. The cardinality of
//! `lock` is bounded: a process labels at most [`LOCK_LABEL_LIMIT`] distinct prefixes, and
//! every lock whose prefix comes after those is labelled `_other` (a key without `:` or hash
//! tag is its own prefix, so per-item keys like `report-1234` would otherwise make one series
//! each). Name keys `<kind>:<id>` to keep their metrics apart.

#![cfg_attr(not(feature = "metrics"), allow(unused_variables))]

use std::time::Duration;

use lease_core::{LossReason, StepDownReason, StoreLoss, Token};

/// At most this many distinct `lock` label values per process; later prefixes are `_other`.
pub const LOCK_LABEL_LIMIT: usize = 256;
/// A `lock` label is cut to at most this many bytes (at a character boundary).
pub const LOCK_LABEL_MAX_LEN: usize = 64;
/// The label of every lock whose prefix came after [`LOCK_LABEL_LIMIT`] others.
pub const LOCK_LABEL_OTHER: &str = "_other";

/// The prefixes labelled so far.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
static LOCK_LABELS: std::sync::LazyLock<std::sync::Mutex<std::collections::HashSet<String>>> =
    std::sync::LazyLock::new(Default::default);

/// The `lock` label of a lock whose first key is `key` (see the module docs for the rule).
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) fn lock_label(key: &str) -> String {
    let prefix = lock_prefix(key);
    let mut seen = LOCK_LABELS.lock().unwrap_or_else(|e| e.into_inner());
    if seen.contains(prefix) {
        return prefix.to_owned();
    }
    if seen.len() < LOCK_LABEL_LIMIT {
        seen.insert(prefix.to_owned());
        return prefix.to_owned();
    }
    LOCK_LABEL_OTHER.to_owned()
}

/// The hash tag or the text before the first `:`, cut to [`LOCK_LABEL_MAX_LEN`] bytes.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
fn lock_prefix(key: &str) -> &str {
    let prefix = match key.find('}') {
        Some(end) if key.starts_with('{') => &key[..=end],
        _ => key.split(':').next().unwrap_or(key),
    };
    let mut cut = prefix.len().min(LOCK_LABEL_MAX_LEN);
    while !prefix.is_char_boundary(cut) {
        cut -= 1;
    }
    &prefix[..cut]
}

/// Describes the election and lock metrics (unit and help text) to the installed recorder;
/// call it once after installing one. Without it the metrics still work, only undescribed
/// (no `# HELP` lines in a Prometheus exposition).
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub fn describe_metrics() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_gauge!(
        "redlease_election_is_leader",
        "1 while this instance leads the election, 0 otherwise"
    );
    describe_gauge!(
        "redlease_election_token",
        "the fencing token of this instance's current or last term"
    );
    describe_counter!(
        "redlease_elections_won_total",
        "terms this instance has won"
    );
    describe_counter!(
        "redlease_election_stepdowns_total",
        "terms this instance has ended, by reason"
    );
    describe_histogram!(
        "redlease_election_renew_seconds",
        Unit::Seconds,
        "round trip of each successful renewal"
    );
    describe_counter!(
        "redlease_election_renew_failures_total",
        "renewals that failed (errors and timeouts)"
    );
    describe_counter!(
        "redlease_election_store_lost_total",
        "discoveries that the store lost its fence state, by kind"
    );
    describe_histogram!(
        "redlease_lock_obtain_seconds",
        Unit::Seconds,
        "obtain calls that got the lock, waiting included"
    );
    describe_counter!(
        "redlease_lock_not_obtained_total",
        "obtain calls that gave up without the lock"
    );
    describe_counter!(
        "redlease_lock_lost_total",
        "held locks lost before release, by reason"
    );
    describe_counter!(
        "redlease_lock_max_hold_total",
        "held locks ended at their max hold (not losses)"
    );
    describe_counter!(
        "redlease_lock_refresh_failures_total",
        "failed refreshes and auto-renewals"
    );
}

/// A run started: the is-leader gauge exists (at 0) before a first term, so a follower
/// reports 0 rather than nothing.
pub(crate) fn contending(election: &str) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("redlease_election_is_leader", "election" => election.to_owned()).set(0.0);
}

pub(crate) fn elected(election: &str, token: Token) {
    #[cfg(feature = "metrics")]
    {
        let labels = [("election", election.to_owned())];
        metrics::counter!("redlease_elections_won_total", &labels).increment(1);
        metrics::gauge!("redlease_election_is_leader", &labels).set(1.0);
        // Tokens are at most 2^53: exact in an f64.
        metrics::gauge!("redlease_election_token", &labels).set(token.get() as f64);
    }
}

pub(crate) fn stepped_down(election: &str, reason: StepDownReason) {
    #[cfg(feature = "metrics")]
    {
        let labels = [
            ("election", election.to_owned()),
            ("reason", format!("{reason:?}")),
        ];
        metrics::counter!("redlease_election_stepdowns_total", &labels).increment(1);
        metrics::gauge!("redlease_election_is_leader", "election" => election.to_owned()).set(0.0);
    }
}

pub(crate) fn renewed(election: &str, took: Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("redlease_election_renew_seconds", "election" => election.to_owned())
        .record(took.as_secs_f64());
}

pub(crate) fn renew_failed(election: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("redlease_election_renew_failures_total", "election" => election.to_owned())
        .increment(1);
}

pub(crate) fn store_lost(election: &str, loss: &StoreLoss) {
    #[cfg(feature = "metrics")]
    {
        let kind = match loss {
            StoreLoss::NewEpoch { .. } => "new_epoch",
            _ => "counter_behind",
        };
        let labels = [("election", election.to_owned()), ("kind", kind.to_owned())];
        metrics::counter!("redlease_election_store_lost_total", &labels).increment(1);
    }
}

pub(crate) fn lock_obtained(lock: &str, took: Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("redlease_lock_obtain_seconds", "lock" => lock_label(lock))
        .record(took.as_secs_f64());
}

pub(crate) fn lock_not_obtained(lock: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("redlease_lock_not_obtained_total", "lock" => lock_label(lock)).increment(1);
}

pub(crate) fn lock_lost(lock: &str, reason: LossReason) {
    #[cfg(feature = "metrics")]
    if reason == LossReason::MaxHoldReached {
        // Not a loss: counted apart, so an alert on losses never fires for a capped hold.
        metrics::counter!("redlease_lock_max_hold_total", "lock" => lock_label(lock)).increment(1);
        return;
    }
    #[cfg(feature = "metrics")]
    metrics::counter!(
        "redlease_lock_lost_total",
        "lock" => lock_label(lock),
        "reason" => format!("{reason:?}")
    )
    .increment(1);
}

pub(crate) fn lock_refresh_failed(lock: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("redlease_lock_refresh_failures_total", "lock" => lock_label(lock))
        .increment(1);
}

#[cfg(test)]
mod tests {
    #[test]
    fn lock_labels_are_prefixes() {
        assert_eq!(super::lock_prefix("{jobs}:42"), "{jobs}");
        assert_eq!(super::lock_prefix("jobs:42:x"), "jobs");
        assert_eq!(super::lock_prefix("report"), "report");
        assert_eq!(super::lock_prefix("{open"), "{open");
        let long = "é".repeat(100);
        let cut = super::lock_prefix(&long);
        assert!(cut.len() <= super::LOCK_LABEL_MAX_LEN && long.starts_with(cut));
    }

    #[test]
    fn lock_label_cardinality_is_bounded() {
        let first = super::lock_label("{first}:7");
        let labels: std::collections::HashSet<String> = (0..2 * super::LOCK_LABEL_LIMIT)
            .map(|i| super::lock_label(&format!("item-{i}")))
            .collect();
        assert!(
            labels.len() <= super::LOCK_LABEL_LIMIT + 1,
            "{}",
            labels.len()
        );
        assert!(labels.contains(super::LOCK_LABEL_OTHER));
        // A prefix labelled before the limit keeps its label.
        assert_eq!(super::lock_label("{first}:8"), first);
    }
}
