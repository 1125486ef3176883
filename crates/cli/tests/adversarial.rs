//! An adversarial corpus against the real services on 127.0.0.1: records
//! a producer with the rights to write the command topic can send at and
//! just over every limit (the broker's record size, the ledger's key and
//! value sizes, every instant and number at the edges of its type, random
//! bytes). After each, the next valid record is decided and archived, the
//! applier and the archiver are still running, and the SKU the record
//! named has the stock it had; then the readers of the topics and the
//! archive (`dlq`, `history`, export) read what they left.

mod common;

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use sha2::{Digest, Sha256};
use sqlx::PgPool;
use stockledger_core::codec::{self, MAX_PAYLOAD_LEN};
use stockledger_core::ids::MAX_TIMESTAMP_MS;
use stockledger_core::{LogPosition, Outcome};
use stockledger_kafka::admin::DEFAULT_MAX_MESSAGE_BYTES;
use stockledger_kafka::names::{
    DLQ_REASON_HEADER, DLQ_SOURCE_HEADER, DLQ_VALUE_LENGTH_HEADER, DLQ_VALUE_SHA256_HEADER,
};
use stockledger_testkit::harness::CATCH_UP;
use stockledger_testkit::{ids, poison, wait_until, Harness};

/// The SKU every adversarial record names, and the one valid records go to.
const TARGET: &str = "ADV-TARGET";
const NEXT: &str = "ADV-NEXT";

/// One record of the corpus, and the answer it gets: its result and how
/// its reason begins (`INVALID` and dead-lettered unless told).
struct Case {
    name: String,
    key: String,
    payload: Vec<u8>,
    headers: Vec<(String, Vec<u8>)>,
    answer: (&'static str, &'static str),
}

fn case(name: impl Into<String>, key: impl Into<String>, payload: Vec<u8>) -> Case {
    Case {
        name: name.into(),
        key: key.into(),
        payload,
        headers: Vec::new(),
        answer: ("INVALID", ""),
    }
}

impl Case {
    /// Read as a command and answered by a rule, not dead-lettered.
    fn answered(self, result: &'static str, reason: &'static str) -> Self {
        Self {
            answer: (result, reason),
            ..self
        }
    }
}

/// The largest value the broker takes with a short key: a batch of one
/// record, less its framing.
fn at_limit() -> usize {
    DEFAULT_MAX_MESSAGE_BYTES - 256
}

