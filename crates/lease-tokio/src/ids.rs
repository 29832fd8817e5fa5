//! Instance ids, ownership tokens and jitter seeds: drawn from the operating system's
//! randomness (`getrandom`; jitter seeds from a per-thread stream seeded by it).
//!
//! Owners are the capability to renew and release a lease, so they must not be predictable
//! from one another: each token is 128 bits read from the OS, never a stream derived from an
//! earlier value. They are read [`POOL`] bytes at a time into a per-thread pool (one
//! `getrandom` call per 64 owners of 16 bytes, instead of one per obtain), each owner's bytes
//! wiped from the pool as it is drawn. A pool remembers the process it was filled in: a
//! forked child's copy is discarded unread, so parent and child never draw the same owner.
//! The sans-IO machines of `lease-core` take their randomness as seeds from here (and tests
//! pass their own seeds).

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);
static WARNED: AtomicBool = AtomicBool::new(false);

/// Fills `buf` from the operating system's randomness. Should the OS refuse (it does not on
/// any supported platform once booted), each 8 bytes come from a `RandomState` hasher (keyed
/// by the OS's randomness when the process started) over a process-wide counter, the pid and
/// the time, so values stay distinct; a warning is traced once.
fn fill(buf: &mut [u8]) {
    if let Err(e) = getrandom::fill(buf) {
        if !WARNED.swap(true, Ordering::Relaxed) {
            tracing::warn!(error = %e, "lease-tokio: the OS randomness failed; ids fall back to a keyed hash");
        }
        for chunk in buf.chunks_mut(8) {
            let v = hashed_u64().to_le_bytes();
            let n = chunk.len();
            chunk.copy_from_slice(&v[..n]);
        }
    }
}

fn hashed_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(d.as_nanos());
    }
    h.finish()
}

/// 64 bits from the operating system's randomness (an elector's default jitter seed).
pub(crate) fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    fill(&mut b);
    u64::from_le_bytes(b)
}

/// Bytes of OS randomness read at once into a thread's owner pool: 64 owners per
/// `getrandom` call.
pub(crate) const POOL: usize = 1024;

/// A thread's unread OS randomness for owners ([`POOL`]).
struct OwnerPool {
    /// The process the bytes were read in (`std::process::id`): a forked child inherits the
    /// pool, and must not draw the owners its parent will.
    pid: u32,
    /// Bytes read from the OS; those before `next` are drawn and zeroed.
    bytes: Box<[u8; POOL]>,
    next: usize,
}

impl OwnerPool {
    /// 16 bytes never drawn before in this process; refills from the OS when the pool is
    /// spent or was filled in another process (a fork's parent).
    fn draw(&mut self) -> [u8; 16] {
        let pid = std::process::id();
        if self.pid != pid || self.next + 16 > POOL {
            fill(&mut self.bytes[..]);
            self.pid = pid;
            self.next = 0;
        }
        let mut out = [0u8; 16];
        let drawn = &mut self.bytes[self.next..self.next + 16];
        out.copy_from_slice(drawn);
        drawn.fill(0);
        self.next += 16;
        out
    }
}

/// 128 bits for one owner, from the calling thread's pool ([`OwnerPool`]).
fn owner_bytes() -> [u8; 16] {
    thread_local! {
        static OWNERS: std::cell::RefCell<OwnerPool> = std::cell::RefCell::new(OwnerPool {
            pid: 0,
            bytes: Box::new([0; POOL]),
            next: POOL,
        });
    }
    // While the thread's storage is torn down (or, never, drawn from re-entrantly), straight
    // from the OS.
    let pooled = OWNERS.try_with(|pool| pool.try_borrow_mut().ok().map(|mut p| p.draw()));
    pooled.ok().flatten().unwrap_or_else(|| {
        let mut bytes = [0u8; 16];
        fill(&mut bytes);
        bytes
    })
}

/// A random owner string: 128 bits as 32 lowercase hex digits, read from the operating
/// system's randomness (no two share state: one observed owner says nothing about any other).
/// It is what a lock is held under (its [`Owner`](lease_core::Owner)), not a fencing token.
///
/// ```
/// let a = lease_tokio::random_owner();
/// assert_eq!(a.len(), 32);
/// assert_ne!(a, lease_tokio::random_owner());
/// ```
pub fn random_owner() -> String {
    random_owner_text().as_ref().to_owned()
}

/// [`random_owner`]'s text on the stack: what an obtain's plan copies into its owner.
pub(crate) fn random_owner_text() -> OwnerText {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = owner_bytes();
    let mut out = [0u8; 32];
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair.copy_from_slice(&[HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]]);
    }
    OwnerText(out)
}

/// 32 lowercase hex digits ([`random_owner_text`]).
pub(crate) struct OwnerText([u8; 32]);

impl AsRef<str> for OwnerText {
    fn as_ref(&self) -> &str {
        // Hex digits are ASCII: never empty here (an empty owner would be refused, not used).
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// The old name of [`random_owner`]: it returns an owner string, not a fencing token.
#[deprecated(
    since = "0.1.0",
    note = "renamed `random_owner`: it returns an owner string, not a fencing token"
)]
pub fn random_token() -> String {
    random_owner()
}

