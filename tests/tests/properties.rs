#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test
//! Property tests: the applier's fold into Redis against the state machine
//! alone on random logs and delivery schedules (one member, and two at
//! once), the machine's invariants, and byte-level determinism of the
//! Redis state.
//!
//! `PROPTEST_CASES=20000 cargo test -p stockledger-e2e --test properties`
//! runs a long local session; failing cases shrink to a minimal log, which
//! proptest prints.

use std::collections::{BTreeMap, BTreeSet};

use proptest::test_runner::{Config, TestCaseError, TestRunner};
use stockledger_core::partition::home_partition;
use stockledger_core::{
    Changes, CommandBody, Decision, Hold, LocationStock, LogFold, OrderStatus, Placement,
    ResultCode, SalePhase, SkuState, StockEventKind, StockEvents, Unit,
};
use stockledger_projection::{keys, Entry, Projection};
use stockledger_redis::RedisConn;
use stockledger_testkit::redis_dump::{delete_prefix, dump_prefix, hashes_under};
use stockledger_testkit::services::redis_url;
use stockledger_testkit::workload::{cases, scenario, Scenario, PARTITIONS, SKUS};

fn runner(default_cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases: cases(default_cases),
        failure_persistence: None,
        ..Config::default()
    })
}

fn fail(e: anyhow::Error) -> TestCaseError {
    TestCaseError::fail(format!("{e:#}"))
}

/// The stock events a record that took the SKU's sale from `before` to
/// `after` raises: `PAUSED` and `RESUMED` when its pause changed; `OPENED`
/// and `CLOSED` when a new window (`set_window`: the record set one) put it
/// on sale or took it off, or when its time passed the opening or the
/// closing (both, passing both).
fn sale_events(
    set_window: bool,
    before: &stockledger_core::SkuState,
    after: &stockledger_core::SkuState,
) -> StockEvents {
    let (was, now) = (before.phase, after.phase);
    let (opened, closed) = if set_window {
        (
            was != SalePhase::Open && now == SalePhase::Open,
            was == SalePhase::Open && now != SalePhase::Open,
        )
    } else {
        (
            was == SalePhase::NotOpen && now > was,
            was != SalePhase::Closed && now == SalePhase::Closed,
        )
    };
    let kinds = [
        (opened, StockEventKind::Opened),
        (closed, StockEventKind::Closed),
        (!before.paused && after.paused, StockEventKind::Paused),
        (before.paused && !after.paused, StockEventKind::Resumed),
    ];
    StockEvents::of(kinds.into_iter().filter(|(on, _)| *on).map(|(_, k)| k))
}

