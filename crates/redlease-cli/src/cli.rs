//! The command line (clap derive).

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::duration;

/// How every boolean option reads its environment variable: `1/0`, `yes/no`, `true/false`,
/// `on/off`, `y/n`, `t/f`, in any case (clap's `BoolishValueParser`); anything else is a usage
/// error (exit 2), never silently false.
fn boolish() -> clap::builder::BoolishValueParser {
    clap::builder::BoolishValueParser::new()
}

/// The default Redis URL.
pub(crate) const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

const LONG_ABOUT: &str = "\
Lease-based leader election and locks on Redis, with fencing tokens, from the shell.

`redlease run` keeps exactly one copy of a program running across machines: the elected
leader runs it, with its fencing token in REDLEASE_TOKEN; if leadership is lost the program is
stopped (SIGTERM, then SIGKILL after --grace). `redlease lock` runs a program under a lock
like `flock`, across machines. `redlease fence` performs fenced writes (refused once a newer
term exists), `redlease status` shows who leads, and `redlease demo` tells the whole failover
story on an in-memory store (no Redis needed).

Progress goes to stderr (JSON lines with --json); results to stdout. Boolean variables (REDLEASE_POLL_ONLY, ...) take 1/0, yes/no, true/false.";

#[derive(Debug, Parser)]
#[command(
    name = "redlease",
    version,
    about = "Leader election and locks on Redis with fencing tokens, from the shell",
    long_about = LONG_ABOUT,
    after_long_help = crate::exit::TABLE,
    propagate_version = true
)]
pub(crate) struct Cli {
    /// Redis URL [default: redis://127.0.0.1:6379]
    #[arg(long, global = true, env = "REDLEASE_REDIS_URL", value_name = "URL")]
    pub(crate) redis: Option<String>,

    /// With a rediss:// URL: trust this CA (PEM) besides the system's roots (SSL_CERT_FILE
    /// replaces the system's roots when set)
    #[arg(long, global = true, env = "REDLEASE_TLS_CA", value_name = "FILE")]
    pub(crate) tls_ca: Option<PathBuf>,

    /// With a rediss:// URL: present this client certificate (PEM) for mutual TLS; needs
    /// --tls-key
    #[arg(long, global = true, env = "REDLEASE_TLS_CERT", value_name = "FILE")]
    pub(crate) tls_cert: Option<PathBuf>,

    /// The private key (PEM) of --tls-cert
    #[arg(long, global = true, env = "REDLEASE_TLS_KEY", value_name = "FILE")]
    pub(crate) tls_key: Option<PathBuf>,

    /// --redis lists the seed URLs (comma-separated) of a Redis Cluster (run, lock, status,
    /// fence); an election's or lock's keys must share a slot: give a hash-tagged name such as
    /// '{jobs}'
    #[arg(long, global = true, env = "REDLEASE_CLUSTER", conflicts_with_all = ["sentinel", "redlock"], value_parser = boolish())]
    pub(crate) cluster: bool,

