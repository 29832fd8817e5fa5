//! What an idle leader and an idle follower cost Redis: commands per second and memory, read
//! from `INFO` on a server nothing else talks to. (The benchmark process's own RSS says
//! nothing about Redis, so it is not reported.)

use std::time::Duration;

use lease_testkit::redis::RedisServer;
use redis::aio::MultiplexedConnection;
use redlease::redis::RedisBackend;
use redlease::{CancellationToken, ElectionConfig, Elector, LeaseBackend, Role, Token};

use crate::setup::{connect, info_field};

/// The election TTL of the idle measurement (renew every TTL/3, follower polls every TTL/2).
pub(crate) const TTL: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
pub(crate) struct Idle {
    pub(crate) period: Duration,
    /// The token the idle leader was elected with (the measurement fails without an
    /// election).
    pub(crate) leader_token: Token,
    pub(crate) leader_commands_per_sec: f64,
    pub(crate) follower_commands_per_sec: f64,
    pub(crate) leader_evalsha_per_sec: f64,
    pub(crate) follower_evalsha_per_sec: f64,
    /// `used_memory` after the leader is elected, minus before (keys, script cache, its
    /// client connection).
    pub(crate) leader_memory_bytes: i64,
    /// `used_memory` after the follower joined, minus before (its client connection).
    pub(crate) follower_memory_bytes: i64,
}

struct Sample {
    commands: u64,
    evalsha: u64,
    memory: i64,
}

async fn sample(conn: &mut MultiplexedConnection) -> Result<Sample, redis::RedisError> {
    // One INFO command per sample (it counts itself once, subtracted below).
    let info: String = redis::cmd("INFO")
        .arg("everything")
        .query_async(conn)
        .await?;
    let num = |f: &str| info_field(&info, f).and_then(|v| v.parse::<i64>().ok());
    let evalsha = info
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:"))
        .and_then(|rest| rest.split(',').find_map(|kv| kv.strip_prefix("calls=")))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    Ok(Sample {
        commands: num("total_commands_processed").unwrap_or(0).max(0) as u64,
        evalsha,
        memory: num("used_memory").unwrap_or(0),
    })
}

fn per_sec(before: &Sample, after: &Sample, period: Duration) -> (f64, f64) {
    // The INFO that took `before` is counted in `after`.
    let commands = after.commands.saturating_sub(before.commands + 1) as f64;
    let evalsha = after.evalsha.saturating_sub(before.evalsha) as f64;
    let secs = period.as_secs_f64();
    (commands / secs, evalsha / secs)
}

/// Waits (bounded) until the elector's role matches; an error names what did not happen.
async fn wait_role<B: LeaseBackend>(
    e: &Elector<B>,
    what: &str,
    pred: impl Fn(&Role) -> bool,
) -> Result<Role, String> {
    let mut rx = e.subscribe();
    match tokio::time::timeout(Duration::from_secs(20), rx.wait_for(|s| pred(&s.role))).await {
        Ok(Ok(state)) => Ok(state.role),
        Ok(Err(_)) => Err(format!("the elector stopped before it became {what}")),
        Err(_) => Err(format!("no {what} within 20 s")),
    }
}

/// Leader alone for `period`, then leader and follower for `period`.
pub(crate) async fn measure(period: Duration) -> Result<Idle, Box<dyn std::error::Error>> {
    let server = RedisServer::start().await?;
    let mut info = connect(&server).await?;
    let config = |id: &str| ElectionConfig::builder("bench:idle", id).ttl(TTL).build();
    let before_leader = sample(&mut info).await?;

    let leader = Elector::new(
        RedisBackend::new(connect(&server).await?),
        config("leader")?,
    );
    let stop = CancellationToken::new();
    let leader_task = tokio::spawn({
        let (e, s) = (leader.clone(), stop.clone());
        async move { e.hold(s).await }
    });
    let Role::Leader(leader_token) =
        wait_role(&leader, "leader", |r| matches!(r, Role::Leader(_))).await?
    else {
        return Err("the leader's role is not Leader".into());
    };
    tokio::time::sleep(TTL).await; // settle: first renewals, script cache
    let l0 = sample(&mut info).await?;
    tokio::time::sleep(period).await;
    let l1 = sample(&mut info).await?;

    let follower = Elector::new(
        RedisBackend::new(connect(&server).await?),
        config("follower")?,
    );
    let follower_task = tokio::spawn({
        let (e, s) = (follower.clone(), stop.clone());
        async move { e.hold(s).await }
    });
    wait_role(&follower, "follower", |r| *r == Role::Follower).await?;
    tokio::time::sleep(TTL).await;
    let f0 = sample(&mut info).await?;
    tokio::time::sleep(period).await;
    let f1 = sample(&mut info).await?;
    stop.cancel();
    let _ = leader_task.await;
    let _ = follower_task.await;

    let (leader_cps, leader_eps) = per_sec(&l0, &l1, period);
    let (both_cps, both_eps) = per_sec(&f0, &f1, period);
    Ok(Idle {
        period,
        leader_token,
        leader_commands_per_sec: leader_cps,
        follower_commands_per_sec: both_cps - leader_cps,
        leader_evalsha_per_sec: leader_eps,
        follower_evalsha_per_sec: both_eps - leader_eps,
        leader_memory_bytes: l0.memory - before_leader.memory,
        follower_memory_bytes: f0.memory - l1.memory,
    })
}
