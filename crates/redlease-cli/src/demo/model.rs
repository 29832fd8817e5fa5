//! What the demo's parts share: the story's constants, the report key and the story's
//! summary. It imports nothing of the demo, so the parts above it form no circle.

use std::time::Duration;

use redlease::Token;

/// The lease TTL of the story: short, so the whole story takes about two seconds.
pub(super) const TTL: Duration = Duration::from_secs(1);
/// The contenders.
pub(super) const NAMES: [&str; 3] = ["alpha", "bravo", "charlie"];
/// A hang guard for each step of the story (never reached when things work).
pub(super) const STEP_LIMIT: Duration = Duration::from_secs(5);
/// How long the first leader works before it stalls (pacing of the story only).
pub(super) const WORK_BEFORE_STALL: Duration = Duration::from_millis(300);
/// The delay between the contenders' starts.
pub(super) const STAGGER: Duration = Duration::from_millis(20);
/// The exit code when the story did not go as expected.
pub(super) const STORY_FAILED: u8 = 1;

/// What the story proved.
#[derive(Debug)]
pub(super) struct Summary {
    pub(super) first_token: Token,
    pub(super) successor_token: Token,
    pub(super) refused_mark: Token,
}

/// The key of the report the leaders write under their tokens.
pub(super) fn report_key(name: &str) -> String {
    format!("{name}:report")
}
