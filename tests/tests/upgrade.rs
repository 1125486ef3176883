#![allow(clippy::expect_used)] // a fixture that does not read is a failed test
//! A Redis that the last release deciding inside Redis (with Lua) filled is
//! applied onto correctly by the fold that decides with the core's machine;
//! so is one that forgot the fold's scripts.
//!
//! `fixtures/lua-release/lua-release.json` holds that release's own bytes:
//! a log using every kind of command, and every key its apply script wrote
//! for it, field by field (`fixtures/lua-release/generate.sh` wrote it by
//! running `generate.rs` in a checkout of the release). The test writes
//! those keys back, reads them as the fold of the log, then applies more
//! records that act on every kind of entry the old bytes hold (rollbacks,
//! confirms, refunds and expiries of old orders, old users' counters, old
//! named units and locations, a redelivered old record, a repeated
//! adjustment) and holds each decision and the final state to the machine
//! folding the whole log alone; then looks every record's decision up,
//! old and new (kept in different hashes), and compacts them all.

use std::collections::BTreeMap;

use stockledger_core::codec::decode_command;
use stockledger_core::{
    AdjustmentId, Command, CommandBody, CommandId, Confirm, Deduct, Expire, LocationId, LogFold,
    OrderId, Quantity, Refund, Restock, RestockMode, Rollback, Sku, TransferId, UserId,
};
use stockledger_projection::{Entry, Projection};
use stockledger_redis::RedisConn;
use stockledger_testkit::redis_dump::delete_prefix;
use stockledger_testkit::services::redis_url;

const FIXTURE: &str = include_str!("fixtures/lua-release/lua-release.json");

/// The SKUs of the fixture's log.
const SKUS: [&str; 4] = ["P", "U", "N", "L"];

/// A record: partition, offset, timestamp, command.
type Record = (i32, i64, i64, Command);

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

fn old_log(fixture: &serde_json::Value) -> anyhow::Result<Vec<Record>> {
    let log = fixture["log"].as_array().expect("log");
    log.iter()
        .map(|r| {
            let number = |field: &str| r[field].as_i64().expect(field);
            let command = decode_command(&unhex(r["command"].as_str().expect("command")))?;
            Ok((
                i32::try_from(number("partition"))?,
                number("offset"),
                number("timestamp"),
                command,
            ))
        })
        .collect()
}

/// Writes the fixture's keys under `prefix`, as the old release left them.
async fn restore_old_bytes(
    conn: &RedisConn,
    prefix: &str,
    fixture: &serde_json::Value,
) -> anyhow::Result<()> {
    let keys = fixture["keys"].as_object().expect("keys");
    let mut writes = Vec::new();
    for (name, key) in keys {
        let fields = key["fields"].as_object().expect("fields");
        let pairs = fields
            .iter()
            .map(|(f, v)| (f.clone(), v.as_str().expect("value").to_owned()));
        let mut cmd = match key["type"].as_str() {
            Some("zset") => redis::cmd("ZADD"),
            _ => redis::cmd("HSET"),
        };
        cmd.arg(format!("{prefix}{name}"));
        for (field, value) in pairs {
            match key["type"].as_str() {
                Some("zset") => cmd.arg(value).arg(field),
                _ => cmd.arg(field).arg(value),
            };
        }
        writes.push(cmd);
    }
    let _: Vec<redis::Value> = conn.query_each(writes).await?;
    Ok(())
}

