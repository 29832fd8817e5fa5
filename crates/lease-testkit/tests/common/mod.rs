//! Helpers shared by the kit's own tests.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use lease_testkit::ServerMode;
use lease_testkit::mode::ENV_TEST_SERVERS;

/// How long a "did not answer" check waits. Only ever used as "no answer within X".
pub const NO_ANSWER_WITHIN: Duration = Duration::from_millis(700);

/// A generous bound for calls that must succeed (never asserted as a duration).
pub const ANSWER_WITHIN: Duration = Duration::from_secs(20);

/// The mode forced through the environment, if any.
pub fn forced_mode() -> Option<ServerMode> {
    match std::env::var(ENV_TEST_SERVERS).ok()?.as_str() {
        "container" => Some(ServerMode::Container),
        "process" => Some(ServerMode::Process),
        _ => None,
    }
}

/// A multiplexed connection without redis-rs' own timeouts, so that the tests'
/// client-side timeouts decide what "no answer" means.
pub async fn connect(url: &str) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(None)
        .set_response_timeout(None);
    redis::Client::open(url)?
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// PING with a client-side timeout: `None` when no answer came in time.
pub async fn ping_within(
    conn: &mut redis::aio::MultiplexedConnection,
    within: Duration,
) -> Option<redis::RedisResult<String>> {
    no_answer_is_none(
        tokio::time::timeout(within, redis::cmd("PING").query_async::<String>(conn)).await,
    )
}

/// Opens a connection and PINGs, all within `within`: `None` when nothing answered.
pub async fn connect_and_ping(url: &str, within: Duration) -> Option<redis::RedisResult<String>> {
    no_answer_is_none(
        tokio::time::timeout(within, async {
            let mut conn = connect(url).await?;
            redis::cmd("PING").query_async::<String>(&mut conn).await
        })
        .await,
    )
}

fn no_answer_is_none(
    result: Result<redis::RedisResult<String>, tokio::time::error::Elapsed>,
) -> Option<redis::RedisResult<String>> {
    match result {
        Err(_elapsed) => None,
        Ok(Err(e)) if e.is_timeout() => None,
        Ok(answer) => Some(answer),
    }
}

/// Whether a process with this pid exists and is a live (non-zombie) redis-server.
pub fn redis_process_alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // Field 3 (after the parenthesised comm) is the state.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or("?");
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    state != "Z" && comm.trim().starts_with("redis")
}

/// Whether Docker still knows a container with this id.
pub fn container_exists(id: &str) -> bool {
    std::process::Command::new("docker")
        .args(["container", "inspect", "--format", "{{.Id}}", id])
        .output()
        .is_ok_and(|o| o.status.success())
}
