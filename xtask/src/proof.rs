//! Proof of the mode each test binary used, read from `cargo test`'s stderr (pure).
//!
//! cargo prints `Running <source> (<binary>)` before it runs each test binary, and the
//! binary's stderr follows; the kit prints one line per binary when it decides the
//! mode (`lease_testkit::mode::ANNOUNCE_*`; the prefixes below must stay in step).

use std::fmt;

use crate::plan::Mode;

const ANNOUNCE_CONTAINER: &str = "lease-testkit: Redis servers run as containers";
const ANNOUNCE_PROCESS: &str = "lease-testkit: Redis servers run as redis-server processes";
const ANNOUNCE_UNDECIDED: &str = "lease-testkit: Redis server mode not decided";

/// What a test binary announced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Announced {
    /// Its Redis servers ran in this mode.
    Mode(Mode),
    /// The kit could not decide (the line, for the report).
    Undecided(String),
}

/// One test binary of a `cargo test` run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Suite {
    /// `testkit_proxy (tests/testkit_proxy.rs)`.
    pub(crate) name: String,
    /// Every announcement it printed (none: it started no Redis server).
    pub(crate) announced: Vec<Announced>,
}

/// Splits `cargo test` stderr into test binaries and their announcements.
pub(crate) fn parse_suites(stderr: &str) -> Vec<Suite> {
    let mut suites: Vec<Suite> = Vec::new();
    let mut in_suite = false;
    for raw in stderr.lines() {
        let line = strip_ansi(raw);
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("Running ") {
            suites.push(Suite {
                name: suite_name(rest),
                announced: Vec::new(),
            });
            in_suite = true;
            continue;
        }
        if line.starts_with("Doc-tests ") {
            in_suite = false;
            continue;
        }
        let announced = if line.starts_with(ANNOUNCE_CONTAINER) {
            Announced::Mode(Mode::Container)
        } else if line.starts_with(ANNOUNCE_PROCESS) {
            Announced::Mode(Mode::Process)
        } else if line.starts_with(ANNOUNCE_UNDECIDED) {
            Announced::Undecided(line.to_owned())
        } else {
            continue;
        };
        if let (true, Some(suite)) = (in_suite, suites.last_mut()) {
            suite.announced.push(announced);
        }
    }
    suites
}

/// `tests/x.rs (target/debug/deps/x-0123abcd)` -> `x (tests/x.rs)`.
fn suite_name(running: &str) -> String {
    let Some((source, binary)) = running.split_once(" (") else {
        return running.to_owned();
    };
    let binary = binary.trim_end_matches(')');
    let file = binary.rsplit('/').next().unwrap_or(binary);
    let stem = match file.rsplit_once('-') {
        Some((stem, hash)) if !hash.is_empty() && hash.chars().all(|c| c.is_ascii_hexdigit()) => {
            stem
        }
        _ => file,
    };
    format!("{stem} ({source})")
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters final-byte (0x40..=0x7e).
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('\u{40}'..='\u{7e}').contains(&c) {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The verdict on one run's suites.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Proof {
    /// Suites that announced the required mode.
    pub(crate) proven: Vec<String>,
    /// Suites that started no Redis server (nothing to prove).
    pub(crate) silent: Vec<String>,
}

impl fmt::Display for Proof {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} announced, {} no Redis",
            self.proven.len(),
            self.silent.len()
        )
    }
}

