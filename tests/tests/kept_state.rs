//! What the fold keeps between batches (the stock hashes of recent SKUs,
//! and the other hashes of those known whole) is never decided on once
//! Redis holds something else: a restore or a swap that takes a SKU back
//! or forward is seen at the next write, a SKU kept before its partition
//! was this member's is read again, and an order compaction may prune is
//! read afresh.

use stockledger_core::{
    AdjustmentId, Command, CommandBody, CommandId, Deduct, LogFold, OrderId, Quantity, Restock,
    RestockMode, ResultCode, Rollback, Sku,
};
use stockledger_projection::{Entry, Projection};
use stockledger_redis::RedisConn;
use stockledger_testkit::redis_dump::delete_prefix;
use stockledger_testkit::services::redis_url;

const T0: i64 = 1_700_000_000_000;

fn command(sku: &str, n: i64, body: CommandBody) -> anyhow::Result<Command> {
    Ok(Command {
        command_id: CommandId::new(format!("{sku}-{n}"))?,
        sku: Sku::new(sku)?,
        occurred_at: T0,
        body,
    })
}

fn deduct(order: &str, quantity: i64) -> anyhow::Result<CommandBody> {
    Ok(CommandBody::Deduct(Deduct::new(
        OrderId::new(order)?,
        Quantity::new(quantity)?,
    )))
}

fn restock(id: &str, quantity: i64) -> anyhow::Result<CommandBody> {
    Ok(CommandBody::Restock(Restock::new(
        AdjustmentId::new(id)?,
        RestockMode::Set,
        quantity,
    )?))
}

/// Applies `command` at `offset` of the one partition, alone in its batch.
async fn apply(
    projection: &Projection,
    offset: i64,
    command: &Command,
) -> anyhow::Result<stockledger_core::Decision> {
    apply_at(projection, (0, 1), offset, command).await
}

