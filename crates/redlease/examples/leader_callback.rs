//! A leader with a callback: contend for `report-builder`; while elected, write fenced
//! progress every second; stop on Ctrl-C (the lease is released on the way out).
//!
//! ```sh
//! REDLEASE_REDIS_URL=redis://127.0.0.1:6379 cargo run -p redlease --example leader_callback
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
    let config = ElectionConfig::builder("report-builder", redlease::default_instance_id())
        .ttl(Duration::from_secs(5))
        .build()?;
    println!("instance {} contending", config.instance_id());
    let elector = Elector::new(backend, config);

    let shutdown = CancellationToken::new();
    let ctrl_c = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        ctrl_c.cancel();
    });

    elector
        .run(shutdown, |term| async move {
            println!("elected with token {}", term.token());
            let fencer = term.fencer();
            let mut n = 0u64;
            loop {
                tokio::select! {
                    _ = term.cancelled() => break,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
                n += 1;
                match fencer.hset("report-builder:progress", "step", n).await {
                    Ok(outcome) if outcome.is_applied() => println!("step {n} written"),
                    Ok(_) => {
                        println!("fenced out: a newer leader exists; stopping");
                        break;
                    }
                    Err(e) => println!("write failed: {e}"),
                }
            }
            println!("term {} ended", term.token());
        })
        .await?;
    Ok(())
}
