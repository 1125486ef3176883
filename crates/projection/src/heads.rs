//! What a projection keeps of the SKUs it wrote or read lately, so a batch
//! need not read it again: each SKU's stock hash and, when known whole,
//! its orders and adjustments hashes. A batch then reads from Redis only
//! what is not kept: for a SKU kept whole, nothing but the orders whose
//! state is final (see below) and the decisions of redelivered records.
//!
//! Nothing kept is trusted beyond the fenced write. On a single Redis the
//! write lands only if the marker is as this projection last saw it (see
//! `fence`): no other member folded the batch's partitions since, and no
//! restore or swap rewrote SKUs; a SKU of a partition is kept only once
//! the partition's marker field was read, and everything is forgotten
//! when a write is refused. On a cluster the write of a SKU lands only if
//! its stock hash in Redis still holds the offset the kept one does, and a
//! SKU's state is a function of that offset (the fold of its log up to
//! there: a restore or a swap that puts another state in puts another
//! offset in). A SKU whose write was refused is dropped and read again.
//! Compaction is the one rewrite that keeps the offset: it removes orders
//! whose state is final (rolled back, cancelled, expired) once they are
//! archived and old. So a kept order in a final state is never answered
//! from memory; its field is read from Redis, where it may be gone.
//!
//! A SKU's orders and adjustments hashes are known whole from a read that
//! took them whole (a SKU not kept, whose hashes are small: a new SKU's
//! are empty), and stay so while they are kept: the fold is their only
//! writer.

use foldhash::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

/// The default bound, in SKUs: about 55 MB of stock hashes (a SKU's
/// costs about 550 bytes kept, measured; docs/operators.md).
pub const DEFAULT_CACHED_SKUS: usize = 100_000;

/// The default bound on the fields of orders and adjustments hashes kept
/// whole, over every SKU: about 165 MB (a field costs about 165 bytes
/// kept, measured; docs/operators.md).
pub const DEFAULT_CACHED_FIELDS: usize = 1_000_000;

/// The most fields one SKU's orders and adjustments hashes may have to be
/// kept whole. A SKU past it (a hot one, with an order for every buyer) is
/// kept by its stock hash alone and reads the orders its records name, so
/// one SKU never takes the room of thousands: one `HMGET` a batch is
/// cheap for Redis, and a hot SKU gained nothing kept whole (e2e-hot, one
/// SKU of 200,000 orders: Redis 3.7 against 3.3-3.5 µs a record, within
/// the runs' spread; docs/BENCHMARKS.md).
pub(crate) const MAX_WHOLE_FIELDS: usize = 10_000;

/// The most fields a hash may have to be read whole on a miss (a SKU the
/// projection keeps nothing of), so that it is kept whole from then on.
const LOAD_WHOLE_FIELDS: usize = 1_000;

/// One SKU as kept.
#[derive(Debug, Clone, Default)]
pub(crate) struct Kept {
    /// The stock hash's fields, as `encoding::STOCK_FIELDS`.
    pub stock: Vec<Option<String>>,
    /// The orders and adjustments hashes, when known whole: a field not
    /// here is not in Redis.
    pub whole: Option<Whole>,
}

impl Kept {
    fn fields(&self) -> usize {
        self.whole
            .as_ref()
            .map_or(0, |[orders, adjustments]| orders.len() + adjustments.len())
    }
}

/// The value of `field` of a hash known whole (`orders`: the orders hash):
/// `None` when it must be read from Redis, else its value (`None` inside:
/// not in the hash).
pub(crate) fn answer_in(
    hash: &HashMap<String, String>,
    orders: bool,
    field: &str,
) -> Option<Option<String>> {
    match hash.get(field) {
        Some(value) if orders && prunable(field, value) => None,
        kept => Some(kept.cloned()),
    }
}

/// Whether a value of the orders hash may be gone from Redis while kept:
/// an order in a final state, which compaction prunes. Fields starting
/// with a brace (users' counters, units, the seat map) are never pruned.
pub(crate) fn prunable(field: &str, value: &str) -> bool {
    !field.starts_with('{') && matches!(value.as_bytes().first(), Some(b'R' | b'C' | b'X'))
}

#[derive(Debug, Default)]
struct Map {
    skus: HashMap<String, Kept>,
    /// The fields of every hash kept whole.
    fields: usize,
}

/// A bounded map of SKU to what is kept of it, shared by a projection's
/// clones.
#[derive(Debug, Clone)]
pub(crate) struct Heads {
    inner: Arc<Mutex<Map>>,
    capacity: usize,
    field_capacity: usize,
}

