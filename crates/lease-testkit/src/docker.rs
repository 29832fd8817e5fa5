//! Docker plumbing: a kit-owned runtime for testcontainers, and the docker CLI.
//!
//! testcontainers shares one Docker HTTP client between all containers alive in the
//! process. Every `#[tokio::test]` has its own runtime, and a hyper client used from
//! a runtime other than the one that created its connections fails with "runtime
//! dropped the dispatch task" once that runtime is gone. So every testcontainers call
//! runs on one long-lived runtime owned by the kit, whatever runtime the test uses.

use std::future::Future;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::runtime::Runtime;

use crate::mode::docker_program;
use crate::process::{describe_output, run_with_timeout, run_with_timeout_async};
use crate::{Error, Result};

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

fn runtime() -> &'static Runtime {
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("lease-testkit-docker")
            .enable_all()
            .build()
            .expect("lease-testkit: cannot build the Docker runtime")
    })
}

/// Runs `fut` on the kit's Docker runtime and awaits it from any runtime.
pub(crate) async fn on_kit_runtime<F, T>(fut: F) -> Result<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    runtime()
        .spawn(fut)
        .await
        .map_err(|e| Error::Container(format!("Docker task failed: {e}")))
}

/// Drops `value` on the kit's Docker runtime (testcontainers' Drop needs a runtime).
pub(crate) fn drop_on_kit_runtime<T: Send + 'static>(value: T) {
    runtime().spawn(async move { drop(value) });
}

fn docker_command(args: &[&str]) -> Command {
    let mut cmd = Command::new(docker_program());
    cmd.args(args);
    cmd
}

fn check(args: &[&str], out: std::process::Output) -> Result<String> {
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(Error::Command {
            command: format!("docker {}", args.join(" ")),
            output: describe_output(&out.status, &out.stdout, &out.stderr),
        })
    }
}

/// Runs the docker CLI synchronously (used from Drop).
pub(crate) fn docker_blocking(args: &[&str], timeout: Duration) -> Result<String> {
    let out = run_with_timeout(docker_command(args), timeout)?;
    check(args, out)
}

/// Runs the docker CLI without blocking the runtime.
pub(crate) async fn docker(args: &[&str], timeout: Duration) -> Result<String> {
    let out = run_with_timeout_async(docker_command(args), timeout).await?;
    check(args, out)
}
