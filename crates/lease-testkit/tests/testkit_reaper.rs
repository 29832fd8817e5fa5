//! Leftovers of a test process that died without running destructors are removed
//! when the next test binary starts its first server. (Its own binary: the clean-up
//! runs once per process.)

mod common;

use std::path::PathBuf;
use std::process::Command;

use lease_testkit::ServerMode;
use lease_testkit::reaper::OWNER_LABEL;
use lease_testkit::redis::RedisServer;
use lease_testkit::tempdir::{ENV_TMPDIR, TEMP_PREFIX};

#[tokio::test]
async fn stale_servers_of_dead_test_processes_are_removed() {
    // A stand-in for a test process that will die without cleaning up. While it
    // lives, its leftovers are not eligible (so no other test binary's clean-up
    // can race with the setup below).
    let mut owner = Command::new("sleep").arg("600").spawn().unwrap();
    let dead = owner.id();
    let root = std::env::var_os(ENV_TMPDIR)
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let stale = root.join(format!("{TEMP_PREFIX}reaper-test-{dead}-0-0"));
    std::fs::create_dir_all(&stale).unwrap();
    // A server still running in the dead owner's directory (`--port 0`: no TCP).
    let mut leftover = Command::new("redis-server")
        .args(["--port", "0", "--save", "", "--appendonly", "no"])
        .current_dir(&stale)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();

    // A container owned by the dead process (container mode only).
    let selection = lease_testkit::mode::selection().unwrap();
    let stale_container = if selection.mode == ServerMode::Container {
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        let out = Command::new("docker")
            .args([
                "create",
                "--label",
                &format!("{OWNER_LABEL}={}:{dead}", hostname.trim()),
                &selection.image,
                "redis-server",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        Some(String::from_utf8(out.stdout).unwrap().trim().to_owned())
    } else {
        None
    };

    owner.kill().unwrap();
    owner.wait().unwrap();

    let server = RedisServer::start().await.unwrap();

    assert!(!stale.exists(), "{} was not removed", stale.display());
    let status = leftover.try_wait().unwrap();
    if status.is_none() {
        let _ = leftover.kill();
        let _ = leftover.wait();
    }
    assert!(status.is_some(), "the leftover process was not killed");
    if let Some(id) = stale_container {
        assert!(
            !common::container_exists(&id),
            "stale container {id} was not removed"
        );
    }
    // Our own, live server is of course untouched.
    assert!(
        common::connect_and_ping(&server.url(), common::ANSWER_WITHIN)
            .await
            .is_some()
    );
}