/// A seed for one call's retry jitter: the next value of a per-thread SplitMix64 stream
/// seeded once from the operating system's randomness.
///
/// Jitter only spreads retries apart, so unlike an owner it needs no secrecy: a stream saves
/// the `getrandom` system call every obtain and refresh would otherwise make.
pub(crate) fn jitter_seed() -> u64 {
    thread_local! {
        static JITTER: std::cell::RefCell<lease_core::rng::SplitMix64> =
            std::cell::RefCell::new(lease_core::rng::SplitMix64::new(random_u64()));
    }
    JITTER.with_borrow_mut(lease_core::rng::SplitMix64::next_u64)
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

    use lease_core::rng::SplitMix64;

    #[test]
    fn tokens_are_distinct_lowercase_hex() {
        let tokens: HashSet<String> = (0..10_000).map(|_| super::random_owner()).collect();
        assert_eq!(tokens.len(), 10_000);
        assert!(tokens.iter().all(|t| {
            t.len() == 32
                && t.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        }));
        // Another thread draws too.
        let other = std::thread::spawn(super::random_owner)
            .join()
            .expect("thread");
        assert!(!tokens.contains(&other));
    }

    /// A pool drawn to its end refills from the OS; every drawn owner's bytes are wiped
    /// from it.
    #[test]
    fn a_pool_wipes_what_it_draws_and_refills() {
        let mut pool = super::OwnerPool {
            pid: std::process::id(),
            bytes: Box::new([0; super::POOL]),
            next: super::POOL,
        };
        let mut seen = HashSet::new();
        for _ in 0..3 * super::POOL / 16 {
            let at = pool.next % super::POOL;
            let owner = pool.draw();
            assert_ne!(owner, [0; 16], "drawn from a filled pool");
            assert!(seen.insert(owner), "no owner drawn twice");
            assert_eq!(pool.bytes[at..at + 16], [0; 16], "drawn bytes are wiped");
        }
    }

    /// A pool filled in another process (what a forked child inherits) is discarded unread:
    /// the child never draws the owners its parent will.
    #[test]
    fn a_pool_inherited_across_a_fork_is_not_drawn_from() {
        let parent_bytes = Box::new([7u8; super::POOL]);
        let mut pool = super::OwnerPool {
            pid: std::process::id().wrapping_add(1),
            bytes: parent_bytes.clone(),
            next: 0,
        };
        let owner = pool.draw();
        assert_ne!(owner, [7; 16], "the parent's next owner");
        assert_eq!(pool.pid, std::process::id());
        assert_eq!(pool.next, 16);
        assert!(
            pool.bytes.iter().filter(|b| **b == 7).count() < super::POOL / 8,
            "refilled from the OS"
        );
    }

    /// The old name still answers (deprecated, not removed), with an owner of the new kind.
    #[test]
    #[allow(deprecated)]
    fn the_old_name_is_an_alias() {
        let old = super::random_token();
        assert_eq!(old.len(), 32);
        assert_ne!(old, super::random_owner());
    }

    /// The finding of issue 27: with a per-thread SplitMix64 stream, one token (the state's
    /// two outputs) predicted every later token of the thread. Inverting SplitMix64's output
    /// function on the first half of a token gives the state; stepping it must not give the
    /// next token.
    #[test]
    fn a_token_does_not_predict_the_next() {
        fn unmix(mut z: u64) -> u64 {
            // Inverse of SplitMix64's output function.
            z = (z ^ (z >> 31) ^ (z >> 62)).wrapping_mul(0x3196_42b2_d24d_8ec3);
            z = (z ^ (z >> 27) ^ (z >> 54)).wrapping_mul(0x96de_1b17_3f11_9089);
            z ^ (z >> 30) ^ (z >> 60)
        }
        // The workspace's SplitMix64: its first output from `state` is the output function of
        // `state` plus the increment.
        let increment = 0x9e37_79b9_7f4a_7c15u64;
        // The inverse is right (checked on a known state).
        let s = 12345u64;
        let out = SplitMix64::new(s).next_u64();
        assert_eq!(unmix(out), s.wrapping_add(increment));

        for _ in 0..100 {
            let t = super::random_owner();
            let next = super::random_owner();
            let hi = u64::from_str_radix(&t[..16], 16).expect("hex");
            // The generator that would have produced `hi` next produces these.
            let mut rng = SplitMix64::new(unmix(hi).wrapping_sub(increment));
            assert_eq!(rng.next_u64(), hi);
            let a = rng.next_u64();
            let b = rng.next_u64();
            let c = rng.next_u64();
            let predicted_b = format!("{a:016x}{b:016x}");
            let predicted_next = format!("{b:016x}{c:016x}");
            assert_ne!(
                &t[16..],
                &predicted_b[..16],
                "second half predicted from the first"
            );
            assert_ne!(next, predicted_next, "next token predicted");
        }
    }
}
