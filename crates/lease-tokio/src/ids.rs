//! Instance ids and ownership tokens.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// 64 bits that differ between calls and processes. `RandomState` is seeded from the operating
/// system's randomness; mixing in a process-wide counter, the pid and the time keeps successive
/// values distinct. Not for secrets: ids and tokens only need to be unique.
pub(crate) fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(d.as_nanos());
    }
    h.finish()
}

/// A random 128-bit ownership token, as 32 lowercase hex digits.
///
/// ```
/// let a = lease_tokio::random_token();
/// assert_eq!(a.len(), 32);
/// assert_ne!(a, lease_tokio::random_token());
/// ```
pub fn random_token() -> String {
    format!("{:016x}{:016x}", random_u64(), random_u64())
}

/// A default instance id, unique per process: `<hostname>-<pid>-<random>`.
///
/// Two live replicas must never share an instance id: each would take the lease over from the
/// other and both would lead. Derive explicit ids from something unique per replica.
///
/// ```
/// let id = lease_tokio::default_instance_id();
/// assert!(id.contains(&std::process::id().to_string()));
/// ```
pub fn default_instance_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "host".to_owned());
    let host: String = host.chars().filter(|c| !c.is_control()).take(128).collect();
    format!("{host}-{}-{:08x}", std::process::id(), random_u64() as u32)
}
