//! The archive's queries, each against a fresh database that
//! `sqlx::test` creates and migrates with the archiver's own migrations
//! (PostgreSQL from `DATABASE_URL`, as `deploy/local/test.sh` sets it).

use sqlx::PgPool;
use stockledger_analysts::query::{
    self, AsOf, Cursor, HistoryOf, HistoryQuery, QueryError, StockAsOf,
};
use stockledger_core::ResultCode;

/// 2026-11-23T10:00:00Z, in ms.
const T0: i64 = 1_795_428_000_000;

/// One archived row; `new` fills what a test does not care about.
#[derive(Clone)]
struct Row {
    partition: i32,
    offset: i64,
    sku: &'static str,
    command: Option<&'static str>,
    order: Option<&'static str>,
    result: &'static str,
    delta: i64,
    available: i64,
    total: i64,
    at_ms: i64,
}

impl Row {
    fn new(partition: i32, offset: i64, sku: &'static str, result: &'static str) -> Self {
        Self {
            partition,
            offset,
            sku,
            command: Some("DEDUCT"),
            order: None,
            result,
            delta: 0,
            available: 0,
            total: 10,
            at_ms: T0,
        }
    }

    fn order(mut self, order: &'static str) -> Self {
        self.order = Some(order);
        self
    }

    fn stock(mut self, command: &'static str, delta: i64, available: i64) -> Self {
        self.command = Some(command);
        self.delta = delta;
        self.available = available;
        self
    }

    /// The stock figures the archiver writes: none for a record not
    /// decided on the stock.
    fn figures(&self) -> Option<(i64, i64)> {
        (!matches!(self.result, "INVALID" | "MISROUTED")).then_some((self.available, self.total))
    }

    fn at(mut self, ms: i64) -> Self {
        self.at_ms = ms;
        self
    }
}

/// Archives `rows` on command topic `t`, creating their months' partitions
/// first as the archiver does.
async fn archive(pool: &PgPool, rows: &[Row]) -> sqlx::Result<()> {
    for r in rows {
        sqlx::query(
            "SELECT ledger_entries_ensure_months(
                 ARRAY[timestamptz 'epoch' + interval '1 millisecond' * $1])",
        )
        .bind(r.at_ms)
        .execute(pool)
        .await?;
        sqlx::query(
            "INSERT INTO ledger_entries (topic, partition, log_offset, sku, command, order_id,
                 result, delta, available_after, total_after, occurred_at)
             VALUES ('t', $1, $2, $3, $4, $5, $6, $7, $8, $9,
                 timestamptz 'epoch' + interval '1 millisecond' * $10)",
        )
        .bind(r.partition)
        .bind(r.offset)
        .bind(r.sku)
        .bind(r.command)
        .bind(r.order)
        .bind(r.result)
        .bind(r.delta)
        .bind(r.figures().map(|(available, _)| available))
        .bind(r.figures().map(|(_, total)| total))
        .bind(r.at_ms)
        .execute(pool)
        .await?;
    }
    Ok(())
}

fn sku(s: &str) -> HistoryOf {
    HistoryOf::Sku(s.into())
}

async fn offsets(pool: &PgPool, q: &HistoryQuery) -> Result<Vec<i64>, QueryError> {
    let page = query::history_page(pool, "t", q).await?;
    Ok(page.entries.iter().map(|e| e.log_offset).collect())
}

#[sqlx::test(migrator = "stockledger_archiver::MIGRATOR")]
async fn the_lowest_stock_counts_only_records_decided_on_the_skus_partition(
    pool: PgPool,
) -> anyhow::Result<()> {
    archive(
        &pool,
        &[
            Row::new(0, 0, "S", "APPLIED").stock("DEDUCT", -1, 9),
            Row::new(0, 1, "S", "APPLIED").stock("DEDUCT", -2, 7),
            // Refusals carry zeros, not stock: they must not count as "stock 0".
            Row::new(1, 0, "S", "MISROUTED"),
            Row::new(1, 1, "S", "INVALID"),
        ],
    )
    .await?;
    assert_eq!(query::min_available(&pool, "t").await?, Some(7));
    assert_eq!(query::min_available(&pool, "other").await?, None);
    assert_eq!(query::count_rows(&pool, "t").await?, 4);
    let by_result = query::count_by_result(&pool, "t").await?;
    assert_eq!(by_result[0], ("APPLIED".to_owned(), 2));
    Ok(())
}

