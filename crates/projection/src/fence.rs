//! The per-partition fence of a single Redis: what a projection last knew
//! of its marker, what its next write must find there, and the write.
//!
//! Only the member that owns a partition folds its records, and every SKU
//! is written only by records of the one partition that owns it (a record
//! elsewhere is `MISROUTED` and writes nothing). So one check per
//! partition fences every SKU the batch writes: the write lands only if,
//! for each partition of the batch, the marker's `applied:` field still
//! holds what this projection last wrote or read there, and its
//! `generation` field what it held then. Another member that folded the
//! partition meanwhile moved the first; a restore or a `replay --swap`,
//! which rewrite SKUs outside the fold, move the second in the same atomic
//! step as their writes. Either way the write lands nothing, and the
//! batch is read again from Redis and decided again.
//!
//! The write is a transaction on a connection of its own: `WATCH` the
//! marker, read its fields and compare, then `MULTI`, the batch's `HDEL`s
//! and `HSET`s, the marks, `EXEC`. Whatever touches the marker in between
//! (another member's batch, a restore, a swap) makes `EXEC` write nothing;
//! the fields are then compared again, and the write sent again if they
//! still hold (another member folded other partitions). No script runs:
//! Redis spends a third of what the same writes cost from Lua, which
//! converts every argument into the interpreter and back.
//!
//! What the projection keeps in memory (see `heads`) is trusted only
//! under this fence: the marker is read before any SKU of a partition the
//! projection does not know yet, the SKUs it kept of that partition are
//! forgotten then, and everything kept is forgotten when the generation
//! moved or a write was refused.
//!
//! A Redis Cluster keeps the marker on another slot than the SKUs, so no
//! script may check it and write them atomically: there each SKU's write
//! is fenced by the offset its stock hash holds (`lua/write.lua`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use redis::aio::MultiplexedConnection;

/// How many times a write whose `EXEC` was cut short by another write to
/// the marker, while this batch's fields still held, is sent again before
/// the batch is decided again.
const WATCHED_ATTEMPTS: usize = 16;

/// The marker's field counting rewrites outside the fold (restores,
/// swaps): a write decided before one of them must not land after it.
pub(crate) const GENERATION_FIELD: &str = "generation";

/// What the marker held when last read or written by this projection.
#[derive(Debug, Default)]
struct Known {
    generation: Option<i64>,
    /// Per partition, its `applied:` field (`None`: absent).
    applied: BTreeMap<i32, Option<i64>>,
}

/// What one write must find in the marker to land.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Expected {
    pub generation: Option<i64>,
    pub applied: Vec<(i32, Option<i64>)>,
}

impl Expected {
    /// The offset `partition`'s field must hold (`None`: absent, or not a
    /// partition of the write).
    pub fn held(&self, partition: i32) -> Option<i64> {
        (self.applied.iter())
            .find(|(p, _)| *p == partition)
            .and_then(|(_, offset)| *offset)
    }
}

/// How a read of the marker changed what is known.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Learned {
    /// Nothing was known, or the generation moved: nothing kept holds.
    Anew,
    /// These partitions are known from now on: what is kept of their SKUs
    /// was kept without the fence and must go.
    Partitions(Vec<i32>),
}

/// What a projection knows of its marker, shared by its clones (they
/// share what they keep of SKUs too).
#[derive(Debug, Clone, Default)]
pub(crate) struct Fence {
    known: Arc<Mutex<Option<Known>>>,
}

impl Fence {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Known>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Of `partitions`, those whose marker fields must be read before the
    /// batch's SKUs are: all when nothing is known.
    pub fn unknown(&self, partitions: &[i32]) -> Vec<i32> {
        let known = self.lock();
        partitions
            .iter()
            .copied()
            .filter(|p| known.as_ref().is_none_or(|k| !k.applied.contains_key(p)))
            .collect()
    }

    /// Takes in a read of the marker: its generation and the `applied:`
    /// field of each partition read.
    pub fn learn(&self, generation: Option<i64>, read: Vec<(i32, Option<i64>)>) -> Learned {
        let mut known = self.lock();
        match known.as_mut() {
            Some(k) if k.generation == generation => {
                let partitions = read.iter().map(|(p, _)| *p).collect();
                k.applied.extend(read);
                Learned::Partitions(partitions)
            }
            _ => {
                *known = Some(Known {
                    generation,
                    applied: read.into_iter().collect(),
                });
                Learned::Anew
            }
        }
    }

