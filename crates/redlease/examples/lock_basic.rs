//! A lock with retries and a fencing token: obtain `{invoice-42}:lock` (waiting for another
//! holder with exponential backoff), stamp a write with the token through the fencer, extend
//! the lock once, and release it.
//!
//! ```sh
//! REDLEASE_REDIS_URL=redis://127.0.0.1:6379 cargo run -p redlease --example lock_basic
//! ```
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::time::Duration;

use redlease::{LockError, LockOptions, Locker, RetryStrategy};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url =
        std::env::var("REDLEASE_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let backend = match redlease::redis::connect(&url).await {
        Ok(b) => b,
        Err(e) => {
            eprintln!("cannot reach Redis at {url}: {e}");
            std::process::exit(2);
        }
    };
    let locker = Locker::new(backend);

    // The hash tag keeps the lock and its fence counter in one slot (required on Cluster,
    // harmless elsewhere).
    let options = LockOptions::new()
        .retry(RetryStrategy::exponential(
            Duration::from_millis(20),
            Duration::from_millis(500),
        )?)
        .wait(Duration::from_secs(10))
        .fence_key("{invoice-42}:fence")
        .metadata("lock_basic example");
    let lock = match locker
        .obtain("{invoice-42}:lock", Duration::from_secs(5), options)
        .await
    {
        Ok(lock) => lock,
        Err(e) if e.is_not_obtained() => {
            // NotObtained, or DeadlineExceeded whose last attempt found it held.
            println!("someone else holds the lock: {e}");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let Some(token) = lock.fence_token() else {
        return Err("a fence key was given, so a token is minted".into());
    };
    println!(
        "obtained with fencing token {token} (owner token {})",
        lock.owner()
    );

    // Writes go through the fencer: Redis refuses them once a newer holder has written.
    if let Some(fencer) = lock.fencer() {
        let outcome = fencer.hset("{invoice-42}:state", "status", "paid").await?;
        println!(
            "fenced write {}",
            if outcome.is_applied() {
                "applied"
            } else {
                "refused: a newer holder exists"
            }
        );
    }

    // Longer than expected: extend the lock.
    match lock.refresh(Duration::from_secs(5)).await {
        Ok(()) => println!("extended; {:?} left", lock.ttl().await?),
        Err(LockError::NotHeld) => {
            println!("the lock expired or was taken; stopping");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    }

    match lock.release().await {
        Ok(()) => println!("released"),
        Err(LockError::NotHeld) => println!("already gone (expired or taken)"),
        Err(e) => return Err(e.into()),
    }
    Ok(())
}
