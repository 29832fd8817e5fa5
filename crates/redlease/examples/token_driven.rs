//! The token-driven style: `hold` keeps this instance elected without a callback, and other
//! tasks (here, a request handler loop) act as the leader through `token()` and fenced writes.
//!
//! ```sh
//! REDLEASE_REDIS_URL=redis://127.0.0.1:6379 cargo run -p redlease --example token_driven
//! ```
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::time::Duration;

use redlease::{CancellationToken, ElectionConfig, Elector};

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
    let config = ElectionConfig::builder("scheduler", redlease::default_instance_id())
        .ttl(Duration::from_secs(3))
        .build()?;
    let elector = Elector::new(backend, config);
    let shutdown = CancellationToken::new();
    let holder = {
        let (e, s) = (elector.clone(), shutdown.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    let ctrl_c = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        ctrl_c.cancel();
    });

    // Some other part of the application: acts only with a current token, and writes only
    // through the fence (is_leader() would be advisory at best).
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    while !shutdown.is_cancelled() {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tick.tick() => {}
        }
        match elector.fencer() {
            Some(fencer) => {
                let outcome = fencer
                    .set("scheduler:last-run", fencer.token().get())
                    .await?;
                println!(
                    "token {}: write {}",
                    fencer.token(),
                    if outcome.is_applied() {
                        "applied"
                    } else {
                        "refused (stale)"
                    }
                );
            }
            None => println!("not leader ({:?})", elector.state().role),
        }
    }
    holder.await??;
    Ok(())
}
