//! The walking skeleton end to end: producer -> Kafka -> applier (Redis Lua)
//! -> outcomes -> archiver (PostgreSQL), against real services.

use std::time::Duration;

use futures::future::try_join_all;
use rdkafka::message::Headers;
use stockledger_analysts::query::{self, HistoryOf};
use stockledger_client::producer::ProducerError;
use stockledger_client::RedisDecisions;
use stockledger_core::{OrderId, Quantity, RestockMode, ResultCode, Sku};
use stockledger_kafka::names::DLQ_REASON_HEADER;
use stockledger_testkit::harness::CATCH_UP;
use stockledger_testkit::ids;
use stockledger_testkit::{reset_group_offsets, wait_until, Harness};

async fn results_of(h: &Harness, sku: &str) -> anyhow::Result<Vec<(Option<String>, String)>> {
    let rows = query::history(&h.pool, &h.ns.topic, &HistoryOf::Sku(sku.into()), 10_000).await?;
    Ok(rows.into_iter().map(|r| (r.command, r.result)).collect())
}

fn count(results: &[(Option<String>, String)], command: &str, result: ResultCode) -> usize {
    results
        .iter()
        .filter(|(c, r)| c.as_deref() == Some(command) && r == result.as_str())
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_buyers_share_twenty_units_without_oversell() -> anyhow::Result<()> {
    let h = Harness::new("fifty-buyers", 4).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    h.ledger
        .restock(
            &ids::sku("HOT"),
            &ids::adjustment("initial"),
            RestockMode::Set,
            20,
        )
        .await?;
    let buyers = (0..50).map(|i| {
        let producer = h.ledger.clone();
        async move {
            producer
                .deduct(
                    &ids::sku("HOT"),
                    &ids::order(format!("order-{i}")),
                    ids::qty(1),
                    None,
                )
                .await
        }
    });
    try_join_all(buyers).await?;
    h.wait_for_archive(51).await?;

    let results = results_of(&h, "HOT").await?;
    assert_eq!(count(&results, "DEDUCT", ResultCode::Applied), 20);
    assert_eq!(
        count(&results, "DEDUCT", ResultCode::RejectedInsufficient),
        30
    );
    assert_eq!(
        results
            .iter()
            .filter(|(c, _)| c.as_deref() == Some("DEDUCT"))
            .count(),
        50
    );
    let state = h.projection.read_sku("HOT").await?.expect("HOT has state");
    assert_eq!((state.available, state.total), (0, 20));
    assert_eq!(query::min_available(&h.pool, &h.ns.topic).await?, Some(0));
    h.assert_projection_matches_log().await?;

    applier.stop().await?;
    archiver.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_before_its_deduct_leaves_a_tombstone_that_refuses_the_deduct(
) -> anyhow::Result<()> {
    let h = Harness::new("tombstone", 2).await?;
    let applier = h.start_applier();
    let reader = RedisDecisions::connect(&h.redis_url, h.ns.prefix.clone()).await?;
    let wait = Duration::from_secs(30);

    let restock = h
        .ledger
        .restock(
            &ids::sku("SKU-T"),
            &ids::adjustment("a1"),
            RestockMode::Set,
            10,
        )
        .await?;
    assert_eq!(
        reader.wait(&restock, wait).await?.result,
        ResultCode::Applied
    );
    let early = h
        .ledger
        .rollback(&ids::sku("SKU-T"), &ids::order("o-1"), Some("cancelled"))
        .await?;
    let late = h
        .ledger
        .deduct(&ids::sku("SKU-T"), &ids::order("o-1"), ids::qty(4), None)
        .await?;
    let again = h
        .ledger
        .rollback(&ids::sku("SKU-T"), &ids::order("o-1"), None)
        .await?;

    assert_eq!(
        reader.wait(&early, wait).await?.result,
        ResultCode::IgnoredNoDeduction
    );
    let refused = reader.wait(&late, wait).await?;
    assert_eq!(
        (refused.result, refused.delta, refused.available),
        (ResultCode::RejectedCancelled, 0, 10)
    );
    let second = reader.wait(&again, wait).await?;
    assert_eq!(
        (second.result, second.delta, second.available),
        (ResultCode::Duplicate, 0, 10)
    );
    let state = h
        .projection
        .read_sku("SKU-T")
        .await?
        .expect("SKU-T has state");
    assert_eq!((state.available, state.total), (10, 10));
    assert_eq!(
        state.orders["o-1"].status,
        stockledger_core::OrderStatus::Cancelled
    );

    applier.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_applier_announces_offsets_only_once_their_decisions_are_readable() -> anyhow::Result<()>
{
    let h = Harness::new("announce", 2).await?;
    let mut announcements = redis::Client::open(h.redis_url.as_str())?
        .get_async_pubsub()
        .await?;
    announcements
        .subscribe(stockledger_projection::keys::applied_channel(&h.ns.prefix))
        .await?;
    let mut announcements = announcements.into_on_message();
    let applier = h.start_applier();
    let reader = RedisDecisions::connect(&h.redis_url, h.ns.prefix.clone()).await?;

    let mut receipts = Vec::new();
    for sku in ["SKU-A", "SKU-B"] {
        receipts.push(
            h.ledger
                .restock(&ids::sku(sku), &ids::adjustment("r1"), RestockMode::Set, 5)
                .await?,
        );
    }
    let deducts = (0..20).map(|i| {
        let producer = h.ledger.clone();
        let sku = if i % 2 == 0 { "SKU-A" } else { "SKU-B" };
        async move {
            producer
                .deduct(
                    &ids::sku(sku),
                    &ids::order(format!("o-{i}")),
                    ids::qty(1),
                    None,
                )
                .await
        }
    });
    receipts.extend(try_join_all(deducts).await?);

    // Every command is announced, and whatever an announcement covers is
    // already readable when it arrives.
    let mut marks = std::collections::HashMap::new();
    let mut uncovered = receipts.len();
    while uncovered > 0 {
        let message = tokio::time::timeout(CATCH_UP, futures::StreamExt::next(&mut announcements))
            .await
            .map_err(|_| anyhow::anyhow!("{uncovered} commands not announced in {CATCH_UP:?}"))?
            .ok_or_else(|| anyhow::anyhow!("the subscription ended"))?;
        let payload: String = message.get_payload()?;
        let (topic, announced) = stockledger_projection::keys::decode_applied(&payload)
            .ok_or_else(|| anyhow::anyhow!("unreadable announcement {payload:?}"))?;
        assert_eq!(topic, h.ns.topic);
        for (partition, offset) in announced {
            let mark = marks.entry(partition).or_insert(-1);
            *mark = offset.max(*mark);
        }
        uncovered = 0;
        for receipt in &receipts {
            let position = &receipt.position;
            if marks
                .get(&position.partition)
                .is_some_and(|&m| m >= position.offset)
            {
                assert!(
                    reader.decision(receipt).await?.is_some(),
                    "{position} announced before its decision was readable"
                );
            } else {
                uncovered += 1;
            }
        }
    }
    for receipt in &receipts {
        reader.wait(receipt, Duration::from_secs(5)).await?;
    }
    applier.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redelivering_the_whole_log_changes_neither_redis_nor_the_archive() -> anyhow::Result<()> {
    let partitions = 3;
    let h = Harness::new("redelivery", partitions).await?;
    // A dynamic member: it leaves the group when stopped, so the group is
    // empty and its offsets can be reset at once. (A static member stays
    // in the group until its session runs out, and Apache Kafka refuses
    // to reset the offsets of a group that has members.)
    let mut dynamic = h.applier_config();
    dynamic.instance_id = None;
    let applier = h.start_applier_with(dynamic);
    let archiver = h.start_archiver();
    for sku in ["A", "B", "C"] {
        h.ledger
            .restock(
                &ids::sku(sku),
                &ids::adjustment("init"),
                RestockMode::Set,
                5,
            )
            .await?;
    }
    let sends = (0..30).map(|i| {
        let producer = h.ledger.clone();
        async move {
            let sku = ["A", "B", "C"][i % 3];
            producer
                .deduct(
                    &ids::sku(sku),
                    &ids::order(format!("o{i}")),
                    ids::qty(1),
                    None,
                )
                .await?;
            if i % 4 == 0 {
                producer
                    .rollback(&ids::sku(sku), &ids::order(format!("o{i}")), None)
                    .await?;
            }
            Ok::<_, ProducerError>(())
        }
    });
    try_join_all(sends).await?;
    let records = h.read(&h.ns.topic).await?.len() as i64;
    h.wait_for_archive(records).await?;
    let before: Vec<_> = {
        let mut states = Vec::new();
        for sku in ["A", "B", "C"] {
            states.push(h.projection.read_sku(sku).await?);
        }
        states
    };
    let rows_before =
        query::history(&h.pool, &h.ns.topic, &HistoryOf::Sku("A".into()), 1000).await?;
    applier.stop().await?;

    reset_group_offsets(&h.kafka, &h.ns.applier_group, &h.ns.topic, partitions).await?;
    let again = h.start_applier();
    // Every record yields its outcome a second time; wait until all are out
    // and the archiver has read them all.
    wait_until("the redelivered outcomes", CATCH_UP, || async {
        let outcomes = h.read(&h.ns.outcomes_topic).await?.len() as i64;
        Ok((outcomes == 2 * records).then_some(()))
    })
    .await?;
    wait_until("the archiver to read every outcome", CATCH_UP, || async {
        Ok((h.archiver_progress().await? == 2 * records).then_some(()))
    })
    .await?;

    for (sku, state) in ["A", "B", "C"].into_iter().zip(&before) {
        assert_eq!(
            &h.projection.read_sku(sku).await?,
            state,
            "{sku} changed on redelivery"
        );
    }
    assert_eq!(h.archived_rows().await?, records);
    assert_eq!(
        query::history(&h.pool, &h.ns.topic, &HistoryOf::Sku("A".into()), 1000).await?,
        rows_before
    );
    let stats = again.stop().await?;
    assert_eq!(
        stats.records, records as u64,
        "the second applier saw the whole log"
    );
    archiver.stop().await?;
    Ok(())
}

/// The rows of ledger_hourly for `topic`, every column but the hour, in
/// key order.
async fn hours_of(h: &Harness) -> anyhow::Result<Vec<(String, i64, i64, i64, i64, Option<i64>)>> {
    Ok(sqlx::query_as(
        "SELECT sku, records, deducts_applied, rollbacks_applied, rejected_insufficient,
                lowest_available
         FROM ledger_hourly WHERE topic = $1 ORDER BY sku, hour",
    )
    .bind(&h.ns.topic)
    .fetch_all(&h.pool)
    .await?)
}

/// A page's shares commit one by one and its progress after them, so an
/// archiver stopped in between reads rows it archived already. Taken to the
/// extreme: a second archiver group, with no progress at all, reads every
/// outcome again, and adds neither a row nor anything to the hours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_archived_without_their_progress_are_not_archived_twice() -> anyhow::Result<()> {
    let partitions = 3;
    let h = Harness::new("progress-lost", partitions).await?;
    let applier = h.start_applier();
    let mut config = h.archiver_config();
    config.writers = 3;
    let archiver = h.start_archiver_with(config.clone());
    let skus: Vec<String> = (0..12).map(|i| format!("SKU-{i}")).collect();
    for sku in &skus {
        h.ledger
            .restock(
                &ids::sku(sku),
                &ids::adjustment("init"),
                RestockMode::Set,
                4,
            )
            .await?;
    }
    let sends = (0..60).map(|i| {
        let (producer, sku) = (h.ledger.clone(), skus[i % skus.len()].clone());
        async move {
            producer
                .deduct(
                    &ids::sku(&sku),
                    &ids::order(format!("o{i}")),
                    ids::qty(1),
                    None,
                )
                .await
        }
    });
    try_join_all(sends).await?;
    let records = h.read(&h.ns.topic).await?.len() as i64;
    h.wait_for_archive(records).await?;
    let hours = hours_of(&h).await?;
    assert_eq!(hours.len(), skus.len(), "one hour per SKU: {hours:?}");
    assert!(
        hours.iter().any(|(_, _, _, _, rejected, _)| *rejected > 0),
        "some deducts found no stock: {hours:?}"
    );
    archiver.stop().await?;

    config.group_id = format!("{}-again", h.ns.archiver_group);
    let again = h.start_archiver_with(config.clone());
    wait_until(
        "the second group to read every outcome",
        CATCH_UP,
        || async {
            let read: Option<i64> = sqlx::query_scalar(
                "SELECT sum(next_offset)::bigint FROM archiver_progress WHERE consumer_group = $1",
            )
            .bind(&config.group_id)
            .fetch_one(&h.pool)
            .await?;
            Ok((read == Some(records)).then_some(()))
        },
    )
    .await?;
    assert_eq!(h.archived_rows().await?, records);
    assert_eq!(
        hours_of(&h).await?,
        hours,
        "the hours counted nothing twice"
    );
    let stats = again.stop().await?;
    assert_eq!(stats.rows, records as u64, "every outcome found archived");
    applier.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_record_is_dead_lettered_and_the_partition_goes_on() -> anyhow::Result<()> {
    let h = Harness::new("dead-letter", 1).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    h.ledger
        .restock(
            &ids::sku("SKU-G"),
            &ids::adjustment("a"),
            RestockMode::Set,
            3,
        )
        .await?;
    let (_, garbage_offset) = h.send_raw("SKU-G", b"definitely not avro").await?;
    h.ledger
        .deduct(
            &ids::sku("SKU-G"),
            &ids::order("after-garbage"),
            ids::qty(2),
            None,
        )
        .await?;
    h.wait_for_archive(3).await?;

    // The dead letter and the outcomes are sent together; the archive may
    // have the outcomes before the broker acknowledges the dead letter.
    let dead = wait_until("the dead letter", CATCH_UP, || async {
        let dead = h.read(&h.ns.dlq_topic).await?;
        Ok((!dead.is_empty()).then_some(dead))
    })
    .await?;
    assert_eq!(dead.len(), 1);
    assert_eq!(
        dead[0].payload.as_deref(),
        Some(&b"definitely not avro"[..])
    );
    let results = results_of(&h, "SKU-G").await?;
    assert_eq!(results[1], (None, "INVALID".to_owned()));
    assert_eq!(
        results[2],
        (Some("DEDUCT".to_owned()), "APPLIED".to_owned())
    );
    let state = h
        .projection
        .read_sku("SKU-G")
        .await?
        .expect("SKU-G has state");
    assert_eq!(state.available, 1);
    assert!(!state.decisions.contains_key(&garbage_offset));

    // The reason travels in a header.
    let consumer_records = dead_letter_reasons(&h).await?;
    assert_eq!(consumer_records.len(), 1);
    assert!(
        consumer_records[0].contains("single-object"),
        "{consumer_records:?}"
    );

    applier.stop().await?;
    archiver.stop().await?;
    Ok(())
}

async fn dead_letter_reasons(h: &Harness) -> anyhow::Result<Vec<String>> {
    use rdkafka::consumer::{Consumer, StreamConsumer};
    use rdkafka::message::Message;
    let consumer: StreamConsumer = h
        .services
        .kafka
        .client_config(&[
            ("group.id", &format!("{}-dlq-reader", h.ns.id)),
            ("auto.offset.reset", "earliest"),
        ])
        .create()?;
    consumer.subscribe(&[&h.ns.dlq_topic])?;
    let message = tokio::time::timeout(CATCH_UP, consumer.recv()).await??;
    let headers = message
        .headers()
        .ok_or_else(|| anyhow::anyhow!("no headers"))?;
    Ok(headers
        .iter()
        .filter(|h| h.key == DLQ_REASON_HEADER)
        .map(|h| String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned())
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restock_below_what_is_held_or_below_zero_is_refused_with_a_reason() -> anyhow::Result<()> {
    let h = Harness::new("restock", 1).await?;
    let applier = h.start_applier();
    let reader = RedisDecisions::connect(&h.redis_url, h.ns.prefix.clone()).await?;
    let wait = Duration::from_secs(30);
    let set = h
        .ledger
        .restock(
            &ids::sku("SKU-R"),
            &ids::adjustment("a1"),
            RestockMode::Set,
            10,
        )
        .await?;
    let sold = h
        .ledger
        .deduct(&ids::sku("SKU-R"), &ids::order("o1"), ids::qty(6), None)
        .await?;
    let below = h
        .ledger
        .restock(
            &ids::sku("SKU-R"),
            &ids::adjustment("a2"),
            RestockMode::Set,
            5,
        )
        .await?;
    let negative = h
        .ledger
        .restock(
            &ids::sku("SKU-R"),
            &ids::adjustment("a3"),
            RestockMode::Add,
            -5,
        )
        .await?;
    assert_eq!(reader.wait(&set, wait).await?.result, ResultCode::Applied);
    assert_eq!(reader.wait(&sold, wait).await?.result, ResultCode::Applied);

    let below = reader.wait(&below, wait).await?;
    assert_eq!(below.result, ResultCode::RejectedRestock);
    assert_eq!(
        below.reason.as_deref(),
        Some("SET 5 is below the 6 units held by orders")
    );
    let negative = reader.wait(&negative, wait).await?;
    assert_eq!(negative.result, ResultCode::RejectedRestock);
    assert_eq!(
        negative.reason.as_deref(),
        Some("ADD -5 would leave available at -1")
    );
    let state = h
        .projection
        .read_sku("SKU-R")
        .await?
        .expect("SKU-R has state");
    assert_eq!((state.available, state.total), (4, 10));
    applier.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_producer_input_names_the_field_and_publishes_nothing() -> anyhow::Result<()> {
    let h = Harness::new("invalid-input", 1).await?;
    // Identifiers and quantities are checked when made, naming the field:
    // what breaks the rules cannot be given to the ledger at all.
    let made = [
        (Quantity::new(0).err(), "quantity"),
        (OrderId::new("").err(), "order_id"),
        (Sku::new("SKU\n2").err(), "sku"),
        (OrderId::new("o".repeat(10 * 1024)).err(), "order_id"),
    ];
    for (refused, field) in made {
        let e = refused.unwrap_or_else(|| panic!("a bad {field} was made"));
        assert_eq!(e.field, field, "{e}");
    }
    // What only the whole command tells is refused when it is sent.
    let sku = ids::sku("SKU");
    let cases = [
        (
            h.ledger
                .restock(&sku, &ids::adjustment("a"), RestockMode::Add, 0)
                .await,
            "quantity",
        ),
        (
            h.ledger
                .reserve_until(&sku, &ids::order("o1"), ids::qty(1), ids::at_ms(1), None)
                .await,
            "expires_at",
        ),
    ];
    for (result, field) in cases {
        match result {
            Err(ProducerError::Invalid(e)) => assert_eq!(e.field, field, "{e}"),
            other => panic!("expected an invalid {field}, got {other:?}"),
        }
    }
    assert!(
        h.read(&h.ns.topic).await?.is_empty(),
        "nothing may be published"
    );
    Ok(())
}

/// The nemesis of seed 7 caught a receipt at offset -1001: the brokers had
/// acknowledged a retried batch without an offset (it was in the log
/// already). The producer now reads the command's offset back from the
/// log; this is that lookup, against the real log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_is_found_by_its_id_at_the_offset_its_receipt_names() -> anyhow::Result<()> {
    let h = Harness::new("locate", 1).await?;
    let mut receipts = Vec::new();
    for i in 0..2_500 {
        receipts.push(
            h.ledger
                .deduct(
                    &ids::sku("L-1"),
                    &ids::order(format!("o-{i}")),
                    ids::qty(1),
                    None,
                )
                .await?,
        );
    }
    // Near the end, and further back than the first window of 1,000.
    for receipt in [&receipts[2_499], &receipts[10]] {
        let found = h
            .ledger
            .producer()
            .locate(&receipt.command_id, receipt.position.partition)
            .await?;
        assert_eq!(found, receipt.position.offset);
    }
    let stranger = stockledger_core::CommandId::new("never-sent")?;
    assert!(h.ledger.producer().locate(&stranger, 0).await.is_err());
    Ok(())
}
