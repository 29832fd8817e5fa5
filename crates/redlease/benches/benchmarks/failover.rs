//! Election failover: the leader is killed (its task aborted mid-term, nothing released, as a
//! SIGKILL would leave it); the time until the follower is elected, in TTLs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode};
use redlease::redis::RedisBackend;
use redlease::{CancellationToken, ElectionConfig, Elector, LeaseBackend, Role};
use tokio::runtime::Runtime;

use crate::setup::{Env, connect};

/// The election TTL of the failover benchmark.
pub(crate) const TTL: Duration = Duration::from_millis(500);

static RUN: AtomicU64 = AtomicU64::new(0);

/// Every failover measured (criterion's samples and its warm-up); each one is a proven
/// election of the successor (see [`once`]).
#[derive(Debug, Default, Clone)]
pub(crate) struct Failovers {
    pub(crate) samples: Vec<Duration>,
}

/// Waits (bounded) until the elector's role matches; returns that role.
async fn wait_role<B: LeaseBackend>(
    e: &Elector<B>,
    what: &str,
    pred: impl Fn(&Role) -> bool,
) -> Role {
    let mut rx = e.subscribe();
    let state = tokio::time::timeout(Duration::from_secs(20), rx.wait_for(|s| pred(&s.role)))
        .await
        .unwrap_or_else(|_| panic!("no {what} within 20 s"))
        .expect("elector state");
    state.role
}

/// One failover: a leader and a follower on their own connections; the leader is killed at a
/// pseudo-random point of its renew cycle; returns the time until the follower leads. Panics
/// unless both elections happened (each within 20 s) and the successor's token is higher.
pub(crate) async fn once(env: &Env) -> Duration {
    let run = RUN.fetch_add(1, Ordering::Relaxed);
    let name = format!("bench:failover:{run}");
    let config = |id: &str| {
        ElectionConfig::builder(name.clone(), id)
            .ttl(TTL)
            .build()
            .expect("config")
    };
    let a = Elector::new(
        RedisBackend::new(connect(&env.servers[0]).await.expect("connect")),
        config("leader"),
    );
    let b = Elector::new(
        RedisBackend::new(connect(&env.servers[0]).await.expect("connect")),
        config("follower"),
    );
    let a_task = tokio::spawn({
        let a = a.clone();
        async move { a.hold(CancellationToken::new()).await }
    });
    let Role::Leader(first) = wait_role(&a, "leader", |r| matches!(r, Role::Leader(_))).await
    else {
        unreachable!("waited for a leader")
    };
    // Pseudo-random phases (from the run number): when the follower starts polling, relative
    // to the leader's renewals, and when the leader is killed. Without them the follower polls
    // in step with the leader's lease and every run measures the same case.
    let mix = run.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let fraction = |bits: u32| ((mix >> bits) & 1023) as u32;
    tokio::time::sleep(a.config().acquire_interval() * fraction(20) / 1024).await;
    let shutdown_b = CancellationToken::new();
    let b_task = tokio::spawn({
        let b = b.clone();
        let s = shutdown_b.clone();
        async move { b.hold(s).await }
    });
    wait_role(&b, "follower", |r| *r == Role::Follower).await;
    tokio::time::sleep(a.config().renew_interval() * fraction(40) / 1024).await;
    a_task.abort();
    let _ = a_task.await;
    let killed = Instant::now();
    let successor = wait_role(&b, "successor", |r| matches!(r, Role::Leader(_))).await;
    let took = killed.elapsed();
    // A failover is an election: the successor leads a new term, with a higher token.
    match successor {
        Role::Leader(token) => assert!(
            token > first,
            "the successor's token {token} is not above the killed leader's {first}"
        ),
        other => panic!("the successor is not leader: {other:?}"),
    }
    shutdown_b.cancel();
    let _ = b_task.await;
    took
}

pub(crate) fn bench(c: &mut Criterion, rt: &Runtime, env: &Env) -> Failovers {
    let samples = Arc::new(Mutex::new(Vec::new()));
    let mut g = c.benchmark_group("failover");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_secs(9));
    g.bench_function("leader_killed_to_successor", |b| {
        b.to_async(rt).iter_custom(|iters| {
            let samples = Arc::clone(&samples);
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let d = once(env).await;
                    samples.lock().expect("samples").push(d);
                    total += d;
                }
                total
            }
        })
    });
    g.finish();
    let samples = samples.lock().expect("samples").clone();
    Failovers { samples }
}
