//! What reaches the command topic from producers that are not ours: bad
//! frames, records on the wrong partition, and a log that mixes schema
//! versions, against real services.

use std::collections::BTreeMap;
use std::future::pending;

use stockledger_analysts::query::{self, HistoryOf};
use stockledger_client::RedisDecisions;
use stockledger_core::codec;
use stockledger_core::partition::home_partition;
use stockledger_core::schema::{self, Subject};
use stockledger_core::{
    Command, CommandBody, CommandId, Deduct, OrderId, Quantity, RestockMode, Sku,
};
use stockledger_kafka::names::{DLQ_REASON_HEADER, DLQ_SOURCE_HEADER};
use stockledger_kafka::topic::LogRecord;
use stockledger_maintenance::reconcile::reconcile;
use stockledger_maintenance::replay::replay;
use stockledger_testkit::harness::CATCH_UP;
use stockledger_testkit::ids;
use stockledger_testkit::redis_dump::{delete_prefix, dump_prefix};
use stockledger_testkit::{wait_until, Harness};

fn deduct(sku: &str, order: &str, quantity: i64) -> Command {
    Command {
        command_id: CommandId::new(format!("c-{sku}-{order}")).unwrap_or_else(|e| panic!("{e}")),
        sku: Sku::new(sku).unwrap_or_else(|e| panic!("{e}")),
        occurred_at: 1_700_000_000_000,
        body: CommandBody::Deduct(Deduct::new(
            OrderId::new(order).unwrap_or_else(|e| panic!("{e}")),
            Quantity::new(quantity).unwrap_or_else(|e| panic!("{e}")),
        )),
    }
}

/// `payload` with its single-object fingerprint replaced.
fn reframed(payload: &[u8], fingerprint: u64) -> Vec<u8> {
    let mut bytes = payload.to_vec();
    bytes[2..10].copy_from_slice(&fingerprint.to_le_bytes());
    bytes
}

/// The `stockledger.reason` and `stockledger.source` headers of each dead letter.
fn reasons(dead: &[LogRecord]) -> Vec<(String, String)> {
    let header = |r: &LogRecord, name: &str| {
        r.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_default()
    };
    dead.iter()
        .map(|r| (header(r, DLQ_REASON_HEADER), header(r, DLQ_SOURCE_HEADER)))
        .collect()
}

