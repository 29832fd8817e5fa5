//! The preflight report of a Redis server: `CONFIG GET` and `INFO replication`, read into a
//! [`StoreReport`]. A server that refuses either (a managed service without `CONFIG`, an ACL
//! without `@admin`) gives an unknown part with its own words in the notes, never an error.

use lease_core::BackendError;
use lease_core::preflight::{Eviction, Persistence, Replication, StoreReport};
use redis::aio::ConnectionLike;

use crate::error::backend_error;

/// The settings read with one `CONFIG GET`.
const SETTINGS: [&str; 5] = [
    "appendonly",
    "appendfsync",
    "save",
    "maxmemory",
    "maxmemory-policy",
];

/// Reads the report over `conn`. Errors only when the server could not be asked.
pub(crate) async fn read<C: ConnectionLike + Send>(
    conn: &mut C,
) -> Result<StoreReport, BackendError> {
    let mut report = StoreReport::unknown("read with CONFIG GET and INFO replication");
    let mut config = redis::cmd("CONFIG");
    config.arg("GET");
    for s in SETTINGS {
        config.arg(s);
    }
    match config.query_async::<Vec<String>>(conn).await {
        Ok(flat) => {
            let get = |name: &str| {
                flat.chunks(2)
                    .find(|kv| kv.first().is_some_and(|k| k.eq_ignore_ascii_case(name)))
                    .and_then(|kv| kv.get(1))
                    .map(String::as_str)
            };
            report.persistence = persistence(get("appendonly"), get("appendfsync"), get("save"));
            report.eviction = eviction(get("maxmemory"), get("maxmemory-policy"));
        }
        Err(e) => disclose_or_fail(&mut report, "CONFIG GET", e)?,
    }
    match redis::cmd("INFO")
        .arg("replication")
        .query_async::<String>(conn)
        .await
    {
        Ok(info) => report.replication = replication(&info),
        Err(e) => disclose_or_fail(&mut report, "INFO replication", e)?,
    }
    Ok(report)
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
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n";
        assert_eq!(replication(info), Replication::Primary { replicas: 2 });
        assert_eq!(replication("role:slave\r\n"), Replication::Replica);
        assert_eq!(replication(""), Replication::Unknown);
    }
}
