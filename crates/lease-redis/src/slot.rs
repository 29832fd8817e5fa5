//! Redis Cluster hash slots, computed locally so cross-slot requests are refused before any
//! round trip.
//!
//! Redis Cluster maps a key to one of 16384 slots: `CRC16(k) mod 16384`, where `k` is the hash
//! tag when the key has one — the bytes between the first `{` and the first `}` after it, if
//! that span is non-empty — and the whole key otherwise. Every key one script touches must map
//! to the same slot, or the server answers `CROSSSLOT`.
//!
//! ```
//! use lease_redis::slot::{check_same_slot, hash_tag, key_slot};
//!
//! assert_eq!(key_slot("foo"), 12182);
//! assert_eq!(hash_tag(b"{user1000}.following"), Some(&b"user1000"[..]));
//! assert_eq!(key_slot("{user1000}.following"), key_slot("{user1000}.followers"));
//! assert!(check_same_slot(&["{jobs}:leader", "{jobs}:fence"]).is_ok());
//! assert!(check_same_slot(&["jobs:leader", "jobs:fence"]).is_err());
//! ```

use lease_core::LeaseSpec;

/// The number of hash slots of a Redis Cluster.
pub const SLOT_COUNT: u16 = 16384;

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), the checksum Redis Cluster uses.
///
/// ```
/// assert_eq!(lease_redis::slot::crc16(b"123456789"), 0x31C3);
/// ```
pub fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The hash tag of `key`: the bytes between the first `{` and the first `}` after it, when
/// that span is non-empty; `None` otherwise (then the whole key is hashed).
///
/// ```
/// use lease_redis::slot::hash_tag;
/// assert_eq!(hash_tag(b"foo{bar}{zap}"), Some(&b"bar"[..]));
/// assert_eq!(hash_tag(b"foo{{bar}}zap"), Some(&b"{bar"[..]));
/// assert_eq!(hash_tag(b"foo{}{bar}"), None);
/// assert_eq!(hash_tag(b"foo"), None);
/// ```
pub fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let rest = &key[open + 1..];
    let close = rest.iter().position(|&b| b == b'}')?;
    (close > 0).then(|| &rest[..close])
}

/// The hash slot of `key` (`0..16384`), by Redis Cluster's rules.
pub fn key_slot(key: impl AsRef<[u8]>) -> u16 {
    let key = key.as_ref();
    crc16(hash_tag(key).unwrap_or(key)) % SLOT_COUNT
}

/// Two keys of one request map to different hash slots.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "keys {first:?} (slot {first_slot}) and {other:?} (slot {other_slot}) map to different \
     Redis Cluster hash slots; give them the same hash tag, e.g. \"{{name}}:...\""
)]
#[non_exhaustive]
pub struct CrossSlot {
    /// The first key of the request.
    pub first: String,
    /// Its slot.
    pub first_slot: u16,
    /// A key in another slot.
    pub other: String,
    /// Its slot.
    pub other_slot: u16,
}

/// Why keys cannot be used together on Redis Cluster.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SlotError {
    /// Keys of one script map to different slots.
    #[error(transparent)]
    CrossSlot(#[from] CrossSlot),
    /// A key that must carry a hash tag has none (for an election: the name needs one, e.g.
    /// `{report-builder}`, so the lock, counter and mark keys share a slot).
    #[error(
        "key {key:?} has no hash tag; on Redis Cluster the keys of one lease must share a hash \
         tag, e.g. \"{{name}}\""
    )]
    NoHashTag {
        /// The key without a hash tag.
        key: String,
    },
}

fn lossy(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}

/// Checks that every key maps to the slot of the first one. An empty list passes.
///
/// ```
/// use lease_redis::slot::check_same_slot;
/// let err = check_same_slot(&["{a}x", "{b}x"]).unwrap_err();
/// assert_eq!(err.first, "{a}x");
/// assert_eq!(err.other, "{b}x");
/// ```
pub fn check_same_slot<K: AsRef<[u8]>>(keys: &[K]) -> Result<(), CrossSlot> {
    let Some((first, rest)) = keys.split_first() else {
        return Ok(());
    };
    let first = first.as_ref();
    let first_slot = key_slot(first);
    for k in rest {
        let k = k.as_ref();
        let slot = key_slot(k);
        if slot != first_slot {
            return Err(CrossSlot {
                first: lossy(first),
                first_slot,
                other: lossy(k),
                other_slot: slot,
            });
        }
    }
    Ok(())
}

/// Every key a lease's scripts touch: the lock keys, then the fence counter, mark and epoch.
pub fn spec_keys(spec: &LeaseSpec) -> Vec<String> {
    let mut keys = spec.keys().to_vec();
    if let Some(f) = spec.fence_key() {
        keys.push(f.to_owned());
        keys.push(lease_core::backend::mark_key_of(f));
        keys.push(lease_core::backend::epoch_key_of(f));
    }
    keys
}

