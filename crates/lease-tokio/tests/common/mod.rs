//! Helpers shared by lease-tokio's tests on the in-memory backend and tokio's paused clock.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use lease_core::Instant;
use lease_core::memory::ManualClock;

/// Keeps the backend's manual clock equal to tokio's (paused) clock.
pub fn bridge(clock: ManualClock) -> tokio::task::JoinHandle<()> {
    let origin = tokio::time::Instant::now();
    tokio::spawn(async move {
        loop {
            clock.set(Instant::from_origin(tokio::time::Instant::now() - origin));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
}

/// A current-thread runtime with paused time (for tests that install a thread-local
/// subscriber or recorder around `block_on`).
pub fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime")
}
pub mod sim;
