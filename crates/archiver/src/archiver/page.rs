//! Writing a page: its shares at once, each in its own transaction with
//! any month partitions its rows need, then the archiver's progress; with
//! retries while PostgreSQL is away.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use rdkafka::message::{Message, OwnedMessage};
use sqlx::{PgConnection, PgPool};
use stockledger_core::report::Chain;
use stockledger_kafka::topic::offset_ranges;
use stockledger_runtime::retry;
use tokio::sync::watch;
use tracing::{debug, instrument, warn};

use super::rows::{copy_rows, insert_rows, is_unique_violation, page_rows, PageRows, Via};
use super::{ArchiverConfig, ArchiverError, ArchiverStats};
use super::{PAGE_SECONDS_METRIC, ROWS_METRIC, UNDECODABLE_METRIC};

/// The page in at most `writers` shares by SKU (the record key): each
/// SKU's messages in one share and in their order, so two shares never
/// update the same rows of `ledger_hourly`.
pub(super) fn share_out(page: Vec<OwnedMessage>, writers: usize) -> Vec<Vec<OwnedMessage>> {
    let writers = writers.max(1);
    if writers == 1 {
        return vec![page];
    }
    let mut shares: Vec<Vec<OwnedMessage>> = (0..writers)
        .map(|_| Vec::with_capacity(page.len() / writers + 1))
        .collect();
    for m in page {
        // FNV-1a: cheap, and the same share for the same key.
        let hash = m
            .key()
            .unwrap_or_default()
            .iter()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
        shares[(hash % writers as u64) as usize].push(m);
    }
    shares.retain(|share| !share.is_empty());
    shares
}

/// Writes a page, its shares at once, each on its own connection and in
/// its own transaction, then the progress of the page's partitions. A page
/// that makes one share carries its progress in its own transaction. If
/// some shares commit and the rest or the progress do not, the page is
/// read again later and its archived rows collapse on the primary key
/// (the trigger adds only rows actually inserted to `ledger_hourly`).
/// Returns `None` if asked to stop while waiting for PostgreSQL.
pub(super) async fn write_page_in_shares(
    pool: &PgPool,
    config: &ArchiverConfig,
    page: Vec<OwnedMessage>,
    progress: &HashMap<i32, i64>,
    months: &HashSet<(i64, u32)>,
    stop: &watch::Receiver<bool>,
) -> Result<Option<Written>, ArchiverError> {
    let shares = share_out(page, config.writers);
    let alone = shares.len() == 1;
    let writes = futures::future::join_all(shares.iter().map(|share| {
        write_page_with_retry(pool, config, share, progress, months, alone, stop.clone())
    }));
    let mut page_written = Written::default();
    for written in writes.await {
        match written? {
            Some(written) => page_written.add(written),
            None => return Ok(None),
        }
    }
    if !alone {
        let next = &page_written.next_offsets;
        let stored = retry::until_stopped(
            || async {
                let mut conn = pool.acquire().await?;
                write_progress(&mut conn, config, next).await
            },
            is_transient,
            postgres_away,
            &mut stop.clone(),
        )
        .await
        .map_err(|source| ArchiverError::Progress {
            topic: config.outcomes_topic.clone(),
            source,
        })?;
        if stored.is_none() {
            return Ok(None);
        }
    }
    Ok(Some(page_written))
}

/// Writes a page (or a share of one), retrying with backoff while
/// PostgreSQL is unreachable; with `progress_too`, the progress of its
/// partitions in the same transaction. Returns `None` if asked to stop
/// while waiting (nothing was written).
pub(super) async fn write_page_with_retry(
    pool: &PgPool,
    config: &ArchiverConfig,
    page: &[OwnedMessage],
    progress: &HashMap<i32, i64>,
    months: &HashSet<(i64, u32)>,
    progress_too: bool,
    mut stop: watch::Receiver<bool>,
) -> Result<Option<Written>, ArchiverError> {
    let write = |via| write_page(pool, config, page, progress, months, via, progress_too);
    retry::until_stopped(
        || async {
            let started = Instant::now();
            let written = match write(Via::Copy).await {
                Err(e) if is_unique_violation(&e) => {
                    debug!("a row of the page is archived already; inserting it row by row");
                    write(Via::Insert).await
                }
                other => other,
            };
            metrics::histogram!(PAGE_SECONDS_METRIC).record(started.elapsed().as_secs_f64());
            written
        },
        is_transient,
        postgres_away,
        &mut stop,
    )
    .await
    .map_err(|source| ArchiverError::Page {
        topic: config.outcomes_topic.clone(),
        offsets: offset_ranges(page.iter().map(|m| (m.partition(), m.offset()))),
        source,
    })
}

