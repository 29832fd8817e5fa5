//! How the kit chooses between Docker containers and local processes.
//!
//! * `REDLEASE_TEST_SERVERS=container` forces testcontainers, `=process` forces a
//!   `redis-server` child process. Unset (or `auto`) picks `container` when a Docker
//!   engine answers **and** the Redis image is present locally, else `process`.
//! * `REDLEASE_REDIS_IMAGE` names the image (default [`DEFAULT_REDIS_IMAGE`]; when it
//!   is unset and that image is absent, the local image built by
//!   `scripts/redis-image.sh`, [`LOCAL_REDIS_IMAGE`], is used if present).
//!
//! The decision is made once per test binary and printed once on stderr.

use std::io::Write;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::process::run_with_timeout;
use crate::{Error, Result};

/// Environment variable forcing the server mode: `container`, `process` or `auto`.
pub const ENV_TEST_SERVERS: &str = "REDLEASE_TEST_SERVERS";
/// Environment variable naming the Redis image used in container mode.
pub const ENV_REDIS_IMAGE: &str = "REDLEASE_REDIS_IMAGE";
/// Default image: the official Redis 7 image (for machines with a registry).
pub const DEFAULT_REDIS_IMAGE: &str = "redis:7";
/// Tag given by `scripts/redis-image.sh` to the local, registry-free image.
pub const LOCAL_REDIS_IMAGE: &str = "redlease-test/redis:local";
/// Environment variable naming the docker CLI (default `docker`).
pub const ENV_DOCKER: &str = "DOCKER";

/// Where the kit's Redis servers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServerMode {
    /// A Docker container started through testcontainers.
    Container,
    /// A `redis-server` child process on a free loopback port.
    Process,
}

impl std::fmt::Display for ServerMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ServerMode::Container => "container",
            ServerMode::Process => "process",
        })
    }
}

impl std::str::FromStr for ServerMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "container" | "docker" => Ok(ServerMode::Container),
            "process" => Ok(ServerMode::Process),
            other => Err(Error::Config(format!(
                "{ENV_TEST_SERVERS}={other:?}: expected `container`, `process` or `auto`"
            ))),
        }
    }
}

/// The mode decision for this test binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// The chosen mode.
    pub mode: ServerMode,
    /// The image used in container mode.
    pub image: String,
    /// Why this mode was chosen (human readable).
    pub reason: String,
}

/// Start of the announcement of a binary whose Redis servers run as containers.
///
/// `cargo xtask test` reads these announcements from each test binary's stderr to
/// prove which mode every suite used: keep the three prefixes in step with `xtask`.
pub const ANNOUNCE_CONTAINER: &str = "lease-testkit: Redis servers run as containers";
/// Start of the announcement of a binary whose Redis servers run as processes.
pub const ANNOUNCE_PROCESS: &str = "lease-testkit: Redis servers run as redis-server processes";
/// Start of the announcement of a binary whose mode could not be decided.
pub const ANNOUNCE_UNDECIDED: &str = "lease-testkit: Redis server mode not decided";

static SELECTION: OnceLock<std::result::Result<Selection, String>> = OnceLock::new();

/// The one line printed on stderr, once per test binary, for this decision.
fn announcement(selection: &Result<Selection>) -> String {
    match selection {
        Ok(s) => match s.mode {
            ServerMode::Container => {
                format!("{ANNOUNCE_CONTAINER} (image {}; {})", s.image, s.reason)
            }
            ServerMode::Process => format!("{ANNOUNCE_PROCESS} ({})", s.reason),
        },
        Err(e) => format!("{ANNOUNCE_UNDECIDED}: {e}"),
    }
}

/// The mode decision for this test binary (computed once, printed once on stderr).
pub fn selection() -> Result<&'static Selection> {
    SELECTION
        .get_or_init(|| {
            let selection = decide();
            // Written to the real stderr, not through `eprintln!`, so that the test
            // harness does not capture it: it shows once per test binary.
            let _ = writeln!(std::io::stderr(), "{}", announcement(&selection));
            selection.map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| Error::Config(e.clone()))
}

/// The mode Redis servers use by default in this test binary.
pub fn server_mode() -> Result<ServerMode> {
    selection().map(|s| s.mode)
}

