//! [`AdoptionCache`]: what a halo exchange, called again and again with the same arrays,
//! made of them on its last call (an adoption, a device view), kept for the next call.
//!
//! A caller describes each array by a key that changes whenever the earlier work would no
//! longer be valid (for a host array: its address, shape, strides and element type). On
//! every call it opens an [`AdoptionCall`], asks it for each array's earlier value
//! ([`AdoptionCall::reuse`]) and records what it made afresh ([`AdoptionCall::keep`]).
//! When the call ends (also by an error), what it used or kept replaces the cache, so an
//! array missing from a call is forgotten and the cache never outgrows one call.

/// The values one call kept, keyed by what they were made from (see the
/// [module docs](crate::cache)).
///
/// ```
/// use gpubuf_halo::AdoptionCache;
///
/// // Keys: (address, length) of a host array; values: the work done for it.
/// let mut cache = AdoptionCache::new();
/// let mut made = 0;
/// for _ in 0..3 {
///     let mut call = cache.call();
///     for key in [(0x1000, 64), (0x2000, 64)] {
///         if call.reuse(&key).is_none() {
///             made += 1;
///             call.keep(key, format!("view of {key:?}"));
///         }
///     }
/// }
/// assert_eq!(made, 2, "the second and third calls reuse the first call's work");
/// // A call without (0x2000, 64) forgets it.
/// cache.call().reuse(&(0x1000, 64));
/// assert_eq!(cache.len(), 1);
/// ```
#[derive(Debug, Clone)]
pub struct AdoptionCache<K, V> {
    entries: Vec<(K, V)>,
}

impl<K, V> Default for AdoptionCache<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K, V> AdoptionCache<K, V> {
    /// An empty cache.
    pub const fn new() -> Self {
        AdoptionCache { entries: Vec::new() }
    }

    /// The values held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no value is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Forgets every value.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Opens one call: the cache then holds what the call reuses or keeps, once the
    /// returned [`AdoptionCall`] is dropped.
    pub fn call(&mut self) -> AdoptionCall<'_, K, V> {
        AdoptionCall { cache: self, kept: Vec::new() }
    }
}

/// One call's use of an [`AdoptionCache`]; dropping it stores what the call used.
#[derive(Debug)]
pub struct AdoptionCall<'c, K, V> {
    cache: &'c mut AdoptionCache<K, V>,
    kept: Vec<(K, V)>,
}

impl<K: PartialEq, V> AdoptionCall<'_, K, V> {
    /// The value the last call kept for `key` (or this call did, for a key met twice),
    /// carried into this call; `None` when neither did.
    pub fn reuse(&mut self, key: &K) -> Option<&V> {
        if let Some(at) = self.kept.iter().position(|(k, _)| k == key) {
            return Some(&self.kept[at].1);
        }
        let at = self.cache.entries.iter().position(|(k, _)| k == key)?;
        let entry = self.cache.entries.swap_remove(at);
        self.kept.push(entry);
        self.kept.last().map(|(_, v)| v)
    }

    /// Records the value this call made for `key` (replacing one kept for an equal key).
    pub fn keep(&mut self, key: K, value: V) -> &V {
        self.kept.retain(|(k, _)| k != &key);
        self.kept.push((key, value));
        &self.kept[self.kept.len() - 1].1
    }
}

impl<K, V> Drop for AdoptionCall<'_, K, V> {
    fn drop(&mut self) {
        self.cache.entries = std::mem::take(&mut self.kept);
    }
}

#[cfg(test)]
mod tests {
    use super::AdoptionCache;

    #[test]
    fn a_call_keeps_what_it_used() {
        let mut cache = AdoptionCache::new();
        {
            let mut call = cache.call();
            assert!(call.reuse(&1).is_none());
            assert_eq!(call.keep(1, "one"), &"one");
            call.keep(2, "two");
            assert_eq!(call.reuse(&2), Some(&"two"), "kept within the call");
            call.keep(2, "deux");
            assert_eq!(call.reuse(&2), Some(&"deux"), "the later value replaces the earlier");
        }
        assert_eq!(cache.len(), 2);
        {
            let mut call = cache.call();
            assert_eq!(call.reuse(&2), Some(&"deux"));
            assert_eq!(call.reuse(&2), Some(&"deux"), "twice in one call");
            assert!(call.reuse(&3).is_none());
        }
        assert_eq!(cache.len(), 1, "1 was not used: forgotten");
        assert!(cache.call().reuse(&1).is_none());
        assert!(cache.is_empty(), "an empty call empties the cache");
    }

    #[test]
    fn an_early_return_still_stores_the_call() {
        fn failing(cache: &mut AdoptionCache<u32, u32>) -> Result<(), ()> {
            let mut call = cache.call();
            call.keep(7, 70);
            Err(())?;
            call.keep(8, 80);
            Ok(())
        }
        let mut cache = AdoptionCache::new();
        assert!(failing(&mut cache).is_err());
        assert_eq!(cache.call().reuse(&7).copied(), Some(70));
        cache.clear();
        assert!(cache.is_empty());
    }
}