/// Takes in what a written page of `messages` archived and advanced.
pub(super) fn record(
    written: Written,
    messages: usize,
    progress: &mut HashMap<i32, i64>,
    months: &mut HashSet<(i64, u32)>,
    stats: &mut ArchiverStats,
) {
    stats.pages += 1;
    metrics::histogram!(super::PAGE_ROWS_METRIC).record(messages as f64);
    stats.rows += written.rows;
    stats.undecodable += written.undecodable;
    metrics::counter!(ROWS_METRIC).increment(written.rows);
    metrics::counter!(UNDECODABLE_METRIC).increment(written.undecodable);
    for (partition, next) in written.next_offsets {
        progress.insert(partition, next);
    }
    months.extend(written.new_months);
}

/// Says that a write is waiting for PostgreSQL, before each retry.
pub(super) fn postgres_away(e: &sqlx::Error, wait: Duration) {
    warn!(error = %Chain(&e), retry_in = ?wait, "PostgreSQL unavailable; progress not advanced, retrying");
}

/// Whether PostgreSQL may answer if asked again (unreachable, restarting,
/// a pool out of connections), or the page may go through when written
/// again (a deadlock or serialization failure with another archiver
/// updating the same hours of `ledger_hourly` during a rebalance).
pub(super) fn is_transient(e: &sqlx::Error) -> bool {
    matches!(
        e,
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::Protocol(_)
    ) || matches!(e, sqlx::Error::Database(db) if db.code().is_some_and(|c| {
        c.starts_with("08") || ["57P01", "57P03", "40P01", "40001"].contains(&c.as_ref())
    }))
}

#[derive(Debug, Default)]
pub(super) struct Written {
    pub(super) rows: u64,
    pub(super) undecodable: u64,
    pub(super) next_offsets: HashMap<i32, i64>,
    /// Months whose partition the page made sure of.
    pub(super) new_months: Vec<(i64, u32)>,
}

impl Written {
    /// Adds what another share of the same page wrote.
    fn add(&mut self, share: Written) {
        self.rows += share.rows;
        self.undecodable += share.undecodable;
        for (partition, next) in share.next_offsets {
            let at = self.next_offsets.entry(partition).or_insert(next);
            *at = (*at).max(next);
        }
        self.new_months.extend(share.new_months);
    }
}

/// The UTC (year, month) of an instant in milliseconds since the Unix epoch.
/// Instants beyond year 9999 either way (which PostgreSQL's timestamps do not
/// hold anyway) fall in (±10000, 0).
pub(super) fn utc_month(ms: i64) -> (i64, u32) {
    match time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000) {
        Ok(t) => (i64::from(t.year()), u32::from(u8::from(t.month()))),
        Err(_) => (ms.signum() * 10_000, 0),
    }
}

/// The months of `instants` not in `known`, each with one of its instants.
pub(super) fn unknown_months(
    instants: &[i64],
    known: &HashSet<(i64, u32)>,
) -> Vec<((i64, u32), i64)> {
    let mut found: Vec<((i64, u32), i64)> = Vec::new();
    for &ms in instants {
        let month = utc_month(ms);
        if !known.contains(&month) && !found.iter().any(|(m, _)| *m == month) {
            found.push((month, ms));
        }
    }
    found
}