#[sqlx::test(migrator = "stockledger_archiver::MIGRATOR")]
async fn history_of_a_sku_or_an_order_is_in_log_order_and_limited(
    pool: PgPool,
) -> anyhow::Result<()> {
    archive(
        &pool,
        &[
            Row::new(0, 2, "A", "DUPLICATE").order("o1"),
            Row::new(0, 0, "A", "APPLIED").order("o1"),
            Row::new(0, 1, "A", "APPLIED").order("o2"),
            Row::new(1, 0, "B", "APPLIED").order("o1"),
        ],
    )
    .await?;
    let of_a = query::history(&pool, "t", &sku("A"), 100).await?;
    let offsets: Vec<i64> = of_a.iter().map(|e| e.log_offset).collect();
    assert_eq!(offsets, [0, 1, 2]);
    let first_two = query::history(&pool, "t", &sku("A"), 2).await?;
    assert_eq!(first_two.len(), 2);
    let o1 = HistoryOf::Order {
        order_id: "o1".into(),
        sku: None,
    };
    let skus: Vec<(String, i64)> = query::history(&pool, "t", &o1, 100)
        .await?
        .into_iter()
        .map(|e| (e.sku, e.log_offset))
        .collect();
    assert_eq!(skus, [("A".into(), 0), ("A".into(), 2), ("B".into(), 0)]);
    let o1_of_b = HistoryOf::Order {
        order_id: "o1".into(),
        sku: Some("B".into()),
    };
    assert_eq!(query::history(&pool, "t", &o1_of_b, 100).await?.len(), 1);
    Ok(())
}

#[sqlx::test(migrator = "stockledger_archiver::MIGRATOR")]
async fn history_pages_follow_their_cursor_both_ways_without_gaps_or_repeats(
    pool: PgPool,
) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    for offset in 0..7 {
        rows.push(Row::new(0, offset, "A", "APPLIED").order("o1"));
        rows.push(Row::new(1, offset, "B", "APPLIED").order("o1"));
    }
    archive(&pool, &rows).await?;
    for newest_first in [false, true] {
        for (of, expected) in [
            (sku("A"), 7),
            (
                HistoryOf::Order {
                    order_id: "o1".into(),
                    sku: None,
                },
                14,
            ),
        ] {
            let mut q = HistoryQuery::of(of.clone(), 3);
            q.newest_first = newest_first;
            let mut seen = Vec::new();
            loop {
                let page = query::history_page(&pool, "t", &q).await?;
                assert!(page.entries.len() <= 3);
                seen.extend(page.entries.iter().map(|e| (e.sku.clone(), e.log_offset)));
                match page.next {
                    // The cursor survives its text form, as HTTP and CLI pass it.
                    Some(next) => q.after = Some(next.to_string().parse().expect("a cursor")),
                    None => break,
                }
            }
            let mut sorted = seen.clone();
            sorted.sort();
            sorted.dedup();
            if newest_first {
                sorted.reverse();
            }
            assert_eq!(
                seen, sorted,
                "{of:?} newest first {newest_first}: in order, once"
            );
            assert_eq!(seen.len(), expected, "{of:?}: every entry once");
        }
    }
    Ok(())
}

