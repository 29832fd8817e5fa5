//! A follower that routes to the current leader: it contends like everyone else, and while
//! following it asks who leads (instance id and token) to forward work there. It also watches
//! role changes through `subscribe()`.
//!
//! ```sh
//! REDLEASE_REDIS_URL=redis://127.0.0.1:6379 cargo run -p redlease --example follower_router
//! ```
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::time::Duration;

use redlease::{CancellationToken, ElectionConfig, Elector, Role};

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
    let config = ElectionConfig::builder("api-writer", redlease::default_instance_id())
        .ttl(Duration::from_secs(5))
        .build()?;
    let elector = Elector::new(backend, config);
    let shutdown = CancellationToken::new();
    let run = {
        let (e, s) = (elector.clone(), shutdown.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    let ctrl_c = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        ctrl_c.cancel();
    });

    let mut roles = elector.subscribe();
    loop {
        let role = roles.borrow_and_update().role;
        match role {
            Role::Leader(token) => println!("I lead (token {token}): serving writes locally"),
            Role::Follower | Role::Candidate => match elector.leader().await {
                Ok(Some(leader)) => println!(
                    "routing writes to {} (token {:?}, {:?} left)",
                    leader.instance_id, leader.token, leader.remaining
                ),
                Ok(None) => println!("no leader right now; retrying"),
                Err(e) => println!("cannot ask who leads: {e}"),
            },
            _ => break,
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            changed = roles.changed() => if changed.is_err() { break },
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
        }
    }
    run.await??;
    Ok(())
}