/// Checks a lease for Redis Cluster: a lease touching a single key always passes; otherwise
/// every key must carry a hash tag and all must map to one slot.
///
/// Requiring the tag (not only equal slots) refuses names whose keys would share a slot only
/// by coincidence.
///
/// ```
/// use lease_core::LeaseSpec;
/// use lease_redis::slot::{check_spec, SlotError};
/// assert!(check_spec(&LeaseSpec::election("{jobs}")).is_ok());
/// assert!(matches!(check_spec(&LeaseSpec::election("jobs")), Err(SlotError::NoHashTag { .. })));
/// assert!(check_spec(&LeaseSpec::lock(["solo"], None)?).is_ok());
/// # Ok::<(), lease_core::ConfigError>(())
/// ```
pub fn check_spec(spec: &LeaseSpec) -> Result<(), SlotError> {
    let keys = spec_keys(spec);
    if keys.len() < 2 {
        return Ok(());
    }
    if let Some(k) = keys.iter().find(|k| hash_tag(k.as_bytes()).is_none()) {
        return Err(SlotError::NoHashTag { key: k.clone() });
    }
    check_same_slot(&keys)?;
    Ok(())
}

/// Checks an election name for Redis Cluster: it must carry a hash tag, so `<name>:leader`,
/// `<name>:fence` and `<name>:fence:applied` share a slot. Call it when building the
/// configuration.
///
/// ```
/// use lease_redis::slot::check_election_name;
/// assert!(check_election_name("{report-builder}").is_ok());
/// assert!(check_election_name("report-builder").is_err());
/// ```
pub fn check_election_name(name: &str) -> Result<(), SlotError> {
    check_spec(&LeaseSpec::election(name))
}

/// Checks that every fenced target key maps to the slot of the mark key.
pub fn check_targets<K: AsRef<[u8]>>(mark_key: &str, targets: &[K]) -> Result<(), CrossSlot> {
    let mark_slot = key_slot(mark_key);
    for k in targets {
        let k = k.as_ref();
        let slot = key_slot(k);
        if slot != mark_slot {
            return Err(CrossSlot {
                first: mark_key.to_owned(),
                first_slot: mark_slot,
                other: lossy(k),
                other_slot: slot,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_check_value() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b""), 0);
    }

    #[test]
    fn known_slots() {
        // Values from `redis-cli CLUSTER KEYSLOT <key>` (Redis 7.0).
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("bar"), 5061);
        assert_eq!(key_slot("hello"), 866);
        assert_eq!(key_slot("somekey"), 11058);
        assert_eq!(key_slot("{user1000}.following"), 3443);
        assert_eq!(key_slot("{user1000}.followers"), 3443);
        assert_eq!(key_slot(""), 0);
        assert_eq!(key_slot("foo{}{bar}"), 8363);
        assert_eq!(key_slot("foo{{bar}}zap"), 4015);
        assert_eq!(key_slot("{bar"), 4015);
        assert_eq!(key_slot("foo{bar}{zap}"), 5061);
    }

    #[test]
    fn hash_tag_rules() {
        // Tag between first '{' and the first '}' after it.
        assert_eq!(key_slot("foo{bar}{zap}"), key_slot("bar"));
        // "{bar" is the tag: the first '}' after the first '{'.
        assert_eq!(key_slot("foo{{bar}}zap"), key_slot("{bar"));
        // Empty tag: the whole key is hashed.
        assert_eq!(key_slot("foo{}{bar}"), crc16(b"foo{}{bar}") % SLOT_COUNT);
        assert_ne!(key_slot("foo{}{bar}"), key_slot("bar"));
        // No closing brace: the whole key.
        assert_eq!(hash_tag(b"foo{bar"), None);
        assert_eq!(hash_tag(b"}{x}"), Some(&b"x"[..]));
        assert_eq!(key_slot("{jobs}:leader"), key_slot("jobs"));
    }

    #[test]
    fn same_slot_checks() {
        assert!(check_same_slot::<&str>(&[]).is_ok());
        assert!(check_same_slot(&["x"]).is_ok());
        let e = check_same_slot(&["{a}1", "{a}2", "{b}3"]).unwrap_err();
        assert_eq!(e.other, "{b}3");
        assert_eq!(e.first_slot, key_slot("a"));
        assert_eq!(e.other_slot, key_slot("b"));
    }

    #[test]
    fn spec_checks() {
        assert!(check_spec(&LeaseSpec::election("{j}")).is_ok());
        assert!(check_spec(&LeaseSpec::election("a{j}b")).is_ok());
        assert_eq!(
            check_spec(&LeaseSpec::election("j")),
            Err(SlotError::NoHashTag {
                key: "j:leader".into()
            })
        );
        // Tagged keys in different slots.
        let l = LeaseSpec::lock(["{a}1", "{b}2"], None).unwrap();
        assert!(matches!(check_spec(&l), Err(SlotError::CrossSlot(_))));
        // A fenced lock whose fence key is in another slot.
        let l = LeaseSpec::lock(["{a}1"], Some("{b}f".into())).unwrap();
        assert!(matches!(check_spec(&l), Err(SlotError::CrossSlot(_))));
        let l = LeaseSpec::lock(["{a}1", "{a}2"], Some("{a}f".into())).unwrap();
        assert!(check_spec(&l).is_ok());
        // A single unfenced key needs no tag.
        assert!(check_spec(&LeaseSpec::lock(["plain"], None).unwrap()).is_ok());
        assert!(check_election_name("{x}").is_ok());
    }

    #[test]
    fn target_checks() {
        assert!(check_targets("{j}:fence:applied", &["{j}:state", "{j}"]).is_ok());
        let e = check_targets("{j}:fence:applied", &["{j}:a", "other"]).unwrap_err();
        assert_eq!(e.other, "other");
        assert!(check_targets::<&str>("{j}:fence:applied", &[]).is_ok());
    }
}
