//! [`Blackhole`]: a silent partition of one loopback port, made with iptables (root only).
//!
//! Unlike [`crate::proxy::FaultProxy`]'s blackhole (which holds bytes and delivers them the
//! moment it heals), this one drops packets in the kernel, both ways: the client's TCP stack
//! retransmits with exponential backoff (up to two minutes between tries) and keeps doing so
//! after the heal, exactly as when a real network path disappears without a reset. It is what
//! shows whether a client rebuilds a silent connection or waits for TCP.
//!
//! ```no_run
//! # async fn demo() -> lease_testkit::Result<()> {
//! use lease_testkit::{Blackhole, RedisServer};
//! let server = RedisServer::start().await?;
//! let cut = Blackhole::port(server.port())?; // nothing reaches the server's port, or leaves it
//! cut.heal()?; // also done on drop, while the test panics too
//! # Ok(()) }
//! ```
//!
//! Every rule carries the comment `redlease-kit-<pid>`; [`Blackhole::port`] first removes
//! rules whose owner process is gone (a test killed before its destructor ran).

use std::process::Command;
use std::sync::Mutex;

use crate::{Error, Result};

const COMMENT_PREFIX: &str = "redlease-kit-";

/// A blackholed loopback port; healed on drop. See the [module documentation](self).
#[derive(Debug)]
pub struct Blackhole {
    rules: Mutex<Vec<Vec<String>>>,
}

impl Blackhole {
    /// Drops every TCP packet to and from `port` on the loopback interface (the port the test's
    /// client connects to). Fails when iptables is missing or refuses (not root).
    pub fn port(port: u16) -> Result<Blackhole> {
        reap_stale();
        let comment = format!("{COMMENT_PREFIX}{}", std::process::id());
        let port = port.to_string();
        let rules: Vec<Vec<String>> = ["--dport", "--sport"]
            .iter()
            .map(|dir| {
                [
                    "INPUT",
                    "-i",
                    "lo",
                    "-p",
                    "tcp",
                    dir,
                    &port,
                    "-m",
                    "comment",
                    "--comment",
                    &comment,
                    "-j",
                    "DROP",
                ]
                .iter()
                .map(|s| (*s).to_owned())
                .collect()
            })
            .collect();
        let hole = Blackhole {
            rules: Mutex::new(Vec::new()),
        };
        for rule in rules {
            iptables("-I", &rule)?;
            hole.rules
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(rule);
        }
        Ok(hole)
    }

    /// Removes the rules (idempotent): traffic flows again, though connections that were cut
    /// stay in TCP's backoff until their next retransmission.
    pub fn heal(&self) -> Result<()> {
        let rules = std::mem::take(&mut *self.rules.lock().unwrap_or_else(|p| p.into_inner()));
        let mut first = Ok(());
        for rule in rules {
            if let Err(e) = iptables("-D", &rule)
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        first
    }

    /// Whether the rules are in place.
    pub fn is_active(&self) -> bool {
        !self
            .rules
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        if let Err(e) = self.heal() {
            eprintln!("lease-testkit: could not remove a blackhole rule: {e}");
        }
    }
}

fn iptables(op: &str, rule: &[String]) -> Result<()> {
    let out = Command::new("iptables")
        .arg("-w")
        .arg(op)
        .args(rule)
        .output()
        .map_err(|error| Error::Io {
            context: "running iptables".to_owned(),
            error,
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::Command {
            command: format!("iptables -w {op} {}", rule.join(" ")),
            output: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        })
    }
}

/// Removes kit rules whose owner process no longer exists.
fn reap_stale() {
    let Ok(out) = Command::new("iptables")
        .args(["-w", "-S", "INPUT"])
        .output()
    else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(pid) = line
            .split_once(COMMENT_PREFIX)
            .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        // `-A INPUT ...` → `-D INPUT ...`
        let Some(spec) = line.strip_prefix("-A ") else {
            continue;
        };
        let args: Vec<String> = spec
            .split_whitespace()
            .map(|s| s.trim_matches('"').to_owned())
            .collect();
        let _ = iptables("-D", &args);
    }
}
