//! The fenced-write counter (feature `metrics`): `redlease_fenced_writes_total`, and the
//! bounded `fence` label.

#[cfg(feature = "metrics")]
use lease_core::FenceOutcome;

#[cfg(feature = "metrics")]
use crate::error::RedisLeaseError;

/// Counts a fenced write (feature `metrics`): `redlease_fenced_writes_total`, labelled `fence`
/// (the mark key's hash tag, or its text before the first `:`: the election's name for an
/// election's mark; cut to 64 bytes, and at most [`FENCE_LABEL_LIMIT`] distinct values per
/// process, later ones labelled `_other`) and `outcome` (`applied`, `stale`, `not_applied`,
/// `unknown`; a permit-fenced write also `not_current`).
#[cfg(feature = "metrics")]
pub(super) fn count(mark_key: &str, result: &Result<FenceOutcome, RedisLeaseError>) {
    let outcome = match result {
        Ok(FenceOutcome::Applied) => "applied",
        Ok(_) => "stale",
        Err(e) => error_outcome(e),
    };
    increment(mark_key, outcome);
}

/// Counts a permit-fenced write as [`count`] does, with one more outcome: `not_current` (the
/// permit had expired or was released; the mark key is the owner's, `<mark key>:<owner>`, so
/// the label is the semaphore's).
#[cfg(feature = "metrics")]
pub(super) fn count_permit(
    mark_key: &str,
    result: &Result<lease_core::semaphore::PermitWriteOutcome, RedisLeaseError>,
) {
    use lease_core::semaphore::PermitWriteOutcome;
    let outcome = match result {
        Ok(PermitWriteOutcome::Applied) => "applied",
        Ok(PermitWriteOutcome::NotCurrent) => "not_current",
        Ok(_) => "stale",
        Err(e) => error_outcome(e),
    };
    increment(mark_key, outcome);
}

#[cfg(feature = "metrics")]
fn error_outcome(e: &RedisLeaseError) -> &'static str {
    if e.is_outcome_unknown() {
        "unknown"
    } else {
        "not_applied"
    }
}

#[cfg(feature = "metrics")]
fn increment(mark_key: &str, outcome: &'static str) {
    metrics::counter!(
        "redlease_fenced_writes_total",
        "fence" => fence_label(mark_key),
        "outcome" => outcome
    )
    .increment(1);
}

/// Describes `redlease_fenced_writes_total` (help text) to the installed recorder; call it
/// once after installing one (feature `metrics`).
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub fn describe_metrics() {
    metrics::describe_counter!(
        "redlease_fenced_writes_total",
        "Redis fenced writes (lock- and permit-fenced), by outcome (applied, stale, \
         not_current, not_applied, unknown)"
    );
}

/// At most this many distinct `fence` label values (of `redlease_fenced_writes_total`) per
/// process; the marks whose prefix comes after them are labelled `_other`, so label
/// cardinality stays bounded whatever mark keys a process writes under.
pub const FENCE_LABEL_LIMIT: usize = 256;

/// The `fence` label of a mark key: its hash tag when it starts with one, else the text
/// before its first `:`, cut to 64 bytes; `_other` past [`FENCE_LABEL_LIMIT`] distinct ones.
#[cfg(feature = "metrics")]
fn fence_label(mark_key: &str) -> String {
    static SEEN: std::sync::LazyLock<std::sync::Mutex<std::collections::HashSet<String>>> =
        std::sync::LazyLock::new(Default::default);
    let prefix = match mark_key.find('}') {
        Some(end) if mark_key.starts_with('{') => &mark_key[..=end],
        _ => mark_key.split(':').next().unwrap_or(mark_key),
    };
    let mut cut = prefix.len().min(64);
    while !prefix.is_char_boundary(cut) {
        cut -= 1;
    }
    let prefix = &prefix[..cut];
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if seen.contains(prefix) || seen.len() < FENCE_LABEL_LIMIT {
        seen.insert(prefix.to_owned());
        return prefix.to_owned();
    }
    "_other".to_owned()
}