    /// Find the primary through these sentinels (HOST:PORT, redis:// or rediss:// URLs,
    /// comma-separated; run, lock, status, fence); needs --service
    #[arg(
        long,
        global = true,
        env = "REDLEASE_SENTINEL",
        value_name = "ADDRS",
        conflicts_with = "redlock",
        requires = "service"
    )]
    pub(crate) sentinel: Option<String>,

    /// The primary's name the sentinels watch (with --sentinel)
    #[arg(long, global = true, env = "REDLEASE_SERVICE", value_name = "NAME")]
    pub(crate) service: Option<String>,

    /// A Redlock quorum over these independent primaries (comma-separated URLs, an odd
    /// number, at least 3; rediss:// URLs use the --tls-* options; run, lock, status; fence
    /// is refused)
    #[arg(long, global = true, env = "REDLEASE_REDLOCK", value_name = "URLS")]
    pub(crate) redlock: Option<String>,

    /// Export the Redis URL to CMD with its password (REDLEASE_REDIS_URL); by default CMD
    /// gets it without the password
    #[arg(long, global = true, env = "REDLEASE_EXPORT_REDIS_PASSWORD", value_parser = boolish())]
    pub(crate) export_redis_password: bool,

    /// Show the libraries' log events: -v info, -vv debug, -vvv trace (warnings are always
    /// shown); RUST_LOG (e.g. `lease_redis=debug`) replaces this when set
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,

    /// Machine-readable output: JSON objects on stdout, progress as JSON lines on stderr
    #[arg(long, global = true)]
    pub(crate) json: bool,

    /// Do not subscribe to release notices (for an ACL without pub/sub): followers, lock
    /// waiters and `status --watch` see a release at their next poll instead of at once
    #[arg(long, global = true, env = "REDLEASE_POLL_ONLY", value_parser = boolish())]
    pub(crate) poll_only: bool,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Contend for leadership of NAME; while leader, run CMD (stopped when leadership is lost)
    #[command(after_long_help = RUN_HELP)]
    Run(RunArgs),
    /// Run CMD under the lock KEY, renewed automatically (like flock, across machines); without
    /// CMD, hold KEY until interrupted, printing its token
    #[command(after_long_help = LOCK_HELP)]
    Lock(LockArgs),
    /// Show who leads election NAME (holder, token, remaining TTL, applied mark), or who holds
    /// and waits for a semaphore, read-write lock or fair lock
    Status(StatusArgs),
    /// Release lock KEY as an operator: only if OWNER holds it (--owner), or whoever holds it
    /// (--force: also raises the fence so the old holder's fenced writes are refused)
    #[command(after_long_help = UNLOCK_HELP)]
    Unlock(UnlockArgs),
    /// Fenced writes from a shell leader: applied only if --token is not stale (exit 3 if it is)
    #[command(subcommand)]
    Fence(FenceCommand),
    /// A self-contained failover story: election, stall, successor, stale write refused
    #[command(after_long_help = DEMO_HELP)]
    Demo(DemoArgs),
    /// Print a shell completion script on stdout (e.g. `redlease completions bash >
    /// /etc/bash_completion.d/redlease`)
    Completions {
        /// The shell
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) on stdout (e.g. `redlease man > redlease.1`)
    Man,
}

const RUN_HELP: &str = "\
CMD gets REDLEASE_TOKEN (the term's fencing token), REDLEASE_NAME, REDLEASE_LEADER_ID (this
instance's id) and REDLEASE_REDIS_URL (without its password unless --export-redis-password) in
its environment, never REDLEASE_INSTANCE_ID (a `redlease run` inside CMD contends under its own
id instead of re-taking this term; pass --instance-id to act as the parent on purpose),
stdin /dev/null (unless --stdin), and runs in its own process group; if redlease dies, the
whole group is killed at once. CMD is stopped before the lease can pass to anyone else: when renewals fail and only
--grace (default TTL/3) is left of the lease, the group gets SIGTERM; at the lease's deadline,
or when the lease is found held by another, SIGKILL; redlease then exits with 72 (or contends
again with --keep-running). When CMD exits, what it left in its group is stopped, the lease is
released and redlease exits with CMD's status (or contends again with --keep-running). On
SIGINT/SIGTERM, CMD gets SIGTERM, then SIGKILL after --grace, the lease is released, and
redlease exits with 130/143 (SIGQUIT: SIGKILL at once, 131; SIGTSTP is ignored). SIGHUP,
SIGUSR1, SIGUSR2, SIGWINCH and SIGALRM are forwarded to CMD's process group.
A paused supervisor cannot stop CMD: fence its writes with REDLEASE_TOKEN. See docs/cli.md.

With --health-addr ADDR (or REDLEASE_HEALTH_ADDR), redlease serves HTTP on ADDR (an IP
address and a port; port 0 picks a free one, and the address bound is printed on stderr):
  GET /healthz  200 \"ok\" while the supervisor is healthy; 503 and the reason when it is
                shutting down, its election has stopped, or (not leading) Redis has not
                answered for longer than the TTL
  GET /leader   JSON: name, instance, role (leader|follower|unknown), is_leader, and as
                stored in Redis: holder, token, remaining_ttl_ms (error: why Redis did not
                answer, else null)
  GET /metrics  Prometheus text: redlease_election_* metrics (is-leader gauge, token,
                elections won, step-downs, renew latency and failures)