/// The corpus: sizes, instants, numbers, random bytes.
fn corpus() -> anyhow::Result<Vec<Case>> {
    let mut rng = StdRng::seed_from_u64(74);
    let mut random = |len: usize| -> Vec<u8> { (0..len).map(|_| rng.random()).collect() };
    let mut cases = vec![
        case(
            "a random blob of 1,000,100 bytes",
            TARGET,
            random(1_000_100),
        ),
        case("a value at the broker's limit", TARGET, random(at_limit())),
        case(
            "a value one byte over the ledger's",
            TARGET,
            random(MAX_PAYLOAD_LEN + 1),
        ),
        case("an empty value", TARGET, Vec::new()),
        case("one random byte", TARGET, random(1)),
        case(
            "a key of 1,048,000 bytes",
            "k".repeat(1_048_000),
            random(64),
        ),
        case("a key of 129 bytes", "k".repeat(129), random(64)),
    ];
    // Taken by the broker, but with the ledger's reason and source too
    // large to copy whole.
    let mut heavy = case("headers of 1,048,000 bytes", TARGET, random(64));
    heavy.headers.push(("heavy".into(), random(1_048_000)));
    cases.push(heavy);
    for occurred_at in [
        i64::MIN,
        -300_000_000_000_000,
        -1,
        MAX_TIMESTAMP_MS + 1,
        9_300_000_000_000_000,
        i64::MAX,
    ] {
        cases.push(case(
            format!("occurred_at {occurred_at}"),
            TARGET,
            poison::deduct_at(TARGET, "adv-order", 1, occurred_at, None, None)?,
        ));
    }
    for expires_at in [i64::MIN, -1, MAX_TIMESTAMP_MS + 1, i64::MAX] {
        cases.push(case(
            format!("expires_at {expires_at}"),
            TARGET,
            poison::deduct_at(
                TARGET,
                "adv-hold",
                1,
                1_700_000_000_000,
                Some(expires_at),
                None,
            )?,
        ));
    }
    for (opens_at, closes_at) in [
        (Some(i64::MIN), None),
        (Some(-1), None),
        (None, Some(MAX_TIMESTAMP_MS + 1)),
        (None, Some(i64::MAX)),
    ] {
        cases.push(case(
            format!("a window from {opens_at:?} to {closes_at:?}"),
            TARGET,
            poison::window_at(TARGET, "adv-window", opens_at, closes_at)?,
        ));
    }
    let closes_when_it_opens = Some(1_800_000_000_000);
    cases.push(
        case(
            "a window that closes when it opens",
            TARGET,
            poison::window_at(
                TARGET,
                "adv-window",
                closes_when_it_opens,
                closes_when_it_opens,
            )?,
        )
        .answered("REJECTED_VALUE", "closes_at: "),
    );
    for quantity in [i64::MIN, -1, 0, 1_000_000_001, i64::MAX] {
        cases.push(
            case(
                format!("quantity {quantity}"),
                TARGET,
                poison::deduct_with(TARGET, "adv-qty", quantity)?,
            )
            .answered("REJECTED_VALUE", "quantity: "),
        );
    }
    // Basket lines no basket could settle: sold at once, or of another
    // order than the basket.
    let now = stockledger_runtime::clock::now_ms();
    for (name, order, deadline, reason) in [
        (
            "a basket line without a deadline",
            "cart-1",
            None,
            "expires_at: a line of basket cart-1 is a hold",
        ),
        (
            "a basket line of another order",
            "order-1",
            Some(now + 60_000),
            "order_id: order-1 is not the basket's id cart-1",
        ),
    ] {
        cases.push(
            case(
                name,
                TARGET,
                poison::deduct_at(TARGET, order, 1, now, deadline, Some("cart-1"))?,
            )
            .answered("REJECTED_VALUE", reason),
        );
    }
    // Read, and refused by the restock rule: quantities outside what
    // their mode takes.
    for (mode, quantity) in [
        ("SET", -1),
        ("SET", 1_000_000_000_000_001),
        ("ADD", -1_000_000_000_000_001),
        ("ADD", 0),
    ] {
        cases.push(
            case(
                format!("a restock {mode} {quantity}"),
                TARGET,
                poison::restock_with(TARGET, &format!("adv-{mode}{quantity}"), mode, quantity)?,
            )
            .answered("REJECTED_RESTOCK", "quantity: "),
        );
    }
    // Valid, and refused by the rules: more than the SKU has.
    cases.push(
        case(
            "quantity 10^9, more than there is",
            TARGET,
            poison::deduct_with(TARGET, "adv-most", 1_000_000_000)?,
        )
        .answered("REJECTED_INSUFFICIENT", ""),
    );
    Ok(cases)
}

