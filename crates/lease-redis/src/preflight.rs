//! The preflight report of a Redis server: `CONFIG GET`, `INFO server`, `INFO replication` and
//! `TIME`, read into a [`StoreReport`]. A server that refuses a command (a managed service
//! without `CONFIG`, an ACL without `@admin`) gives an unknown part with its own words in the
//! notes, never an error; the report then carries [`StoreRisk::Unconfirmed`] for that part.
//!
//! Every supported server answers: Redis 7+ and Valkey take the five settings in one
//! `CONFIG GET`; Redis 6.2 takes one parameter per call, so a refusal of the multi-parameter
//! call that is not a permission error is retried one parameter at a time.
//!
//! [`StoreRisk::Unconfirmed`]: lease_core::preflight::StoreRisk::Unconfirmed

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lease_core::BackendError;
use lease_core::preflight::{
    ClockSkew, Eviction, Persistence, Replication, ServerInfo, StoreReport,
};
use redis::aio::ConnectionLike;

use crate::error::backend_error;

/// The settings read with `CONFIG GET`.
const SETTINGS: [&str; 5] = [
    "appendonly",
    "appendfsync",
    "save",
    "maxmemory",
    "maxmemory-policy",
];

/// The oldest Redis this crate supports: `SET .. PX`, `PEXPIRE` and Lua scripts are older,
/// but 6.2 is the oldest release tested (`docs/compatibility.md`), and ACLs (6.0) are
/// assumed by the least-privilege setup.
pub const MIN_REDIS: &str = "6.2.0";
/// The oldest Valkey this crate supports (the first Valkey release).
pub const MIN_VALKEY: &str = "7.2.0";

/// Reads the report over `conn`. Errors only when the server could not be asked.
pub(crate) async fn read<C: ConnectionLike + Send>(
    conn: &mut C,
) -> Result<StoreReport, BackendError> {
    let mut report = StoreReport::unknown("read with CONFIG GET, INFO server|replication, TIME");
    match config_get(conn).await? {
        Ok(values) => {
            let get = |name: &str| {
                values
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.as_str())
            };
            report.persistence = persistence(get("appendonly"), get("appendfsync"), get("save"));
            report.eviction = eviction(get("maxmemory"), get("maxmemory-policy"));
        }
        Err(e) => disclose_or_fail(&mut report, "CONFIG GET", e)?,
    }
    match redis::cmd("INFO")
        .arg("server")
        .query_async::<redis::Value>(conn)
        .await
        .and_then(info_texts)
    {
        Ok(infos) => {
            // On Cluster, one text per primary: the oldest server is the one that counts.
            report.server = infos
                .iter()
                .filter_map(|i| server(i))
                .min_by_key(|s| s.version_numbers());
            report.minimum = report.server.as_ref().and_then(minimum);
        }
        Err(e) => disclose_or_fail(&mut report, "INFO server", e)?,
    }
    match redis::cmd("INFO")
        .arg("replication")
        .query_async::<redis::Value>(conn)
        .await
        .and_then(info_texts)
    {
        Ok(infos) => {
            report.replication = infos
                .iter()
                .map(|i| replication(i))
                .max_by_key(replication_rank)
                .unwrap_or(Replication::Unknown);
        }
        Err(e) => disclose_or_fail(&mut report, "INFO replication", e)?,
    }
    let before = SystemTime::now();
    match redis::cmd("TIME").query_async::<(u64, u64)>(conn).await {
        Ok((secs, micros)) => {
            let after = SystemTime::now();
            report.clock_skew = skew(before, after, secs, micros);
        }
        Err(e) => disclose_or_fail(&mut report, "TIME", e)?,
    }
    Ok(report)
}

