//! A lock kept alive in the background while long work runs: the lock renews itself every
//! TTL/3 and its loss token fires if renewal fails for good or the local deadline passes, so
//! the work stops as soon as the lock is no longer safely held. Ctrl-C stops early.
//!
//! ```sh
//! REDLEASE_REDIS_URL=redis://127.0.0.1:6379 cargo run -p redlease --example lock_auto_renew
//! ```
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::ExitCode;
use std::time::Duration;

use redlease::{LockError, LockOptions, Locker};

const TTL: Duration = Duration::from_secs(3);

/// Stand-in for long work: ten steps of a second each.
async fn work() {
    for step in 1..=10 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        println!("step {step}/10 done");
    }
}

#[tokio::main]
async fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let url =
        std::env::var("REDLEASE_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let backend = match redlease::redis::connect(&url).await {
        Ok(b) => b,
        Err(e) => {
            eprintln!("cannot reach Redis at {url}: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let locker = Locker::new(backend);
    let lock = match locker
        .obtain(
            "{nightly-report}:lock",
            TTL,
            LockOptions::new()
                .auto_renew(TTL / 3)
                .fence_key("{nightly-report}:fence"),
        )
        .await
    {
        Ok(lock) => lock,
        Err(e @ LockError::NotObtained { .. }) => {
            println!("another instance runs the report: {e}");
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => return Err(e.into()),
    };
    let token = lock
        .fence_token()
        .map_or_else(|| "none".to_owned(), |t| t.to_string());
    println!(
        "running with fencing token {token}; renewing every {:?}",
        TTL / 3
    );

    let lost = lock.lost();
    tokio::select! {
        _ = lost.cancelled() => {
            // Renewal failed for good (or the deadline passed): someone else may hold the lock
            // now. Stop at once; writes stamped with the old token are refused by the fence.
            eprintln!("lock lost; abandoning the work");
            return Ok(ExitCode::FAILURE);
        }
        _ = tokio::signal::ctrl_c() => println!("interrupted"),
        _ = work() => println!("work finished"),
    }

    match lock.release().await {
        Ok(()) => println!("released"),
        Err(LockError::NotHeld) => println!("the lock was already gone"),
        Err(e) => return Err(e.into()),
    }
    Ok(ExitCode::SUCCESS)
}