/// Applies `command` at `offset` of partition `at.0` of a topic of `at.1`
/// partitions, alone in its batch.
async fn apply_at(
    projection: &Projection,
    (partition, partitions): (i32, i32),
    offset: i64,
    command: &Command,
) -> anyhow::Result<stockledger_core::Decision> {
    let entry = Entry {
        partition,
        offset,
        timestamp: T0 + offset,
        command: Some(command),
    };
    let decided = projection
        .apply(&projection.prepare([entry], partitions))
        .await?;
    decided
        .into_iter()
        .next()
        .ok_or_else(|| anyhow::anyhow!("no decision"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sku_restored_under_the_applier_is_decided_on_what_was_restored() -> anyhow::Result<()> {
    let conn = RedisConn::connect(redis_url().await?).await?;
    let prefix = format!("kept:{}", uuid::Uuid::new_v4().simple());
    let projection = Projection::new(conn.clone(), prefix.clone());
    // Marked, as an applier's prefix is: a restore fences its writes.
    projection.mark("log", 1).await?;
    let log = [
        command("K", 0, restock("a", 5)?)?,
        command("K", 1, deduct("o1", 2)?)?,
        command("K", 2, deduct("o2", 1)?)?,
        command("K", 3, deduct("o3", 1)?)?,
        command("K", 4, deduct("o4", 2)?)?,
    ];
    for (offset, record) in log.iter().enumerate().take(3) {
        apply(&projection, i64::try_from(offset)?, record).await?;
    }
    let snapshot = projection.export(&["K"]).await?;
    let taken = apply(&projection, 3, &log[3]).await?;
    assert_eq!((taken.result, taken.available), (ResultCode::Applied, 1));
    // The operator restores the snapshot: K is back at offset 2, two units
    // free, while the fold keeps K's stock hash at offset 3, one free.
    projection.restore(&snapshot).await?;
    let decided = apply(&projection, 4, &log[4]).await?;

    let mut restored = LogFold::new(1);
    for (offset, record) in log.iter().enumerate().filter(|(o, _)| *o != 3) {
        let offset = i64::try_from(offset)?;
        let expected = restored.apply(0, offset, T0 + offset, record);
        if offset == 4 {
            assert_eq!(decided, expected, "decided on the restored state");
        }
    }
    assert_eq!(
        (decided.result, decided.available),
        (ResultCode::Applied, 0)
    );
    assert_eq!(
        projection.fence_refusals(),
        1,
        "the kept stock hash was refused once"
    );
    // A restore writes the snapshot's fields over the live ones (it does
    // not delete what came after), so the stock is what is compared.
    let state = projection.read_sku("K").await?;
    let stock = |s: Option<&stockledger_core::SkuState>| {
        s.map(|s| (s.available, s.total, s.reserved, s.last_offset))
    };
    assert_eq!(
        stock(state.as_ref()),
        stock(restored.sku("K")),
        "Redis holds the restored stock and the record after it"
    );
    delete_prefix(&conn, &prefix).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_compaction_pruned_under_the_applier_are_not_found_again() -> anyhow::Result<()> {
    let conn = RedisConn::connect(redis_url().await?).await?;
    let prefix = format!("kept:{}", uuid::Uuid::new_v4().simple());
    let projection = Projection::new(conn.clone(), prefix.clone());
    let rollback = CommandBody::Rollback(Rollback::new(OrderId::new("o1")?, None)?);
    let log = [
        command("C", 0, restock("a", 3)?)?,
        command("C", 1, deduct("o1", 1)?)?,
        command("C", 2, rollback)?,
        command("C", 3, deduct("o1", 1)?)?,
        command("C", 4, deduct("o1", 1)?)?,
    ];
    for (offset, record) in log.iter().enumerate().take(4) {
        apply(&projection, i64::try_from(offset)?, record).await?;
    }
    // Compaction prunes the rolled-back order (and the decisions up to
    // it); the fold keeps C's stock hash, and reads its orders afresh.
    let (orders, _) = projection.prune("C", 3).await?;
    assert_eq!(orders, 1, "the rolled-back order was pruned");
    let mut fresh = projection
        .read_sku("C")
        .await?
        .ok_or_else(|| anyhow::anyhow!("C has no state"))?;
    let at = stockledger_core::Placement::home(0);
    let expected = fresh.apply(at, 4, T0 + 4, &log[4].body);
    let reads = projection.reads_of_skus();
    let decided = apply(&projection, 4, &log[4]).await?;
    assert_eq!(decided, expected, "decided on what Redis holds");
    assert_eq!(decided.result, ResultCode::Applied);
    assert_eq!(projection.fence_refusals(), 0);
    assert_eq!(
        projection.reads_of_skus(),
        reads + 1,
        "the kept order was rolled back, so prunable: it was read"
    );
    delete_prefix(&conn, &prefix).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sku_known_whole_is_decided_from_memory_as_redis_would() -> anyhow::Result<()> {
    let conn = RedisConn::connect(redis_url().await?).await?;
    let prefix = format!("kept:{}", uuid::Uuid::new_v4().simple());
    let projection = Projection::new(conn.clone(), prefix.clone());
    let log = [
        command("W", 0, restock("a", 3)?)?,
        command("W", 1, deduct("o1", 1)?)?,
        command("W", 2, deduct("o2", 1)?)?,
        command("W", 3, deduct("o1", 1)?)?,
        command("W", 4, restock("a", 9)?)?,
        command("W", 5, deduct("o3", 5)?)?,
    ];
    let mut reference = LogFold::new(1);
    let mut reads = Vec::new();
    for (offset, record) in log.iter().enumerate() {
        let offset = i64::try_from(offset)?;
        let decided = apply(&projection, offset, record).await?;
        let expected = reference.apply(0, offset, T0 + offset, record);
        assert_eq!(decided, expected, "record {offset}");
        reads.push(projection.reads_of_skus());
    }
    // W had no state when first read: from then on its orders and its
    // restocks are known whole, and nothing of it is read again, not even
    // the orders a deduct names and Redis lacks.
    assert_eq!(reads, vec![1; log.len()], "reads after each record");
    assert_eq!(projection.cached_fields(), 3, "o1, o2 and the restock a");
    // The member loses partition 1, then 0 (W's): it forgets W.
    let forget = |p: i32| projection.forget_partitions(&std::collections::BTreeSet::from([p]));
    assert_eq!(forget(1), 0);
    assert_eq!((projection.cached_skus(), forget(0)), (1, 1));
    assert_eq!(
        (projection.cached_skus(), projection.cached_fields()),
        (0, 0)
    );
    // A second member, knowing nothing, reads W once, whole (it is
    // small), and decides the next records as the one that kept W would.
    let other = Projection::new(conn.clone(), prefix.clone());
    for (offset, body) in [(6, deduct("o2", 1)?), (7, deduct("o9", 1)?)] {
        let next = command("W", offset, body)?;
        let decided = apply(&other, offset, &next).await?;
        assert_eq!(decided, reference.apply(0, offset, T0 + offset, &next));
    }
    assert_eq!(other.reads_of_skus(), 1, "read once, then kept whole");
    assert_eq!(other.cached_fields(), 4, "o1, o2, o9 and the restock a");
    // Without keeping anything, every batch reads.
    let forgetful = Projection::new(conn.clone(), prefix.clone()).caching(0, 0);
    let next = command("W", 8, deduct("o10", 1)?)?;
    let decided = apply(&forgetful, 8, &next).await?;
    assert_eq!(decided, reference.apply(0, 8, T0 + 8, &next));
    let next = command("W", 9, deduct("o11", 1)?)?;
    apply(&forgetful, 9, &next).await?;
    assert_eq!(forgetful.reads_of_skus(), 2);
    delete_prefix(&conn, &prefix).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sku_swapped_in_under_the_applier_is_not_applied_twice() -> anyhow::Result<()> {
    let conn = RedisConn::connect(redis_url().await?).await?;
    let live = format!("kept:{}", uuid::Uuid::new_v4().simple());
    let rebuilt = format!("kept:{}", uuid::Uuid::new_v4().simple());
    let projection = Projection::new(conn.clone(), live.clone());
    let replay = Projection::new(conn.clone(), rebuilt.clone());
    projection.mark("log", 1).await?;
    let log = [
        command("S", 0, restock("a", 5)?)?,
        command("S", 1, deduct("o1", 2)?)?,
        command("S", 2, deduct("o2", 2)?)?,
        command("S", 3, deduct("o3", 1)?)?,
    ];
    let mut reference = LogFold::new(1);
    let mut first = Vec::new();
    for (offset, record) in log.iter().enumerate() {
        let offset = i64::try_from(offset)?;
        first.push(reference.apply(0, offset, T0 + offset, record));
        apply(&replay, offset, record).await?;
        if offset < 2 {
            apply(&projection, offset, record).await?;
        }
    }
    // A replay that went further (offset 3) is swapped in while the live
    // applier keeps S at offset 1; the applier then reaches offset 2 and
    // 3, which the swapped-in state holds already.
    assert!(replay.swap_into("S", &live, None).await?);
    for offset in [2, 3] {
        let decided = apply(&projection, offset, &log[usize::try_from(offset)?]).await?;
        assert_eq!(decided, first[usize::try_from(offset)?], "record {offset}");
    }
    assert_eq!(
        projection.fence_refusals(),
        1,
        "refused once, after the swap"
    );
    let state = projection.read_sku("S").await?;
    assert_eq!(
        state.as_ref(),
        reference.sku("S"),
        "each record applied once"
    );
    delete_prefix(&conn, &rebuilt).await?;
    delete_prefix(&conn, &live).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sku_kept_before_its_partition_was_this_members_is_read_again() -> anyhow::Result<()> {
    let conn = RedisConn::connect(redis_url().await?).await?;
    let prefix = format!("kept:{}", uuid::Uuid::new_v4().simple());
    let (a, b) = (
        Projection::new(conn.clone(), prefix.clone()),
        Projection::new(conn.clone(), prefix.clone()),
    );
    let home = stockledger_core::partition::home_partition(b"M", 2);
    let elsewhere = 1 - home;
    let log = [
        command("M", 0, deduct("o0", 1)?)?,
        command("M", 1, restock("a", 3)?)?,
        command("M", 2, deduct("o1", 1)?)?,
    ];
    let mut reference = LogFold::new(2);
    // Member a owns the other partition, where a producer misrouted M's
    // first record: a reads M (nothing yet) and keeps it.
    let decided = apply_at(&a, (elsewhere, 2), 0, &log[0]).await?;
    assert_eq!(decided, reference.apply(elsewhere, 0, T0, &log[0]));
    assert_eq!(decided.result, ResultCode::Misrouted);
    assert_eq!(a.cached_skus(), 1);
    // Member b, owning M's partition, restocks it; then M's partition is
    // given to a, which must decide on the restock, not on what it kept.
    let decided = apply_at(&b, (home, 2), 1, &log[1]).await?;
    assert_eq!(decided, reference.apply(home, 1, T0 + 1, &log[1]));
    let decided = apply_at(&a, (home, 2), 2, &log[2]).await?;
    assert_eq!(decided, reference.apply(home, 2, T0 + 2, &log[2]));
    assert_eq!(
        (decided.result, decided.available),
        (ResultCode::Applied, 2)
    );
    assert_eq!(a.read_sku("M").await?.as_ref(), reference.sku("M"));
    delete_prefix(&conn, &prefix).await
}
