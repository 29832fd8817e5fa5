//! The keys of a lease ([`LeaseSpec`]), its owner ([`Owner`]) and stored metadata
//! ([`Metadata`]), with their limits.

use std::fmt;
use std::sync::Arc;

use crate::config::{ConfigError, MAX_ID_LEN, MAX_NAME_LEN, check_text};
#[cfg(doc)]
use crate::token::Epoch;

/// The most keys one lease may span.
pub const MAX_KEYS: usize = 64;
/// The largest metadata accepted, in bytes.
pub const MAX_METADATA_LEN: usize = 64 * 1024;

/// The keys of one lease: the lock keys and the optional fence counter.
///
/// The applied mark lives at `<fence>:applied`.
///
/// ```
/// use lease_core::LeaseSpec;
/// let e = LeaseSpec::election("{jobs}");
/// assert_eq!(e.keys(), ["{jobs}:leader"]);
/// assert_eq!(e.fence_key(), Some("{jobs}:fence"));
/// assert_eq!(e.mark_key().as_deref(), Some("{jobs}:fence:applied"));
/// let l = LeaseSpec::lock(["a", "b"], None)?;
/// assert_eq!(l.keys().len(), 2);
/// assert!(LeaseSpec::lock(["a", "a"], None).is_err());
/// # Ok::<(), lease_core::ConfigError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct LeaseSpec {
    keys: Keys,
    fence: Option<String>,
}

/// A spec's lock keys: one held inline (every election and plain lock: no `Vec` to allocate),
/// or two and more.
#[derive(Clone)]
enum Keys {
    One(String),
    /// Always two keys or more.
    Many(Vec<String>),
}

impl Keys {
    fn as_slice(&self) -> &[String] {
        match self {
            Keys::One(k) => std::slice::from_ref(k),
            Keys::Many(v) => v,
        }
    }
}

// Compared, hashed and shown as the list of keys, whichever way they are held.
impl PartialEq for Keys {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Keys {}

impl std::hash::Hash for Keys {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_slice().fmt(f)
    }
}

impl LeaseSpec {
    /// The lease of election `name`: `<name>:leader`, fenced by `<name>:fence`.
    ///
    /// The name is assumed valid (see [`crate::ElectionConfig`]).
    pub fn election(name: &str) -> LeaseSpec {
        LeaseSpec {
            keys: Keys::One(format!("{name}:leader")),
            fence: Some(format!("{name}:fence")),
        }
    }

    /// A lock over `keys` (all-or-nothing), optionally minting tokens from `fence`.
    pub fn lock<I, S>(keys: I, fence: Option<String>) -> Result<LeaseSpec, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut given = keys.into_iter().map(Into::into);
        let Some(first) = given.next() else {
            return Err(ConfigError::Empty { what: "key list" });
        };
        let keys = match given.next() {
            None => Keys::One(first),
            Some(second) => {
                let mut all = vec![first, second];
                all.extend(given);
                Keys::Many(all)
            }
        };
        let list = keys.as_slice();
        if list.len() > MAX_KEYS {
            return Err(ConfigError::TooManyKeys {
                len: list.len(),
                max: MAX_KEYS,
            });
        }
        for (i, k) in list.iter().enumerate() {
            check_key("lock key", k)?;
            if list[..i].contains(k) {
                return Err(ConfigError::DuplicateKey(k.clone()));
            }
        }
        if let Some(f) = &fence {
            check_key("fence key", f)?;
            let mark = format!("{f}:applied");
            if let Some(k) = list.iter().find(|k| *k == f || **k == mark) {
                return Err(ConfigError::DuplicateKey(k.clone()));
            }
        }
        Ok(LeaseSpec { keys, fence })
    }

    /// The lock keys.
    pub fn keys(&self) -> &[String] {
        self.keys.as_slice()
    }

    /// The fence counter key, if fenced.
    pub fn fence_key(&self) -> Option<&str> {
        self.fence.as_deref()
    }

    /// The applied-mark key of election `name`: `<name>:fence:applied`.
    pub fn election_mark_key(name: &str) -> String {
        format!("{name}:fence:applied")
    }

    /// The applied-mark key, if fenced: `<fence>:applied`.
    pub fn mark_key(&self) -> Option<String> {
        self.fence.as_deref().map(mark_key_of)
    }

    /// The fence-epoch key, if fenced: `<fence>:epoch` (see [`Epoch`]).
    pub fn epoch_key(&self) -> Option<String> {
        self.fence.as_deref().map(epoch_key_of)
    }
}

/// The applied-mark key of a fence counter key.
pub fn mark_key_of(fence_key: &str) -> String {
    format!("{fence_key}:applied")
}