/// The settings, read with one multi-parameter `CONFIG GET`, or one parameter per call where
/// the server takes only one (Redis 6.2). The inner error is the server's refusal.
async fn config_get<C: ConnectionLike + Send>(
    conn: &mut C,
) -> Result<Result<Vec<(String, String)>, redis::RedisError>, BackendError> {
    let mut all = redis::cmd("CONFIG");
    all.arg("GET").arg(&SETTINGS[..]);
    let first = match all.query_async::<Vec<String>>(conn).await {
        Ok(flat) => return Ok(Ok(pairs(flat))),
        Err(e) => e,
    };
    // A permission error (or a failure to reach the server) is the answer for every
    // parameter alike; anything else is read as "one parameter per call".
    let refused = matches!(backend_error(first.clone()), BackendError::Refused(_));
    if first.code() == Some("NOPERM") || !refused {
        return Ok(Err(first));
    }
    let mut values = Vec::with_capacity(SETTINGS.len());
    for setting in SETTINGS {
        match redis::cmd("CONFIG")
            .arg("GET")
            .arg(setting)
            .query_async::<Vec<String>>(conn)
            .await
        {
            Ok(flat) => values.extend(pairs(flat)),
            Err(e) => return Ok(Err(e)),
        }
    }
    Ok(Ok(values))
}

/// The text of an `INFO` reply: one text from a server, one per node from a cluster
/// connection (redis-rs sends `INFO` to every primary and answers with a map).
fn info_texts(value: redis::Value) -> redis::RedisResult<Vec<String>> {
    match value {
        redis::Value::Map(entries) => entries
            .into_iter()
            .map(|(_, text)| redis::from_redis_value::<String>(text).map_err(Into::into))
            .collect(),
        other => Ok(vec![redis::from_redis_value::<String>(other)?]),
    }
}

/// How risky a node's replication is (a replica worst, then more replicas).
fn replication_rank(r: &Replication) -> (u8, u32) {
    match r {
        Replication::Primary { replicas } => (0, *replicas),
        Replication::Replica => (2, 0),
        _ => (1, 0),
    }
}

fn pairs(flat: Vec<String>) -> Vec<(String, String)> {
    let mut it = flat.into_iter();
    let mut out = Vec::new();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        out.push((k, v));
    }
    out
}

/// The product and version from `INFO server` (Valkey names itself in `server_name` and
/// `valkey_version`, and keeps `redis_version` at the Redis release it is compatible with).
fn server(info: &str) -> Option<ServerInfo> {
    let field = |name: &str| {
        info.lines().find_map(|l| {
            l.trim()
                .strip_prefix(name)
                .and_then(|rest| rest.strip_prefix(':'))
                .map(str::trim)
                .filter(|v| !v.is_empty())
        })
    };
    let product = field("server_name").unwrap_or("redis").to_ascii_lowercase();
    let version = field(&format!("{product}_version")).or_else(|| field("redis_version"))?;
    Some(ServerInfo::new(product, version))
}

/// The oldest supported version of `server`'s product (none for a product we do not know).
fn minimum(server: &ServerInfo) -> Option<ServerInfo> {
    match server.product.as_str() {
        "redis" => Some(ServerInfo::new("redis", MIN_REDIS)),
        "valkey" => Some(ServerInfo::new("valkey", MIN_VALKEY)),
        _ => None,
    }
}

/// The server's clock (`TIME`) against the midpoint of this host's clock around the call.
fn skew(before: SystemTime, after: SystemTime, secs: u64, micros: u64) -> Option<ClockSkew> {
    let before = before.duration_since(UNIX_EPOCH).ok()?;
    let after = after.duration_since(UNIX_EPOCH).ok()?;
    let round_trip = after.checked_sub(before).unwrap_or(Duration::ZERO);
    let midpoint = before + round_trip / 2;
    let server = Duration::from_secs(secs).checked_add(Duration::from_micros(micros))?;
    let offset_ms = if server >= midpoint {
        i64::try_from((server - midpoint).as_millis()).ok()?
    } else {
        -i64::try_from((midpoint - server).as_millis()).ok()?
    };
    Some(ClockSkew::new(offset_ms, round_trip / 2))
}

/// A refusal by the server makes that part unknown (noted); a failure to reach it is an error.
fn disclose_or_fail(
    report: &mut StoreReport,
    what: &str,
    e: redis::RedisError,
) -> Result<(), BackendError> {
    match backend_error(e) {
        BackendError::Refused(message) => {
            report
                .notes
                .push(format!("{what} refused by the server ({message}): unknown"));
            Ok(())
        }
        other => Err(other),
    }
}

