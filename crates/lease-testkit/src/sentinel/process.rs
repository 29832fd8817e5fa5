//! One `redis-sentinel` process: its configuration, start (a new port on a port conflict)
//! and address.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::SentinelGroupBuilder;
use crate::poll::{Look, poll_every, with_detail};
use crate::process::{ServerProcess, free_port, log_stdio, log_tail, loopback};
use crate::resp::{self, ProbeAuth};
use crate::tempdir::TempDir;
use crate::{Error, Result};

/// How long a sentinel may take to answer `PING` after it was started.
const START_DEADLINE: Duration = Duration::from_secs(20);
/// How often a starting sentinel is pinged.
const STARTED_POLL: Duration = Duration::from_millis(25);

/// A sentinel process.
#[derive(Debug)]
pub(super) struct Sentinel {
    // Field order matters: the process is killed before the directory is removed.
    pub(super) process: ServerProcess,
    pub(super) port: u16,
    pub(super) tls_port: Option<u16>,
    pub(super) dir: TempDir,
}

impl Sentinel {
    pub(super) async fn start(
        program: &PathBuf,
        opts: &SentinelGroupBuilder,
        primary_port: u16,
    ) -> Result<Sentinel> {
        let dir = TempDir::new("sentinel")?;
        let mut last_error = None;
        for _ in 0..5 {
            let port = free_port()?;
            let mut tls_port = None;
            let mut tls_text = String::new();
            if let Some(cert) = &opts.tls {
                let mut tp = free_port()?;
                while tp == port {
                    tp = free_port()?;
                }
                tls_port = Some(tp);
                tls_text = format!(
                    "tls-port {tp}\ntls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\n\
                     tls-auth-clients no\ntls-replication yes\n",
                    cert.cert_file().display(),
                    cert.key_file().display(),
                    cert.ca_file().display(),
                );
            }
            let conf = dir.path().join("sentinel.conf");
            let text = format!(
                "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {dir}\n\
                 sentinel monitor {name} 127.0.0.1 {primary_port} 2\n\
                 sentinel down-after-milliseconds {name} {down}\n\
                 sentinel failover-timeout {name} {failover}\n\
                 sentinel parallel-syncs {name} 2\n",
                dir = dir.path().display(),
                name = opts.name,
                down = opts.down_after.as_millis(),
                failover = opts.failover_timeout.as_millis(),
            ) + &tls_text;
            std::fs::write(&conf, text)
                .map_err(|e| Error::io(format!("writing {}", conf.display()), e))?;
            let log = dir.path().join("sentinel.log");
            let (out, err) = log_stdio(&log)?;
            let mut cmd = Command::new(program);
            cmd.arg(&conf)
                .arg("--sentinel")
                .current_dir(dir.path())
                .stdout(out)
                .stderr(err);
            let mut process = ServerProcess::spawn(cmd, "redis-sentinel")?;
            let what = format!("redis-sentinel on port {port}");
            let ready = poll_every(STARTED_POLL, START_DEADLINE, what.clone(), || {
                let exited = process.try_exited();
                let (what, log) = (what.clone(), &log);
                async move {
                    if let Some(status) = exited {
                        return Look::Fail(Error::Exited {
                            what,
                            status: status.to_string(),
                            log: log_tail(log),
                        });
                    }
                    match resp::ping(loopback(port), &ProbeAuth::default()).await {
                        Ok(()) => Look::Done(()),
                        Err(e) => Look::NotYet(e),
                    }
                }
            })
            .await
            .map_err(|e| with_detail(e, || format!("; log tail:\n{}", log_tail(&log))));
            match ready {
                Ok(()) => {
                    return Ok(Sentinel {
                        process,
                        port,
                        tls_port,
                        dir,
                    });
                }
                // Another process took the port meanwhile: try another one.
                Err(e) if port_conflict(&e) => last_error = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_error.unwrap_or_else(|| Error::Config("no port attempts".to_owned())))
    }

    pub(super) fn addr(&self) -> SocketAddr {
        loopback(self.port)
    }
}

/// Whether `e` is a process that exited because its port was taken.
fn port_conflict(e: &Error) -> bool {
    matches!(e, Error::Exited { log, .. } if log.to_ascii_lowercase().contains("address already in use"))
}