/// The fence-epoch key of a fence counter key: `<fence>:epoch`.
pub fn epoch_key_of(fence_key: &str) -> String {
    format!("{fence_key}:epoch")
}

fn check_key(what: &'static str, k: &str) -> Result<(), ConfigError> {
    if k.is_empty() {
        return Err(ConfigError::Empty { what });
    }
    if k.len() > MAX_NAME_LEN {
        return Err(ConfigError::TooLong {
            what,
            len: k.len(),
            max: MAX_NAME_LEN,
        });
    }
    Ok(())
}

/// The owner of a lease: an election's instance id, or a lock's ownership token.
///
/// Matched exactly (never by prefix). Non-empty, at most 256 bytes, no NUL byte (NUL separates
/// the owner from metadata in the stored value).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner(Arc<str>);

impl Owner {
    /// Validates an owner.
    ///
    /// ```
    /// use lease_core::Owner;
    /// assert!(Owner::new("host-a-1").is_ok());
    /// assert!(Owner::new("").is_err());
    /// assert!(Owner::new("a\0b").is_err());
    /// ```
    pub fn new(s: impl AsRef<str>) -> Result<Owner, ConfigError> {
        let s = s.as_ref();
        check_text("owner", s, MAX_ID_LEN)?;
        Ok(Owner(Arc::from(s)))
    }

    /// The owner as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value stored in a lock key: the owner, then NUL and the metadata when there is any.
    pub fn stored_value(&self, metadata: &Metadata) -> String {
        if metadata.is_empty() {
            self.0.to_string()
        } else {
            format!("{}\0{}", self.0, metadata.as_str())
        }
    }

    /// Whether a stored value belongs to this owner (exact match of the owner part).
    pub fn matches(&self, stored: &str) -> bool {
        split_stored(stored).0 == &*self.0
    }
}

/// Splits a stored lock value into owner and metadata.
///
/// A stored value is `owner`, or `owner NUL metadata`, optionally followed by `NUL flags`: a
/// server-side store may append flags to a held lock's value (the Redis backend marks a
/// lock that someone failed to obtain, so that its release publishes a notice). Neither the
/// owner nor the metadata contains NUL, so the parts are unambiguous; the flags are not part
/// of the metadata.
pub fn split_stored(stored: &str) -> (&str, &str) {
    match stored.split_once('\0') {
        Some((o, rest)) => (o, rest.split_once('\0').map_or(rest, |(m, _)| m)),
        None => (stored, ""),
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Metadata stored with a lock (at most 64 KiB, no NUL byte), returned to anyone who inspects
/// it.
#[derive(Clone, PartialEq, Eq, Hash, Default, Debug)]
pub struct Metadata(Arc<str>);

impl Metadata {
    /// Validates metadata.
    pub fn new(s: impl AsRef<str>) -> Result<Metadata, ConfigError> {
        let s = s.as_ref();
        if s.len() > MAX_METADATA_LEN {
            return Err(ConfigError::MetadataTooLong {
                len: s.len(),
                max: MAX_METADATA_LEN,
            });
        }
        if s.contains('\0') {
            // NUL separates the parts of a stored value (see [`split_stored`]).
            return Err(ConfigError::ContainsNul { what: "metadata" });
        }
        if s.is_empty() {
            // No metadata is the common case: one shared empty value, no allocation per lock.
            static EMPTY: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();
            return Ok(Metadata(Arc::clone(EMPTY.get_or_init(|| Arc::from("")))));
        }
        Ok(Metadata(Arc::from(s)))
    }
    /// The metadata as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, RandomState};

    #[test]
    fn one_key_or_many_the_spec_is_its_list_of_keys() {
        let one = LeaseSpec::lock(["a"], None).unwrap();
        assert_eq!(one.keys(), ["a"]);
        assert_eq!(
            format!("{one:?}"),
            r#"LeaseSpec { keys: ["a"], fence: None }"#
        );
        let two = LeaseSpec::lock(["a", "b"], None).unwrap();
        assert_eq!(two.keys(), ["a", "b"]);
        assert_ne!(one, two);
        let election = LeaseSpec::election("x");
        let same = LeaseSpec::lock(["x:leader"], Some("x:fence".into())).unwrap();
        assert_eq!(election, same);
        let state = RandomState::new();
        assert_eq!(state.hash_one(&election), state.hash_one(&same));
        assert_eq!(
            state.hash_one(["a"].as_slice().to_vec()),
            state.hash_one(one.keys())
        );
        assert!(LeaseSpec::lock(Vec::<String>::new(), None).is_err());
        let too_many: Vec<String> = (0..=MAX_KEYS).map(|i| format!("k{i}")).collect();
        assert!(matches!(
            LeaseSpec::lock(too_many, None),
            Err(ConfigError::TooManyKeys { .. })
        ));
    }
}