/// Checks that every suite that announced a mode announced `required`, and (with
/// `require_some`) that at least one did. `Err` lists the offenders.
pub(crate) fn check(suites: &[Suite], required: Mode, require_some: bool) -> Result<Proof, String> {
    let mut proof = Proof {
        proven: Vec::new(),
        silent: Vec::new(),
    };
    let mut wrong = Vec::new();
    for suite in suites {
        if suite.announced.is_empty() {
            proof.silent.push(suite.name.clone());
            continue;
        }
        let mut ok = true;
        for announced in &suite.announced {
            match announced {
                Announced::Mode(m) if *m == required => {}
                Announced::Mode(m) => {
                    ok = false;
                    wrong.push(format!("{} ran as {m}", suite.name));
                }
                Announced::Undecided(line) => {
                    ok = false;
                    wrong.push(format!("{}: {line}", suite.name));
                }
            }
        }
        if ok {
            proof.proven.push(suite.name.clone());
        }
    }
    if !wrong.is_empty() {
        return Err(format!(
            "required {required} mode, but: {}",
            wrong.join("; ")
        ));
    }
    if require_some && proof.proven.is_empty() {
        return Err(format!(
            "required {required} mode, but no suite announced a mode ({} suites seen): \
             the run proves nothing",
            suites.len()
        ));
    }
    Ok(proof)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "\
   Compiling lease-testkit v0.1.0 (/w/crates/lease-testkit)
    Finished `test` profile [unoptimized + debuginfo] target(s) in 1.2s
     Running unittests src/lib.rs (/t/debug/deps/lease_testkit-0f1e2d3c4b5a6978)
     Running tests/testkit_cluster.rs (/t/debug/deps/testkit_cluster-aa11bb22cc33dd44)
lease-testkit: Redis Cluster nodes run as redis-server processes (clusters have no container mode)
     Running tests/testkit_proxy.rs (/t/debug/deps/testkit_proxy-1234abcd5678ef90)
lease-testkit: Redis servers run as containers (image redlease-test/redis:7.0.15; forced by REDLEASE_TEST_SERVERS=container)
     Running tests/testkit_redis.rs (/t/debug/deps/testkit_redis-99887766aabbccdd)
lease-testkit: removed stale /tmp/redlease-testkit-redis-1-0-0
lease-testkit: Redis servers run as containers (image redlease-test/redis:7.0.15; Docker answers and the image is present)
error: test failed, to rerun pass `--test testkit_redis`
   Doc-tests lease_testkit
lease-testkit: Redis servers run as redis-server processes (doctest, ignored)
";

    #[test]
    fn finds_each_binary_and_its_announcement() {
        let suites = parse_suites(RUN);
        let names: Vec<&str> = suites.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "lease_testkit (unittests src/lib.rs)",
                "testkit_cluster (tests/testkit_cluster.rs)",
                "testkit_proxy (tests/testkit_proxy.rs)",
                "testkit_redis (tests/testkit_redis.rs)",
            ]
        );
        assert!(suites[0].announced.is_empty());
        assert!(
            suites[1].announced.is_empty(),
            "the cluster line is not the Redis server announcement"
        );
        assert_eq!(suites[2].announced, [Announced::Mode(Mode::Container)]);
        assert_eq!(suites[3].announced, [Announced::Mode(Mode::Container)]);
    }

    #[test]
    fn containers_everywhere_is_proven() {
        let proof = check(&parse_suites(RUN), Mode::Container, true).unwrap();
        assert_eq!(proof.proven.len(), 2);
        assert_eq!(proof.silent.len(), 2);
    }

    #[test]
    fn one_suite_on_processes_fails_a_container_run() {
        let run = RUN.replacen(
            "lease-testkit: Redis servers run as containers (image redlease-test/redis:7.0.15; Docker",
            "lease-testkit: Redis servers run as redis-server processes (Docker",
            1,
        );
        let err = check(&parse_suites(&run), Mode::Container, true).unwrap_err();
        assert!(err.contains("testkit_redis"), "{err}");
        assert!(err.contains("ran as process"), "{err}");
        assert!(!err.contains("testkit_proxy"), "{err}");
    }

    #[test]
    fn a_container_run_is_not_proof_of_process_mode() {
        assert!(check(&parse_suites(RUN), Mode::Process, true).is_err());
    }

    #[test]
    fn an_undecided_mode_fails() {
        let run = format!(
            "{RUN}     Running tests/x.rs (/t/debug/deps/x-00ff)\n\
             lease-testkit: Redis server mode not decided: invalid configuration: bad\n"
        );
        let err = check(&parse_suites(&run), Mode::Container, true).unwrap_err();
        assert!(err.contains("x (tests/x.rs)"), "{err}");
    }

    #[test]
    fn a_run_without_any_announcement_proves_nothing() {
        let run = "     Running tests/a.rs (/t/debug/deps/a-01)\n";
        assert!(check(&parse_suites(run), Mode::Container, true).is_err());
        // Filtered runs (extra arguments) may start no server at all.
        let proof = check(&parse_suites(run), Mode::Container, false).unwrap();
        assert_eq!(proof.silent, ["a (tests/a.rs)"]);
    }

    #[test]
    fn colours_do_not_hide_the_lines() {
        let run = "\u{1b}[1m\u{1b}[92m     Running\u{1b}[0m tests/a.rs (/t/debug/deps/a-01)\n\
                   lease-testkit: Redis servers run as redis-server processes (forced)\n";
        let suites = parse_suites(run);
        assert_eq!(suites.len(), 1);
        assert_eq!(suites[0].announced, [Announced::Mode(Mode::Process)]);
    }
}
