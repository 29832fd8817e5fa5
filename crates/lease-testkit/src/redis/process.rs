//! The `redis-server` child-process backend of a [`RedisServer`].

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::AtomicU8;

use super::config::{RedisOptions, redis_args};
use super::{Backend, PORT_ATTEMPTS, RedisServer, START_DEADLINE, ServerState, is_port_conflict};
use crate::mode::ServerMode;
use crate::process::{ServerProcess, free_port, log_stdio};
use crate::tempdir::TempDir;
use crate::{Error, Result};

#[derive(Debug)]
pub(super) struct ProcessBackend {
    // Field order matters: the process is killed before the directory is removed.
    pub(super) process: Option<ServerProcess>,
    program: PathBuf,
    args: Vec<String>,
    pub(super) dir: TempDir,
}

impl ProcessBackend {
    pub(super) fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    pub(super) fn spawn(&mut self) -> Result<()> {
        let log = self.log_path();
        let (out, err) = log_stdio(&log)?;
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .current_dir(self.dir.path())
            .stdout(out)
            .stderr(err);
        self.process = Some(ServerProcess::spawn(cmd, "redis-server")?);
        Ok(())
    }
}

impl RedisServer {
    pub(super) async fn start_process(opts: RedisOptions) -> Result<Self> {
        let program = crate::server::program()?;
        let dir = TempDir::new(if opts.cluster {
            "cluster-node"
        } else {
            "redis"
        })?;
        let dir_str = dir
            .path()
            .to_str()
            .ok_or_else(|| Error::Config("temp dir path is not UTF-8".to_owned()))?
            .to_owned();
        let mut backend = ProcessBackend {
            process: None,
            program,
            args: Vec::new(),
            dir,
        };
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            let mut port = free_port()?;
            let bus_port = if opts.cluster && !crate::server::has_cluster_port_option() {
                // Redis 6.2 has no `cluster-port`: the bus is always the port + 10000.
                while port > u16::MAX - 10_000 || !port_free(port + 10_000) {
                    port = free_port()?;
                }
                Some(port + 10_000)
            } else if opts.cluster {
                let mut bus = free_port()?;
                while bus == port {
                    bus = free_port()?;
                }
                Some(bus)
            } else {
                None
            };
            let tls_port = if opts.tls.is_some() {
                let mut tls = free_port()?;
                while tls == port || Some(tls) == bus_port {
                    tls = free_port()?;
                }
                Some(tls)
            } else {
                None
            };
            backend.args = redis_args(&opts, port, tls_port, bus_port, &dir_str, "127.0.0.1")?;
            let _ = std::fs::remove_file(backend.log_path());
            backend.spawn()?;
            let server = RedisServer {
                mode: ServerMode::Process,
                port,
                tls_port,
                bus_port,
                state: AtomicU8::new(ServerState::Running.to_u8()),
                inner: tokio::sync::Mutex::new(Backend::Process(backend)),
                opts: opts.clone(),
            };
            match server.wait_ready(START_DEADLINE).await {
                Ok(()) => return Ok(server),
                Err(Error::Exited { log, what, status }) if is_port_conflict(&log) => {
                    last_error = Some(Error::Exited { log, what, status });
                    let Backend::Process(b) = server.into_backend() else {
                        unreachable!("process backend")
                    };
                    backend = b;
                    backend.process = None;
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_error.unwrap_or_else(|| Error::Config("no port attempts".to_owned())))
    }
}

/// Whether 127.0.0.1:`port` can be bound now.
fn port_free(port: u16) -> bool {
    std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, port)).is_ok()
}

pub(super) fn running(p: &mut ProcessBackend) -> Result<&mut ServerProcess> {
    p.process
        .as_mut()
        .ok_or_else(|| Error::InvalidState("the server process is not running".to_owned()))
}
