//! How a batch's changes reach Redis, fenced: on a single Redis one
//! transaction under `WATCH` on the marker (see `fence`), on a cluster
//! the write script once per SKU (`lua/write.lua`); and the marks alone.

use std::sync::LazyLock;

use redis::Script;

use crate::fence::{self, Expected, Watched, GENERATION_FIELD};
use crate::projection::{Projection, ProjectionError, APPLIED_FIELD};
use crate::stage::SkuWrite;

/// The fenced write of a cluster's SKU, and the marks alone; see the
/// file.
static WRITE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/write.lua")));

impl Projection {
    /// Writes `writes` (by SKU number in the batch) fenced, with the
    /// batch's `marks`. On a single Redis it is one transaction, fenced by
    /// the marker (`expected`, see `fence`): it lands whole or not at all.
    /// On a cluster it is one call per SKU, each fenced by its stock hash,
    /// then the marker's once every SKU is written.
    pub(crate) async fn write(
        &self,
        marks: &[(i32, i64)],
        writes: &[(usize, SkuWrite)],
        expected: Option<&Expected>,
    ) -> Result<Written, ProjectionError> {
        let Some(expected) = expected else {
            let calls = || {
                (writes.iter())
                    .map(|(_, write)| write_call(WriteFence::Sku, &[write], None))
                    .collect()
            };
            let replies: Vec<Vec<i64>> = self.run(&WRITE, calls).await?;
            let moved: Vec<usize> = (writes.iter().zip(replies))
                .filter(|(_, moved)| !moved.is_empty())
                .map(|((s, _), _)| *s)
                .collect();
            if !moved.is_empty() {
                return Ok(Written::Moved(moved));
            }
            self.record_applied(marks).await?;
            return Ok(Written::Landed);
        };
        if writes.is_empty() && marks.is_empty() {
            return Ok(Written::Landed);
        }
        let all: Vec<&SkuWrite> = writes.iter().map(|(_, w)| w).collect();
        match self.write_watched(expected, &all, marks).await? {
            Watched::Landed => {
                self.fence.landed(expected, marks);
                Ok(Written::Landed)
            }
            Watched::Refused => Ok(Written::Refused),
        }
    }

    /// Writes `writes` and records `marks` in the marker in one
    /// transaction, if the marker still holds `expected` (see `fence`),
    /// through the projection's own connection.
    async fn write_watched(
        &self,
        expected: &Expected,
        writes: &[&SkuWrite],
        marks: &[(i32, i64)],
    ) -> Result<Watched, ProjectionError> {
        let marker = self.marker_key();
        let mut look = redis::pipe();
        look.cmd("WATCH").arg(&marker).ignore();
        look.cmd("HMGET").arg(&marker).arg(GENERATION_FIELD);
        for (partition, _) in &expected.applied {
            look.arg(format!("{APPLIED_FIELD}{partition}"));
        }
        let mut write = redis::Pipeline::with_capacity(2 * 3 * writes.len() + marks.len());
        write.atomic();
        for w in writes {
            for (key, hash) in w.keys.written().into_iter().zip(&w.hashes) {
                if !hash.deletes.is_empty() {
                    let fields: usize = hash.deletes.iter().map(String::len).sum();
                    let mut delete = sized("HDEL", 1 + hash.deletes.len(), key.len() + fields);
                    delete.arg(key).arg(&hash.deletes);
                    write.add_command(delete).ignore();
                }
                if !hash.sets.is_empty() {
                    let pairs: usize = (hash.sets.iter()).map(|(f, v)| f.len() + v.len()).sum();
                    let mut set = sized("HSET", 1 + 2 * hash.sets.len(), key.len() + pairs);
                    set.arg(key);
                    for (field, value) in &hash.sets {
                        set.arg(field).arg(value);
                    }
                    write.add_command(set).ignore();
                }
            }
        }
        for &(partition, offset) in marks {
            if expected.held(partition).is_none_or(|held| held < offset) {
                (write.cmd("HSET").arg(&marker))
                    .arg(format!("{APPLIED_FIELD}{partition}"))
                    .arg(offset)
                    .ignore();
            }
        }
        let mut writer = self.writer.lock().await;
        let conn = match writer.as_mut() {
            Some(conn) => conn,
            None => match self.redis.dedicated().await? {
                Some(conn) => writer.insert(conn),
                None => unreachable!("a cluster fences each SKU, not through the marker"),
            },
        };
        let done = fence::watched(conn, &look, expected, &write).await;
        if done.is_err() {
            *writer = None;
        }
        Ok(done?)
    }

    /// Records in the marker that `marks` (partition, last offset applied)
    /// are folded into this prefix, as [`Projection::apply`] does with
    /// each batch; a mark already further is kept.
    pub async fn record_applied(&self, marks: &[(i32, i64)]) -> Result<(), ProjectionError> {
        if marks.is_empty() {
            return Ok(());
        }
        let call = || {
            let marker = Some((self.marker_key(), marks));
            vec![write_call(WriteFence::None, &[], marker)]
        };
        let _: Vec<Vec<i64>> = self.run(&WRITE, call).await?;
        Ok(())
    }
}

/// A command `name` with room for `args` more arguments of `bytes` in
/// all: a write's commands carry hundreds of fields, and a command grown
/// an argument at a time copies its buffer again and again.
pub(crate) fn sized(name: &str, args: usize, bytes: usize) -> redis::Cmd {
    let mut cmd = redis::Cmd::with_capacity(1 + args, name.len() + bytes);
    cmd.arg(name);
    cmd
}

/// What a call of the write script must find to land (see
/// `lua/write.lua`; a single Redis fences a batch through the marker
/// instead, see `fence`).
#[derive(Debug, Clone, Copy)]
enum WriteFence {
    /// Each SKU's stock hash offset (a cluster).
    Sku,
    /// Nothing: the marks alone, never lowered.
    None,
}

/// What became of a batch's fenced write.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Written {
    Landed,
    /// These SKUs (by number in the batch) moved; the others landed.
    Moved(Vec<usize>),
    /// Nothing landed: the marker moved.
    Refused,
}

/// One call of the write script for the SKUs' `writes`, fenced by `fence`,
/// and, when given, the marker key and the marks to record in it.
fn write_call(
    fence: WriteFence,
    writes: &[&SkuWrite],
    marker: Option<(String, &[(i32, i64)])>,
) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(WRITE.get_hash())
        .arg(3 * writes.len() + usize::from(marker.is_some()));
    for write in writes {
        for key in write.keys.written() {
            cmd.arg(key);
        }
    }
    if let Some((key, _)) = &marker {
        cmd.arg(key);
    }
    cmd.arg(match fence {
        WriteFence::Sku => "sku",
        WriteFence::None => "none",
    });
    for write in writes {
        if matches!(fence, WriteFence::Sku) {
            cmd.arg(write.fence.as_deref().unwrap_or(""));
        }
        for hash in &write.hashes {
            cmd.arg(hash.deletes.len()).arg(&hash.deletes);
            cmd.arg(hash.sets.len());
            for (field, value) in &hash.sets {
                cmd.arg(field).arg(value);
            }
        }
    }
    if let Some((_, marks)) = marker {
        for &(partition, offset) in marks {
            cmd.arg(format!("{APPLIED_FIELD}{partition}")).arg(offset);
        }
    }
    cmd
}
