//! Network namespaces, veth links and iptables rules for the nodes.
//!
//! Node `i` of run `r` (a letter: runs of one process may overlap) of harness process `P`
//! lives in namespace `rlj<P><r>-<i>`, linked to the host's namespace by a veth pair
//! `rlj<P><r>h<i>` (host side, `10.<o>.<i>.1/24`) and `rlj<P><r>n<i>` (node side,
//! `10.<o>.<i>.2/24`), where the octet `o` is one no address of the host uses.
//! Redis servers listen on the host side of every link. Partitions are iptables rules in the
//! node's namespace, so they cut exactly that node. Everything carries the `rlj` prefix and
//! the harness's pid: [`clean_stale`] removes what a dead harness left, and [`Network`]'s
//! `Drop` removes what this one made (processes in the namespaces first).

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;

use crate::error::{JepsenError, Result};
use crate::nemesis::Direction;

/// The prefix of every namespace and link the harness creates.
pub const PREFIX: &str = "rlj";

/// Runs a command and returns its stdout; a non-zero exit is an error with its stderr.
pub fn run(args: &[&str]) -> Result<String> {
    let command = args.join(" ");
    let (program, rest) = args.split_first().ok_or_else(|| JepsenError::Command {
        command: command.clone(),
        detail: "empty command".to_owned(),
    })?;
    let out = Command::new(program)
        .args(rest)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| JepsenError::Command {
            command: command.clone(),
            detail: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(JepsenError::Command {
            command,
            detail: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Why this machine cannot run the harness, if it cannot: not root, no `ip` or `iptables`,
/// or namespaces cannot be created (a container without `CAP_SYS_ADMIN`, say).
pub fn unsupported() -> Option<String> {
    if !is_root() {
        return Some("not running as root: network namespaces and iptables need root".to_owned());
    }
    for tool in [
        ["ip", "-V"],
        ["iptables", "-V"],
        ["redis-server", "--version"],
    ] {
        if let Err(e) = run(&tool) {
            return Some(format!("{} is not usable: {e}", tool[0]));
        }
    }
    static PROBES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let probe = format!("{PREFIX}{}-probe{n}", std::process::id());
    if let Err(e) = run(&["ip", "netns", "add", &probe]) {
        return Some(format!("cannot create a network namespace: {e}"));
    }
    let rule = run(&[
        "ip", "netns", "exec", &probe, "iptables", "-w", "-A", "OUTPUT", "-p", "tcp", "--dport",
        "1", "-j", "DROP",
    ]);
    let _ = run(&["ip", "netns", "del", &probe]);
    if let Err(e) = rule {
        return Some(format!("iptables does not work in a namespace: {e}"));
    }
    None
}

/// The pid in a name `rlj<pid>...`, if it has that shape.
fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Kills every process in namespace `ns` (SIGKILL).
fn kill_pids_in(ns: &str) {
    if let Ok(pids) = run(&["ip", "netns", "pids", ns]) {
        for pid in pids.split_whitespace() {
            let _ = run(&["kill", "-KILL", pid]);
        }
    }
}

/// The harness namespaces present now (`rlj...`), with their owner pid.
pub fn namespaces() -> Vec<(String, Option<u32>)> {
    run(&["ip", "netns", "list"])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(PREFIX))
        .map(|n| (n.to_owned(), owner_pid(n)))
        .collect()
}

/// Removes namespaces and links left by harness processes that no longer run (a harness
/// killed with SIGKILL cannot clean up). Returns what it removed.
pub fn clean_stale() -> Vec<String> {
    let mut removed = Vec::new();
    for (ns, pid) in namespaces() {
        if pid.is_none_or(|p| !alive(p)) {
            kill_pids_in(&ns);
            if run(&["ip", "netns", "del", &ns]).is_ok() {
                removed.push(format!("namespace {ns}"));
            }
        }
    }
    let links = run(&["ip", "-o", "link", "show"]).unwrap_or_default();
    for line in links.lines() {
        let Some(name) = line.split(':').nth(1).map(str::trim) else {
            continue;
        };
        let name = name.split('@').next().unwrap_or(name);
        if name.starts_with(PREFIX)
            && owner_pid(name).is_none_or(|p| !alive(p))
            && run(&["ip", "link", "del", name]).is_ok()
        {
            removed.push(format!("link {name}"));
        }
    }
    removed
}

/// One node's place in the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeNet {
    /// The namespace.
    pub ns: String,
    /// The host side of the veth pair.
    pub host_if: String,
    /// The address of the host side: the node reaches the servers here.
    pub host_ip: String,
    /// The node's own address.
    pub node_ip: String,
}

/// The namespaces and links of one run; removed on drop.
#[derive(Debug)]
pub struct Network {
    nodes: Vec<NodeNet>,
}

impl Network {
    /// Creates `n` namespaces with their links. On failure, what was made is removed.
    pub fn create(n: usize) -> Result<Network> {
        static CREATING: Mutex<u32> = Mutex::new(0);
        // One creation at a time in this process: the free subnet is chosen by looking.
        let mut runs = CREATING.lock().unwrap_or_else(|p| p.into_inner());
        let run_letter = char::from(b'a' + u8::try_from(*runs % 26).unwrap_or(0));
        *runs += 1;
        let pid = std::process::id();
        let used = run(&["ip", "-o", "-4", "addr", "show"]).unwrap_or_default();
        let octet = (0..100u32)
            .map(|k| 100 + (pid + k) % 100)
            .find(|o| !used.contains(&format!(" 10.{o}.")))
            .ok_or_else(|| JepsenError::Config("no free 10.x.0.0/16 subnet".to_owned()))?;
        let mut net = Network { nodes: Vec::new() };
        for i in 0..n {
            let node = NodeNet {
                ns: format!("{PREFIX}{pid}{run_letter}-{i}"),
                host_if: format!("{PREFIX}{pid}{run_letter}h{i}"),
                host_ip: format!("10.{octet}.{i}.1"),
                node_ip: format!("10.{octet}.{i}.2"),
            };
            let ns_if = format!("{PREFIX}{pid}{run_letter}n{i}");
            run(&["ip", "netns", "add", &node.ns])?;
            net.nodes.push(node.clone());
            run(&[
                "ip",
                "link",
                "add",
                &node.host_if,
                "type",
                "veth",
                "peer",
                "name",
                &ns_if,
            ])?;
            run(&["ip", "link", "set", &ns_if, "netns", &node.ns])?;
            run(&[
                "ip",
                "addr",
                "add",
                &format!("{}/24", node.host_ip),
                "dev",
                &node.host_if,
            ])?;
            run(&["ip", "link", "set", &node.host_if, "up"])?;
            let exec = |args: &[&str]| {
                let mut v = vec!["ip", "netns", "exec", node.ns.as_str()];
                v.extend_from_slice(args);
                run(&v)
            };
            exec(&[
                "ip",
                "addr",
                "add",
                &format!("{}/24", node.node_ip),
                "dev",
                &ns_if,
            ])?;
            exec(&["ip", "link", "set", &ns_if, "up"])?;
            exec(&["ip", "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    /// The nodes' places.
    pub fn nodes(&self) -> &[NodeNet] {
        &self.nodes
    }

    /// The host-side addresses (where servers must listen).
    pub fn host_ips(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.host_ip.clone()).collect()
    }

    fn exec(&self, node: usize, args: &[&str]) -> Result<String> {
        let n = self.nodes.get(node).ok_or_else(|| JepsenError::Node {
            node,
            detail: "no such node".to_owned(),
        })?;
        let mut v = vec!["ip", "netns", "exec", n.ns.as_str()];
        v.extend_from_slice(args);
        run(&v)
    }

    /// Drops node `node`'s traffic to `ports` on the host side, in `direction`.
    pub fn partition(&self, node: usize, direction: Direction, ports: &[u16]) -> Result<()> {
        let host = self
            .nodes
            .get(node)
            .map(|n| n.host_ip.clone())
            .unwrap_or_default();
        for port in ports {
            let port = port.to_string();
            if matches!(direction, Direction::Both | Direction::Requests) {
                self.exec(
                    node,
                    &[
                        "iptables", "-w", "-A", "OUTPUT", "-p", "tcp", "-d", &host, "--dport",
                        &port, "-j", "DROP",
                    ],
                )?;
            }
            if matches!(direction, Direction::Both | Direction::Replies) {
                self.exec(
                    node,
                    &[
                        "iptables", "-w", "-A", "INPUT", "-p", "tcp", "-s", &host, "--sport",
                        &port, "-j", "DROP",
                    ],
                )?;
            }
        }
        Ok(())
    }

    /// Removes every rule of node `node`.
    pub fn heal(&self, node: usize) -> Result<()> {
        self.exec(node, &["iptables", "-w", "-F", "OUTPUT"])?;
        self.exec(node, &["iptables", "-w", "-F", "INPUT"])?;
        Ok(())
    }

    /// The namespace of node `node`.
    pub fn ns(&self, node: usize) -> Option<&str> {
        self.nodes.get(node).map(|n| n.ns.as_str())
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for n in &self.nodes {
            kill_pids_in(&n.ns);
            let _ = run(&["ip", "netns", "del", &n.ns]);
            // Gone with its peer; this only matters if the move into the namespace failed.
            let _ = run(&["ip", "link", "del", &n.host_if]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_pids_parse_from_names() {
        assert_eq!(owner_pid("rlj1234-0"), Some(1234));
        assert_eq!(owner_pid("rlj77bh3"), Some(77));
        assert_eq!(owner_pid("rlj-x"), None);
        assert_eq!(owner_pid("other"), None);
    }
}
