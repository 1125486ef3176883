//! The holds' index: reservations by deadline, per partition, for the
//! applier's expiry and a replay's hand-over.

use super::{Projection, ProjectionError};
use crate::keys;

impl Projection {
    /// For each of `partitions`, up to `limit` holds whose deadline is
    /// before `now` (ms): (sku, order id, deadline), earliest first; one
    /// pipelined round trip for all of them.
    pub async fn due_holds(
        &self,
        partitions: &[i32],
        now: i64,
        limit: usize,
    ) -> Result<Vec<Vec<(String, String, i64)>>, ProjectionError> {
        let reads: Vec<redis::Cmd> = partitions
            .iter()
            .map(|&partition| {
                redis::cmd("ZRANGE")
                    .arg(keys::holds_key(&self.prefix, partition))
                    .arg("-inf")
                    .arg(format!("({now}"))
                    .arg("BYSCORE")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(limit)
                    .arg("WITHSCORES")
                    .clone()
            })
            .collect();
        let due: Vec<Vec<(String, i64)>> = self.redis.query_each(reads).await?;
        partitions
            .iter()
            .zip(due)
            .map(|(&partition, holds)| {
                holds
                    .into_iter()
                    .map(
                        |(member, deadline)| match keys::decode_hold_member(&member) {
                            Some((sku, order)) => Ok((sku.to_owned(), order.to_owned(), deadline)),
                            None => Err(ProjectionError::Corrupt {
                                key: keys::holds_key(&self.prefix, partition),
                                value: member,
                            }),
                        },
                    )
                    .collect()
            })
            .collect()
    }

    /// For each of `partitions`, how many holds the index keeps and the
    /// earliest instant one of them is due (its deadline, or when the
    /// expire sent for it is to be tried again), in ms.
    pub async fn holds_summary(
        &self,
        partitions: &[i32],
    ) -> Result<Vec<(u64, Option<i64>)>, ProjectionError> {
        let key = |p: i32| keys::holds_key(&self.prefix, p);
        let counts: Vec<u64> = self
            .redis
            .query_each(
                partitions
                    .iter()
                    .map(|&p| redis::Cmd::zcard(key(p)))
                    .collect(),
            )
            .await?;
        let first: Vec<Vec<(String, i64)>> = self
            .redis
            .query_each(
                partitions
                    .iter()
                    .map(|&p| redis::Cmd::zrange_withscores(key(p), 0, 0))
                    .collect(),
            )
            .await?;
        Ok(counts
            .into_iter()
            .zip(first)
            .map(|(count, first)| (count, first.first().map(|&(_, due)| due)))
            .collect())
    }

    /// Puts off the holds of `partition` named by `members` (sku, order)
    /// until `retry_at` (ms), if they are still indexed: an expire was
    /// sent for each, and is tried again then if it did not end the hold.
    pub async fn defer_holds(
        &self,
        partition: i32,
        members: &[(String, String)],
        retry_at: i64,
    ) -> Result<(), ProjectionError> {
        if members.is_empty() {
            return Ok(());
        }
        let mut cmd = redis::cmd("ZADD");
        cmd.arg(keys::holds_key(&self.prefix, partition)).arg("XX");
        for (sku, order) in members {
            cmd.arg(retry_at).arg(keys::hold_member(sku, order));
        }
        let _: i64 = cmd.query_async(&mut self.redis.clone()).await?;
        Ok(())
    }

    /// Adds this prefix's index of holds to `live`'s, for each of
    /// `partitions` (a rebuilt prefix swapped in whole: the live index may
    /// have been lost with the live state).
    pub async fn copy_holds_into(
        &self,
        live: &Projection,
        partitions: i32,
    ) -> Result<(), ProjectionError> {
        for partition in 0..partitions {
            self.move_sorted_set(
                &keys::holds_key(&self.prefix, partition),
                &keys::holds_key(&live.prefix, partition),
            )
            .await?;
        }
        Ok(())
    }

    /// Up to `page` baskets whose holds' deadline is at or before `now`
    /// and that the settler has not found settled yet.
    pub async fn due_baskets(&self, now: i64, page: usize) -> Result<Vec<String>, ProjectionError> {
        Ok(redis::cmd("ZRANGE")
            .arg(keys::open_baskets_key(&self.prefix))
            .arg("-inf")
            .arg(now)
            .arg("BYSCORE")
            .arg("LIMIT")
            .arg(0)
            .arg(page)
            .query_async(&mut self.redis.clone())
            .await?)
    }

    /// Takes `settled` baskets off the open ones and looks at `open` ones
    /// again at `again` (ms).
    pub async fn settle_baskets(
        &self,
        settled: &[String],
        open: &[String],
        again: i64,
    ) -> Result<(), ProjectionError> {
        if settled.is_empty() && open.is_empty() {
            return Ok(());
        }
        let key = keys::open_baskets_key(&self.prefix);
        let mut pipe = redis::pipe();
        if !settled.is_empty() {
            pipe.cmd("ZREM").arg(&key).arg(settled).ignore();
        }
        if !open.is_empty() {
            let cmd = pipe.cmd("ZADD").arg(&key).arg("XX");
            for basket in open {
                cmd.arg(again).arg(basket);
            }
            cmd.ignore();
        }
        let () = pipe.query_async(&mut self.redis.clone()).await?;
        Ok(())
    }

    /// Adds this prefix's baskets' index and open baskets to `live`'s and
    /// deletes them here (a rebuilt prefix swapped in whole, as
    /// [`copy_holds_into`](Self::copy_holds_into)).
    pub async fn copy_baskets_into(&self, live: &Projection) -> Result<(), ProjectionError> {
        let pattern = keys::basket_key_pattern(&self.prefix);
        for key in self.redis.scan_all(&pattern).await? {
            let Some(basket) = key.strip_prefix(&keys::basket_key(&self.prefix, "")) else {
                continue;
            };
            let lines: Vec<(String, String)> = redis::cmd("HGETALL")
                .arg(&key)
                .query_async(&mut self.redis.clone())
                .await?;
            if !lines.is_empty() {
                let _: i64 = redis::cmd("HSET")
                    .arg(keys::basket_key(&live.prefix, basket))
                    .arg(&lines)
                    .query_async(&mut self.redis.clone())
                    .await?;
            }
            let _: i64 = redis::cmd("DEL")
                .arg(&key)
                .query_async(&mut self.redis.clone())
                .await?;
        }
        self.move_sorted_set(
            &keys::open_baskets_key(&self.prefix),
            &keys::open_baskets_key(&live.prefix),
        )
        .await
    }

    /// Adds the members of sorted set `from` to `to`, a page at a time
    /// (the two may be on different Cluster nodes), then deletes `from`.
    async fn move_sorted_set(&self, from: &str, to: &str) -> Result<(), ProjectionError> {
        let members: Vec<(String, i64)> = redis::cmd("ZRANGE")
            .arg(from)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut self.redis.clone())
            .await?;
        for page in members.chunks(1000) {
            let mut cmd = redis::cmd("ZADD");
            cmd.arg(to);
            for (member, score) in page {
                cmd.arg(score).arg(member);
            }
            let _: i64 = cmd.query_async(&mut self.redis.clone()).await?;
        }
        let _: i64 = redis::cmd("DEL")
            .arg(from)
            .query_async(&mut self.redis.clone())
            .await?;
        Ok(())
    }
}