#[sqlx::test(migrator = "stockledger_archiver::MIGRATOR")]
async fn history_filters_by_time_range_and_result(pool: PgPool) -> anyhow::Result<()> {
    // One row a minute, alternately applied and refused; the first in the
    // month before (its own partition).
    let mut rows = vec![Row::new(0, 0, "A", "APPLIED").at(1_793_491_199_999)];
    for i in 1..10 {
        let result = if i % 2 == 0 {
            "APPLIED"
        } else {
            "REJECTED_INSUFFICIENT"
        };
        rows.push(Row::new(0, i, "A", result).at(T0 + i * 60_000));
    }
    archive(&pool, &rows).await?;
    let mut q = HistoryQuery::of(sku("A"), 100);
    q.since_ms = Some(T0 + 3 * 60_000);
    q.until_ms = Some(T0 + 7 * 60_000);
    assert_eq!(
        offsets(&pool, &q).await?,
        [3, 4, 5, 6],
        "since inclusive, until exclusive"
    );
    q.results = vec![ResultCode::RejectedInsufficient];
    assert_eq!(offsets(&pool, &q).await?, [3, 5]);
    q.results.push(ResultCode::Applied);
    q.newest_first = true;
    assert_eq!(offsets(&pool, &q).await?, [6, 5, 4, 3]);
    // A range across the month boundary reads both partitions.
    let mut q = HistoryQuery::of(sku("A"), 100);
    q.until_ms = Some(T0 + 2 * 60_000);
    assert_eq!(offsets(&pool, &q).await?, [0, 1]);
    Ok(())
}

#[sqlx::test(migrator = "stockledger_archiver::MIGRATOR")]
async fn history_refuses_a_foreign_cursor_a_reversed_range_and_limits_out_of_bounds(
    pool: PgPool,
) -> anyhow::Result<()> {
    let invalid_field = |r: Result<query::Page, QueryError>| match r {
        Err(QueryError::Invalid { field, .. }) => field,
        other => panic!("expected a refusal, got {other:?}"),
    };
    let mut q = HistoryQuery::of(sku("A"), 10);
    q.after = Some(Cursor {
        topic: "another.topic".into(),
        partition: 0,
        log_offset: 1,
        sku: "A".into(),
    });
    assert_eq!(
        invalid_field(query::history_page(&pool, "t", &q).await),
        "after"
    );
    let mut q = HistoryQuery::of(sku("A"), 10);
    (q.since_ms, q.until_ms) = (Some(T0), Some(T0));
    assert_eq!(
        invalid_field(query::history_page(&pool, "t", &q).await),
        "since"
    );
    for limit in [0, query::MAX_PAGE + 1] {
        let q = HistoryQuery::of(sku("A"), limit);
        assert_eq!(
            invalid_field(query::history_page(&pool, "t", &q).await),
            "limit"
        );
    }
    Ok(())
}