/// Waits until the archive holds the row of `position`.
async fn archived(pool: &PgPool, position: &LogPosition) -> anyhow::Result<()> {
    wait_until(&format!("the row of {position}"), CATCH_UP, || async {
        let found: Option<i64> = sqlx::query_scalar(
            "SELECT log_offset FROM ledger_entries WHERE topic = $1 AND partition = $2 AND log_offset = $3",
        )
        .bind(&position.topic)
        .bind(position.partition)
        .bind(position.offset)
        .fetch_optional(pool)
        .await?;
        Ok(found.map(|_| ()))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_record_a_producer_can_write_stops_the_applier_or_the_archiver() -> anyhow::Result<()> {
    let h = Harness::new("adversarial", 2).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    let sku = ids::sku(TARGET);
    let restocked = h
        .ledger
        .restock(
            &sku,
            &ids::adjustment("adv-stock"),
            stockledger_core::RestockMode::Set,
            100,
        )
        .await?;
    archived(&h.pool, &restocked.position).await?;
    let stock = |h: &Harness| {
        let projection = h.projection.clone();
        async move {
            let stock = projection.stock(&[TARGET]).await?;
            let stock = stock[0].expect("the SKU was restocked");
            anyhow::Ok((stock.available, stock.total))
        }
    };
    let before = stock(&h).await?;
    let mut answered = Vec::new();
    for (i, case) in corpus()?.into_iter().enumerate() {
        let headers: Vec<(&str, &[u8])> = case
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_slice()))
            .collect();
        let (partition, offset) = h
            .send_raw_with(None, &case.key, &case.payload, &headers)
            .await?;
        let next = h
            .ledger
            .deduct(
                &ids::sku(NEXT),
                &ids::order(format!("next-{i}")),
                ids::qty(1),
                None,
            )
            .await?;
        let waited = tokio::time::timeout(Duration::from_secs(60), async {
            archived(&h.pool, &next.position).await?;
            let position = LogPosition {
                topic: h.ns.topic.clone(),
                partition,
                offset,
            };
            archived(&h.pool, &position).await?;
            anyhow::Ok(position)
        })
        .await;
        assert!(!applier.is_finished(), "{}: the applier stopped", case.name);
        assert!(
            !archiver.is_finished(),
            "{}: the archiver stopped",
            case.name
        );
        let position =
            waited.map_err(|_| anyhow::anyhow!("{}: not archived in 60 s", case.name))??;
        {
            // The answer each case gets: a rule's, naming the field, or
            // INVALID for what cannot be read.
            let (result, reason): (String, Option<String>) = sqlx::query_as(
                "SELECT result, reason FROM ledger_entries WHERE topic = $1 AND partition = $2 AND log_offset = $3",
            )
            .bind(&position.topic)
            .bind(position.partition)
            .bind(position.offset)
            .fetch_one(&h.pool)
            .await?;
            let (expected, begins) = case.answer;
            assert_eq!(result, expected, "{}", case.name);
            let reason = reason.unwrap_or_default();
            assert!(reason.starts_with(begins), "{}: {reason}", case.name);
            answered.push((position, expected != "INVALID"));
        }
        assert_eq!(stock(&h).await?, before, "{}: the stock changed", case.name);
    }
    // Nothing dead-lettered was cut but what did not fit (the blob of
    // 1,000,100 bytes fits whole); what was cut names its place in the
    // log, its length and its hash.
    let dead = h.read(&h.ns.dlq_topic).await?;
    let reasons: Vec<String> = dead
        .iter()
        .filter_map(|r| r.header(DLQ_REASON_HEADER))
        .collect();
    // What cannot be read is dead-lettered; a record read as a command is
    // answered, not dead-lettered.
    let sources: Vec<String> = dead
        .iter()
        .filter_map(|r| r.header(DLQ_SOURCE_HEADER))
        .collect();
    for (position, read) in &answered {
        assert_eq!(
            sources.contains(&position.to_string()),
            !read,
            "{position}: dead-lettered only when it cannot be read"
        );
    }
    let named = "invalid occurred_at: 9223372036854775807 is not between 0";
    assert!(
        reasons.iter().any(|r| r.starts_with(named)),
        "{named}: {reasons:?}"
    );
    let digests: Vec<_> = dead
        .iter()
        .filter(|r| r.header(DLQ_VALUE_SHA256_HEADER).is_some())
        .collect();
    let lengths: Vec<_> = digests
        .iter()
        .map(|r| r.header(DLQ_VALUE_LENGTH_HEADER))
        .collect();
    assert_eq!(
        lengths,
        [
            Some(at_limit().to_string()),
            Some("64".into()),
            Some("64".into())
        ],
        "the value at the limit, the key and the headers"
    );
    let log = h.read(&h.ns.topic).await?;
    for letter in digests {
        assert_eq!(letter.payload, None);
        assert!(letter.key.as_ref().is_some_and(|k| k.len() <= 128));
        let source = letter.header(DLQ_SOURCE_HEADER).expect("a source");
        let original = log
            .iter()
            .find(|r| format!("{}/{}@{}", h.ns.topic, r.partition, r.offset) == source)
            .expect("the original is in the log");
        let value = original.payload.clone().unwrap_or_default();
        assert_eq!(
            letter.header(DLQ_VALUE_LENGTH_HEADER),
            Some(value.len().to_string())
        );
        assert_eq!(
            letter.header(DLQ_VALUE_SHA256_HEADER),
            Some(hex::encode(Sha256::digest(&value)))
        );
    }
    // A record not decided on the stock says nothing of it: no figures.
    let (garbage, with_figures): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(available_after) + count(total_after) FROM ledger_entries
         WHERE topic = $1 AND result = 'INVALID'",
    )
    .bind(&h.ns.topic)
    .fetch_one(&h.pool)
    .await?;
    assert!(garbage > 20, "{garbage} INVALID rows");
    assert_eq!(with_figures, 0, "INVALID rows with stock figures");
    h.assert_contract().await?;
    readers_read_what_the_corpus_left(&h)?;
    applier.stop().await?;
    archiver.stop().await?;
    Ok(())
}