/// Runs `property` on generated scenarios with a Redis connection.
fn with_redis(
    default_cases: u32,
    max_steps: usize,
    property: impl Fn(&tokio::runtime::Runtime, RedisConn, &Scenario) -> anyhow::Result<()>,
) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let conn = rt
        .block_on(async { anyhow::Ok(RedisConn::connect(redis_url().await?).await?) })
        .unwrap();
    let result = runner(default_cases).run(&scenario(max_steps), |s| {
        property(&rt, conn.clone(), &s).map_err(fail)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

fn unique_prefix(name: &str) -> String {
    format!("prop:{name}:{}", uuid::Uuid::new_v4().simple())
}

/// Applies the scenario's batches through the fold, as the applier does.
async fn apply_batches<'a>(
    projection: &Projection,
    s: &'a Scenario,
    batches: impl IntoIterator<Item = &'a [usize]>,
    mut per_batch: impl FnMut(&'a [usize], Vec<Decision>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    for batch in batches {
        let prepared = projection.prepare(
            batch.iter().map(|&i| {
                let r = &s.log[i];
                Entry {
                    partition: r.partition,
                    offset: r.offset,
                    timestamp: r.timestamp,
                    command: Some(&r.command),
                }
            }),
            PARTITIONS,
        );
        per_batch(batch, projection.apply(&prepared).await?)?;
    }
    Ok(())
}

/// Fails unless every SKU's state in `projection` is the machine's.
async fn same_final_state(projection: &Projection, reference: &LogFold) -> anyhow::Result<()> {
    for sku in SKUS {
        let actual = projection.read_sku(sku).await?;
        anyhow::ensure!(
            actual.as_ref() == reference.sku(sku),
            "final state of {sku}: Redis {actual:#?}\nreference {:#?}",
            reference.sku(sku)
        );
    }
    Ok(())
}

/// Fails unless the index of live holds in `prefix` names exactly the
/// machine's live reservations, each under its SKU's partition with its
/// deadline: redeliveries and rewinds (a crash's aftermath) leave no hold
/// behind and lose none.
async fn same_holds(conn: &RedisConn, prefix: &str, reference: &LogFold) -> anyhow::Result<()> {
    let mut expected: BTreeSet<(i32, String, i64)> = BTreeSet::new();
    for sku in SKUS {
        let Some(state) = reference.sku(sku) else {
            continue;
        };
        let owner = state.owner(home_partition(sku.as_bytes(), PARTITIONS));
        for (order, entry) in &state.orders {
            if let (OrderStatus::Reserved, Some(deadline)) = (entry.status, entry.expires_at) {
                expected.insert((owner, keys::hold_member(sku, order), deadline));
            }
        }
    }
    let mut actual = BTreeSet::new();
    for partition in 0..PARTITIONS {
        let held: Vec<(String, i64)> = redis::cmd("ZRANGE")
            .arg(keys::holds_key(prefix, partition))
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut conn.clone())
            .await?;
        actual.extend(held.into_iter().map(|(m, d)| (partition, m, d)));
    }
    anyhow::ensure!(
        actual == expected,
        "the index of live holds: Redis {actual:?}\nreference {expected:?}"
    );
    Ok(())
}

#[test]
fn the_fold_into_redis_decides_exactly_what_the_machine_alone_decides() {
    with_redis(600, 60, |rt, conn, s| {
        rt.block_on(async {
            let prefix = unique_prefix("differential");
            let projection = Projection::new(conn.clone(), prefix.clone());
            let mut reference = LogFold::new(PARTITIONS);
            apply_batches(&projection, s, s.batches(), |batch, got| {
                let expected: Vec<Decision> = batch
                    .iter()
                    .map(|&i| {
                        let r = &s.log[i];
                        reference.apply(r.partition, r.offset, r.timestamp, &r.command)
                    })
                    .collect();
                anyhow::ensure!(
                    got == expected,
                    "batch {batch:?}: the fold decided {got:#?}\nthe machine alone {expected:#?}"
                );
                Ok(())
            })
            .await?;
            same_final_state(&projection, &reference).await?;
            same_holds(&conn, &prefix, &reference).await?;
            delete_prefix(&conn, &prefix).await
        })
    });
}