impl Heads {
    pub fn new(capacity: usize, field_capacity: usize) -> Self {
        Self {
            inner: Arc::default(),
            capacity,
            field_capacity,
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, Map> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The kept stock hash of each of `skus` that has one, and whether its
    /// other hashes are kept whole.
    pub fn get(
        &self,
        skus: impl Iterator<Item = impl AsRef<str>>,
    ) -> Vec<Option<(Vec<Option<String>>, bool)>> {
        let map = self.map();
        skus.map(|sku| {
            let kept = map.skus.get(sku.as_ref())?;
            Some((kept.stock.clone(), kept.whole.is_some()))
        })
        .collect()
    }

    /// The values of `fields` of `sku`'s orders (`hash` 0) or adjustments
    /// (1) hash, for a SKU kept whole: `None` for a field that must be
    /// read from Redis, else its value (`None` inside: not in the hash).
    pub fn answer(&self, sku: &str, hash: usize, fields: &[String]) -> Vec<Option<Option<String>>> {
        let map = self.map();
        let whole = map.skus.get(sku).and_then(|k| k.whole.as_ref());
        fields
            .iter()
            .map(|field| answer_in(&whole?[hash], hash == 0, field))
            .collect()
    }

    /// The most fields a SKU's orders or adjustments hash may have to be
    /// read whole on a miss (0: none is, nothing being kept).
    pub fn whole_on_miss(&self) -> usize {
        if self.capacity == 0 || self.field_capacity == 0 {
            0
        } else {
            LOAD_WHOLE_FIELDS
        }
    }

    /// Keeps what each SKU's batch left (`None` forgets the SKU); when a
    /// bound is passed, forgets SKUs, or their whole hashes, not among
    /// these until a quarter of the room is free.
    pub fn put(&self, kept: Vec<(String, Option<Change>)>) {
        if self.capacity == 0 {
            return;
        }
        let mut map = self.map();
        let fresh: HashSet<String> = kept.iter().map(|(sku, _)| sku.clone()).collect();
        for (sku, change) in kept {
            let before = map.skus.get(&sku).map_or(0, Kept::fields);
            let after = match change {
                Some(change) => {
                    let entry = map.skus.entry(sku).or_default();
                    change.apply(entry);
                    entry.fields()
                }
                None => {
                    map.skus.remove(&sku);
                    0
                }
            };
            map.fields = map.fields - before + after;
        }
        self.bound(&mut map, &fresh);
    }

    fn bound(&self, map: &mut Map, fresh: &HashSet<String>) {
        let Map { skus, fields } = map;
        if *fields > self.field_capacity {
            let target = self.field_capacity - self.field_capacity / 4;
            for (sku, kept) in skus.iter_mut() {
                if *fields <= target {
                    break;
                }
                if !fresh.contains(sku) {
                    *fields -= kept.fields();
                    kept.whole = None;
                }
            }
            // The batch's own SKUs last: one SKU may hold more than all.
            for (sku, kept) in skus.iter_mut() {
                if *fields > self.field_capacity && fresh.contains(sku) {
                    *fields -= kept.fields();
                    kept.whole = None;
                }
            }
        }
        if skus.len() > self.capacity {
            let target = self.capacity - self.capacity / 4;
            let mut over = skus.len().saturating_sub(target);
            skus.retain(|sku, kept| {
                if over == 0 || fresh.contains(sku) {
                    return true;
                }
                over -= 1;
                *fields -= kept.fields();
                false
            });
        }
    }

    /// Forgets the SKUs `gone` says are gone (those of partitions this
    /// member no longer holds); returns how many.
    pub fn forget(&self, gone: impl Fn(&Kept) -> bool) -> usize {
        let mut map = self.map();
        let Map { skus, fields } = &mut *map;
        let before = skus.len();
        skus.retain(|_, kept| {
            let keep = !gone(kept);
            if !keep {
                *fields -= kept.fields();
            }
            keep
        });
        before - skus.len()
    }

    /// Forgets every SKU.
    pub fn clear(&self) {
        let mut map = self.map();
        map.skus.clear();
        map.fields = 0;
    }

    /// How many SKUs are kept.
    pub fn len(&self) -> usize {
        self.map().skus.len()
    }

    /// How many fields of orders and adjustments hashes are kept whole.
    pub fn fields(&self) -> usize {
        self.map().fields
    }
}

/// A SKU's orders and adjustments hashes, whole.
pub(crate) type Whole = [HashMap<String, String>; 2];

/// The fields of a hash deleted, and those set with their values.
pub(crate) type HashChange = (Vec<String>, Vec<(String, String)>);

/// What a batch did to one kept SKU.
#[derive(Debug)]
pub(crate) struct Change {
    /// Its stock hash now.
    pub stock: Vec<Option<String>>,
    /// Its orders and adjustments hashes as the batch read them whole,
    /// before its writes (empty for a SKU with no state yet).
    pub loaded: Option<Whole>,
    /// The fields of its orders and adjustments hashes the batch deleted,
    /// and those it set.
    pub hashes: [HashChange; 2],
}

impl Change {
    fn apply(self, kept: &mut Kept) {
        kept.stock = self.stock;
        if kept.whole.is_none() {
            kept.whole = self.loaded;
        }
        let Some(whole) = kept.whole.as_mut() else {
            return;
        };
        for (hash, (deletes, sets)) in whole.iter_mut().zip(self.hashes) {
            for field in deletes {
                hash.remove(&field);
            }
            hash.extend(sets);
        }
        if kept.fields() > MAX_WHOLE_FIELDS {
            kept.whole = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(orders: &[(&str, &str)], whole: bool) -> Change {
        Change {
            stock: vec![Some("1".into())],
            loaded: whole.then(Whole::default),
            hashes: [
                (
                    Vec::new(),
                    orders
                        .iter()
                        .map(|(f, v)| ((*f).to_owned(), (*v).to_owned()))
                        .collect(),
                ),
                (Vec::new(), Vec::new()),
            ],
        }
    }

    #[test]
    fn a_sku_known_whole_answers_absent_fields_but_not_final_orders() {
        let heads = Heads::new(10, 100);
        heads.put(vec![(
            "A".into(),
            Some(change(
                &[("o1", "D|1|5"), ("o2", "R|1|6"), ("{u:x", "1")],
                true,
            )),
        )]);
        let fields: Vec<String> = ["o1", "o2", "o3", "{u:x"].map(str::to_owned).to_vec();
        let answers = heads.answer("A", 0, &fields);
        assert_eq!(
            answers,
            vec![
                Some(Some("D|1|5".into())),
                None, // rolled back: compaction may have pruned it
                Some(None),
                Some(Some("1".into())),
            ]
        );
        // A SKU not known whole answers nothing.
        heads.put(vec![("B".into(), Some(change(&[("o1", "D|1|5")], false)))]);
        assert_eq!(heads.answer("B", 0, &fields[..1]), vec![None]);
        assert_eq!(heads.get(["A", "B", "C"].iter()).len(), 3);
        assert_eq!(heads.fields(), 3);
    }

    #[test]
    fn the_field_bound_drops_whole_hashes_and_keeps_stock() {
        let heads = Heads::new(10, 4);
        heads.put(vec![(
            "A".into(),
            Some(change(&[("o1", "D|1|1"), ("o2", "D|1|2")], true)),
        )]);
        heads.put(vec![(
            "B".into(),
            Some(change(&[("o1", "D|1|1"), ("o2", "D|1|2")], true)),
        )]);
        assert_eq!(heads.fields(), 4);
        heads.put(vec![("C".into(), Some(change(&[("o1", "D|1|1")], true)))]);
        assert!(heads.fields() <= 3, "{}", heads.fields());
        let kept = heads.get(["A", "B", "C"].iter());
        assert!(kept.iter().all(Option::is_some), "stock stays: {kept:?}");
        assert_eq!(
            kept[2].as_ref().map(|k| k.1),
            Some(true),
            "the batch's own stays whole"
        );
        // Forgetting a SKU gives its fields back.
        heads.put(vec![("C".into(), None)]);
        assert_eq!(heads.len(), 2);
        heads.clear();
        assert_eq!((heads.len(), heads.fields()), (0, 0));
    }

    #[test]
    fn a_sku_with_too_many_fields_is_kept_by_its_stock_alone() {
        let heads = Heads::new(10, 10 * MAX_WHOLE_FIELDS);
        let orders: Vec<(String, String)> = (0..=MAX_WHOLE_FIELDS)
            .map(|o| (format!("o{o}"), "D|1|1".to_owned()))
            .collect();
        let many: Vec<(&str, &str)> = orders
            .iter()
            .map(|(f, v)| (f.as_str(), v.as_str()))
            .collect();
        heads.put(vec![("HOT".into(), Some(change(&many, true)))]);
        assert_eq!(
            heads.get(["HOT"].iter()),
            vec![Some((vec![Some("1".into())], false))]
        );
        assert_eq!(heads.fields(), 0);
    }
}
