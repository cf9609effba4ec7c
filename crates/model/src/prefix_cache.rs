//! Prefix cache: KV state of prompt prefixes (typically the rendered harness system
//! prompt), keyed by their exact tokens and evicted least-recently-used by size.
//!
//! Entries hold immutable tensors, so a request that extends a cached prefix never mutates
//! the entry, and a changed prefix has different tokens and so a different key: stale state
//! is never returned.

use crate::model::Cache;

#[derive(Debug)]
struct Entry {
    tokens: Vec<u32>,
    cache: Cache,
    last_logits: Vec<f32>,
    bytes: usize,
    last_used: u64,
}

/// A hit: the cached prefix length, its KV state and the logits after its last token.
#[derive(Debug, Clone)]
pub struct PrefixHit {
    pub len: usize,
    pub cache: Cache,
    pub last_logits: Vec<f32>,
}

/// LRU cache of prefix KV states, bounded in bytes.
#[derive(Debug)]
pub struct PrefixCache {
    capacity: usize,
    used: usize,
    clock: u64,
    entries: Vec<Entry>,
    hits: u64,
    misses: u64,
}

impl PrefixCache {
    /// Cache holding at most `capacity_bytes` of KV tensors.
    pub fn new(capacity_bytes: usize) -> Self {
        Self {
            capacity: capacity_bytes,
            used: 0,
            clock: 0,
            entries: Vec::new(),
            hits: 0,
            misses: 0,
        }
    }
    /// Bytes held.
    pub fn used_bytes(&self) -> usize {
        self.used
    }
    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// (hits, misses).
    pub fn stats(&self) -> (u64, u64) {
        (self.hits, self.misses)
    }
    /// Drops everything.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.used = 0;
    }

    /// Longest cached prefix of `prompt` (at most `prompt.len()` tokens).
    pub fn lookup(&mut self, prompt: &[u32]) -> Option<PrefixHit> {
        self.clock += 1;
        // Every entry that begins the prompt counts as used, not only the longest: a shorter
        // one (a system prompt under a conversation) is what the next conversation on it
        // starts from, and must not age out while its longer extensions are hit.
        let mut best: Option<&mut Entry> = None;
        for e in self.entries.iter_mut() {
            if e.tokens.is_empty() || !prompt.starts_with(&e.tokens) {
                continue;
            }
            e.last_used = self.clock;
            if best
                .as_ref()
                .is_none_or(|b| e.tokens.len() > b.tokens.len())
            {
                best = Some(e);
            }
        }
        match best {
            Some(e) => {
                self.hits += 1;
                Some(PrefixHit {
                    len: e.tokens.len(),
                    cache: e.cache.clone(),
                    last_logits: e.last_logits.clone(),
                })
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    /// Stores the state after `tokens`, evicting least-recently-used entries to fit.
    /// Entries larger than the whole capacity are not stored.
    pub fn insert(&mut self, tokens: Vec<u32>, cache: Cache, last_logits: Vec<f32>) {
        let bytes = cache.bytes() + last_logits.len() * 4;
        if bytes > self.capacity || tokens.is_empty() {
            return;
        }
        if let Some(i) = self.entries.iter().position(|e| e.tokens == tokens) {
            let e = self.entries.remove(i);
            self.used -= e.bytes;
        }
        while self.used + bytes > self.capacity {
            let Some(i) = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(i, _)| i)
            else {
                break;
            };
            let e = self.entries.remove(i);
            self.used -= e.bytes;
        }
        self.clock += 1;
        self.used += bytes;
        self.entries.push(Entry {
            tokens,
            cache,
            last_logits,
            bytes,
            last_used: self.clock,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::KvCache;
    use candle_core::{DType, Device, Tensor};

    fn cache_of(len: usize) -> Cache {
        let t = Tensor::zeros((1, 1, len, 4), DType::F32, &Device::Cpu).unwrap();
        Cache::from_layers(vec![KvCache::from_tensors(t.clone(), t)])
    }

    #[test]
    fn longest_prefix_wins_and_lru_evicts_by_size() {
        let mut pc = PrefixCache::new(3 * 2 * 10 * 4 * 4 + 100);
        pc.insert(vec![1, 2], cache_of(10), vec![]);
        pc.insert(vec![1, 2, 3], cache_of(10), vec![]);
        assert_eq!(pc.lookup(&[1, 2, 3, 4]).unwrap().len, 3);
        assert_eq!(pc.lookup(&[1, 2, 9]).unwrap().len, 2);
        assert!(pc.lookup(&[2, 1]).is_none());
        // [1,2] was used last; inserting two more evicts [1,2,3] first
        pc.insert(vec![7], cache_of(10), vec![]);
        pc.insert(vec![8], cache_of(10), vec![]);
        assert!(pc.used_bytes() <= 3 * 2 * 10 * 4 * 4 + 100);
        assert_eq!(pc.lookup(&[1, 2, 3]).map(|h| h.len), Some(2));
        // too large: not stored
        pc.insert(vec![9], cache_of(1000), vec![]);
        assert!(pc.lookup(&[9]).is_none());
    }

    /// A hit on a long entry keeps the shorter entries it extends in use: the system prompt
    /// under a conversation outlives unrelated entries.
    #[test]
    fn a_hit_keeps_the_prefixes_it_extends() {
        let mut pc = PrefixCache::new(3 * 2 * 10 * 4 * 4 + 100);
        pc.insert(vec![1, 2], cache_of(10), vec![]);
        pc.insert(vec![1, 2, 3], cache_of(10), vec![]);
        pc.insert(vec![7], cache_of(10), vec![]);
        assert_eq!(pc.lookup(&[1, 2, 3, 4]).unwrap().len, 3);
        pc.insert(vec![8], cache_of(10), vec![]);
        assert!(
            pc.lookup(&[7]).is_none(),
            "the unused entry was not the one evicted"
        );
        assert_eq!(pc.lookup(&[1, 2, 5]).map(|h| h.len), Some(2));
    }
}