/// Two members folding the same deliveries into one prefix at once, in
/// different batch shapes, as an old owner that has not noticed it lost
/// its partitions and the new owner do during a rebalance: every write is
/// fenced, so each decision either member returns is the one the log
/// decides for that record, and Redis ends as the fold of the log.
#[test]
fn two_members_folding_one_log_at_once_decide_as_one() {
    let refused = std::sync::atomic::AtomicU64::new(0);
    with_redis(200, 60, |rt, conn, s| {
        rt.block_on(async {
            let prefix = unique_prefix("two-members");
            let (old, new) = (
                Projection::new(conn.clone(), prefix.clone()),
                Projection::new(conn.clone(), prefix.clone()),
            );
            let mut reference = LogFold::new(PARTITIONS);
            let mut first: BTreeMap<usize, Decision> = BTreeMap::new();
            for &i in &s.deliveries {
                let r = &s.log[i];
                let decision = reference.apply(r.partition, r.offset, r.timestamp, &r.command);
                first.entry(i).or_insert(decision);
            }
            let check = |member: &str, batch: &[usize], got: Vec<Decision>| {
                for (&i, decision) in batch.iter().zip(&got) {
                    anyhow::ensure!(
                        Some(decision) == first.get(&i),
                        "the {member} member decided {decision:?} for log record {i}; \
                         the log decides {:?}",
                        first.get(&i)
                    );
                }
                Ok(())
            };
            let singles: Vec<&[usize]> = s.deliveries.chunks(1).collect();
            let (a, b) = tokio::join!(
                apply_batches(&old, s, s.batches(), |batch, got| check("old", batch, got)),
                apply_batches(&new, s, singles, |batch, got| check("new", batch, got)),
            );
            a?;
            b?;
            refused.fetch_add(
                old.fence_refusals() + new.fence_refusals(),
                std::sync::atomic::Ordering::Relaxed,
            );
            same_final_state(&new, &reference).await?;
            delete_prefix(&conn, &prefix).await
        })
    });
    // The two raced: some writes were refused by the fence and decided
    // again, so the cases above tested it.
    assert!(refused.into_inner() > 0, "no write was ever fenced");
}

#[test]
fn replaying_into_two_prefixes_gives_byte_equal_redis_state() {
    with_redis(200, 60, |rt, conn, s| {
        rt.block_on(async {
            let (a, b) = (unique_prefix("replay-a"), unique_prefix("replay-b"));
            let (fold_a, fold_b) = (
                Projection::new(conn.clone(), a.clone()),
                Projection::new(conn.clone(), b.clone()),
            );
            // The same deliveries, cut into batches differently.
            fold_a.mark("log", PARTITIONS).await?;
            apply_batches(&fold_a, s, s.batches(), |_, _| Ok(())).await?;
            fold_b.mark("log", PARTITIONS).await?;
            let singles: Vec<&[usize]> = s.deliveries.chunks(1).collect();
            apply_batches(&fold_b, s, singles, |_, _| Ok(())).await?;
            // The markers say the same, each partition's furthest offset;
            // they are compared by what they say, as a hash's bytes follow
            // the order its fields were first written in, which the
            // batches decide.
            let (marker_a, marker_b) = (fold_a.marker().await?, fold_b.marker().await?);
            anyhow::ensure!(
                marker_a == marker_b,
                "markers differ: {marker_a:?} vs {marker_b:?}"
            );
            let furthest = s.deliveries.iter().fold(BTreeMap::new(), |mut m, &i| {
                let r = &s.log[i];
                let last = m.entry(r.partition).or_insert(r.offset);
                *last = (*last).max(r.offset);
                m
            });
            anyhow::ensure!(marker_a.is_some_and(|m| m.applied == furthest));
            let (mut dump_a, mut dump_b) =
                (dump_prefix(&conn, &a).await?, dump_prefix(&conn, &b).await?);
            dump_a.remove(":meta");
            dump_b.remove(":meta");
            anyhow::ensure!(!s.log.is_empty() || dump_a.is_empty());
            let differ: Vec<&String> = (dump_a.keys().chain(dump_b.keys()))
                .filter(|key| dump_a.get(*key) != dump_b.get(*key))
                .collect();
            anyhow::ensure!(
                differ.is_empty(),
                "dumps differ at {differ:?}: one batch shape wrote {:?}, the other {:?}",
                hashes_under(&conn, &a).await?,
                hashes_under(&conn, &b).await?
            );
            delete_prefix(&conn, &a).await?;
            delete_prefix(&conn, &b).await
        })
    });
}

#[test]
fn the_reference_machine_keeps_the_ledger_invariants() {
    on_machine_alone(5000, check_invariants);
}

/// Runs `property` on generated scenarios of up to 80 steps, with the
/// machine alone (no Redis).
fn on_machine_alone(default_cases: u32, property: fn(&Scenario) -> anyhow::Result<()>) {
    let result = runner(default_cases).run(&scenario(80), |s| property(&s).map_err(fail));
    if let Err(e) = result {
        panic!("{e}");
    }
}