Other paths: 404; other methods: 405. An address that cannot be bound: exit 74.

Example:
  redlease run --name report-builder --ttl 5s -- ./build-reports.sh
  redlease run --name report-builder --health-addr 127.0.0.1:9100 -- ./build-reports.sh

Exit codes: see `redlease --help`.";

const LOCK_HELP: &str = "\
The lock is renewed every TTL/3 while CMD runs. With --fence, a fencing token is minted from
the counter <KEY>:fence and passed as REDLEASE_TOKEN (fenced writes check the mark
<KEY>:fence:applied). CMD also gets REDLEASE_LOCK_KEY and REDLEASE_REDIS_URL (without its
password). When renewals fail and only --grace (default TTL/3) is left, CMD's group gets
SIGTERM; at the lock's deadline, or when it is found held by another, SIGKILL; redlease exits
with 72. If the lock is not obtained within --wait, it exits with 71, or the status -E chose
(--wait 0: one attempt; -w 2.5: seconds, as flock; --wait forever: until obtained). The
default wait is 30s, not forever as with flock: a waiter also retries through a Redis outage,
and cron runs would pile up silently behind one (docs/cli.md). SIGHUP, SIGUSR1, SIGUSR2,
SIGWINCH and SIGALRM are forwarded to CMD's process group; -q keeps only what went wrong.

With --health-addr ADDR (or REDLEASE_HEALTH_ADDR), redlease serves HTTP on ADDR (port 0
picks a free port, printed on stderr): GET /healthz (200 while obtaining or holding the
lock; 503 once lost, released or shutting down), GET /leader (JSON: key, state
(obtaining|held|lost|released), held, token) and GET /metrics (Prometheus text:
redlease_lock_* metrics). An address that cannot be bound: exit 74.

