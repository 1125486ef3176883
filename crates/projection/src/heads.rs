//! The stock hashes of SKUs a projection wrote or read lately, kept so a
//! batch need not read them again: the fold reads only the orders its
//! records name.
//!
//! A cached stock hash is never trusted beyond the fenced write: the write
//! lands only if the stock hash in Redis still holds the offset the cached
//! one does, and a SKU's stock hash is a function of that offset (the fold
//! of its log up to there: a restore or a swap that puts another state in
//! puts another offset in, and compaction never touches it). A SKU whose
//! write was refused is dropped and read again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// The default bound, in SKUs: about 55 MB (a SKU's stock hash costs about
/// 550 bytes kept, measured; docs/operators.md).
pub const DEFAULT_CACHED_SKUS: usize = 100_000;

/// A bounded map of SKU to its stock hash's fields (as
/// `stage::STOCK_FIELDS`), shared by a projection's clones.
#[derive(Debug, Clone)]
pub(crate) struct Heads {
    inner: Arc<Mutex<HashMap<String, Vec<Option<String>>>>>,
    capacity: usize,
}

impl Heads {
    pub fn new(capacity: usize) -> Self {
        Self {
            inner: Arc::default(),
            capacity,
        }
    }

    /// The cached stock hash of each of `skus` that has one.
    pub fn get(
        &self,
        skus: impl Iterator<Item = impl AsRef<str>>,
    ) -> Vec<Option<Vec<Option<String>>>> {
        let map = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        skus.map(|sku| map.get(sku.as_ref()).cloned()).collect()
    }

    /// Keeps `heads` (`None` forgets the SKU); when the bound is passed,
    /// forgets SKUs not among these until a quarter of the room is free.
    pub fn put(&self, heads: Vec<(String, Option<Vec<Option<String>>>)>) {
        if self.capacity == 0 {
            return;
        }
        let mut map = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let fresh: Vec<String> = heads.iter().map(|(sku, _)| sku.clone()).collect();
        for (sku, head) in heads {
            match head {
                Some(head) => map.insert(sku, head),
                None => map.remove(&sku),
            };
        }
        if map.len() > self.capacity {
            let keep: std::collections::HashSet<&String> = fresh.iter().collect();
            let target = self.capacity - self.capacity / 4;
            let mut over = map.len().saturating_sub(target);
            map.retain(|sku, _| {
                if over == 0 || keep.contains(sku) {
                    return true;
                }
                over -= 1;
                false
            });
        }
    }

    /// Forgets every SKU.
    pub fn clear(&self) {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// How many SKUs are kept.
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}