/// The archived results of `sku`'s records, by (partition, offset).
async fn results_by_position(
    h: &Harness,
    sku: &str,
) -> anyhow::Result<BTreeMap<(i32, i64), String>> {
    let rows = query::history(&h.pool, &h.ns.topic, &HistoryOf::Sku(sku.into()), 10_000).await?;
    Ok(rows
        .into_iter()
        .map(|r| ((r.partition, r.log_offset), r.result))
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_bad_record_is_dead_lettered_with_what_is_wrong_and_nothing_after_it_waits(
) -> anyhow::Result<()> {
    let h = Harness::new("bad-frames", 1).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    h.ledger
        .restock(
            &ids::sku("SKU-B"),
            &ids::adjustment("a"),
            RestockMode::Set,
            5,
        )
        .await?;
    let good = codec::encode_command(&deduct("SKU-B", "o-1", 1))?;

    // A known fingerprint, then bytes that are no datum of that schema (a
    // string length pointing past the end).
    let mut not_the_schema = good[..10].to_vec();
    not_the_schema.extend_from_slice(&[0x7f, b'x']);
    let mut trailing = good.clone();
    trailing.extend_from_slice(b"!!");
    let unknown = reframed(&good, 0x0123_4567_89ab_cdef);
    let writer = format!(
        "Command.v{}",
        stockledger_core::schema::current(stockledger_core::schema::Subject::Command).version
    );
    let malformed = format!("malformed Avro datum for writer schema {writer}");
    let trailed = format!("2 trailing bytes after the Avro datum of writer schema {writer}");
    let bad: [(&str, Vec<u8>, &str); 5] = [
        ("SKU-B", not_the_schema, &malformed),
        ("SKU-B", trailing, &trailed),
        (
            "",
            good.clone(),
            "record key is empty; it must be the sku \"SKU-B\"",
        ),
        (
            "SKU-X",
            good.clone(),
            "record key \"SKU-X\" does not match the command's sku \"SKU-B\"",
        ),
        (
            "SKU-B",
            unknown,
            "unknown writer schema fingerprint 0123456789abcdef",
        ),
    ];
    let mut offsets = Vec::new();
    for (key, payload, _) in &bad {
        offsets.push(h.send_raw(key, payload).await?.1);
    }
    let after = h
        .ledger
        .deduct(
            &ids::sku("SKU-B"),
            &ids::order("after-the-bad-ones"),
            ids::qty(2),
            None,
        )
        .await?;
    h.wait_for_archive(7).await?;

    let dead = h.read(&h.ns.dlq_topic).await?;
    let got = reasons(&dead);
    assert_eq!(got.len(), bad.len(), "{got:#?}");
    for ((reason, source), ((_, _, expected), offset)) in got.iter().zip(bad.iter().zip(&offsets)) {
        assert!(
            reason.starts_with(expected),
            "{reason:?} should start with {expected:?}"
        );
        assert_eq!(source, &format!("{}/0@{offset}", h.ns.topic));
    }
    // Each dead letter keeps the original bytes.
    for (record, (_, payload, _)) in dead.iter().zip(&bad) {
        assert_eq!(record.payload.as_deref(), Some(&payload[..]));
    }
    let reader = RedisDecisions::connect(&h.redis_url, &h.ns.prefix).await?;
    let decided = reader.wait(&after, CATCH_UP).await?;
    assert_eq!((decided.result.as_str(), decided.available), ("APPLIED", 3));
    h.assert_contract().await?;
    applier.stop().await?;
    archiver.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_on_the_wrong_partition_is_misrouted_not_compared_with_that_partitions_offsets(
) -> anyhow::Result<()> {
    let h = Harness::new("misrouted", 2).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    let home = home_partition(b"SKU-M", 2);
    let away = 1 - home;
    // A SKU that lives on the other partition, to give it offsets too.
    let neighbour = (0..)
        .map(|i| format!("N{i}"))
        .find(|s| home_partition(s.as_bytes(), 2) == away)
        .unwrap_or_default();
    h.ledger
        .restock(
            &ids::sku("SKU-M"),
            &ids::adjustment("a"),
            RestockMode::Set,
            5,
        )
        .await?;
    h.ledger
        .restock(
            &ids::sku(&neighbour),
            &ids::adjustment("a"),
            RestockMode::Set,
            5,
        )
        .await?;
    let first = h
        .ledger
        .deduct(&ids::sku("SKU-M"), &ids::order("o-1"), ids::qty(1), None)
        .await?;
    assert_eq!(
        first.position.partition, home,
        "the library routes by murmur2"
    );

    // As a producer with another partitioner would: SKU-M on `away`, at an
    // offset SKU-M's own partition has already used.
    let payload = codec::encode_command(&deduct("SKU-M", "o-2", 1))?;
    let own = ("origin", &b"other-partitioner"[..]);
    let (partition, offset) = h
        .send_raw_with(Some(away), "SKU-M", &payload, &[own])
        .await?;
    assert_eq!(partition, away);
    let later = h
        .ledger
        .deduct(&ids::sku(&neighbour), &ids::order("o-1"), ids::qty(1), None)
        .await?;
    assert_eq!(later.position.partition, away);
    h.wait_for_archive(5).await?;

    let results = results_by_position(&h, "SKU-M").await?;
    assert_eq!(
        results.values().filter(|r| *r == "MISROUTED").count(),
        1,
        "{results:?}"
    );
    let dead = h.read(&h.ns.dlq_topic).await?;
    assert_eq!(
        reasons(&dead),
        vec![(
            format!(
                "record is on partition {away} but the sku lives on partition {home} \
                 (produce with the murmur2 partitioner)"
            ),
            format!("{}/{away}@{offset}", h.ns.topic)
        )]
    );
    // Dead-lettered whole: its key, its value and its own headers.
    assert_eq!(dead[0].key.as_deref(), Some(&b"SKU-M"[..]));
    assert_eq!(dead[0].payload.as_deref(), Some(&payload[..]));
    assert_eq!(
        dead[0].header("origin").as_deref(),
        Some("other-partitioner")
    );
    let state = h
        .projection
        .read_sku("SKU-M")
        .await?
        .expect("SKU-M has state");
    assert_eq!((state.available, state.partition), (4, Some(home)));
    assert!(!state.orders.contains_key("o-2"));
    let reader = RedisDecisions::connect(&h.redis_url, &h.ns.prefix).await?;
    let mut misrouted = first.clone();
    misrouted.position.partition = away;
    misrouted.position.offset = offset;
    assert_eq!(
        reader.wait(&misrouted, CATCH_UP).await?.result.as_str(),
        "MISROUTED"
    );
    assert_eq!(
        reader.wait(&later, CATCH_UP).await?.result.as_str(),
        "APPLIED"
    );
    h.assert_contract().await?;
    // The misrouted record sits at the offset SKU-M's state was last changed
    // at, on the other partition: reconcile must compare with the right row.
    assert_eq!(Some(offset), state.last_offset);
    let redis = h.projection.connection();
    let report = reconcile(&redis, &h.ns.prefix, &h.pool, &h.ns.topic, 10, |_| {}).await?;
    assert!(report.differences.is_empty(), "{:?}", report.differences);
    applier.stop().await?;
    archiver.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_written_by_the_previous_release_and_this_one_replays_to_the_same_state(
) -> anyhow::Result<()> {
    let h = Harness::new("mixed-versions", 2).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    let v1 = schema::versions(Subject::Command)
        .next()
        .expect("a first command version");
    let legacy = v1
        .legacy_fingerprint
        .expect("v1 was released with another fingerprint");
    // Newer records first, then older ones after them, on every SKU.
    let skus = ["V0", "V1", "V2", "V3"];
    let mut records = 0;
    for sku in skus {
        h.ledger
            .restock(&ids::sku(sku), &ids::adjustment("a"), RestockMode::Set, 10)
            .await?;
        h.ledger
            .deduct(&ids::sku(sku), &ids::order("new-1"), ids::qty(2), None)
            .await?;
        records += 2;
    }
    for sku in skus {
        for (order, quantity) in [("old-1", 3), ("new-1", 1)] {
            let payload = codec::encode_command_as(&deduct(sku, order, quantity), v1, legacy)?;
            h.send_raw(sku, &payload).await?;
            records += 1;
        }
    }
    h.wait_for_archive(records).await?;
    for sku in skus {
        let results: Vec<String> = results_by_position(&h, sku).await?.into_values().collect();
        assert_eq!(
            results,
            ["APPLIED", "APPLIED", "APPLIED", "DUPLICATE"],
            "{sku}"
        );
    }
    assert!(h.read(&h.ns.dlq_topic).await?.is_empty());

    // Outcomes of the older version (v1, under both its fingerprints) read
    // back too: the archiver takes them (the rows exist, so nothing changes)
    // and moves past them.
    let outcomes = h.read(&h.ns.outcomes_topic).await?;
    let v1_outcome = schema::versions(Subject::Outcome)
        .next()
        .expect("Outcome v1");
    for (record, fingerprint) in outcomes
        .iter()
        .zip(
            [
                v1_outcome.fingerprint,
                v1_outcome.legacy_fingerprint.unwrap_or_default(),
            ]
            .iter()
            .cycle(),
        )
        .take(4)
    {
        let payload = record.payload.as_deref().unwrap_or_default();
        // As the previous release wrote it: v1's fields only.
        let old =
            codec::encode_outcome_as(&codec::decode_outcome(payload)?, v1_outcome, *fingerprint)?;
        let key = String::from_utf8_lossy(record.key.as_deref().unwrap_or_default()).into_owned();
        let producer: rdkafka::producer::FutureProducer = h.kafka.client_config(&[]).create()?;
        producer
            .send(
                rdkafka::producer::FutureRecord::to(&h.ns.outcomes_topic)
                    .partition(record.partition)
                    .key(&key)
                    .payload(&old),
                CATCH_UP,
            )
            .await
            .map_err(|(e, _)| e)?;
    }
    let total = outcomes.len() as i64 + 4;
    wait_until(
        "the archiver to pass the older outcomes",
        CATCH_UP,
        || async { Ok((h.archiver_progress().await? == total).then_some(())) },
    )
    .await?;
    h.assert_contract().await?;
    applier.stop().await?;
    archiver.stop().await?;

    let redis = h.projection.connection();
    let before = dump_prefix(&redis, &h.ns.prefix).await?;
    delete_prefix(&redis, &h.ns.prefix).await?;
    replay(h.replay_swap_config(true), pending(), |_| {}).await?;
    assert_eq!(dump_prefix(&redis, &h.ns.prefix).await?, before);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producers_traceparent_reaches_the_outcome_and_the_archive_row_and_a_bad_one_does_not(
) -> anyhow::Result<()> {
    use stockledger_client::ProducerError;

    let h = Harness::new("traceparent", 1).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    let traced = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let body = |order: &str| {
        CommandBody::Deduct(Deduct::new(
            OrderId::new(order).unwrap_or_else(|e| panic!("{e}")),
            Quantity::new(1).unwrap_or_else(|e| panic!("{e}")),
        ))
    };
    h.ledger
        .restock(&ids::sku("T-1"), &ids::adjustment("a"), RestockMode::Set, 5)
        .await?;
    let sent = h
        .ledger
        .producer()
        .send_traced(Sku::new("T-1")?, body("o-1"), traced, false)
        .await?;
    // A traceparent no tracer would accept is not carried (upper-case hex).
    let payload = codec::encode_command(&deduct("T-1", "o-2", 1))?;
    h.send_raw_with(
        None,
        "T-1",
        &payload,
        &[("traceparent", traced.to_uppercase().as_bytes())],
    )
    .await?;
    // The library refuses one, naming the field, and sends nothing.
    let refused = h
        .ledger
        .producer()
        .send_traced(Sku::new("T-1")?, body("o-3"), "00-abc", false)
        .await;
    assert!(
        matches!(&refused, Err(ProducerError::Invalid(e)) if e.field == "traceparent"),
        "{refused:?}"
    );
    h.wait_for_archive(3).await?;

    let outcomes = h.read(&h.ns.outcomes_topic).await?;
    let carried: Vec<(i64, Option<String>)> = outcomes
        .iter()
        .map(|r| {
            let outcome = codec::decode_outcome(r.payload.as_deref().unwrap_or_default())
                .unwrap_or_else(|e| panic!("{e}"));
            let header = r
                .headers
                .iter()
                .find(|(k, _)| k == "traceparent")
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned());
            (outcome.position.offset, header)
        })
        .collect();
    assert_eq!(
        carried,
        vec![
            (0, None),
            (sent.position.offset, Some(traced.to_owned())),
            (2, None)
        ]
    );
    let archived: Vec<(i64, Option<String>)> = sqlx::query_as(
        "SELECT log_offset, traceparent FROM ledger_entries WHERE topic = $1 ORDER BY log_offset",
    )
    .bind(&h.ns.topic)
    .fetch_all(&h.pool)
    .await?;
    assert_eq!(archived, carried);
    let history = query::history(
        &h.pool,
        &h.ns.topic,
        &HistoryOf::Order {
            order_id: "o-1".into(),
            sku: None,
        },
        10,
    )
    .await?;
    assert_eq!(
        history.first().and_then(|e| e.traceparent.as_deref()),
        Some(traced)
    );
    applier.stop().await?;
    archiver.stop().await?;
    Ok(())
}

/// Two records that once got in: a deduct one byte short (its `location`
/// union index missing), which took a unit of stock, and a rollback whose
/// reason holds a NUL, which PostgreSQL cannot store, so the archive
/// stopped at it for good. Both are now dead-lettered, nothing applied;
/// and an outcome with a NUL, as an older release could have written it,
/// is archived escaped while the archive goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_one_byte_short_or_with_a_nul_is_dead_lettered_and_the_archive_goes_on(
) -> anyhow::Result<()> {
    let h = Harness::new("strict-wire", 1).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    h.ledger
        .restock(
            &ids::sku("SKU-T"),
            &ids::adjustment("a"),
            RestockMode::Set,
            5,
        )
        .await?;
    let whole = codec::encode_command(&deduct("SKU-T", "o2", 1))?;
    let short = &whole[..whole.len() - 1];
    let nul = codec::encode_command(&Command {
        body: CommandBody::Rollback(stockledger_core::Rollback {
            order_id: OrderId::new("o-nul")?,
            reason: Some("a\0b".into()),
        }),
        ..deduct("SKU-T", "o-nul", 1)
    })?;
    h.send_raw("SKU-T", short).await?;
    h.send_raw("SKU-T", &nul).await?;
    let after = h
        .ledger
        .deduct(&ids::sku("SKU-T"), &ids::order("after"), ids::qty(1), None)
        .await?;
    h.wait_for_archive(4).await?;

    let writer = format!("Command.v{}", schema::current(Subject::Command).version);
    let got: Vec<String> = reasons(&h.read(&h.ns.dlq_topic).await?)
        .into_iter()
        .map(|(reason, _)| reason)
        .collect();
    assert_eq!(
        got,
        [
            format!(
                "the payload ends before the Avro datum of writer schema {writer} does: \
                 body.Deduct.location needs at least 1 more byte(s)"
            ),
            "invalid reason: must not contain control characters (found '\\0')".to_owned(),
        ]
    );
    let reader = RedisDecisions::connect(&h.redis_url, &h.ns.prefix).await?;
    let decided = reader.wait(&after, CATCH_UP).await?;
    // Only the last deduct took stock.
    assert_eq!((decided.result.as_str(), decided.available), ("APPLIED", 4));
    let results: Vec<String> = results_by_position(&h, "SKU-T")
        .await?
        .into_values()
        .collect();
    assert_eq!(results, ["APPLIED", "INVALID", "INVALID", "APPLIED"]);
    h.assert_contract().await?;

    // An outcome with a NUL in its text, straight on the outcomes topic.
    let at = stockledger_core::LogPosition {
        topic: h.ns.topic.clone(),
        partition: 0,
        offset: 1_000_000,
    };
    let mut poisoned = stockledger_core::Outcome::invalid(at, "SKU-P", "x".into(), 7);
    poisoned.rollback_reason = Some("a\0b".into());
    h.send_raw_outcome("SKU-P", &codec::encode_outcome(&poisoned)?)
        .await?;
    h.ledger
        .deduct(&ids::sku("SKU-T"), &ids::order("later"), ids::qty(1), None)
        .await?;
    h.wait_for_archive(6).await?;
    let rows = query::history(&h.pool, &h.ns.topic, &HistoryOf::Sku("SKU-P".into()), 10).await?;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].rollback_reason.as_deref(), Some("a\u{2400}b"));
    applier.stop().await?;
    archiver.stop().await?;
    Ok(())
}