/// Records after the old log, on each SKU's partition, acting on what the
/// old bytes hold; and the first old record again, redelivered.
fn new_records(old: &[Record]) -> anyhow::Result<Vec<Record>> {
    let partition_of = |sku: &str| {
        old.iter()
            .find(|r| r.3.sku.as_str() == sku)
            .map(|r| r.0)
            .expect("an old record of each sku")
    };
    let mut next: BTreeMap<i32, i64> = BTreeMap::new();
    for r in old {
        let n = next.entry(r.0).or_default();
        *n = (*n).max(r.1 + 1);
    }
    let t0 = old.iter().map(|r| r.2).max().unwrap_or(0) + 60_000;
    let order = |id: &str| OrderId::new(id);
    let q = |n: i64| Quantity::new(n);
    let deduct = |id: &str, n: i64| anyhow::Ok(Deduct::new(order(id)?, q(n)?));
    let berlin = || LocationId::new("berlin");
    let paris = || LocationId::new("paris");
    let rollback = |id: &str| anyhow::Ok(CommandBody::Rollback(Rollback::new(order(id)?, None)?));
    let bodies: Vec<(&str, CommandBody)> = vec![
        ("P", CommandBody::Deduct(deduct("o2", 1)?)),
        ("P", CommandBody::Deduct(deduct("o3", 1)?)),
        (
            "P",
            CommandBody::Restock(Restock::new(
                AdjustmentId::new("a-p1")?,
                RestockMode::Add,
                1,
            )?),
        ),
        ("P", rollback("o1")?),
        ("P", CommandBody::Deduct(deduct("o4", 20)?)),
        (
            "U",
            CommandBody::Expire(Expire {
                order_id: order("h3")?,
            }),
        ),
        (
            "U",
            CommandBody::Deduct(Deduct {
                user_id: Some(UserId::new("alice")?),
                expires_at: Some(t0 + 600_000),
                ..deduct("h4", 1)?
            }),
        ),
        (
            "U",
            CommandBody::Deduct(Deduct {
                user_id: Some(UserId::new("alice")?),
                ..deduct("d2", 1)?
            }),
        ),
        ("U", rollback("h2")?),
        (
            "U",
            CommandBody::Confirm(Confirm {
                order_id: order("h2")?,
            }),
        ),
        ("N", rollback("n2")?),
        (
            "N",
            CommandBody::Deduct(Deduct::for_units(order("n3")?, &["A1"])?),
        ),
        (
            "N",
            CommandBody::Deduct(Deduct::for_units(order("n4")?, &["B1", "A3"])?),
        ),
        (
            "N",
            CommandBody::Refund(Refund {
                order_id: order("n1")?,
                quantity: None,
            }),
        ),
        ("L", CommandBody::Deduct(deduct("l4", 1)?.at(paris()?)?)),
        ("L", rollback("l1")?),
        (
            "L",
            CommandBody::Transfer(stockledger_core::Transfer::new(
                TransferId::new("t1")?,
                berlin()?,
                paris()?,
                q(1)?,
            )?),
        ),
        (
            "L",
            CommandBody::Expire(Expire {
                order_id: order("l3")?,
            }),
        ),
        ("L", CommandBody::Deduct(deduct("l5", 3)?)),
    ];
    let mut records = vec![old[0].clone()];
    for (i, (sku, body)) in bodies.into_iter().enumerate() {
        let partition = partition_of(sku);
        let offset = next.entry(partition).or_default();
        records.push((
            partition,
            *offset,
            t0 + 1_000 * i as i64,
            Command {
                command_id: CommandId::new(format!("new-{i}"))?,
                sku: Sku::new(sku)?,
                occurred_at: t0,
                body,
            },
        ));
        *offset += 1;
    }
    Ok(records)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_the_lua_release_filled_is_applied_onto_correctly() -> anyhow::Result<()> {
    let fixture: serde_json::Value = serde_json::from_str(FIXTURE)?;
    let partitions = i32::try_from(fixture["partitions"].as_i64().expect("partitions"))?;
    let conn = RedisConn::connect(redis_url().await?).await?;
    let prefix = format!("upgrade:{}", uuid::Uuid::new_v4().simple());
    restore_old_bytes(&conn, &prefix, &fixture).await?;
    let projection = Projection::new(conn.clone(), prefix.clone());

    let old = old_log(&fixture)?;
    let mut reference = LogFold::new(partitions);
    for (partition, offset, timestamp, command) in &old {
        reference.apply(*partition, *offset, *timestamp, command);
    }
    for sku in SKUS {
        let read = projection.read_sku(sku).await?;
        assert_eq!(
            read.as_ref(),
            reference.sku(sku),
            "{sku}: the old bytes read back as the fold of the old log"
        );
    }

    let new = new_records(&old)?;
    let expected: Vec<_> = new
        .iter()
        .map(|(p, o, t, c)| reference.apply(*p, *o, *t, c))
        .collect();
    let mut decided = Vec::new();
    for batch in new.chunks(7) {
        let prepared = projection.prepare(
            batch
                .iter()
                .map(|(partition, offset, timestamp, command)| Entry {
                    partition: *partition,
                    offset: *offset,
                    timestamp: *timestamp,
                    command: Some(command),
                }),
            partitions,
        );
        decided.extend(projection.apply(&prepared).await?);
    }
    for ((record, got), want) in new.iter().zip(&decided).zip(&expected) {
        assert_eq!(
            got, want,
            "{} at {}@{}: decided on the old bytes as the whole log decides",
            record.3.sku, record.0, record.1
        );
    }
    // Every kind of result the new records were built to reach.
    let results: Vec<&str> = expected.iter().map(|d| d.result.as_str()).collect();
    for result in [
        "APPLIED",
        "DUPLICATE",
        "REJECTED_CANCELLED",
        "EXPIRED",
        "REJECTED_LIMIT",
        "REJECTED_INSUFFICIENT",
        "REFUNDED",
    ] {
        assert!(results.contains(&result), "no {result} among {results:?}");
    }
    for sku in SKUS {
        let read = projection.read_sku(sku).await?;
        assert_eq!(read.as_ref(), reference.sku(sku), "{sku}: the final state");
    }
    // Each record's decision is looked up where it is kept: the old ones
    // in the hash the old release wrote them to, the new ones in the
    // stock hash. Compaction prunes both.
    let mut first = LogFold::new(partitions);
    for (partition, offset, timestamp, command) in old.iter().chain(&new) {
        let decided = first.apply(*partition, *offset, *timestamp, command);
        let sku = command.sku.as_str();
        let looked_up = projection.decision(sku, *partition, *offset).await?;
        assert_eq!(looked_up, Some(decided), "{sku} at {partition}@{offset}");
    }
    let held = projection.decisions_held(&SKUS).await?;
    assert!(held > new.len() as u64, "old and new decisions: {held}");
    let mut pruned = 0;
    for sku in SKUS {
        pruned += projection.prune(sku, i64::MAX).await?.1;
    }
    assert_eq!((pruned, projection.decisions_held(&SKUS).await?), (held, 0));
    delete_prefix(&conn, &prefix).await
}

/// A Redis restarted or flushed of its scripts (not of its keys) is folded
/// onto as before: the load and write scripts are loaded again and the
/// batch runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_forgot_the_scripts_gets_them_again() -> anyhow::Result<()> {
    let conn = RedisConn::connect(redis_url().await?).await?;
    let prefix = format!("noscript:{}", uuid::Uuid::new_v4().simple());
    let projection = Projection::new(conn.clone(), prefix.clone()).caching(0, 0);
    let command = |n: usize, body| -> anyhow::Result<Command> {
        Ok(Command {
            command_id: CommandId::new(format!("c{n}"))?,
            sku: Sku::new("F")?,
            occurred_at: 0,
            body,
        })
    };
    let restock = Restock::new(AdjustmentId::new("a")?, RestockMode::Set, 2)?;
    let deduct = Deduct::new(OrderId::new("o")?, Quantity::new(1)?);
    let records = [
        command(0, CommandBody::Restock(restock))?,
        command(1, CommandBody::Deduct(deduct))?,
    ];
    let mut results = Vec::new();
    for (offset, record) in records.iter().enumerate() {
        let () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut conn.clone())
            .await?;
        let entry = Entry {
            partition: 0,
            offset: i64::try_from(offset)?,
            timestamp: 1_700_000_000_000,
            command: Some(record),
        };
        let decided = projection.apply(&projection.prepare([entry], 1)).await?;
        results.extend(
            decided
                .into_iter()
                .map(|d| (d.result.as_str(), d.available)),
        );
    }
    assert_eq!(results, [("APPLIED", 2), ("APPLIED", 1)]);
    assert_eq!(projection.fence_refusals(), 0, "each write ran once");
    delete_prefix(&conn, &prefix).await
}
