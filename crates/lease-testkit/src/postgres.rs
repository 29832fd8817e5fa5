//! A real Postgres server per test: `initdb` + `postgres` on a free loopback port
//! in a temporary directory. As root, both run as the `postgres` OS user (the
//! directory is chowned to it), because Postgres refuses to run as root.
//!
//! ```no_run
//! use lease_testkit::postgres::Postgres;
//!
//! # async fn demo() -> lease_testkit::Result<()> {
//! let pg = Postgres::start().await?;
//! let client = pg.client().await?;
//! let row = client.query_one("SELECT 1 + 1", &[]).await?;
//! assert_eq!(row.get::<_, i32>(0), 2);
//! # Ok(())
//! # }
//! ```

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::poll::{Look, poll_until, with_detail};
use crate::process::{
    ServerProcess, describe_output, display_command, free_port, log_stdio, log_tail, lookup_user,
    loopback, run_with_timeout_async, running_as_root,
};
use crate::tempdir::TempDir;
use crate::{Error, Result};

/// Environment variable: a directory holding `initdb` and `postgres`, searched first.
pub const ENV_PG_BINDIR: &str = "REDLEASE_PG_BINDIR";

const START_DEADLINE: Duration = Duration::from_secs(60);
const INITDB_TIMEOUT: Duration = Duration::from_secs(120);
const PORT_ATTEMPTS: usize = 8;
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Builder for [`Postgres`].
#[derive(Debug, Clone)]
#[must_use]
pub struct PostgresBuilder {
    database: String,
    user: String,
}

impl Default for PostgresBuilder {
    fn default() -> Self {
        PostgresBuilder {
            database: "redlease".to_owned(),
            user: "postgres".to_owned(),
        }
    }
}

impl PostgresBuilder {
    /// The database created for the test (default `redlease`).
    pub fn database(mut self, name: impl Into<String>) -> Self {
        self.database = name.into();
        self
    }

    /// The superuser name given to `initdb -U` (default `postgres`). Authentication
    /// is `trust` on 127.0.0.1, so no password is needed.
    pub fn user(mut self, name: impl Into<String>) -> Self {
        self.user = name.into();
        self
    }

    /// Runs `initdb`, starts `postgres`, waits until it accepts connections and
    /// creates the database.
    pub async fn start(self) -> Result<Postgres> {
        for name in [&self.database, &self.user] {
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(Error::Config(format!(
                    "Postgres names must be [A-Za-z0-9_]+, got {name:?}"
                )));
            }
        }
        crate::reaper::reap_stale_dirs();
        let bindir = find_bindir()?;
        let owner = if running_as_root() {
            Some(lookup_user("postgres").ok_or_else(|| {
                Error::Config(
                    "running as root, but there is no `postgres` OS user to run Postgres as \
                     (install the postgresql package or create the user)"
                        .to_owned(),
                )
            })?)
        } else {
            None
        };
        let dir = TempDir::new("postgres")?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .map_err(|e| Error::io(format!("chown {}", dir.path().display()), e))?;
        }
        let data = dir.path().join("data");

        let mut initdb = Command::new(bindir.join("initdb"));
        initdb.arg("-D").arg(&data).args([
            "-U",
            &self.user,
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-locale",
            "--no-sync",
        ]);
        as_owner(&mut initdb, owner, dir.path());
        let shown = display_command(&initdb);
        let out = run_with_timeout_async(initdb, INITDB_TIMEOUT).await?;
        if !out.status.success() {
            return Err(Error::Command {
                command: shown,
                output: describe_output(&out.status, &out.stdout, &out.stderr),
            });
        }

        let log = dir.path().join("postgres.log");
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port()?;
            let _ = std::fs::remove_file(&log);
            let (stdout, stderr) = log_stdio(&log)?;
            let mut cmd = Command::new(bindir.join("postgres"));
            cmd.arg("-D")
                .arg(&data)
                .args(["-p", &port.to_string()])
                .args([
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    "unix_socket_directories=",
                    "-c",
                    "fsync=off",
                    "-c",
                    "synchronous_commit=off",
                    "-c",
                    "full_page_writes=off",
                    "-c",
                    "shared_buffers=16MB",
                    "-c",
                    "max_connections=100",
                ])
                .stdout(stdout)
                .stderr(stderr);
            as_owner(&mut cmd, owner, dir.path());
            let mut process = ServerProcess::spawn(cmd, "postgres")?;
            match wait_ready(&mut process, port, &self.user, &log).await {
                Ok(()) => {
                    let pg = Postgres {
                        process: Some(process),
                        port,
                        database: self.database.clone(),
                        user: self.user.clone(),
                        bindir: bindir.clone(),
                        dir,
                    };
                    pg.create_database().await?;
                    return Ok(pg);
                }
                Err(Error::Exited { what, status, log }) if log.contains("already in use") => {
                    last_error = Some(Error::Exited { what, status, log });
                }
                Err(e) => {
                    process.terminate("QUIT", SHUTDOWN_GRACE).await?;
                    return Err(e);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| Error::Config("no port attempts".to_owned())))
    }
}

fn as_owner(cmd: &mut Command, owner: Option<(u32, u32)>, dir: &Path) {
    cmd.current_dir(dir).env("LC_ALL", "C").env_remove("PGDATA");
    if let Some((uid, gid)) = owner {
        // std drops supplementary groups, then sets gid and uid in the child.
        cmd.uid(uid).gid(gid);
    }
}