#[instrument(name = "page", skip_all, fields(messages = page.len()))]
pub(super) async fn write_page(
    pool: &PgPool,
    config: &ArchiverConfig,
    page: &[OwnedMessage],
    progress: &HashMap<i32, i64>,
    months: &HashSet<(i64, u32)>,
    via: Via,
    progress_too: bool,
) -> Result<Written, sqlx::Error> {
    let PageRows {
        columns,
        next_offsets,
        undecodable,
    } = page_rows(page, progress);
    let rows = columns.offset.len() as u64;
    let new_months = unknown_months(&columns.occurred_at_ms, months);
    let mut tx = pool.begin().await?;
    if !new_months.is_empty() {
        let instants: Vec<i64> = new_months.iter().map(|&(_, ms)| ms).collect();
        sqlx::query(
            "SELECT ledger_entries_ensure_months(ARRAY(
                 SELECT timestamptz 'epoch' + ms * interval '1 millisecond'
                 FROM UNNEST($1::bigint[]) AS ms))",
        )
        .bind(&instants)
        .execute(&mut *tx)
        .await?;
    }
    if rows > 0 {
        match via {
            Via::Copy => copy_rows(&mut tx, &columns).await?,
            Via::Insert => insert_rows(&mut tx, &columns).await?,
        }
    }
    if progress_too {
        write_progress(&mut tx, config, &next_offsets).await?;
    }
    tx.commit().await?;
    debug!(rows, undecodable, next = ?next_offsets, progress_too, "page archived");
    Ok(Written {
        rows,
        undecodable,
        next_offsets,
        new_months: new_months.into_iter().map(|(month, _)| month).collect(),
    })
}

