//! The testcontainers (Docker) backend of a [`RedisServer`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

use super::config::{RedisOptions, redis_args};
use super::{
    Backend, DOCKER_TIMEOUT, PORT_ATTEMPTS, RedisServer, START_DEADLINE, ServerState,
    is_port_conflict,
};
use crate::docker::{docker, docker_blocking, drop_on_kit_runtime, on_kit_runtime};
use crate::mode::ServerMode;
use crate::process::free_port;
use crate::tempdir::run_id;
use crate::{Error, Result};

/// The port Redis listens on inside a container.
const CONTAINER_PORT: u16 = 6379;

/// Docker label put on every container the kit starts.
pub const CONTAINER_LABEL: &str = "redlease.testkit";
/// Docker label carrying the run id ([`crate::tempdir::ENV_RUN_ID`]), when set.
pub const CONTAINER_RUN_LABEL: &str = "redlease.testkit.run";

#[derive(Debug)]
pub(super) struct ContainerBackend {
    container: Option<Arc<ContainerAsync<GenericImage>>>,
    pub(super) id: String,
    pub(super) image: String,
}

impl Drop for ContainerBackend {
    fn drop(&mut self) {
        // Synchronous and independent of any runtime: `docker rm -f` also removes a
        // paused container. testcontainers' own Drop then finds nothing to remove.
        if let Err(e) = docker_blocking(&["rm", "-f", "-v", &self.id], DOCKER_TIMEOUT) {
            eprintln!("lease-testkit: could not remove container {}: {e}", self.id);
        }
        if let Some(container) = self.container.take() {
            drop_on_kit_runtime(container);
        }
    }
}

impl RedisServer {
    pub(super) async fn start_container(opts: RedisOptions, image: String) -> Result<Self> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let (image_name, image_tag) = split_image(&image);
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            let host_port = free_port()?;
            let name = format!(
                "redlease-redis-{}-{}-{}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed),
                host_port
            );
            let mut cmd = vec!["redis-server".to_owned()];
            cmd.extend(redis_args(
                &opts,
                CONTAINER_PORT,
                None,
                None,
                "/data",
                "0.0.0.0",
            )?);
            let mut request = GenericImage::new(image_name.clone(), image_tag.clone())
                .with_wait_for(WaitFor::message_on_stdout("Ready to accept connections"))
                .with_cmd(cmd)
                .with_container_name(name.clone())
                .with_label(CONTAINER_LABEL, "redis")
                .with_label(crate::reaper::OWNER_LABEL, crate::reaper::owner())
                .with_mapped_port(host_port, CONTAINER_PORT.tcp())
                .with_startup_timeout(START_DEADLINE)
                .with_host_config_modifier(|host_config| {
                    // Publish on loopback only (testcontainers publishes on 0.0.0.0).
                    if let Some(bindings) = host_config.port_bindings.as_mut() {
                        for binding in bindings.values_mut().flatten().flatten() {
                            binding.host_ip = Some("127.0.0.1".to_owned());
                        }
                    }
                });
            if let Some(run) = run_id() {
                request = request.with_label(CONTAINER_RUN_LABEL, run);
            }
            let started = on_kit_runtime(async move { request.start().await }).await?;
            match started {
                Ok(container) => {
                    let id = container.id().to_owned();
                    let server = RedisServer {
                        mode: ServerMode::Container,
                        port: host_port,
                        tls_port: None,
                        bus_port: None,
                        state: AtomicU8::new(ServerState::Running.to_u8()),
                        inner: tokio::sync::Mutex::new(Backend::Container(ContainerBackend {
                            container: Some(Arc::new(container)),
                            id,
                            image: image.clone(),
                        })),
                        opts,
                    };
                    server.wait_ready(START_DEADLINE).await?;
                    return Ok(server);
                }
                Err(e) => {
                    // A failed start may leave a created container behind.
                    let _ = docker(&["rm", "-f", "-v", &name], DOCKER_TIMEOUT).await;
                    let message = e.to_string();
                    if is_port_conflict(&message) {
                        last_error = Some(Error::Container(message));
                        continue;
                    }
                    return Err(Error::Container(format!(
                        "starting {image} via testcontainers: {message}"
                    )));
                }
            }
        }
        Err(last_error.unwrap_or_else(|| Error::Config("no port attempts".to_owned())))
    }
}

pub(super) fn container(c: &ContainerBackend) -> Result<Arc<ContainerAsync<GenericImage>>> {
    c.container
        .clone()
        .ok_or_else(|| Error::InvalidState("the container is gone".to_owned()))
}

/// Splits `name[:tag]` (the tag is after the last `:` that follows the last `/`).
fn split_image(image: &str) -> (String, String) {
    let slash = image.rfind('/').map_or(0, |i| i + 1);
    match image[slash..].rfind(':') {
        Some(i) => (
            image[..slash + i].to_owned(),
            image[slash + i + 1..].to_owned(),
        ),
        None => (image.to_owned(), "latest".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_image_references() {
        assert_eq!(split_image("redis:7"), ("redis".into(), "7".into()));
        assert_eq!(
            split_image("localhost:5000/redlease-test/redis:7.0.15"),
            ("localhost:5000/redlease-test/redis".into(), "7.0.15".into())
        );
        assert_eq!(split_image("redis"), ("redis".into(), "latest".into()));
    }
}
