//! What a run left behind (pure: the caller lists containers, processes and
//! directories, and removes what this returns).

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};

/// Something a kit run left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Leak {
    /// A container carrying this run's label.
    Container(String),
    /// A process whose working directory is one of this run's directories.
    Process {
        /// Its pid.
        pid: u32,
        /// Its working directory.
        cwd: PathBuf,
    },
    /// One of this run's temporary directories.
    Directory(PathBuf),
    /// A network namespace of the Jepsen harness (`rlj<pid>...`) whose harness process is
    /// gone.
    Namespace(String),
}

impl fmt::Display for Leak {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Leak::Container(id) => write!(f, "container {id}"),
            Leak::Process { pid, cwd } => write!(f, "process {pid} (cwd {})", cwd.display()),
            Leak::Directory(path) => write!(f, "directory {}", path.display()),
            Leak::Namespace(name) => write!(f, "network namespace {name}"),
        }
    }
}

/// The label filter for `docker ps` selecting this run's containers.
pub(crate) fn container_filter(run: &str) -> String {
    format!("label=redlease.testkit.run={run}")
}

/// The name prefix of this run's temporary directories (the kit's naming:
/// `redlease-testkit-<run id>-<kind>-<pid>-<n>-<nanos>`).
pub(crate) fn dir_prefix(run: &str) -> String {
    format!("redlease-testkit-{run}-")
}

/// The prefix of the Jepsen harness's namespaces and links (`lease_jepsen::netns::PREFIX`;
/// keep in step).
pub(crate) const JEPSEN_PREFIX: &str = "rlj";

/// The Jepsen harness's namespaces in `ip netns list` output whose owner (the pid after the
/// prefix) is not alive: a harness that ended removes its own, so these leaked. Namespaces of
/// a harness still running (someone's long run) are not leaks.
pub(crate) fn jepsen_namespaces(ip_netns_list: &str, alive: &dyn Fn(u32) -> bool) -> Vec<Leak> {
    ip_netns_list
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(|name| {
            let rest = name.strip_prefix(JEPSEN_PREFIX)?;
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            let owner_alive = digits.parse::<u32>().is_ok_and(alive);
            (!owner_alive).then(|| Leak::Namespace(name.to_owned()))
        })
        .collect()
}

/// Whether `cwd` is (inside) a directory of `tmp` whose name starts with `prefix`.
pub(crate) fn in_run_dir(cwd: &Path, tmp: &Path, prefix: &str) -> bool {
    cwd.strip_prefix(tmp)
        .ok()
        .and_then(|p| p.components().next())
        .and_then(|c| c.as_os_str().to_str())
        .is_some_and(|name| name.starts_with(prefix))
}

/// Everything of run `run` among: `docker ps -q` output, processes as (pid, cwd), and
/// the entries of `tmp`.
pub(crate) fn find(
    run: &str,
    tmp: &Path,
    docker_ps: &str,
    processes: &[(u32, PathBuf)],
    tmp_entries: &[&OsStr],
) -> Vec<Leak> {
    let prefix = dir_prefix(run);
    let mut leaks: Vec<Leak> = docker_ps
        .split_whitespace()
        .map(|id| Leak::Container(id.to_owned()))
        .collect();
    leaks.extend(
        processes
            .iter()
            .filter(|(_, cwd)| in_run_dir(cwd, tmp, &prefix))
            .map(|(pid, cwd)| Leak::Process {
                pid: *pid,
                cwd: cwd.clone(),
            }),
    );
    leaks.extend(
        tmp_entries
            .iter()
            .filter(|name| name.to_string_lossy().starts_with(&prefix))
            .map(|name| Leak::Directory(tmp.join(name))),
    );
    leaks
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "x42-beef";

    #[test]
    fn a_clean_run_has_no_leaks() {
        let procs = [(1, PathBuf::from("/")), (7, PathBuf::from("/tmp"))];
        let entries = [
            OsStr::new("other"),
            OsStr::new("redlease-testkit-redis-1-0-0"),
        ];
        assert!(find(RUN, Path::new("/tmp"), "\n", &procs, &entries).is_empty());
    }

    #[test]
    fn finds_containers_processes_and_directories_of_this_run_only() {
        let tmp = Path::new("/tmp");
        let mine = tmp.join("redlease-testkit-x42-beef-redis-10-0-5");
        let procs = [
            (11, mine.clone()),
            (12, mine.join("sub")),
            // Another run (same prefix up to the run id), and a look-alike elsewhere.
            (13, tmp.join("redlease-testkit-x42-beefy-redis-1-0-0")),
            (
                14,
                PathBuf::from("/var/redlease-testkit-x42-beef-redis-1-0-0"),
            ),
        ];
        let entries = [
            OsStr::new("redlease-testkit-x42-beef-redis-10-0-5"),
            OsStr::new("redlease-testkit-x42-beefy-pg-1-0-0"),
        ];
        let leaks = find(RUN, tmp, "abc123\ndef456\n", &procs, &entries);
        assert_eq!(
            leaks,
            [
                Leak::Container("abc123".to_owned()),
                Leak::Container("def456".to_owned()),
                Leak::Process {
                    pid: 11,
                    cwd: mine.clone()
                },
                Leak::Process {
                    pid: 12,
                    cwd: mine.join("sub")
                },
                Leak::Directory(mine),
            ]
        );
        assert_eq!(leaks[0].to_string(), "container abc123");
    }

    #[test]
    fn jepsen_namespaces_of_dead_harnesses_leak() {
        let list = "rlj42a-0 (id: 3)\nrlj7b-1\nother\nrljx-0\n";
        let alive = |pid: u32| pid == 7;
        assert_eq!(
            jepsen_namespaces(list, &alive),
            [
                Leak::Namespace("rlj42a-0".to_owned()),
                Leak::Namespace("rljx-0".to_owned())
            ]
        );
        assert_eq!(
            Leak::Namespace("rlj1a-0".to_owned()).to_string(),
            "network namespace rlj1a-0"
        );
    }

    #[test]
    fn the_names_match_the_kits_conventions() {
        assert_eq!(container_filter(RUN), "label=redlease.testkit.run=x42-beef");
        assert_eq!(dir_prefix(RUN), "redlease-testkit-x42-beef-");
    }
}