#[sqlx::test(migrator = "stockledger_archiver::MIGRATOR")]
async fn stock_as_of_a_time_or_an_offset_answers_the_edges_without_guessing(
    pool: PgPool,
) -> anyhow::Result<()> {
    archive(
        &pool,
        &[
            Row::new(0, 10, "A", "APPLIED")
                .stock("RESTOCK", 10, 10)
                .at(T0),
            Row::new(0, 11, "B", "APPLIED")
                .stock("RESTOCK", 5, 5)
                .at(T0 + 500),
            // Two records in the same millisecond.
            Row::new(0, 12, "A", "APPLIED")
                .stock("DEDUCT", -3, 7)
                .at(T0 + 1_000),
            Row::new(0, 13, "A", "APPLIED")
                .stock("DEDUCT", -2, 5)
                .at(T0 + 1_000),
            // Carries no stock: never an answer.
            Row::new(0, 14, "A", "INVALID").at(T0 + 2_000),
            Row::new(0, 15, "B", "APPLIED")
                .stock("DEDUCT", -1, 4)
                .at(T0 + 3_000),
        ],
    )
    .await?;
    let available = |answer: StockAsOf| match answer {
        StockAsOf::Known {
            entry,
            stock,
            reach,
        } => {
            assert_eq!((reach.partition, reach.log_offset), (0, 15));
            assert_eq!(entry.available_after, Some(stock.available));
            stock.available
        }
        other => panic!("expected a known stock, got {other:?}"),
    };
    let as_of = |at| query::stock_as_of(&pool, "t", "A", at);
    // Before the first record: no state, and the first record named.
    match as_of(AsOf::Time(T0 - 1)).await? {
        StockAsOf::BeforeFirst { first } => assert_eq!(first.log_offset, 10),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        as_of(AsOf::Offset(9)).await?,
        StockAsOf::BeforeFirst { .. }
    ));
    assert_eq!(available(as_of(AsOf::Time(T0)).await?), 10);
    assert_eq!(available(as_of(AsOf::Time(T0 + 999)).await?), 10);
    // At the shared millisecond: after both of its records.
    assert_eq!(available(as_of(AsOf::Time(T0 + 1_000)).await?), 5);
    // Between them only an offset can tell.
    assert_eq!(available(as_of(AsOf::Offset(12)).await?), 7);
    assert_eq!(available(as_of(AsOf::Offset(13)).await?), 5);
    // An invalid record and another SKU's change leave the answer as it was.
    assert_eq!(available(as_of(AsOf::Offset(14)).await?), 5);
    assert_eq!(available(as_of(AsOf::Time(T0 + 10_000)).await?), 5);
    assert_eq!(available(as_of(AsOf::Offset(15)).await?), 5);
    // Beyond what the archive holds of the partition: says so.
    match as_of(AsOf::Offset(16)).await? {
        StockAsOf::NotArchivedYet { asked, reach } => {
            assert_eq!((asked, reach.partition, reach.log_offset), (16, 0, 15))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        query::stock_as_of(&pool, "t", "never", AsOf::Offset(1)).await?,
        StockAsOf::Unknown
    );
    Ok(())
}

#[sqlx::test(migrator = "stockledger_archiver::MIGRATOR")]
async fn a_report_totals_each_sku_per_interval(pool: PgPool) -> anyhow::Result<()> {
    let minute = 60_000;
    archive(
        &pool,
        &[
            Row::new(0, 0, "A", "APPLIED").stock("RESTOCK", 3, 3).at(T0),
            Row::new(0, 1, "A", "APPLIED")
                .stock("DEDUCT", -2, 1)
                .at(T0 + 1),
            Row::new(0, 2, "A", "APPLIED")
                .stock("DEDUCT", -1, 0)
                .at(T0 + 2),
            Row::new(0, 3, "A", "REJECTED_INSUFFICIENT").at(T0 + 3),
            Row::new(0, 4, "A", "DUPLICATE").at(T0 + 4),
            // Next minute: a rollback gives 2 back.
            Row::new(0, 5, "A", "APPLIED")
                .stock("ROLLBACK", 2, 2)
                .at(T0 + minute),
            Row::new(0, 6, "A", "INVALID").at(T0 + minute + 1),
            Row::new(1, 0, "B", "APPLIED")
                .stock("RESTOCK", 9, 9)
                .at(T0 + 5),
        ],
    )
    .await?;
    let rows = query::report(&pool, &range("t", 60, T0, T0 + 2 * minute, None, 100)).await?;
    let keys: Vec<(&str, &str)> = rows.iter().map(|r| (&*r.sku, &*r.bucket)).collect();
    assert_eq!(
        keys,
        [
            ("A", "2026-11-23T10:00:00.000Z"),
            ("A", "2026-11-23T10:01:00.000Z"),
            ("B", "2026-11-23T10:00:00.000Z")
        ]
    );
    let a = &rows[0];
    assert_eq!(
        (a.records, a.deducts_applied, a.units_taken, a.net_taken),
        (5, 2, 3, 3)
    );
    assert_eq!(
        (
            a.restocks_applied,
            a.restock_delta,
            a.rejected_insufficient,
            a.duplicates
        ),
        (1, 3, 1, 1)
    );
    assert_eq!(a.lowest_available, Some(0));
    assert_eq!(a.sold_out_at.as_deref(), Some("2026-11-23T10:00:00.002Z"));
    let a2 = &rows[1];
    assert_eq!(
        (
            a2.rollbacks_applied,
            a2.units_returned,
            a2.net_taken,
            a2.invalid
        ),
        (1, 2, -2, 1)
    );
    assert_eq!(
        (a2.lowest_available, a2.sold_out_at.clone()),
        (Some(2), None)
    );
    // One SKU, one interval covering both minutes.
    let a_only = query::report(
        &pool,
        &range("t", 3600, T0, T0 + 2 * minute, Some("A"), 100),
    )
    .await?;
    assert_eq!(a_only.len(), 1);
    assert_eq!((a_only[0].records, a_only[0].net_taken), (7, 1));
    assert!(matches!(
        query::report(&pool, &range("t", 0, T0, T0 + 1, None, 100)).await,
        Err(QueryError::Invalid { field: "every", .. })
    ));
    assert!(matches!(
        query::report(&pool, &range("t", 60, T0, T0 + 2 * minute, None, 2)).await,
        Err(QueryError::Invalid {
            field: "max_rows",
            ..
        })
    ));
    Ok(())
}