fn check_invariants(s: &Scenario) -> anyhow::Result<()> {
    let mut ledger = LogFold::new(PARTITIONS);
    // (sku, order) pairs whose rollback has been applied for the first time,
    // and those a rollback has given stock back to.
    let mut rolled_back: BTreeSet<(String, String)> = BTreeSet::new();
    let mut credited: BTreeSet<(String, String)> = BTreeSet::new();
    for &i in &s.deliveries {
        let record = &s.log[i];
        let sku = record.command.sku.as_str().to_owned();
        let before = ledger.sku(&sku).cloned().unwrap_or_default();
        let home = home_partition(sku.as_bytes(), PARTITIONS);
        let first_time = before.last_offset.is_none_or(|last| record.offset > last);
        let decision = ledger.apply(
            record.partition,
            record.offset,
            record.timestamp,
            &record.command,
        );
        let after = ledger.sku(&sku).cloned().unwrap_or_default();
        if record.partition != before.owner(home) {
            anyhow::ensure!(
                decision.result == ResultCode::Misrouted && before == after,
                "{sku}: a record on partition {} (owner {}) was {decision:?}",
                record.partition,
                before.owner(home)
            );
            continue;
        }
        anyhow::ensure!(
            decision.result != ResultCode::Misrouted,
            "{sku}: a record on its own partition was misrouted"
        );

        anyhow::ensure!(
            after.available >= 0 && after.reserved >= 0,
            "{sku}: available {} or reserved {} below zero",
            after.available,
            after.reserved
        );
        // held + sold + available = total, each counted from the orders.
        let units = |status: OrderStatus| -> i64 {
            after
                .orders
                .values()
                .filter(|o| o.status == status)
                .map(|o| o.live_units())
                .sum()
        };
        let held = units(OrderStatus::Reserved);
        let sold = units(OrderStatus::Deducted) + units(OrderStatus::Confirmed);
        anyhow::ensure!(
            held == after.reserved && after.available + held + sold == after.total,
            "{sku}: available {} + held {held} (recorded {}) + sold {sold} != total {}",
            after.available,
            after.reserved,
            after.total
        );
        // Named units: the SKU counts them, each is held by exactly the
        // live reservation that names it, sold to exactly the order that
        // bought it, or free.
        if !after.units.is_empty() {
            let free = after
                .units
                .values()
                .filter(|u| **u == Unit::Available)
                .count();
            anyhow::ensure!(
                after.total == after.units.len() as i64 && after.available == free as i64,
                "{sku}: total {} and available {} for units {:?}",
                after.total,
                after.available,
                after.units
            );
        }
        for (name, unit) in &after.units {
            let order = unit
                .order()
                .and_then(|o| after.orders.get(o).map(|e| (o, e)));
            let consistent = match (unit, order) {
                (Unit::Available, _) => true,
                (Unit::Held(_), Some((_, e))) => e.status == OrderStatus::Reserved,
                (Unit::Sold(_), Some((_, e))) => {
                    matches!(e.status, OrderStatus::Deducted | OrderStatus::Confirmed)
                        && e.live_units() > 0
                }
                _ => false,
            };
            anyhow::ensure!(
                consistent && order.is_none_or(|(_, e)| e.units.contains(name)),
                "{sku}: unit {name} is {unit:?} but its order is {order:?}"
            );
        }
        for (id, order) in &after.orders {
            if order.live_units() > 0 {
                for name in &order.units {
                    anyhow::ensure!(
                        after.units.get(name).and_then(Unit::order) == Some(id.as_str()),
                        "{sku}: order {id} is {:?} but its unit {name} is {:?}",
                        order.status,
                        after.units.get(name)
                    );
                }
            }
        }
        // Locations: they sum to the SKU's stock, none is below zero, and
        // what orders hold at each is what was taken from there.
        if !after.locations.is_empty() {
            let sum = |f: fn(&LocationStock) -> i64| after.locations.iter().map(f).sum::<i64>();
            anyhow::ensure!(
                (sum(|l| l.available), sum(|l| l.total)) == (after.available, after.total),
                "{sku}: locations {:?} do not sum to available {} of total {}",
                after.locations,
                after.available,
                after.total
            );
        }
        for at in &after.locations {
            let taken: i64 = (after.orders.values())
                .filter(|o| o.location.as_deref() == Some(at.name.as_str()))
                .map(|o| o.live_units())
                .sum();
            anyhow::ensure!(
                at.available >= 0 && at.held() == taken,
                "{sku}: {at:?} but its live orders took {taken}"
            );
        }
        anyhow::ensure!(
            (after.orders.values()).all(|o| o.location.is_none() || !after.locations.is_empty()),
            "{sku}: an order has a location the sku does not keep"
        );
        // Stock events: exactly the crossings of 0 and of the threshold
        // the record caused, never on a redelivery (it changes nothing).
        let expected = if first_time {
            StockEvents::between(before.available, after.available, before.low_stock_below).with(
                sale_events(
                    matches!(record.command.body, CommandBody::Window(_))
                        && decision.result == ResultCode::Applied,
                    &before,
                    &after,
                ),
            )
        } else {
            after
                .decisions
                .get(&record.offset)
                .map_or(StockEvents::NONE, |d| d.events)
        };
        anyhow::ensure!(
            decision.events == expected,
            "{sku}: {decision:?} after available {} (threshold {:?}), expected {expected:?}",
            before.available,
            before.low_stock_below
        );
        // Each user's counter is what their live orders hold or bought.
        let mut per_user = stockledger_core::machine::Users::default();
        for order in after.orders.values() {
            if let (Some(user), n @ 1..) = (&order.user, order.live_units()) {
                *per_user.entry(user.clone()).or_default() += n;
            }
        }
        anyhow::ensure!(
            per_user == after.users,
            "{sku}: user counters {:?}, orders say {per_user:?}",
            after.users
        );
        // An order that ended (rolled back, expired, cancelled) never
        // comes back: its units are never also sold.
        for (id, order) in &before.orders {
            let ended = matches!(
                order.status,
                OrderStatus::RolledBack | OrderStatus::Expired | OrderStatus::Cancelled
            );
            anyhow::ensure!(
                !ended || after.orders.get(id).map(|o| o.status) == Some(order.status),
                "{sku}: order {id} left {:?} for {:?}",
                order.status,
                after.orders.get(id)
            );
        }
        if !first_time {
            anyhow::ensure!(
                before == after,
                "{sku}: a redelivery at {} changed state",
                record.offset
            );
            anyhow::ensure!(Some(&decision) == after.decisions.get(&record.offset));
            continue;
        }
        // Only a sale's own commands change it; only a deduct is refused
        // by it.
        let sale_refusal = matches!(
            decision.result,
            ResultCode::RejectedNotOpen | ResultCode::RejectedClosed | ResultCode::RejectedPaused
        );
        anyhow::ensure!(
            !sale_refusal || matches!(record.command.body, CommandBody::Deduct(_)),
            "{sku}: {:?} refused by the sale: {decision:?}",
            record.command.body.kind()
        );
        if record.command.body.change_id().is_none() {
            anyhow::ensure!(
                (before.window, before.paused) == (after.window, after.paused),
                "{sku}: a {:?} changed the sale",
                record.command.body.kind()
            );
        }
        match &record.command.body {
            CommandBody::Rollback(r) => {
                let key = (sku.clone(), r.order_id.as_str().to_owned());
                if decision.result == ResultCode::Applied {
                    let taken = before.orders.get(key.1.as_str()).map(|o| o.quantity);
                    anyhow::ensure!(
                        Some(decision.delta) == taken,
                        "rollback credited {} for a deduct of {taken:?}",
                        decision.delta
                    );
                    anyhow::ensure!(credited.insert(key.clone()), "{key:?} credited twice");
                } else {
                    anyhow::ensure!(decision.delta == 0, "an unapplied rollback changed stock");
                }
                rolled_back.insert(key);
            }
            CommandBody::Deduct(d) => {
                let key = (sku.clone(), d.order_id.as_str().to_owned());
                if rolled_back.contains(&key) {
                    anyhow::ensure!(
                        decision.result != ResultCode::Applied && decision.delta == 0,
                        "a deduct after its rollback took stock: {decision:?}"
                    );
                }
                // Nothing is sold while paused or outside the window, by
                // the record's own timestamp.
                if decision.result == ResultCode::Applied {
                    anyhow::ensure!(!before.paused, "{sku}: a deduct applied while paused");
                    let phase = before.window.phase(record.timestamp);
                    anyhow::ensure!(
                        phase == SalePhase::Open,
                        "{sku}: a deduct at {} applied {} ({})",
                        record.timestamp,
                        phase.as_str(),
                        before.window
                    );
                }
                // A user is never taken above the limit.
                if let (ResultCode::Applied, Some(limit)) = (decision.result, after.limit) {
                    let user = d.user_id.as_ref().map(|u| u.as_str().to_owned());
                    let counted = user.and_then(|u| after.users.get(&u).copied());
                    anyhow::ensure!(
                        counted.is_some_and(|c| c <= limit),
                        "{sku}: a deduct under limit {limit} left its user at {counted:?}"
                    );
                }
                // A hold is decided against its record's own timestamp.
                if let (ResultCode::Applied, Some(deadline)) = (decision.result, d.expires_at) {
                    anyhow::ensure!(
                        deadline > record.timestamp,
                        "{sku}: a hold until {deadline} was taken at {}",
                        record.timestamp
                    );
                }
            }
            CommandBody::Confirm(_) | CommandBody::Expire(_) => {
                let order = record.command.body.order_id().map(|o| o.as_str());
                let entry = order.and_then(|o| after.orders.get(o));
                match decision.result {
                    ResultCode::Confirmed => anyhow::ensure!(
                        entry.and_then(|e| e.expires_at) >= Some(record.timestamp),
                        "{sku}: confirmed after the deadline: {entry:?} at {}",
                        record.timestamp
                    ),
                    ResultCode::Expired => anyhow::ensure!(
                        entry.and_then(|e| e.expires_at) < Some(record.timestamp),
                        "{sku}: expired before the deadline: {entry:?} at {}",
                        record.timestamp
                    ),
                    _ => {}
                }
            }
            CommandBody::Restock(_)
            | CommandBody::Refund(_)
            | CommandBody::Limit(_)
            | CommandBody::Transfer(_)
            | CommandBody::Alerts(_) => {}
            CommandBody::Window(_) | CommandBody::Pause(_) | CommandBody::Resume(_) => {
                anyhow::ensure!(
                    decision.delta == 0 && before.available == after.available,
                    "{sku}: a change of the sale moved stock: {decision:?}"
                );
            }
            CommandBody::Refused(_) => {
                anyhow::ensure!(
                    decision.result == ResultCode::RejectedValue
                        && (before.available, before.total) == (after.available, after.total),
                    "{sku}: a refused command was not refused alone: {decision:?}"
                );
            }
        }
    }
    // Replaying the whole log again changes nothing and repeats every decision.
    let folded = ledger.clone();
    let mut first: BTreeMap<(String, i64), Decision> = BTreeMap::new();
    for (sku, state) in &folded.skus {
        for (offset, d) in &state.decisions {
            first.insert((sku.clone(), *offset), d.clone());
        }
    }
    for record in &s.log {
        let again = ledger.apply(
            record.partition,
            record.offset,
            record.timestamp,
            &record.command,
        );
        let sku = record.command.sku.as_str();
        let owner = ledger.sku(sku).map(|state| state.partition);
        if owner != Some(Some(record.partition)) {
            anyhow::ensure!(again.result == ResultCode::Misrouted);
            continue;
        }
        let key = (sku.to_owned(), record.offset);
        anyhow::ensure!(
            first.get(&key) == Some(&again),
            "replay of {key:?} decided {again:?}"
        );
    }
    anyhow::ensure!(ledger == folded, "replaying the log changed the state");
    Ok(())
}

