//! systemd's readiness protocol (`sd_notify(3)`): when `NOTIFY_SOCKET` is set, `run` sends
//! `READY=1` once it contends, `STATUS=...` on each transition (leader, follower, stepped
//! down) and `STOPPING=1` on SIGINT/SIGTERM/SIGQUIT, each as one datagram on the unix socket
//! it names (a path, or `@name` in the abstract namespace). Best effort: a message that cannot
//! be sent is dropped (traced at debug level), never an error of `run`. No dependency: std's
//! `UnixDatagram`.

use std::os::unix::net::{SocketAddr, UnixDatagram};

/// The socket systemd listens on, and ours to send from.
#[derive(Debug)]
pub(crate) struct Notifier {
    sock: UnixDatagram,
    addr: SocketAddr,
}

impl Notifier {
    /// From `NOTIFY_SOCKET`, or `None` when it is unset, empty or unusable (said at debug
    /// level: a service without `Type=notify` has none).
    pub(crate) fn from_env() -> Option<Notifier> {
        let path = std::env::var_os("NOTIFY_SOCKET")?;
        if path.is_empty() {
            return None;
        }
        let addr = match address(path.as_encoded_bytes()) {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!(error = %e, "NOTIFY_SOCKET is not a usable address; not notifying");
                return None;
            }
        };
        let sock = match UnixDatagram::unbound() {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "no datagram socket for NOTIFY_SOCKET; not notifying");
                return None;
            }
        };
        // Never block the supervisor on a full socket buffer.
        let _ = sock.set_nonblocking(true);
        Some(Notifier { sock, addr })
    }

    /// Sends `state` (newline-separated `KEY=VALUE` lines) as one datagram.
    pub(crate) fn send(&self, state: &str) {
        if let Err(e) = self.sock.send_to_addr(state.as_bytes(), &self.addr) {
            tracing::debug!(error = %e, "sd_notify message not sent");
        }
    }
}

/// A `STATUS=` value: one line, no control bytes (a holder name comes from the store).
pub(crate) fn status_line(text: &str) -> String {
    let clean: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(200)
        .collect();
    format!("STATUS={clean}")
}

/// `NOTIFY_SOCKET`'s address: `@name` is abstract (Linux), anything else a path.
fn address(raw: &[u8]) -> std::io::Result<SocketAddr> {
    match raw.split_first() {
        Some((b'@', name)) => {
            #[cfg(target_os = "linux")]
            {
                use std::os::linux::net::SocketAddrExt;
                SocketAddr::from_abstract_name(name)
            }
            #[cfg(not(target_os = "linux"))]
            {
                let _ = name;
                Err(std::io::Error::other("abstract sockets are Linux only"))
            }
        }
        _ => {
            use std::os::unix::ffi::OsStrExt;
            SocketAddr::from_pathname(std::ffi::OsStr::from_bytes(raw))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_is_one_clean_line() {
        assert_eq!(status_line("leader\nof x"), "STATUS=leader of x");
        assert_eq!(status_line(&"a".repeat(500)).len(), "STATUS=".len() + 200);
    }

    #[test]
    fn addresses_are_paths_or_abstract_names() {
        assert!(
            address(b"/run/systemd/notify")
                .unwrap()
                .as_pathname()
                .is_some()
        );
        #[cfg(target_os = "linux")]
        {
            use std::os::linux::net::SocketAddrExt;
            let a = address(b"@sd").unwrap();
            assert_eq!(a.as_abstract_name(), Some(&b"sd"[..]));
        }
    }
}