#[sqlx::test(migrator = "stockledger_archiver::MIGRATOR")]
async fn an_export_writes_the_range_to_a_new_csv_or_parquet_file_and_never_overwrites(
    pool: PgPool,
) -> anyhow::Result<()> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use stockledger_analysts::export::{export, ExportError, Format};

    // 70,000 rows a millisecond apart; every third without an order.
    sqlx::query("SELECT ledger_entries_ensure_months(ARRAY[timestamptz 'epoch' + interval '1 millisecond' * $1])")
        .bind(T0)
        .execute(&pool)
        .await?;
    sqlx::query(
        "INSERT INTO ledger_entries (topic, partition, log_offset, sku, command, order_id,
             result, delta, available_after, total_after, occurred_at, rollback_reason)
         SELECT 't', 0, i, CASE WHEN i = 10 THEN E'A\\x1b[2J\\x07\\r' ELSE 'A' END, 'DEDUCT',
             CASE WHEN i % 3 = 0 THEN NULL ELSE 'o, \"quoted\"' END,
             'APPLIED', -1, 100000 - i, 100000,
             timestamptz 'epoch' + interval '1 millisecond' * ($1 + i), NULL
         FROM generate_series(0, 69999) AS i",
    )
    .bind(T0)
    .execute(&pool)
    .await?;
    let dir = std::env::temp_dir().join(format!("stockledger-export-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let csv_path = dir.join("range.csv");
    let parquet_path = dir.join("range.parquet");
    let _ = std::fs::remove_file(&csv_path);
    let _ = std::fs::remove_file(&parquet_path);

    // [T0 + 10, T0 + 66_010): 66,000 rows, more than one row group.
    let (since, until) = (T0 + 10, T0 + 66_010);
    let mut reported = Vec::new();
    assert_eq!(
        export(&pool, "t", since, until, Format::Csv, &csv_path, |n| {
            reported.push(n)
        })
        .await?,
        66_000
    );
    // Progress every 10,000 rows, and the count at the end, which the
    // count a progress display takes as its total agrees with.
    assert_eq!(reported.first(), Some(&10_000));
    assert_eq!(reported.last(), Some(&66_000));
    assert_eq!(
        stockledger_analysts::query::count_between(&pool, "t", since, until).await?,
        66_000
    );
    let mut reader = csv::Reader::from_path(&csv_path)?;
    assert_eq!(
        reader.headers()?.iter().collect::<Vec<_>>(),
        stockledger_analysts::export::COLUMNS
    );
    let records: Vec<csv::StringRecord> = reader.records().collect::<Result<_, _>>()?;
    assert_eq!(records.len(), 66_000);
    assert_eq!(&records[0][2], "10");
    assert_eq!(
        &records[0][5], "o, \"quoted\"",
        "a cell with a comma and quotes survives"
    );
    assert_eq!(&records[2][5], "", "NULL is an empty cell");
    assert_eq!(
        &records[0][3], "A\\u{1b}[2J\\u{7}\\r",
        "an invalid record's key is escaped, as history prints it"
    );
    assert_eq!(&records[0][16], "2026-11-23T10:00:00.010Z");

    assert_eq!(
        export(
            &pool,
            "t",
            since,
            until,
            Format::Parquet,
            &parquet_path,
            |_| {}
        )
        .await?,
        66_000
    );
    let file = SerializedFileReader::new(std::fs::File::open(&parquet_path)?)?;
    let meta = file.metadata();
    assert_eq!(meta.file_metadata().num_rows(), 66_000);
    assert_eq!(meta.num_row_groups(), 2);
    let first = file.get_row_iter(None)?.next().expect("a row")?;
    let text = first.to_string();
    assert!(text.contains("log_offset: 10"), "{text}");

    // An existing file is never overwritten, and left as it was.
    let before = std::fs::read(&csv_path)?;
    match export(&pool, "t", since, until, Format::Csv, &csv_path, |_| {}).await {
        Err(ExportError::Exists { .. }) => {}
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(std::fs::read(&csv_path)?, before);
    // No partial file is left beside them.
    let mut names: Vec<String> = std::fs::read_dir(&dir)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    names.sort();
    assert_eq!(names, ["range.csv", "range.parquet"]);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

#[sqlx::test(migrator = "stockledger_archiver::MIGRATOR")]
async fn hourly_totals_count_each_row_once_and_match_the_rows_themselves(
    pool: PgPool,
) -> anyhow::Result<()> {
    let hour = 3_600_000;
    let mut rows = Vec::new();
    for i in 0..60 {
        let (result, delta) = match i % 4 {
            0 => ("REJECTED_INSUFFICIENT", 0),
            1 => ("DUPLICATE", 0),
            _ => ("APPLIED", -1),
        };
        let sku = if i % 3 == 0 { "A" } else { "B" };
        rows.push(
            Row::new(i32::from(sku == "B"), i, sku, result)
                .stock("DEDUCT", delta, 100 - i)
                .at(T0 + i * 7 * 60_000),
        );
    }
    archive(&pool, &rows).await?;
    // Outcomes published twice collapse on the primary key and add nothing.
    sqlx::query(
        "INSERT INTO ledger_entries SELECT * FROM ledger_entries WHERE log_offset < 10
         ON CONFLICT DO NOTHING",
    )
    .execute(&pool)
    .await?;
    // Whole hours come from ledger_hourly; 30-minute intervals from the rows.
    let (since, until) = (T0, T0 + 8 * hour);
    let hourly = query::report(&pool, &range("t", 3600, since, until, None, 1000)).await?;
    let halves = query::report(&pool, &range("t", 1800, since, until, None, 1000)).await?;
    assert_eq!(hourly.iter().map(|r| r.records).sum::<i64>(), 60);
    for h in &hourly {
        let parts: Vec<_> = halves
            .iter()
            .filter(|r| r.sku == h.sku && r.bucket[..13] == h.bucket[..13])
            .collect();
        let sum = |f: fn(&query::ReportRow) -> i64| parts.iter().map(|r| f(r)).sum::<i64>();
        assert_eq!(sum(|r| r.records), h.records, "{h:?}");
        assert_eq!(sum(|r| r.units_taken), h.units_taken, "{h:?}");
        assert_eq!(sum(|r| r.rejected_insufficient), h.rejected_insufficient);
        assert_eq!(sum(|r| r.duplicates), h.duplicates);
        let lowest = parts.iter().filter_map(|r| r.lowest_available).min();
        assert_eq!(lowest, h.lowest_available, "{h:?}");
    }
    Ok(())
}

/// The range of a report on topic `topic`.
fn range<'a>(
    topic: &'a str,
    every_secs: i64,
    since_ms: i64,
    until_ms: i64,
    sku: Option<&'a str>,
    max_rows: i64,
) -> query::ReportRange<'a> {
    query::ReportRange {
        topic,
        every_secs,
        since_ms,
        until_ms,
        sku,
        max_rows,
    }
}
