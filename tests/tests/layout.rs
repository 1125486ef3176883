//! One module (`stockledger-projection`) owns how a SKU's state is laid out
//! in Redis. A state written by the applier must read back identically
//! through every path that reads or rewrites it.

use std::collections::{BTreeMap, HashMap};
use std::future::pending;

use stockledger_analysts::query::{self, HistoryOf};
use stockledger_core::{Decision, ResultCode, SkuState, StockEventKind, StockEvents};
use stockledger_maintenance::reconcile::reconcile;
use stockledger_maintenance::replay::replay;
use stockledger_maintenance::snapshot;
use stockledger_projection::encoding::{decode_order, user_of_field};
use stockledger_projection::Projection;
use stockledger_testkit::redis_dump::hashes_under;
use stockledger_testkit::{traffic, Harness};

const SKUS: [&str; 5] = ["L0", "L1", "L2", "L3", "L4"];

async fn states(projection: &Projection) -> anyhow::Result<BTreeMap<String, SkuState>> {
    let mut states = BTreeMap::new();
    for sku in SKUS {
        let state = projection.read_sku(sku).await?;
        let state = state.ok_or_else(|| anyhow::anyhow!("{sku} has no state"))?;
        states.insert(sku.to_owned(), state);
    }
    Ok(states)
}

fn without_decisions(mut states: BTreeMap<String, SkuState>) -> BTreeMap<String, SkuState> {
    for state in states.values_mut() {
        state.decisions.clear();
    }
    states
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_written_by_the_applier_reads_back_identically_through_every_path(
) -> anyhow::Result<()> {
    let h = Harness::new("layout", 3).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    let records = traffic::restock_all(&h.ledger, &SKUS, 40).await?
        + traffic::orders(&h.ledger, &SKUS, 0, 60).await?;
    h.wait_for_archive(records as i64).await?;
    applier.stop().await?;
    archiver.stop().await?;
    let redis = h.projection.connection();
    let live = states(&h.projection).await?;

    // The applier's state is the reference fold of the log.
    h.assert_projection_matches_log().await?;

    // Stock fields, as reconcile reads them.
    let names: Vec<&str> = SKUS.to_vec();
    for (sku, stock) in SKUS.iter().zip(h.projection.stock(&names).await?) {
        let stock = stock.expect("every SKU has a stock hash");
        let state = &live[*sku];
        assert_eq!(
            (
                stock.available,
                stock.total,
                Some(stock.offset),
                stock.partition
            ),
            (
                state.available,
                state.total,
                state.last_offset,
                state.partition
            ),
            "{sku}"
        );
    }
    let report = reconcile(&redis, &h.ns.prefix, &h.pool, &h.ns.topic, 2, |_| {}).await?;
    assert!(report.differences.is_empty(), "{:?}", report.differences);

    // Exported as a snapshot keeps it, in the stored forms.
    for export in h.projection.export(&names).await? {
        let state = &live[&export.sku];
        let (users, orders): (Vec<_>, Vec<_>) = export
            .orders
            .iter()
            .partition(|(field, _)| user_of_field(field).is_some());
        let orders: stockledger_core::machine::Orders = orders
            .into_iter()
            .map(|(id, entry)| (id.clone(), decode_order(entry).expect("an order entry")))
            .collect();
        assert_eq!(&orders, &state.orders, "{}", export.sku);
        let users: stockledger_core::machine::Users = users
            .into_iter()
            .filter_map(|(field, units)| {
                Some((user_of_field(field)?.to_owned(), units.parse().ok()?))
            })
            .collect();
        assert_eq!(&users, &state.users, "{}", export.sku);
        assert_eq!(export.adjustments.len(), state.adjustments.len());
    }

    // Snapshot, then restore into a fresh prefix: everything but the
    // per-record decisions (which snapshots leave to the archive).
    let start = snapshot::committed_offsets(&h.kafka, &h.ns.applier_group, &h.ns.topic).await?;
    let snap = snapshot::take(
        &h.pool,
        &redis,
        &h.ns.prefix,
        &h.ns.topic,
        &start,
        2,
        |_| {},
    )
    .await?;
    let restored_prefix = format!("{}-restored", h.ns.prefix);
    snapshot::restore(&h.pool, &snap, &redis, &restored_prefix, 2).await?;
    let restored = Projection::new(redis.clone(), restored_prefix.clone());
    assert_eq!(
        without_decisions(states(&restored).await?),
        without_decisions(live.clone())
    );

    // Every archived decision is what the decision lookup answers.
    let mut archived: HashMap<(i32, i64), Decision> = HashMap::new();
    for sku in SKUS {
        for row in query::history(&h.pool, &h.ns.topic, &HistoryOf::Sku(sku.into()), 10_000).await?
        {
            let decision = Decision {
                result: ResultCode::parse(&row.result).expect("a known result"),
                delta: row.delta,
                available: row.available_after.expect("a decided record's figures"),
                total: row.total_after.expect("a decided record's figures"),
                reason: row.reason,
                location: row.location,
                events: StockEvents::of(
                    (row.events.iter().flatten()).filter_map(|k| StockEventKind::parse(k)),
                ),
            };
            archived.insert((row.partition, row.log_offset), decision.clone());
            let looked_up = h
                .projection
                .decision(sku, row.partition, row.log_offset)
                .await?;
            assert_eq!(looked_up, Some(decision), "{sku} at {}", row.log_offset);
        }
    }
    assert_eq!(archived.len() as u64, records);

    // A replay into a fresh prefix gives the same hashes, and swapping it
    // in leaves the live state as it was; only the marker's generation
    // moved, once a SKU, so no write decided before the swap lands after
    // it. (Contents, not DUMP bytes: the lookups above stepped the
    // incremental rehashing of the larger hashes.)
    let mut before = hashes_under(&redis, &h.ns.prefix).await?;
    let report = replay(h.replay_swap_config(true), pending(), |_| {}).await?;
    assert_eq!(report.swapped, SKUS.len());
    assert_eq!(states(&h.projection).await?, live);
    let mut after = hashes_under(&redis, &h.ns.prefix).await?;
    let generation = |hashes: &mut BTreeMap<String, BTreeMap<String, String>>| {
        (hashes.get_mut(":meta"))
            .and_then(|meta| meta.remove("generation"))
            .map_or(Ok(0), |g| g.parse::<usize>())
    };
    let moved = generation(&mut after)? - generation(&mut before)?;
    assert_eq!(moved, SKUS.len(), "the generation moved once a SKU swapped");
    assert_eq!(after, before);
    Ok(())
}
