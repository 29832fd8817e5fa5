//! `redlease demo`: a failover story, on the in-memory store by default or on Redis.
//!
//! Three contenders elect a leader. The leader writes under its token, then **stalls**: its
//! calls to the store hang (a wrapper backend blocks them while a flag is set), as in a long
//! GC pause, so it cannot renew. Its lease expires at the store and a successor is elected
//! with a higher token. The stalled leader then resumes and, still holding its old token,
//! writes: the store refuses the write (stale), because the successor's election stamped a
//! higher mark.
//!
//! The parts: `stall` (the wrapper backend that hangs a leader's calls), `store` (the
//! in-memory or Redis store the story runs on), `story` (the contenders and the plot, with its
//! checks), `render` (what is printed: the observer, the write outcomes, the verdict) and
//! `model` (what they share: the story's constants, its keys and its summary). Imports go one
//! way: `story` uses `stall`, `store` and `render`; all of them use `model`, which uses none.

mod model;
mod render;
mod stall;
mod store;
mod story;

use std::sync::Arc;
use std::time::Duration;

use redlease::core::Instant;
use redlease::memory::{ManualClock, MemoryBackend};
use redlease::redis::RedisBackend;

use crate::exit::Failure;
use crate::output::{Progress, Sink};
use crate::{Ctx, conn};

use render::finish;
use store::{MemoryStore, RedisStore};
use story::story;

pub(crate) async fn demo(ctx: &Ctx) -> Result<u8, Failure> {
    let progress = Arc::new(Progress::new(ctx.json, Sink::Stdout));
    if ctx.redis_explicit {
        let connection = conn::connect(ctx).await?;
        let suffix: String = redlease::random_owner().chars().take(8).collect();
        let store = RedisStore {
            backend: RedisBackend::new(connection),
        };
        let name = format!("redlease-demo-{suffix}");
        let label = format!("on Redis at {}", ctx.shown_url);
        let store = Arc::new(store);
        let result = story(Arc::clone(&store), &name, &label, &progress).await;
        store.cleanup(&name).await;
        finish(result, &progress)
    } else {
        let clock = ManualClock::new();
        // The in-memory store expires leases on its manual clock: keep it equal to the real
        // time elapsed (the electors' deadlines run on the real clock).
        let ticker = tokio::spawn(follow_real_time(clock.clone()));
        let store = MemoryStore {
            backend: MemoryBackend::new(clock),
        };
        let label = "on the in-memory store (no Redis needed)".to_owned();
        let result = story(Arc::new(store), "redlease-demo", &label, &progress).await;
        ticker.abort();
        finish(result, &progress)
    }
}

async fn follow_real_time(clock: ManualClock) {
    let start = tokio::time::Instant::now();
    loop {
        clock.set(Instant::from_origin(start.elapsed()));
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
