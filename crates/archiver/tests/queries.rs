//! The archive's queries, each against a fresh database that
//! `sqlx::test` creates and migrates with the archiver's own migrations
//! (PostgreSQL from `DATABASE_URL`, as `deploy/local/test.sh` sets it).

use sqlx::PgPool;
use stockledger_archiver::query::{self, HistoryOf};

/// One archived row: (partition, offset, sku, order, result, available after).
type Row<'a> = (i32, i64, &'a str, Option<&'a str>, &'a str, i64);

async fn archive(pool: &PgPool, rows: &[Row<'_>]) -> sqlx::Result<()> {
    for (partition, offset, sku, order, result, available) in rows {
        sqlx::query(
            "INSERT INTO ledger_entries (topic, partition, log_offset, sku, command, order_id,
                 result, delta, available_after, total_after, occurred_at)
             VALUES ('t', $1, $2, $3, 'DEDUCT', $4, $5, 0, $6, 10, now())",
        )
        .bind(partition)
        .bind(offset)
        .bind(sku)
        .bind(order)
        .bind(result)
        .bind(available)
        .execute(pool)
        .await?;
    }
    Ok(())
}

#[sqlx::test(migrator = "stockledger_archiver::MIGRATOR")]
async fn the_lowest_stock_counts_only_records_decided_on_the_skus_partition(
    pool: PgPool,
) -> sqlx::Result<()> {
    archive(
        &pool,
        &[
            (0, 0, "S", Some("o1"), "APPLIED", 9),
            (0, 1, "S", Some("o2"), "APPLIED", 7),
            // Refusals carry zeros, not stock: they must not count as "stock 0".
            (1, 0, "S", Some("o3"), "MISROUTED", 0),
            (1, 1, "S", None, "INVALID", 0),
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
) -> sqlx::Result<()> {
    archive(
        &pool,
        &[
            (0, 2, "A", Some("o1"), "DUPLICATE", 8),
            (0, 0, "A", Some("o1"), "APPLIED", 9),
            (0, 1, "A", Some("o2"), "APPLIED", 8),
            (1, 0, "B", Some("o1"), "APPLIED", 4),
        ],
    )
    .await?;
    let of_a = query::history(&pool, "t", &HistoryOf::Sku("A".into()), 100).await?;
    let offsets: Vec<i64> = of_a.iter().map(|e| e.log_offset).collect();
    assert_eq!(offsets, [0, 1, 2]);
    let first_two = query::history(&pool, "t", &HistoryOf::Sku("A".into()), 2).await?;
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
async fn history_pages_follow_their_cursor_to_the_end_without_gaps_or_repeats(
    pool: PgPool,
) -> sqlx::Result<()> {
    let mut rows = Vec::new();
    for offset in 0..7 {
        rows.push((0, offset, "A", Some("o1"), "APPLIED", 10 - offset));
        rows.push((1, offset, "B", Some("o1"), "APPLIED", 10 - offset));
    }
    archive(&pool, &rows).await?;
    for (of, expected) in [
        (HistoryOf::Sku("A".into()), 7),
        (
            HistoryOf::Order {
                order_id: "o1".into(),
                sku: None,
            },
            14,
        ),
    ] {
        let mut seen = Vec::new();
        let mut after: Option<query::Cursor> = None;
        loop {
            let page = query::history_page(&pool, "t", &of, after.as_ref(), 3).await?;
            assert!(page.entries.len() <= 3);
            seen.extend(page.entries.iter().map(|e| (e.sku.clone(), e.log_offset)));
            match page.next {
                // The cursor survives its text form, as HTTP and CLI pass it.
                Some(next) => after = Some(next.to_string().parse().expect("a cursor")),
                None => break,
            }
        }
        let mut sorted = seen.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(seen, sorted, "{of:?}: in order, no repeats");
        assert_eq!(seen.len(), expected, "{of:?}: every entry once");
    }
    // "Everything" as a limit reads everything (the demo asks so).
    let all = query::history_page(&pool, "t", &HistoryOf::Sku("A".into()), None, i64::MAX).await?;
    assert_eq!((all.entries.len(), all.next), (7, None));
    assert!("x:1:A".parse::<query::Cursor>().is_err());
    assert!("1:2:".parse::<query::Cursor>().is_err());
    Ok(())
}
