//! Named seats under contention: many buyers of overlapping seat sets at
//! once, some dying before they pay (their holds expire by themselves),
//! some paying, some cancelling, some buying outright. No seat is ever
//! given to two live orders at once, by the ledger's own decisions in log
//! order; every seat ends available or sold to the one order that
//! bought it; the projection agrees with the pure fold of the log and a
//! replay rebuilds it; the archive tells each seat's story.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use stockledger_analysts::query::{history, HistoryOf};
use stockledger_client::{Receipt, RedisDecisions};
use stockledger_core::{
    codec, AdjustmentId, CommandBody, Confirm, Decision, Deduct, Expire, OrderId, Restock,
    ResultCode, Rollback, Sku, Unit,
};
use stockledger_maintenance::replay::replay;
use stockledger_runtime::clock::now_ms;
use stockledger_testkit::{wait_until, Harness};

const PARTITIONS: i32 = 4;
/// Seats per show: few, so that buyers collide.
const SEATS: usize = 12;
const BUYERS: usize = 48;

fn seat(n: usize) -> String {
    format!("R1-{n}")
}

async fn decided(reader: &RedisDecisions, receipt: Receipt) -> anyhow::Result<Decision> {
    Ok(reader.wait(&receipt, Duration::from_secs(30)).await?)
}

