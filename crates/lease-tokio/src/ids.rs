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
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let (a, b) = TOKEN_STREAM.with(|s| {
        let mut state = s.get();
        let a = splitmix64(&mut state);
        let b = splitmix64(&mut state);
        s.set(state);
        (a, b)
    });
    let mut out = String::with_capacity(32);
    for word in [a, b] {
        for i in (0..16).rev() {
            out.push(char::from(HEX[((word >> (i * 4)) & 0xf) as usize]));
        }
    }
    out
}

/// A seed for one call's retry jitter, from this thread's token stream (cheap: no hasher, no
/// clock read).
pub(crate) fn jitter_seed() -> u64 {
    TOKEN_STREAM.with(|s| {
        let mut state = s.get();
        let v = splitmix64(&mut state);
        s.set(state);
        v
    })
}

thread_local! {
    /// Each thread's token stream, seeded once from [`random_u64`] (the OS-seeded hasher, a
    /// process-wide counter, the pid and the time): a lock cycle makes one token, and seeding
    /// a hasher and reading the clock for each was a measurable share of it.
    static TOKEN_STREAM: std::cell::Cell<u64> = std::cell::Cell::new(random_u64());
}

/// SplitMix64: a bijection of its 64-bit state, so one thread's stream repeats no value
/// within 2^64 draws; distinct seeds keep threads and processes apart.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
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

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    #[test]
    fn tokens_are_distinct_lowercase_hex() {
        let tokens: HashSet<String> = (0..10_000).map(|_| super::random_token()).collect();
        assert_eq!(tokens.len(), 10_000);
        assert!(tokens.iter().all(|t| {
            t.len() == 32
                && t.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        }));
        // Another thread draws from a stream of its own.
        let other = std::thread::spawn(super::random_token)
            .join()
            .expect("thread");
        assert!(!tokens.contains(&other));
    }
}