/// The change set the machine gives with each decision names every part
/// of the state the record changed (the projection writes those parts
/// only): the order named, with its user's count and its units; the
/// adjustment spent, with a restock's new units; the limit, the
/// threshold, the stock per location, the sale. A redelivery or a
/// misrouted record changes nothing, and every record naming an order
/// that was ever a reservation says where its hold stands.
#[test]
fn the_machines_change_sets_name_every_part_a_record_changed() {
    on_machine_alone(2000, check_change_sets);
}

fn check_change_sets(s: &Scenario) -> anyhow::Result<()> {
    // Of any map (the orders are hashed, the rest in trees).
    fn changed<'a, K: Ord + 'a, V: PartialEq + 'a>(
        before: impl IntoIterator<Item = (&'a K, &'a V)>,
        after: impl IntoIterator<Item = (&'a K, &'a V)>,
    ) -> BTreeSet<&'a K> {
        let before: BTreeMap<&K, &V> = before.into_iter().collect();
        let after: BTreeMap<&K, &V> = after.into_iter().collect();
        let differs = |a: &BTreeMap<&'a K, &'a V>, b: &BTreeMap<&'a K, &'a V>| {
            (a.iter().filter(|(k, v)| b.get(*k) != Some(v)))
                .map(|(k, _)| *k)
                .collect::<Vec<_>>()
        };
        (differs(&before, &after).into_iter())
            .chain(differs(&after, &before))
            .collect()
    }
    let mut states: BTreeMap<String, SkuState> = BTreeMap::new();
    for &i in &s.deliveries {
        let record = &s.log[i];
        let sku = record.command.sku.as_str();
        let state = states.entry(sku.to_owned()).or_default();
        let before = state.clone();
        let at = Placement {
            partition: record.partition,
            home: home_partition(sku.as_bytes(), PARTITIONS),
        };
        let body = &record.command.body;
        let (decision, changes) = state.apply_noting(at, record.offset, record.timestamp, body);
        let after = &*state;
        let order = body.order_id().map(|id| id.as_str().to_owned());
        let entry = order.as_ref().and_then(|id| after.orders.get(id));
        let hold = entry.and_then(|e| {
            let deadline = e.expires_at?;
            Some(match e.status {
                OrderStatus::Reserved => Hold::Live(deadline),
                _ => Hold::Ended,
            })
        });
        let what = format!(
            "{sku} offset {}: {body:?} {decision:?} {changes:?}",
            record.offset
        );
        let misrouted = decision.result == ResultCode::Misrouted;
        anyhow::ensure!(
            changes.hold == if misrouted { None } else { hold },
            "{what}: the hold is {hold:?}"
        );
        if !changes.decided {
            anyhow::ensure!(before == *after, "{what}: changed the state undecided");
            let only_hold = Changes {
                hold: changes.hold,
                ..Changes::default()
            };
            anyhow::ensure!(changes == only_hold, "{what}: undecided, yet changes");
            continue;
        }
        anyhow::ensure!(!misrouted, "{what}: misrouted, yet decided");
        let orders = changed(&before.orders, &after.orders);
        let expected: BTreeSet<&String> = order.iter().filter(|_| changes.order).collect();
        anyhow::ensure!(orders == expected, "{what}: orders {orders:?} changed");
        let users = changed(&before.users, &after.users);
        let user = entry
            .filter(|_| changes.order)
            .and_then(|e| e.user.as_ref());
        anyhow::ensure!(
            users.iter().all(|u| Some(*u) == user),
            "{what}: users {users:?} changed"
        );
        let mut units: BTreeSet<String> = BTreeSet::new();
        if changes.order {
            units.extend(entry.iter().flat_map(|e| e.units.iter().cloned()));
        }
        if let (CommandBody::Restock(r), true) = (body, changes.adjustment) {
            units.extend(r.named().iter().map(|u| u.as_str().to_owned()));
        }
        let moved = changed(&before.units, &after.units);
        anyhow::ensure!(
            moved.iter().all(|u| units.contains(*u)),
            "{what}: units {moved:?} changed"
        );
        let spent = changed(&before.adjustments, &after.adjustments);
        let id = body.adjustment_id().filter(|_| changes.adjustment);
        anyhow::ensure!(
            spent.iter().map(|s| s.as_str()).eq(id),
            "{what}: adjustments {spent:?} changed"
        );
        for (flag, moved, part) in [
            (changes.limit, before.limit != after.limit, "limit"),
            (
                changes.low_stock,
                before.low_stock_below != after.low_stock_below,
                "threshold",
            ),
            (
                changes.locations,
                before.locations != after.locations,
                "locations",
            ),
            (
                changes.sale,
                (before.window, before.phase, before.paused)
                    != (after.window, after.phase, after.paused),
                "sale",
            ),
        ] {
            anyhow::ensure!(flag == moved, "{what}: the {part} changed: {moved}");
        }
    }
    Ok(())
}