fn decide() -> Result<Selection> {
    let forced = match std::env::var(ENV_TEST_SERVERS) {
        Ok(v) if v.trim().is_empty() || v.trim().eq_ignore_ascii_case("auto") => None,
        Ok(v) => Some(v.parse::<ServerMode>()?),
        Err(_) => None,
    };
    let explicit_image = std::env::var(ENV_REDIS_IMAGE)
        .ok()
        .filter(|s| !s.trim().is_empty());
    // A server of the matrix other than the default runs as a process: the local image
    // carries the default Redis only.
    let server = crate::server::choice()?;
    if !server.is_default() {
        if forced == Some(ServerMode::Container) {
            return Err(Error::Config(format!(
                "{}={} runs as a process only; unset {ENV_TEST_SERVERS}=container",
                crate::server::ENV_SERVER,
                std::env::var(crate::server::ENV_SERVER).unwrap_or_default()
            )));
        }
        return Ok(Selection {
            mode: ServerMode::Process,
            image: explicit_image.unwrap_or_else(|| DEFAULT_REDIS_IMAGE.to_owned()),
            reason: format!(
                "{}={}: {}",
                crate::server::ENV_SERVER,
                std::env::var(crate::server::ENV_SERVER).unwrap_or_default(),
                server.program.display()
            ),
        });
    }
    match forced {
        Some(ServerMode::Process) => Ok(Selection {
            mode: ServerMode::Process,
            image: explicit_image.unwrap_or_else(|| DEFAULT_REDIS_IMAGE.to_owned()),
            reason: format!("forced by {ENV_TEST_SERVERS}=process"),
        }),
        Some(ServerMode::Container) => {
            let image = match explicit_image {
                Some(image) => image,
                None => pick_present_image().unwrap_or_else(|| DEFAULT_REDIS_IMAGE.to_owned()),
            };
            Ok(Selection {
                mode: ServerMode::Container,
                image,
                reason: format!("forced by {ENV_TEST_SERVERS}=container"),
            })
        }
        _ => {
            if let Err(why) = docker_answers() {
                return Ok(Selection {
                    mode: ServerMode::Process,
                    image: explicit_image.unwrap_or_else(|| DEFAULT_REDIS_IMAGE.to_owned()),
                    reason: format!("no Docker engine answers: {why}"),
                });
            }
            let image = match explicit_image {
                Some(image) if image_present(&image) => Some(image),
                Some(image) => {
                    return Ok(Selection {
                        mode: ServerMode::Process,
                        reason: format!("Docker answers but image {image} is not present locally"),
                        image,
                    });
                }
                None => pick_present_image(),
            };
            Ok(match image {
                Some(image) => Selection {
                    mode: ServerMode::Container,
                    image,
                    reason: "Docker answers and the image is present".to_owned(),
                },
                None => Selection {
                    mode: ServerMode::Process,
                    image: DEFAULT_REDIS_IMAGE.to_owned(),
                    reason: format!(
                        "Docker answers but neither {DEFAULT_REDIS_IMAGE} nor {LOCAL_REDIS_IMAGE} \
                         is present (build one with scripts/redis-image.sh)"
                    ),
                },
            })
        }
    }
}

fn pick_present_image() -> Option<String> {
    [DEFAULT_REDIS_IMAGE, LOCAL_REDIS_IMAGE]
        .into_iter()
        .find(|image| image_present(image))
        .map(str::to_owned)
}

/// The docker CLI to run.
pub(crate) fn docker_program() -> String {
    std::env::var(ENV_DOCKER)
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "docker".to_owned())
}

/// `Ok(())` when `docker version` reaches an engine within a few seconds.
pub fn docker_answers() -> std::result::Result<(), String> {
    let mut cmd = Command::new(docker_program());
    cmd.args(["version", "--format", "{{.Server.Version}}"]);
    match run_with_timeout(cmd, Duration::from_secs(10)) {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(String::from_utf8_lossy(&out.stderr).trim().to_owned()),
        Err(e) => Err(e.to_string()),
    }
}

/// Whether `image` exists in the local Docker engine.
pub fn image_present(image: &str) -> bool {
    let mut cmd = Command::new(docker_program());
    cmd.args(["image", "inspect", "--format", "{{.Id}}", image]);
    run_with_timeout(cmd, Duration::from_secs(10)).is_ok_and(|out| out.status.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selection(mode: ServerMode) -> Selection {
        Selection {
            mode,
            image: "redlease-test/redis:local".to_owned(),
            reason: "a reason".to_owned(),
        }
    }

    /// The exact text `cargo xtask test` matches (its own tests parse the same lines).
    #[test]
    fn announcements_keep_the_prefixes_xtask_parses() {
        assert_eq!(
            announcement(&Ok(selection(ServerMode::Container))),
            "lease-testkit: Redis servers run as containers \
             (image redlease-test/redis:local; a reason)"
        );
        assert_eq!(
            announcement(&Ok(selection(ServerMode::Process))),
            "lease-testkit: Redis servers run as redis-server processes (a reason)"
        );
        let undecided = announcement(&Err(Error::Config("bad".to_owned())));
        assert!(
            undecided.starts_with("lease-testkit: Redis server mode not decided: "),
            "{undecided}"
        );
    }
}