/// Directories searched for `initdb` and `postgres`: `$REDLEASE_PG_BINDIR`, `PATH`,
/// then `/usr/lib/postgresql/<version>/bin` (newest first).
fn find_bindir() -> Result<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(dir) = std::env::var_os(ENV_PG_BINDIR) {
        dirs.push(PathBuf::from(dir));
    }
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    let mut versioned: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .collect();
    versioned.sort_by_key(|v| std::cmp::Reverse(v.0));
    dirs.extend(versioned.into_iter().map(|(_, dir)| dir));
    dirs.into_iter()
        .find(|dir| dir.join("initdb").is_file() && dir.join("postgres").is_file())
        .ok_or_else(|| Error::ProgramNotFound {
            program: "initdb/postgres".to_owned(),
            hint: "looked in $REDLEASE_PG_BINDIR, PATH and /usr/lib/postgresql/*/bin; install \
                   Postgres (Debian/Ubuntu: `apt-get install postgresql`, or run \
                   scripts/install-deps.sh)"
                .to_owned(),
        })
}

fn connection_string(port: u16, user: &str, database: &str) -> String {
    format!("host=127.0.0.1 port={port} user={user} dbname={database} connect_timeout=5")
}

/// Polls until the server accepts a query on the `postgres` database.
async fn wait_ready(process: &mut ServerProcess, port: u16, user: &str, log: &Path) -> Result<()> {
    let conn = &connection_string(port, user, "postgres");
    let what = format!("postgres on port {port}");
    poll_until(START_DEADLINE, what.clone(), || {
        let exited = process.try_exited();
        let what = what.clone();
        async move {
            if let Some(status) = exited {
                return Look::Fail(Error::Exited {
                    what,
                    status: status.to_string(),
                    log: log_tail(log),
                });
            }
            match tokio_postgres::connect(conn, tokio_postgres::NoTls).await {
                Ok((client, connection)) => {
                    let task = tokio::spawn(connection);
                    let ok = client.simple_query("SELECT 1").await;
                    drop(client);
                    let _ = task.await;
                    match ok {
                        Ok(_) => Look::Done(()),
                        Err(e) => Look::NotYet(e.to_string()),
                    }
                }
                Err(e) => Look::NotYet(e.to_string()),
            }
        }
    })
    .await
    .map_err(|e| with_detail(e, || format!("; log tail:\n{}", log_tail(log))))
}

/// A Postgres server owned by the test. Dropping it shuts it down (SIGQUIT, then
/// SIGKILL if needed) and deletes its data directory.
#[derive(Debug)]
pub struct Postgres {
    // Field order matters: the process is stopped before the directory is removed.
    process: Option<ServerProcess>,
    port: u16,
    database: String,
    user: String,
    bindir: PathBuf,
    dir: TempDir,
}

impl Postgres {
    /// Starts a server with the default database (`redlease`) and user (`postgres`).
    pub async fn start() -> Result<Self> {
        Self::builder().start().await
    }

    /// A builder for the database and user names.
    pub fn builder() -> PostgresBuilder {
        PostgresBuilder::default()
    }

    async fn create_database(&self) -> Result<()> {
        if self.database == "postgres" {
            return Ok(());
        }
        let (client, connection) = tokio_postgres::connect(
            &self.connection_string_for("postgres"),
            tokio_postgres::NoTls,
        )
        .await?;
        let task = tokio::spawn(connection);
        let result = client
            .batch_execute(&format!("CREATE DATABASE \"{}\"", self.database))
            .await;
        drop(client);
        let _ = task.await;
        Ok(result?)
    }

    fn connection_string_for(&self, database: &str) -> String {
        connection_string(self.port, &self.user, database)
    }

    /// `host=127.0.0.1 port=<port> user=<user> dbname=<database> connect_timeout=5`
    /// (for `tokio_postgres::connect`).
    pub fn connection_string(&self) -> String {
        self.connection_string_for(&self.database)
    }

    /// `postgres://<user>@127.0.0.1:<port>/<database>`.
    pub fn url(&self) -> String {
        format!(
            "postgres://{}@127.0.0.1:{}/{}",
            self.user, self.port, self.database
        )
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        loopback(self.port)
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The database created for the test.
    pub fn database(&self) -> &str {
        &self.database
    }

    /// The (superuser) role to connect as.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The directory the Postgres binaries were taken from.
    pub fn bindir(&self) -> &Path {
        &self.bindir
    }

    /// A connected `tokio_postgres::Client` for [`connection_string`](Self::connection_string);
    /// its connection task is spawned on the current runtime.
    pub async fn client(&self) -> Result<tokio_postgres::Client> {
        let (client, connection) =
            tokio_postgres::connect(&self.connection_string(), tokio_postgres::NoTls).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
    }

    /// The temporary directory holding the data directory (`data/`) and the server
    /// log (`postgres.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The postmaster's process id.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(ServerProcess::pid)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Some(mut process) = self.process.take() {
            // SIGQUIT = immediate shutdown: backends exit and shared memory is released.
            process.terminate_blocking("QUIT", SHUTDOWN_GRACE);
        }
    }
}