fn persistence(
    appendonly: Option<&str>,
    appendfsync: Option<&str>,
    save: Option<&str>,
) -> Persistence {
    match (appendonly, appendfsync, save) {
        (Some("yes"), Some("always"), _) => Persistence::EveryWrite,
        (Some("yes"), Some(_), _) => Persistence::Periodic,
        (Some("no"), _, Some(rules)) if rules.trim().is_empty() => Persistence::None,
        (Some("no"), _, Some(_)) => Persistence::Snapshots,
        _ => Persistence::Unknown,
    }
}

fn eviction(maxmemory: Option<&str>, policy: Option<&str>) -> Eviction {
    let Some(policy) = policy else {
        return Eviction::Unknown;
    };
    let policy = policy.to_owned();
    if !policy.starts_with("allkeys") {
        Eviction::Never { policy }
    } else if maxmemory == Some("0") {
        // No memory limit: nothing is ever evicted, whatever the policy.
        Eviction::Never {
            policy: format!("{policy} (maxmemory 0: no limit)"),
        }
    } else {
        Eviction::Possible { policy }
    }
}

fn replication(info: &str) -> Replication {
    let field = |name: &str| {
        info.lines().find_map(|l| {
            l.trim()
                .strip_prefix(name)
                .and_then(|rest| rest.strip_prefix(':'))
        })
    };
    match field("role") {
        Some("master") => Replication::Primary {
            replicas: field("connected_slaves")
                .and_then(|n| n.parse().ok())
                .unwrap_or(0),
        },
        Some("slave") | Some("replica") => Replication::Replica,
        _ => Replication::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_map_to_guarantees() {
        assert_eq!(
            persistence(Some("yes"), Some("always"), Some("")),
            Persistence::EveryWrite
        );
        assert_eq!(
            persistence(Some("yes"), Some("everysec"), Some("")),
            Persistence::Periodic
        );
        assert_eq!(
            persistence(Some("no"), Some("everysec"), Some("")),
            Persistence::None
        );
        assert_eq!(
            persistence(Some("no"), Some("everysec"), Some("3600 1")),
            Persistence::Snapshots
        );
        assert_eq!(persistence(None, None, None), Persistence::Unknown);
        assert!(matches!(
            eviction(Some("100mb"), Some("allkeys-lru")),
            Eviction::Possible { .. }
        ));
        assert!(matches!(
            eviction(Some("0"), Some("allkeys-lru")),
            Eviction::Never { .. }
        ));
        assert!(matches!(
            eviction(Some("100mb"), Some("volatile-lru")),
            Eviction::Never { .. }
        ));
        assert_eq!(eviction(Some("0"), None), Eviction::Unknown);
        let valkey =
            "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n";
        assert_eq!(server(valkey), Some(ServerInfo::new("valkey", "9.1.2")));
        let redis = "# Server\r\nredis_version:6.2.14\r\nredis_mode:standalone\r\n";
        assert_eq!(server(redis), Some(ServerInfo::new("redis", "6.2.14")));
        assert_eq!(server(""), None);
        assert_eq!(
            minimum(&ServerInfo::new("redis", "7.0.15")),
            Some(ServerInfo::new("redis", MIN_REDIS))
        );
        assert_eq!(minimum(&ServerInfo::new("keydb", "6.3.4")), None);
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000);
        let t1 = t0 + Duration::from_millis(10);
        let ahead = skew(t0, t1, 1_002, 5_000).unwrap();
        assert_eq!(
            (ahead.offset_ms, ahead.uncertainty),
            (2_000, Duration::from_millis(5))
        );
        let behind = skew(t0, t1, 999, 0).unwrap();
        assert_eq!(behind.offset_ms, -1_005);
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n";
        assert_eq!(replication(info), Replication::Primary { replicas: 2 });
        assert_eq!(replication("role:slave\r\n"), Replication::Replica);
        assert_eq!(replication(""), Replication::Unknown);
    }
}