/// The generator is worth its cases only if they reach every rule: over a
/// thousand scenarios the reference machine takes every decision but
/// INVALID (which never reaches it).
#[test]
fn generated_logs_reach_every_decision() {
    use proptest::strategy::{Strategy, ValueTree};
    // A fixed seed: the question is what the generator can reach, and a
    // rare decision missed by one unlucky draw would only make noise.
    let mut runner = TestRunner::deterministic();
    let mut seen: BTreeSet<ResultCode> = BTreeSet::new();
    // The refusals of named units, by how their reasons begin.
    let unit_refusals = [
        "units not free",
        "units already there",
        "the sku sells named units",
        "the sku sells counted stock",
        "the sku holds",
        "an order of named units",
    ];
    let mut refused: BTreeSet<&str> = BTreeSet::new();
    let mut raised: BTreeSet<StockEventKind> = BTreeSet::new();
    // The refusals of stock by location, by what their reasons say.
    let location_refusals = [
        "unknown location",
        "available at",
        "but no one location has that many",
        "the sku keeps stock by location; name the location",
        "the sku keeps stock by location; named units",
        "units in no location",
        "held by orders at",
        "would leave available at",
    ];
    for _ in 0..1_000 {
        let s = scenario(80).new_tree(&mut runner).unwrap().current();
        let mut ledger = LogFold::new(PARTITIONS);
        for &i in &s.deliveries {
            let r = &s.log[i];
            let decision = ledger.apply(r.partition, r.offset, r.timestamp, &r.command);
            seen.insert(decision.result);
            raised.extend(decision.events.kinds());
            let reason = decision.reason.as_deref().unwrap_or("");
            refused.extend(unit_refusals.iter().filter(|p| reason.starts_with(**p)));
            refused.extend(location_refusals.iter().filter(|p| reason.contains(**p)));
        }
    }
    let unreached: Vec<&&str> = (unit_refusals.iter())
        .chain(&location_refusals)
        .filter(|p| !refused.contains(**p))
        .collect();
    assert!(unreached.is_empty(), "never refused with {unreached:?}");
    let silent: Vec<StockEventKind> = (StockEventKind::ALL.into_iter())
        .filter(|k| !raised.contains(k))
        .collect();
    assert!(silent.is_empty(), "never raised: {silent:?}");
    let missing: Vec<ResultCode> = ResultCode::ALL
        .into_iter()
        .filter(|r| *r != ResultCode::Invalid && !seen.contains(r))
        .collect();
    assert!(missing.is_empty(), "never decided: {missing:?}");
}