/// What a buyer did, and what the ledger said.
#[derive(Debug)]
struct Buyer {
    show: String,
    order: String,
    seats: Vec<String>,
    held: ResultCode,
    /// `Some(true)`: paid (confirmed, or bought outright); `Some(false)`:
    /// cancelled; `None`: died, or was refused.
    paid: Option<bool>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buyers_of_overlapping_seats_never_share_one_and_every_seat_ends_free_or_sold(
) -> anyhow::Result<()> {
    let h = Harness::new("seat-race", PARTITIONS).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    let reader = RedisDecisions::connect(&h.redis_url, h.ns.prefix.clone()).await?;
    let shows = ["SHOW-A", "SHOW-B"];
    for show in shows {
        let seats: Vec<String> = (0..SEATS).map(seat).collect();
        let body = CommandBody::Restock(Restock::units(AdjustmentId::new("hall")?, &seats)?);
        let added = decided(&reader, h.ledger.send(&Sku::new(show)?, body).await?).await?;
        assert_eq!(added.result, ResultCode::Applied, "{added:?}");
    }
    // Buyer n wants 2 or 3 adjacent seats starting at a seat that walks
    // the row, so neighbours overlap. A quarter buy outright; of the rest
    // who get their seats, the first three die holding them (the holds
    // last 3 s), and the others pay or cancel.
    let dying = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for n in 0..BUYERS {
        let producer = h.ledger.clone();
        let reader = reader.clone();
        let dying = dying.clone();
        let show = shows[n % shows.len()].to_owned();
        let seats: Vec<String> = (0..2 + n % 2).map(|k| seat((n / 2 + k) % SEATS)).collect();
        tasks.push(tokio::spawn(async move {
            let order = format!("buyer-{n}");
            let outright = n % 4 == 3;
            let deduct = Deduct {
                expires_at: (!outright).then(|| now_ms() + 3_000),
                ..Deduct::for_units(OrderId::new(order.clone())?, &seats)?
            };
            let sku = Sku::new(show.clone())?;
            let sent = producer.send(&sku, CommandBody::Deduct(deduct)).await?;
            let held = decided(&reader, sent).await?;
            let mut buyer = Buyer {
                show,
                order: order.clone(),
                seats,
                held: held.result,
                paid: None,
            };
            if held.result != ResultCode::Applied {
                let reason = held.reason.unwrap_or_default();
                assert!(reason.starts_with("units not free: "), "{reason}");
                return anyhow::Ok(buyer);
            }
            if outright {
                buyer.paid = Some(true);
                return Ok(buyer);
            }
            if dying.fetch_add(1, Ordering::SeqCst) < 3 {
                return Ok(buyer); // dies holding its seats
            }
            let order_id = OrderId::new(order)?;
            let body = if n % 2 == 0 {
                CommandBody::Confirm(Confirm { order_id })
            } else {
                CommandBody::Rollback(Rollback::new(order_id, Some("changed my mind".into()))?)
            };
            let ended = decided(&reader, producer.send(&sku, body).await?).await?;
            buyer.paid = match ended.result {
                ResultCode::Confirmed => Some(true),
                ResultCode::Applied => Some(false),
                other => anyhow::bail!("ending a live hold was {other}: {ended:?}"),
            };
            Ok(buyer)
        }));
    }
    let mut buyers = Vec::new();
    for task in tasks {
        buyers.push(task.await??);
    }
    let held = buyers
        .iter()
        .filter(|b| b.held == ResultCode::Applied)
        .count();
    let refused = buyers.len() - held;
    let died = buyers
        .iter()
        .filter(|b| b.held == ResultCode::Applied && b.paid.is_none())
        .count();
    eprintln!("seats: {held} holds or sales taken, {refused} refused, {died} buyers died");
    assert!(refused > 0, "no buyer collided: the test proves nothing");
    assert!(died > 0, "no buyer died holding seats");

    // The dead buyers' holds expire by themselves.
    wait_until("every hold to end", Duration::from_secs(60), || async {
        let mut live = 0;
        for show in shows {
            live += h.projection.read_sku(show).await?.map_or(0, |s| s.reserved);
        }
        Ok((live == 0).then_some(()))
    })
    .await?;
    let given = assert_no_seat_given_twice(&h).await?;
    assert!(given >= held, "{given} seat takes in the log, {held} told");
    // Every seat sold went to the one buyer told it was theirs.
    let mut sold: BTreeMap<(String, String), String> = BTreeMap::new();
    for b in buyers.iter().filter(|b| b.paid == Some(true)) {
        for s in &b.seats {
            let previous = sold.insert((b.show.clone(), s.clone()), b.order.clone());
            assert!(
                previous.is_none(),
                "{}/{s} sold to {} and {previous:?}",
                b.show,
                b.order
            );
        }
    }
    for show in shows {
        let map = h.projection.units(show).await?;
        assert_eq!(map.len(), SEATS, "{map:?}");
        let state = h.projection.read_sku(show).await?.unwrap();
        let mut sold_here = 0;
        for (name, unit) in &map {
            let buyer = sold.get(&(show.to_owned(), name.clone()));
            match unit {
                Unit::Sold(order) => {
                    sold_here += 1;
                    assert_eq!(Some(order), buyer, "{show}/{name}");
                }
                Unit::Available => assert_eq!(buyer, None, "{show}/{name} was sold"),
                Unit::Held(order) => panic!("{show}/{name} still held by {order}"),
            }
        }
        assert_eq!(
            (state.available, state.total),
            (SEATS as i64 - sold_here, SEATS as i64),
            "{show}"
        );
    }
    h.assert_contract().await?;

    // The archive tells each seat's story: a seat sold was asked for by
    // every buyer whose refusal named it, and its buyer's confirm is there.
    h.wait_for_archive(h.read(&h.ns.topic).await?.len() as i64)
        .await?;
    if let Some(((show, name), order)) = sold.iter().next() {
        let q = HistoryOf::Unit {
            sku: show.clone(),
            unit: name.clone(),
        };
        let entries = history(&h.pool, &h.ns.topic, &q, 1000).await?;
        let orders: BTreeSet<&str> = entries
            .iter()
            .filter_map(|e| e.order_id.as_deref())
            .collect();
        assert!(orders.contains(order.as_str()), "{entries:?}");
        let asked_by: BTreeSet<&str> = buyers
            .iter()
            .filter(|b| &b.show == show && b.seats.contains(name))
            .map(|b| b.order.as_str())
            .collect();
        assert!(
            asked_by.iter().all(|o| orders.contains(o)),
            "{asked_by:?} vs {orders:?}"
        );
        assert_eq!(entries[0].adjustment_id.as_deref(), Some("hall"));
    }

    // A replay rebuilds the same seats.
    applier.stop().await?;
    let before: Vec<_> = [
        h.projection.units(shows[0]).await?,
        h.projection.units(shows[1]).await?,
    ]
    .into();
    replay(h.replay_swap_config(true), std::future::pending(), |_| {}).await?;
    let after: Vec<_> = [
        h.projection.units(shows[0]).await?,
        h.projection.units(shows[1]).await?,
    ]
    .into();
    assert_eq!(before, after);
    h.assert_projection_matches_log().await?;
    archiver.stop().await?;
    Ok(())
}

/// No seat was ever held or sold to two live orders at once, as the
/// ledger told it: walking each show's records in log order with the
/// decision the ledger published for each, a take of seats is applied
/// only while none of them belongs to a live order; a rollback applied
/// or an expiry gives the order's seats back. Returns the takes applied.
async fn assert_no_seat_given_twice(h: &Harness) -> anyhow::Result<usize> {
    let mut results: BTreeMap<(i32, i64), ResultCode> = BTreeMap::new();
    for record in h.read(&h.ns.outcomes_topic).await? {
        let outcome = codec::decode_outcome(record.payload.as_deref().unwrap_or_default())?;
        let at = (outcome.position.partition, outcome.position.offset);
        results.insert(at, outcome.decision.result);
    }
    let mut log = h.read(&h.ns.topic).await?;
    log.sort_by_key(|r| (r.partition, r.offset));
    // (show, seat) → the order that has it; (show, order) → its seats.
    let mut taken: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut seats_of: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut takes = 0;
    for record in log {
        let Ok(command) = codec::decode_command(record.payload.as_deref().unwrap_or_default())
        else {
            continue;
        };
        let at = (record.partition, record.offset);
        let result = *results
            .get(&at)
            .ok_or_else(|| anyhow::anyhow!("no decision published for {at:?}"))?;
        let show = command.sku.as_str().to_owned();
        match (&command.body, result) {
            (CommandBody::Deduct(d), ResultCode::Applied) if !d.units.is_empty() => {
                let order = d.order_id.as_str().to_owned();
                let seats: Vec<String> = d.units.iter().map(|u| u.as_str().to_owned()).collect();
                for seat in &seats {
                    let key = (show.clone(), seat.clone());
                    if let Some(other) = taken.insert(key, order.clone()) {
                        anyhow::bail!(
                            "{show}/{seat} given to {order} at {at:?} while {other} had it"
                        );
                    }
                }
                seats_of.insert((show, order), seats);
                takes += 1;
            }
            (CommandBody::Rollback(Rollback { order_id, .. }), ResultCode::Applied)
            | (CommandBody::Expire(Expire { order_id }), ResultCode::Expired) => {
                for seat in seats_of
                    .remove(&(show.clone(), order_id.as_str().to_owned()))
                    .unwrap_or_default()
                {
                    taken.remove(&(show.clone(), seat));
                }
            }
            _ => {}
        }
    }
    Ok(takes)
}