/// `dlq list` and `dlq redrive --dry-run` read every dead letter, a digest
/// among them; `history` and `export` read every archived row.
fn readers_read_what_the_corpus_left(h: &Harness) -> anyhow::Result<()> {
    let run = |args: &[&str]| -> anyhow::Result<(Option<i32>, String)> {
        let out = common::stockledger(h).args(args).output()?;
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        let errors = String::from_utf8_lossy(&out.stderr);
        anyhow::ensure!(!errors.contains("panicked"), "{args:?}: {errors}");
        Ok((out.status.code(), said))
    };
    let (code, listed) = run(&["dlq", "list", "--limit", "100", "--format", "json"])?;
    assert_eq!(code, Some(0), "{listed}");
    assert!(listed.lines().count() >= 20, "{listed}");
    let (code, judged) = run(&["dlq", "redrive", "--all", "--dry-run", "--format", "json"])?;
    assert_eq!(code, Some(65), "nothing of it is a command now: {judged}");
    assert!(
        judged.contains("keeps only the value's length (1048332 bytes) and SHA-256"),
        "{judged}"
    );
    let (code, history) = run(&[
        "history", "--sku", TARGET, "--limit", "1000", "--format", "json",
    ])?;
    assert_eq!(code, Some(0), "{history}");
    assert!(history.contains("INVALID"), "{history}");
    let file = std::env::temp_dir().join(format!("{}-export.csv", h.ns.id));
    let file = file.to_string_lossy().into_owned();
    let (code, said) = run(&[
        "export",
        "--since",
        "1970-01-01T00:00:00Z",
        "--format",
        "csv",
        "--out",
        &file,
    ])?;
    assert_eq!(code, Some(0), "{said}");
    let _ = std::fs::remove_file(&file);
    Ok(())
}

/// An outcome written to the outcomes topic by another producer: stamped
/// in `occurred_at`.
fn outcome_at(h: &Harness, offset: i64, occurred_at: i64) -> anyhow::Result<Vec<u8>> {
    let position = LogPosition {
        topic: h.ns.topic.clone(),
        partition: 0,
        offset: 1_000_000 + offset,
    };
    let mut outcome = Outcome::invalid(position, TARGET, "written by hand".into(), 0);
    outcome.occurred_at = occurred_at;
    Ok(codec::encode_outcome(&outcome)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_archive_makes_tables_only_for_months_it_bounds_and_skips_what_it_cannot_hold(
) -> anyhow::Result<()> {
    let h = Harness::new("archive-months", 1).await?;
    let archiver = h.start_archiver();
    // Year 3000 and 1971: archived, in the one table beside the months.
    let year_3000 = 32_503_680_000_000;
    let year_1971 = 31_536_000_000;
    // Beyond what PostgreSQL holds: left out, logged, and the archiver
    // goes on.
    let beyond = [i64::MIN, i64::MAX, 9_300_000_000_000_000];
    let mut offset = 0;
    for at in [year_3000, year_1971].into_iter().chain(beyond) {
        h.send_raw_outcome(TARGET, &outcome_at(&h, offset, at)?)
            .await?;
        offset += 1;
    }
    let last = LogPosition {
        topic: h.ns.topic.clone(),
        partition: 0,
        offset: 1_000_000 + offset,
    };
    h.send_raw_outcome(TARGET, &outcome_at(&h, offset, 1_700_000_000_000)?)
        .await?;
    archived(&h.pool, &last).await?;
    assert!(!archiver.is_finished());
    let tables: Vec<(String, i64)> = sqlx::query_as(
        "SELECT tableoid::regclass::text, count(*) FROM ledger_entries WHERE topic = $1 GROUP BY 1 ORDER BY 1",
    )
    .bind(&h.ns.topic)
    .fetch_all(&h.pool)
    .await?;
    assert_eq!(
        tables,
        [
            ("ledger_entries_2023_11".to_owned(), 1),
            ("ledger_entries_other_months".to_owned(), 2)
        ]
    );
    let made: Option<String> =
        sqlx::query_scalar("SELECT to_regclass('ledger_entries_3000_01')::text")
            .fetch_one(&h.pool)
            .await?;
    assert_eq!(made, None, "no table for year 3000");
    archiver.stop().await?;
    Ok(())
}
