//! A flat open-addressing hash map for the binding table's hot lookups:
//! keys and values sit together in one array of slots (linear probing,
//! at most half full, backward-shift deletion), so a lookup that misses
//! the CPU caches costs one memory access, where a Swiss table costs two
//! (its control bytes and its buckets live apart). The lwAFTR does one of
//! these per packet; with a million bindings nearly every one is a miss.
//!
//! Keys are hashed with foldhash seeded per process. Only `Copy` keys and
//! values, no iteration order.

use std::hash::{BuildHasher, Hash};

/// The map.
#[derive(Debug, Clone)]
pub struct FlatMap<K, V> {
    slots: Vec<Option<(K, V)>>,
    len: usize,
    mask: usize,
    hasher: foldhash::fast::RandomState,
}

impl<K: Copy + Eq + Hash, V: Copy> Default for FlatMap<K, V> {
    fn default() -> Self {
        Self::with_capacity(0)
    }
}

impl<K: Copy + Eq + Hash, V: Copy> FlatMap<K, V> {
    /// Room for `n` entries without growing.
    pub fn with_capacity(n: usize) -> Self {
        let slots = (n.max(4) * 2).next_power_of_two();
        FlatMap { slots: vec![None; slots], len: 0, mask: slots - 1, hasher: Default::default() }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of the slot array.
    pub fn memory_bytes(&self) -> usize {
        self.slots.len() * core::mem::size_of::<Option<(K, V)>>()
    }

    #[inline]
    fn home(&self, k: &K) -> usize {
        (self.hasher.hash_one(k) as usize) & self.mask
    }

    /// The value of `k`.
    #[inline]
    pub fn get(&self, k: &K) -> Option<&V> {
        let mut i = self.home(k);
        loop {
            match &self.slots[i] {
                Some((sk, v)) if sk == k => return Some(v),
                Some(_) => i = (i + 1) & self.mask,
                None => return None,
            }
        }
    }

    /// True when `k` is present.
    #[inline]
    pub fn contains_key(&self, k: &K) -> bool {
        self.get(k).is_some()
    }

    fn grow(&mut self) {
        let old = std::mem::take(&mut self.slots);
        let n = old.len() * 2;
        self.slots = vec![None; n];
        self.mask = n - 1;
        self.len = 0;
        for (k, v) in old.into_iter().flatten() {
            self.insert(k, v);
        }
    }

    /// Insert or replace; returns the old value.
    pub fn insert(&mut self, k: K, v: V) -> Option<V> {
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let mut i = self.home(&k);
        loop {
            match &mut self.slots[i] {
                Some((sk, sv)) if *sk == k => return Some(std::mem::replace(sv, v)),
                Some(_) => i = (i + 1) & self.mask,
                slot @ None => {
                    *slot = Some((k, v));
                    self.len += 1;
                    return None;
                }
            }
        }
    }

    /// Remove `k`; later entries of its probe run shift back into the hole.
    pub fn remove(&mut self, k: &K) -> Option<V> {
        let mut i = self.home(k);
        loop {
            match &self.slots[i] {
                Some((sk, _)) if sk == k => break,
                Some(_) => i = (i + 1) & self.mask,
                None => return None,
            }
        }
        let (_, v) = self.slots[i].take()?;
        self.len -= 1;
        let mut hole = i;
        let mut j = (i + 1) & self.mask;
        while let Some((kj, _)) = &self.slots[j] {
            let h = self.home(kj);
            // Move j into the hole when its home is not in (hole, j] cyclically.
            let in_between = if hole <= j { hole < h && h <= j } else { hole < h || h <= j };
            if !in_between {
                self.slots[hole] = self.slots[j].take();
                hole = j;
            }
            j = (j + 1) & self.mask;
        }
        Some(v)
    }

    /// Every entry, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> + '_ {
        self.slots.iter().flatten().map(|(k, v)| (k, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    proptest! {
        #[test]
        fn behaves_like_a_hashmap(ops in proptest::collection::vec((any::<bool>(), 0u16..64, any::<u32>()), 0..400)) {
            let mut f: FlatMap<u16, u32> = FlatMap::with_capacity(2);
            let mut h = HashMap::new();
            for (ins, k, v) in ops {
                if ins {
                    prop_assert_eq!(f.insert(k, v), h.insert(k, v));
                } else {
                    prop_assert_eq!(f.remove(&k), h.remove(&k));
                }
                prop_assert_eq!(f.len(), h.len());
            }
            for k in 0u16..64 {
                prop_assert_eq!(f.get(&k), h.get(&k));
            }
            prop_assert_eq!(f.iter().count(), h.len());
        }
    }
}
