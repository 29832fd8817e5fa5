//! The script-body cache: a bounded LRU of wrapped [`FencedWrite::Eval`](crate::FencedWrite::Eval)
//! bodies, each compiled once into a [`LuaScript`] (source and SHA1).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{LuaScript, wrap_body};

/// How many wrapped [`FencedWrite::Eval`](crate::FencedWrite::Eval) bodies one backend keeps
/// compiled (SHA1 and source).
///
/// The cache is least-recently-used: when full, the body used longest ago is dropped. A dropped
/// body is simply wrapped again on its next use; the server keeps its own script cache, so
/// this bounds client memory only.
pub const BODY_CACHE_CAPACITY: usize = 256;

/// Wrapped Eval bodies, shared (through an `Arc`) by a backend and every fencer it hands out.
#[derive(Debug, Default)]
pub(crate) struct BodyCache {
    inner: Mutex<CacheInner>,
}

#[derive(Debug, Default)]
struct CacheInner {
    map: HashMap<String, (Arc<LuaScript>, u64)>,
    tick: u64,
}

impl BodyCache {
    fn lock(&self) -> MutexGuard<'_, CacheInner> {
        // Every mutation is a single step; a panic elsewhere leaves the map consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The wrapped script of `body`, built on first use.
    pub(crate) fn get(&self, body: &str) -> Arc<LuaScript> {
        let mut c = self.lock();
        c.tick += 1;
        let tick = c.tick;
        if let Some((s, used)) = c.map.get_mut(body) {
            *used = tick;
            return Arc::clone(s);
        }
        if c.map.len() >= BODY_CACHE_CAPACITY
            && let Some(oldest) = c
                .map
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone())
        {
            c.map.remove(&oldest);
        }
        let s = Arc::new(LuaScript::new("fence_eval", wrap_body(body)));
        c.map.insert(body.to_owned(), (Arc::clone(&s), tick));
        s
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().map.len()
    }

    #[cfg(test)]
    fn contains(&self, body: &str) -> bool {
        self.lock().map.contains_key(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_is_lru_and_bounded() {
        let c = BodyCache::default();
        let first = c.get("return 0");
        for i in 1..BODY_CACHE_CAPACITY {
            c.get(&format!("return {i}"));
        }
        assert_eq!(c.len(), BODY_CACHE_CAPACITY);
        // Touch the first body: it becomes the most recently used.
        assert!(Arc::ptr_eq(&first, &c.get("return 0")));
        c.get("return 'new'");
        assert_eq!(c.len(), BODY_CACHE_CAPACITY);
        assert!(c.contains("return 0"), "recently used body kept");
        assert!(!c.contains("return 1"), "least recently used body evicted");
        assert!(c.contains("return 'new'"));
    }

    #[test]
    fn wrapped_body_has_its_own_hash() {
        let c = BodyCache::default();
        let a = c.get("return 1");
        let b = c.get("return 2");
        assert_ne!(a.name, "");
        assert_ne!(format!("{a:?}"), format!("{b:?}"));
    }
}