On a Redis Cluster (--cluster) the key must carry a hash tag ('{backup}'); through
--sentinel or on a --redlock quorum it works as on one server (waiters on Cluster and
Sentinel are woken by the holder's release notice; on Redlock they poll).

Without CMD (`redlease lock KEY`, as etcdctl's `lock NAME`), the lock is fenced (as --fence)
and held, renewed, until SIGINT or SIGTERM: its token is printed on stdout once obtained (with
--json: {\"key\",\"token\",\"owner\"}), and the lock is released on exit (exit 0; 72 if it
was lost meanwhile, e.g. broken by `redlease unlock --force`).

Example:
  redlease lock nightly-backup --ttl 30s --wait 0 -- ./backup.sh
  redlease lock -q -w forever deploy -- ./deploy.sh

Exit codes: see `redlease --help`.";

const UNLOCK_HELP: &str = "\
--owner OWNER deletes the lock only if OWNER holds it (a compare-and-delete; OWNER is the holder
`redlease status --lock KEY` shows). --force deletes it whoever holds it and, in the same
atomic step, mints a fresh token from the counter <KEY>:fence into the mark
<KEY>:fence:applied (even when the lock was free: a holder whose lease lapsed may still write):
the broken holder's fenced writes (REDLEASE_TOKEN of `lock --fence`) are refused from then on,
the next holder's token is minted above it and accepted. A forced release is logged on stderr.
The broken holder's `redlease lock` learns of it at its next renewal: it stops CMD and exits 72.
Not offered with --redlock (exit 64).

Exit codes: 0 released; 1 the lock was not held (by OWNER, with --owner): nothing deleted;
69 Redis unreachable (nothing done); 75 outcome unknown (it may have been released); 64 bad key
or owner.

Example:
  redlease unlock nightly-backup --owner host-a-1234-9f2c
  redlease unlock nightly-backup --force";

const DEMO_HELP: &str = "\
Three contenders (alpha, bravo, charlie) contend for one election with a 1 s TTL. The leader
writes under its token, then stalls: its calls to the store hang, as in a long GC pause, so it
cannot renew. Its lease expires, a successor is elected with a higher token and writes; then
the stale leader resumes and writes with its old token, and the store refuses it. Runs on an
in-memory store unless --redis is given on the command line (REDLEASE_REDIS_URL is not used).
Exits 0 when the story went as expected, 1 otherwise.";

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[arg(
        long,
        env = "REDLEASE_NAME",
        help = "Election name (keys <NAME>:leader, <NAME>:fence, <NAME>:fence:applied)"
    )]
    pub(crate) name: String,
    /// Lease TTL (e.g. 5s, 1500ms; at least 100ms); renewed every TTL/3
    #[arg(long, env = "REDLEASE_TTL", default_value = "5s", value_parser = duration::parse)]
    pub(crate) ttl: Duration,
    #[arg(
        long,
        env = "REDLEASE_INSTANCE_ID",
        help = "This instance's id, unique among live instances [default: <host>-<pid>-<random>]"
    )]
    pub(crate) instance_id: Option<String>,
    /// Time between SIGTERM and SIGKILL when CMD must stop; when renewals fail, SIGTERM is sent
    /// this long before the lease's deadline and SIGKILL at it. Must be shorter than TTL minus
    /// the renew interval (2/3 of the TTL) [default: TTL/3]
    #[arg(long, env = "REDLEASE_GRACE", value_parser = duration::parse)]
    pub(crate) grace: Option<Duration>,
    /// Contend again after CMD exits or leadership is lost, instead of exiting
    #[arg(long, env = "REDLEASE_KEEP_RUNNING", value_parser = boolish())]
    pub(crate) keep_running: bool,
    /// Refuse to contend when the server's settings let the fence keys be evicted or lost
    /// (no persistence, an allkeys eviction policy, a replica): exit 78
    #[arg(long, env = "REDLEASE_REQUIRE_DURABLE_STORE", value_parser = boolish())]
    pub(crate) require_durable_store: bool,
    /// Give CMD redlease's stdin (by default CMD's stdin is /dev/null)
    #[arg(long)]
    pub(crate) stdin: bool,
    /// Quiet: no progress lines on stderr, only those that say something went wrong (CMD
    /// stopped or killed, the lease lost, a failed release, a retried Redis error) and the
    /// final error; the libraries' warnings are left out too (unless -v); for cron jobs
    #[arg(short, long, env = "REDLEASE_QUIET", value_parser = boolish())]
    pub(crate) quiet: bool,
    /// Serve GET /healthz, /leader and /metrics on ADDR (IP:PORT; port 0 picks a free port,
    /// printed on stderr)
    #[arg(long, env = "REDLEASE_HEALTH_ADDR", value_name = "ADDR")]
    pub(crate) health_addr: Option<String>,
    /// The command to run while leader, after `--`
    #[arg(last = true, required = true, value_name = "CMD")]
    pub(crate) cmd: Vec<OsString>,
}

