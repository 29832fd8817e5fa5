//! Clean-up of servers left behind by test processes that died without running
//! their destructors (SIGKILL, `timeout`, a crashed harness).
//!
//! Every kit directory name ends in `-<owner pid>-<n>-<nanos>` and every kit
//! container carries the label `redlease.testkit.owner=<hostname>:<pid>`. Once per
//! test binary, before its first server starts, the kit removes the directories and
//! containers whose owner process no longer exists (and kills processes still
//! running in such a directory). Resources of live processes are never touched, nor
//! directories kept with `REDLEASE_KEEP_TMP=1`, and only `redis-server` and
//! `postgres` processes are ever killed.

use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::Duration;

use crate::process::send_signal;
use crate::tempdir::{ENV_TMPDIR, KEEP_MARKER, TEMP_PREFIX};

/// Docker label naming the process that owns a container (`<hostname>:<pid>`).
pub const OWNER_LABEL: &str = "redlease.testkit.owner";

static DIRS: Once = Once::new();
static CONTAINERS: Once = Once::new();

/// `<hostname>:<pid>` of this process.
pub(crate) fn owner() -> String {
    format!("{}:{}", hostname(), std::process::id())
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default()
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Removes stale kit directories (and processes running in them), once.
pub(crate) fn reap_stale_dirs() {
    DIRS.call_once(|| {
        let root = std::env::var_os(ENV_TMPDIR)
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let Ok(entries) = std::fs::read_dir(&root) else {
            return;
        };
        let stale: Vec<PathBuf> = entries
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                if !name.starts_with(TEMP_PREFIX) {
                    return None;
                }
                // Kept on purpose (REDLEASE_KEEP_TMP=1).
                if entry.path().join(KEEP_MARKER).exists() {
                    return None;
                }
                // ...-<pid>-<n>-<nanos>
                let pid: u32 = name.rsplit('-').nth(2)?.parse().ok()?;
                (pid != std::process::id() && !pid_alive(pid)).then(|| entry.path())
            })
            .collect();
        if stale.is_empty() {
            return;
        }
        kill_processes_in(&stale);
        for dir in &stale {
            if std::fs::remove_dir_all(dir).is_ok() {
                eprintln!("lease-testkit: removed stale {}", dir.display());
            }
        }
    });
}

/// Whether a process is a server the kit starts (by its command name).
fn is_server_process(pid: u32) -> bool {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let comm = comm.trim();
    comm.starts_with("redis-server")
        || comm.starts_with("valkey-server")
        || comm.starts_with("redis-check")
        || comm == "postgres"
}

/// SIGKILLs every server process whose working directory is inside one of `dirs`.
fn kill_processes_in(dirs: &[PathBuf]) {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cwd) = std::fs::read_link(entry.path().join("cwd")) else {
            continue;
        };
        // A deleted directory reads as "<path> (deleted)".
        let cwd = PathBuf::from(
            cwd.to_string_lossy()
                .trim_end_matches(" (deleted)")
                .to_owned(),
        );
        if dirs.iter().any(|dir| cwd.starts_with(dir)) && is_server_process(pid) {
            let _ = send_signal(pid, "CONT");
            if send_signal(pid, "KILL").is_ok() {
                eprintln!(
                    "lease-testkit: killed stale server process {pid} in {}",
                    cwd.display()
                );
            }
        }
    }
}

/// Removes stale kit containers of this host, once.
pub(crate) async fn reap_stale_containers() {
    if CONTAINERS.is_completed() {
        return;
    }
    let listing = crate::docker::docker(
        &[
            "ps",
            "-a",
            "--filter",
            &format!("label={OWNER_LABEL}"),
            "--format",
            &format!("{{{{.ID}}}} {{{{.Label \"{OWNER_LABEL}\"}}}}"),
        ],
        Duration::from_secs(30),
    )
    .await;
    CONTAINERS.call_once(|| {});
    let Ok(listing) = listing else {
        return;
    };
    let host = hostname();
    for line in listing.lines() {
        let Some((id, owner)) = line.split_once(' ') else {
            continue;
        };
        let Some((owner_host, pid)) = owner.rsplit_once(':') else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if owner_host == host && pid != std::process::id() && !pid_alive(pid) {
            let removed =
                crate::docker::docker(&["rm", "-f", "-v", id], Duration::from_secs(60)).await;
            if removed.is_ok() {
                eprintln!("lease-testkit: removed stale container {id} (owner {owner} is gone)");
            }
        }
    }
}