/// Records the next offset to archive of each partition, never moving one
/// back (a page redelivered after a rebalance may end below it).
pub(super) async fn write_progress(
    conn: &mut PgConnection,
    config: &ArchiverConfig,
    next_offsets: &HashMap<i32, i64>,
) -> Result<(), sqlx::Error> {
    let partitions: Vec<i32> = next_offsets.keys().copied().collect();
    let nexts: Vec<i64> = partitions.iter().map(|p| next_offsets[p]).collect();
    sqlx::query(
        "INSERT INTO archiver_progress (consumer_group, topic, partition, next_offset)
         SELECT $1, $2, partition, next_offset FROM UNNEST($3::int[], $4::bigint[])
             AS p(partition, next_offset)
         ON CONFLICT (consumer_group, topic, partition) DO UPDATE
         SET next_offset = GREATEST(archiver_progress.next_offset, EXCLUDED.next_offset),
             updated_at = now()",
    )
    .bind(&config.group_id)
    .bind(&config.outcomes_topic)
    .bind(&partitions)
    .bind(&nexts)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use rdkafka::message::OwnedMessage;
    use rdkafka::Timestamp;
    use stockledger_core::{codec, Decision, LogPosition, Outcome, ResultCode};

    use super::*;

    /// An outcome message at `partition`/`offset` of the outcomes topic for
    /// the command record at `command_offset`.
    fn message(partition: i32, offset: i64, payload: Vec<u8>) -> OwnedMessage {
        OwnedMessage::new(
            Some(payload),
            Some(b"SKU".to_vec()),
            "t.outcomes".into(),
            Timestamp::NotAvailable,
            partition,
            offset,
            None,
        )
    }

    fn outcome(partition: i32, command_offset: i64) -> Vec<u8> {
        let position = LogPosition {
            topic: "t".into(),
            partition,
            offset: command_offset,
        };
        let mut o = Outcome::invalid(position, "SKU", "x".into(), 0);
        o.decision = Decision {
            result: ResultCode::Applied,
            delta: -1,
            available: 4,
            total: 5,
            reason: None,
            location: None,
            events: stockledger_core::StockEvents::NONE,
        };
        codec::encode_outcome(&o).unwrap_or_default()
    }

    #[test]
    fn a_page_skips_what_earlier_pages_archived_and_advances_each_partition() {
        let page = [
            message(0, 7, outcome(0, 70)),
            message(1, 3, outcome(1, 30)),
            message(0, 8, outcome(0, 80)),
            message(1, 4, b"not an outcome".to_vec()),
            message(2, 0, outcome(2, 0)),
        ];
        // Partition 0 was archived up to offset 8 (exclusive), 1 up to 3.
        let progress = HashMap::from([(0, 8), (1, 3)]);
        let rows = page_rows(&page, &progress);
        assert_eq!(rows.columns.offset, [30, 80, 0], "command offsets archived");
        assert_eq!(rows.columns.partition, [1, 0, 2]);
        assert_eq!(rows.undecodable, 1);
        assert_eq!(rows.next_offsets, HashMap::from([(0, 9), (1, 5), (2, 1)]));
    }

    #[test]
    fn a_page_is_shared_out_by_sku_in_order_and_about_evenly() {
        let page: Vec<OwnedMessage> = (0..2000)
            .map(|offset| {
                message((offset % 3) as i32, offset, Vec::new())
                    .set_key(Some(format!("SKU-{}", offset % 100).into_bytes()))
            })
            .collect();
        let shares = share_out(page.clone(), 2);
        assert_eq!(shares.len(), 2);
        for share in &shares {
            assert!(
                (700..=1300).contains(&share.len()),
                "about half each: {}",
                share.len()
            );
            let offsets: Vec<i64> = share.iter().map(|m| m.offset()).collect();
            assert!(offsets.is_sorted(), "messages keep their order");
        }
        for sku in 0..100 {
            let key = format!("SKU-{sku}").into_bytes();
            let holders = shares
                .iter()
                .filter(|s| s.iter().any(|m| m.key() == Some(key.as_slice())))
                .count();
            assert_eq!(holders, 1, "SKU-{sku} is in one share");
        }
        let all: usize = shares.iter().map(Vec::len).sum();
        assert_eq!(all, page.len(), "nothing lost");

        // One writer, or one SKU: the page as it came.
        for shares in [share_out(page.clone(), 1), share_out(page[..1].to_vec(), 4)] {
            assert_eq!(shares.len(), 1);
        }
        assert_eq!(share_out(page.clone(), 1)[0].len(), page.len());
    }

    #[test]
    fn shares_of_a_page_add_up_to_its_rows_and_furthest_offsets() {
        let mut page = Written::default();
        page.add(Written {
            rows: 3,
            undecodable: 1,
            next_offsets: HashMap::from([(0, 9), (1, 4)]),
            new_months: vec![(2026, 11)],
        });
        page.add(Written {
            rows: 2,
            undecodable: 0,
            next_offsets: HashMap::from([(0, 7), (2, 5)]),
            new_months: Vec::new(),
        });
        assert_eq!((page.rows, page.undecodable), (5, 1));
        assert_eq!(page.next_offsets, HashMap::from([(0, 9), (1, 4), (2, 5)]));
        assert_eq!(page.new_months, [(2026, 11)]);
    }

    #[test]
    fn instants_fall_in_their_utc_month_on_both_sides_of_the_epoch() {
        assert_eq!(utc_month(0), (1970, 1));
        assert_eq!(utc_month(-1), (1969, 12));
        // 2024-02-29T23:59:59.999Z and the next millisecond.
        assert_eq!(utc_month(1_709_251_199_999), (2024, 2));
        assert_eq!(utc_month(1_709_251_200_000), (2024, 3));
        // 2026-12-31T23:59:59.999Z and 2027-01-01T00:00:00Z.
        assert_eq!(utc_month(1_798_761_599_999), (2026, 12));
        assert_eq!(utc_month(1_798_761_600_000), (2027, 1));
        let known = HashSet::from([(2024, 2)]);
        assert_eq!(
            unknown_months(
                &[1_709_251_199_999, 1_709_251_200_000, 1_709_251_200_001, 0],
                &known
            ),
            [((2024, 3), 1_709_251_200_000), ((1970, 1), 0)]
        );
    }

    #[test]
    fn a_page_entirely_archived_already_adds_nothing() {
        let page = [message(0, 1, outcome(0, 1)), message(0, 2, outcome(0, 2))];
        let rows = page_rows(&page, &HashMap::from([(0, 5)]));
        assert!(rows.columns.offset.is_empty());
        assert!(rows.next_offsets.is_empty());
        assert_eq!(rows.undecodable, 0);
    }
}