#[derive(Debug, Args)]
pub(crate) struct LockArgs {
    /// The lock key
    pub(crate) key: String,
    /// Lock TTL (renewed every TTL/3 while CMD runs)
    #[arg(long, env = "REDLEASE_LOCK_TTL", default_value = "10s", value_parser = duration::parse)]
    pub(crate) ttl: Duration,
    /// How long to wait for the lock: seconds (`-w 2.5`, as flock), a duration (500ms, 2m),
    /// `forever` (until obtained, as flock without -w; also through a Redis outage), or 0 (one
    /// attempt). The default is 30s, not forever: see docs/cli.md
    #[arg(
        short = 'w',
        long,
        env = "REDLEASE_LOCK_WAIT",
        default_value = "30s",
        value_parser = duration::parse_wait,
        value_name = "SECS|DURATION|forever"
    )]
    pub(crate) wait: duration::Wait,
    /// The exit status when the lock is not obtained within --wait (flock's -E; default 71)
    #[arg(
        short = 'E',
        long,
        env = "REDLEASE_LOCK_CONFLICT_EXIT_CODE",
        default_value_t = crate::exit::NOT_OBTAINED,
        value_name = "N"
    )]
    pub(crate) conflict_exit_code: u8,
    #[arg(
        long,
        env = "REDLEASE_LOCK_FENCE",
        value_parser = boolish(),
        help = "Mint a fencing token (counter <KEY>:fence) and pass it as REDLEASE_TOKEN"
    )]
    pub(crate) fence: bool,
    /// Time between SIGTERM and SIGKILL when CMD must stop; when renewals fail, SIGTERM is sent
    /// this long before the lock's deadline and SIGKILL at it. Must be shorter than 2/3 of the
    /// TTL [default: TTL/3]
    #[arg(long, env = "REDLEASE_GRACE", value_parser = duration::parse)]
    pub(crate) grace: Option<Duration>,
    /// Cap the hold: auto-renewal stops so that the lock ends no later than D after it was
    /// obtained; CMD gets SIGTERM --grace before the end and SIGKILL at it (as when the lock
    /// is lost), the lock is released, and redlease exits 73. At least --ttl
    #[arg(long, env = "REDLEASE_LOCK_MAX_HOLD", value_parser = duration::parse, value_name = "D")]
    pub(crate) max_hold: Option<Duration>,
    /// Give CMD redlease's stdin (by default CMD's stdin is /dev/null)
    #[arg(long)]
    pub(crate) stdin: bool,
    /// Quiet: no progress lines on stderr, only those that say something went wrong (CMD
    /// stopped or killed, the lease lost, a failed release, a retried Redis error) and the
    /// final error; the libraries' warnings are left out too (unless -v); for cron jobs
    #[arg(short, long, env = "REDLEASE_QUIET", value_parser = boolish())]
    pub(crate) quiet: bool,
    /// A semaphore instead of a lock: at most N holders of KEY at once (like `consul lock -n`),
    /// each permit fenced (REDLEASE_TOKEN) and expiring with its TTL if its holder dies. Every
    /// holder of KEY must use the same N (another N exits 64)
    #[arg(
        short = 'n',
        long = "permits",
        env = "REDLEASE_LOCK_PERMITS",
        value_name = "N"
    )]
    pub(crate) permits: Option<u32>,
    /// A fair lock instead of a plain one: waiters get KEY in arrival order across processes,
    /// each release waking the next waiter alone; fenced (REDLEASE_TOKEN, counter
    /// <KEY>:fence). Every holder of KEY must use --fair (a plain `lock` barges past the queue)
    #[arg(long, env = "REDLEASE_LOCK_FAIR", conflicts_with = "permits", value_parser = boolish())]
    pub(crate) fair: bool,
    /// A reader's hold instead of the lock: any number of `--shared` holders of KEY at once,
    /// none beside a plain `lock` of KEY, the writer (like `flock -s` beside `flock -x`).
    /// Writer-preferring. Always fenced (counter <KEY>:fence, REDLEASE_TOKEN); give writers
    /// --fence to order their tokens against readers'
    #[arg(long, env = "REDLEASE_LOCK_SHARED", conflicts_with_all = ["permits", "fair"], value_parser = boolish())]
    pub(crate) shared: bool,
    /// Serve GET /healthz, /leader and /metrics on ADDR (IP:PORT; port 0 picks a free port,
    /// printed on stderr)
    #[arg(long, env = "REDLEASE_HEALTH_ADDR", value_name = "ADDR")]
    pub(crate) health_addr: Option<String>,
    /// The command to run under the lock, after `--`. Without CMD, redlease holds the lock
    /// (fenced, as --fence) until SIGINT or SIGTERM, prints its token on stdout once obtained,
    /// and releases it on exit (exit 0; 72 if it was lost meanwhile)
    #[arg(last = true, value_name = "CMD")]
    pub(crate) cmd: Vec<OsString>,
}

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// Election name
    #[arg(
        long,
        env = "REDLEASE_NAME",
        required_unless_present_any = ["check", "semaphore", "shared", "fair", "lock"]
    )]
    pub(crate) name: Option<String>,
    /// Plain lock KEY (what `lock KEY` holds): print its holder, the metadata stored with it,
    /// the time it has left, and the fence counter <KEY>:fence and mark (`lock --fence`)
    #[arg(long, value_name = "KEY", conflicts_with = "watch")]
    pub(crate) lock: Option<String>,
    /// Semaphore name (what `lock -n N NAME` holds): print its permit count and its current
    /// holders, each with the time its permit has left, the last token and the mark
    #[arg(long, conflicts_with = "watch")]
    pub(crate) semaphore: Option<String>,
    /// Read-write lock KEY (what `lock --shared KEY` and `lock KEY` hold): print its writer,
    /// or its readers each with the time its hold has left, whether a writer is waiting, the
    /// last token and the mark
    #[arg(long, value_name = "KEY", conflicts_with = "watch")]
    pub(crate) shared: Option<String>,
    /// Fair lock NAME (what `lock --fair NAME` holds): print its holder (token, time left) and
    /// its waiters in queue order, each with the time its place has left
    #[arg(long, value_name = "NAME", conflicts_with = "watch")]
    pub(crate) fair: Option<String>,
    /// Also report what the server's settings guarantee for fencing tokens (persistence,
    /// eviction, replication); exit 78 when they let the fence keys be evicted or lost
    #[arg(long)]
    pub(crate) check: bool,
    /// Keep watching NAME and print each change of leader (holder, token) until SIGINT or
    /// SIGTERM (exit 0); one JSON object per line with --json
    #[arg(long, requires = "name", conflicts_with = "check")]
    pub(crate) watch: bool,
    /// How often --watch polls
    #[arg(long, value_parser = duration::parse, default_value = "500ms", requires = "watch")]
    pub(crate) every: std::time::Duration,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("how").required(true).args(["owner", "force"])))]