    /// What a write of a batch of `partitions`, all known, must find.
    pub fn expected(&self, partitions: &[i32]) -> Expected {
        let known = self.lock();
        let known = known.as_ref();
        Expected {
            generation: known.and_then(|k| k.generation),
            applied: partitions
                .iter()
                .map(|&p| (p, known.and_then(|k| k.applied.get(&p).copied().flatten())))
                .collect(),
        }
    }

    /// After a write that found `expected` and recorded `marks`: each mark
    /// raised its field, never lowered it.
    pub fn landed(&self, expected: &Expected, marks: &[(i32, i64)]) {
        let mut known = self.lock();
        let Some(k) = known.as_mut() else { return };
        if k.generation != expected.generation {
            return;
        }
        for &(partition, offset) in marks {
            let was = expected.held(partition);
            k.applied
                .insert(partition, Some(was.map_or(offset, |w| w.max(offset))));
        }
    }

    /// Forgets everything: the next batch reads the marker first.
    pub fn reset(&self) {
        *self.lock() = None;
    }

    /// Forgets `partitions` (no longer this member's).
    pub fn forget(&self, partitions: &std::collections::BTreeSet<i32>) {
        if let Some(k) = self.lock().as_mut() {
            k.applied.retain(|p, _| !partitions.contains(p));
        }
    }
}

/// The connection a projection's fenced writes go through, shared by its
/// clones (one write at a time), made on first use and dropped after an
/// error (a `WATCH` it may still hold goes with it).
pub(crate) type Writer = Arc<tokio::sync::Mutex<Option<MultiplexedConnection>>>;

/// What a fenced write did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Watched {
    Landed,
    /// The marker no longer held what was expected: nothing was written.
    Refused,
}

/// Runs `write`, a transaction, on `conn` if the marker still holds
/// `expected`: `look` watches the marker and reads its generation and the
/// `applied:` field of each partition of `expected`, in that order (see
/// the module's documentation). On an error the connection may still
/// watch the marker: drop it.
pub(crate) async fn watched(
    conn: &mut MultiplexedConnection,
    look: &redis::Pipeline,
    expected: &Expected,
    write: &redis::Pipeline,
) -> redis::RedisResult<Watched> {
    for _ in 0..WATCHED_ATTEMPTS {
        let (held,): (Vec<Option<String>>,) = look.query_async(conn).await?;
        let mut held = held
            .into_iter()
            .map(|v| v.and_then(|v| v.parse::<i64>().ok()));
        let generation = held.next().flatten();
        let same = generation == expected.generation
            && (expected.applied.iter()).all(|(_, offset)| held.next().flatten() == *offset);
        if !same {
            let () = redis::cmd("UNWATCH").query_async(conn).await?;
            return Ok(Watched::Refused);
        }
        let done: Option<()> = write.query_async(conn).await?;
        if done.is_some() {
            return Ok(Watched::Landed);
        }
    }
    Ok(Watched::Refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_is_known_once_read_and_raised_by_each_write() {
        let fence = Fence::default();
        assert_eq!(fence.unknown(&[0, 1]), vec![0, 1]);
        assert_eq!(
            fence.learn(Some(3), vec![(0, Some(9)), (1, None)]),
            Learned::Anew
        );
        assert!(fence.unknown(&[0, 1]).is_empty());
        let expected = fence.expected(&[0, 1]);
        assert_eq!(
            expected,
            Expected {
                generation: Some(3),
                applied: vec![(0, Some(9)), (1, None)]
            }
        );
        // A redelivered batch never lowers a field.
        fence.landed(&expected, &[(0, 4), (1, 2)]);
        assert_eq!(
            fence.expected(&[0, 1]).applied,
            vec![(0, Some(9)), (1, Some(2))]
        );
        assert_eq!(fence.unknown(&[2]), vec![2]);
        assert_eq!(
            fence.learn(Some(3), vec![(2, Some(1))]),
            Learned::Partitions(vec![2])
        );
    }

    #[test]
    fn a_moved_generation_or_a_reset_forgets_everything() {
        let fence = Fence::default();
        fence.learn(None, vec![(0, Some(1)), (1, Some(1))]);
        assert_eq!(fence.learn(Some(1), vec![(2, None)]), Learned::Anew);
        assert_eq!(fence.unknown(&[0, 1, 2]), vec![0, 1]);
        fence.reset();
        assert_eq!(fence.unknown(&[2]), vec![2]);
        fence.learn(None, vec![(0, Some(1)), (1, Some(1))]);
        fence.forget(&[1].into());
        assert_eq!(fence.unknown(&[0, 1]), vec![1]);
    }
}