pub(crate) struct UnlockArgs {
    /// The lock's key
    pub(crate) key: String,
    /// Release only if OWNER holds the lock (compare-and-delete)
    #[arg(long, value_name = "OWNER", conflicts_with = "force")]
    pub(crate) owner: Option<String>,
    /// Release whoever holds the lock, and raise the fence <KEY>:fence so the old holder's
    /// fenced writes are refused
    #[arg(long)]
    pub(crate) force: bool,
}

#[derive(Debug, Args)]
pub(crate) struct FenceTarget {
    #[arg(
        long,
        env = "REDLEASE_NAME",
        help = "Election name (mark key <NAME>:fence:applied)"
    )]
    pub(crate) name: String,
    /// The term's fencing token [env: REDLEASE_TOKEN, as CMD gets it]
    #[arg(long, env = "REDLEASE_TOKEN", hide_env = true)]
    pub(crate) token: String,
}

#[derive(Debug, Subcommand)]
pub(crate) enum FenceCommand {
    /// Fenced SET KEY VALUE
    Set {
        #[command(flatten)]
        target: FenceTarget,
        /// The key
        key: String,
        /// The value
        value: String,
    },
    /// Fenced HSET KEY FIELD VALUE
    #[command(name = "hset")]
    HSet {
        #[command(flatten)]
        target: FenceTarget,
        /// The hash key
        key: String,
        /// The field
        field: String,
        /// The value
        value: String,
    },
    /// Fenced DEL KEY...
    Del {
        #[command(flatten)]
        target: FenceTarget,
        /// The keys
        #[arg(required = true)]
        keys: Vec<String>,
    },
}

#[derive(Debug, Args)]
pub(crate) struct DemoArgs {}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn cmd_comes_after_double_dash() {
        let cli = Cli::try_parse_from([
            "redlease",
            "run",
            "--name",
            "jobs",
            "--ttl",
            "2s",
            "--",
            "sh",
            "-c",
            "echo --ttl",
        ])
        .unwrap();
        let Command::Run(run) = cli.command else {
            panic!("run")
        };
        assert_eq!(run.ttl, Duration::from_secs(2));
        assert_eq!(run.grace, None);
        assert_eq!(run.cmd, ["sh", "-c", "echo --ttl"]);
        assert!(
            Cli::try_parse_from(["redlease", "run", "--name", "jobs", "sleep", "1"]).is_err(),
            "CMD without `--` is refused"
        );
        assert!(Cli::try_parse_from(["redlease", "run", "--name", "jobs", "--"]).is_err());
    }
}
