//! The nemesis's traffic. Library, gateway and basket callers work on SKUs
//! with stock to spare and on scarce ones, restocked a few units at a
//! time, so that they sell out again and again while faults strike. A
//! shelf caller sells named seats and stock kept in two places, moved
//! between them. Per-user limits, holds that expire and low-stock
//! thresholds are among the rules in play. Every command the ledger
//! acknowledged is written down, with its position when the answer gave
//! one.

use std::sync::Mutex;
use std::time::Duration;

use serde_json::json;
use stockledger_client::basket::{self, BasketHold, BasketStatus, Decide, Line};
use stockledger_client::{
    CommandBody, Decision, Ledger, OutcomeError, ProducerError, Receipt, UnitId,
};
use stockledger_core::{BasketId, Quantity, RestockMode, Sku};
use stockledger_testkit::ids;
use stockledger_testkit::nemesis::SplitMix64;
use tokio::time::Instant;

/// SKUs with a million units each.
pub const PLENTIFUL: [&str; 6] = ["N-0", "N-1", "N-2", "N-3", "N-4", "N-5"];
/// SKUs that start with [`SCARCE_START`] units and are restocked one to
/// three at a time, each with a low-stock threshold; the first caps what
/// one user may hold and buy at [`PER_USER`].
pub const SCARCE: [&str; 3] = ["S-0", "S-1", "S-2"];
const SCARCE_START: i64 = 6;
const LOW_STOCK_BELOW: i64 = 3;
const PER_USER: i64 = 3;
/// A show whose seats are sold by name, `A-1` to `A-{SEAT_COUNT}`.
pub const SEATS: &str = "T-0";
const SEAT_COUNT: u64 = 24;
/// A SKU stocked in two places, sold from either and moved between them.
pub const LOCATED: &str = "L-0";
const PLACES: [&str; 2] = ["paris", "berlin"];
const PLACE_START: i64 = 8;

/// A caller's pause between commands: the load stays a few hundred
/// commands a second, so a long run's log is read back in seconds.
const PACE: Duration = Duration::from_millis(10);

/// Every SKU the callers use.
pub fn skus() -> impl Iterator<Item = &'static str> {
    PLENTIFUL.into_iter().chain(SCARCE).chain([SEATS, LOCATED])
}

/// Stocks the workload's SKUs and `probes` and sets their rules.
pub async fn stock(ledger: &Ledger, probes: &[String]) -> anyhow::Result<()> {
    let initial = ids::adjustment("initial");
    for sku in PLENTIFUL
        .iter()
        .copied()
        .chain(probes.iter().map(String::as_str))
    {
        let sku = ids::sku(sku);
        ledger
            .restock(&sku, &initial, RestockMode::Set, 1_000_000)
            .await?;
    }
    for sku in SCARCE.map(ids::sku) {
        ledger
            .restock(&sku, &initial, RestockMode::Set, SCARCE_START)
            .await?;
        ledger.alerts(&sku, Some(ids::qty(LOW_STOCK_BELOW))).await?;
    }
    ledger
        .limit(&ids::sku(SCARCE[0]), Some(ids::qty(PER_USER)))
        .await?;
    let seats: Vec<UnitId> = (1..=SEAT_COUNT).map(seat).collect();
    ledger.add_units(&ids::sku(SEATS), &initial, &seats).await?;
    for place in PLACES {
        let adjustment = ids::adjustment(format!("initial-{place}"));
        let (sku, place) = (ids::sku(LOCATED), ids::location(place));
        ledger
            .restock_at(&sku, &adjustment, &place, RestockMode::Set, PLACE_START)
            .await?;
    }
    Ok(())
}

fn seat(n: u64) -> UnitId {
    ids::unit(format!("A-{n}"))
}

/// A command the ledger acknowledged.
#[derive(Debug, Clone)]
pub enum Ack {
    /// At its position in the log.
    At {
        partition: i32,
        offset: i64,
        command_id: String,
    },
    /// An answer with the command's id and no position: found in the log
    /// by its id.
    Id(String),
    /// The gateway's answer to a repeat of an order it already holds (no
    /// id, no position): the log holds that order of that SKU.
    Repeat { sku: String, order: String },
}

impl From<Receipt> for Ack {
    fn from(r: Receipt) -> Self {
        Self::At {
            partition: r.position.partition,
            offset: r.position.offset,
            command_id: r.command_id.as_str().to_owned(),
        }
    }
}

/// The numbers of caller `stream` (library callers from 1, HTTP callers
/// from 101, basket callers from 201, the shelf caller 301), drawn from
/// the run's seed.
fn caller_rng(seed: u64, stream: u64) -> SplitMix64 {
    SplitMix64::new(seed ^ stream.wrapping_mul(0x2545_F491_4F6C_DD1D))
}

/// A SKU of the library and gateway callers: scarce one time in three.
fn any_sku(rng: &mut SplitMix64) -> &'static str {
    if rng.chance(33) {
        SCARCE[rng.below(SCARCE.len() as u64) as usize]
    } else {
        PLENTIFUL[rng.below(PLENTIFUL.len() as u64) as usize]
    }
}

/// One library caller until `until`: deducts (by one of five users, on a
/// scarce SKU), rollbacks before their deducts, holds of one to four
/// seconds (confirmed, rolled back or left to expire), refunds after
/// confirms, restocks (of twenty units, or one to three of a scarce SKU).
/// A send that fails is given up (it may or may not be in the log; it was
/// not acknowledged).
pub async fn library_caller(ledger: Ledger, caller: u64, seed: u64, until: Instant) -> Vec<Ack> {
    let mut rng = caller_rng(seed, caller + 1);
    let mut acks = Vec::new();
    let mut i = 0u64;
    while Instant::now() < until {
        i += 1;
        let name = any_sku(&mut rng);
        let scarce = SCARCE.contains(&name);
        let sku = ids::sku(name);
        let order = ids::order(format!("c{caller}-{i}"));
        let quantity = ids::qty(rng.between(1, 3) as i64);
        let user = ids::user(format!("u{}", rng.below(5)));
        let mut sent: Vec<Result<Receipt, _>> = Vec::new();
        match rng.below(100) {
            0..=34 => {
                let by = scarce.then_some(&user);
                sent.push(ledger.deduct(&sku, &order, quantity, by).await);
                if rng.chance(25) {
                    sent.push(ledger.rollback(&sku, &order, Some("cancelled")).await);
                }
            }
            35..=44 => {
                sent.push(ledger.rollback(&sku, &order, None).await);
                sent.push(ledger.deduct(&sku, &order, quantity, None).await);
            }
            45..=89 => {
                let hold = rng.between(1_000, 4_000) as i64;
                let deadline = ids::at_ms(stockledger_runtime::clock::now_ms() + hold);
                let held = ledger.reserve_until(&sku, &order, quantity, deadline, Some(&user));
                sent.push(held.await);
                match rng.below(3) {
                    0 => {
                        sent.push(ledger.confirm(&sku, &order).await);
                        if rng.chance(50) {
                            sent.push(ledger.refund(&sku, &order, None).await);
                        }
                    }
                    1 => sent.push(ledger.rollback(&sku, &order, None).await),
                    _ => {} // left to expire
                }
            }
            _ => {
                let adjustment = ids::adjustment(format!("r{caller}-{i}"));
                let units = if scarce { rng.between(1, 3) as i64 } else { 20 };
                sent.push(
                    ledger
                        .restock(&sku, &adjustment, RestockMode::Add, units)
                        .await,
                );
            }
        }
        acks.extend(sent.into_iter().flatten().map(Ack::from));
        tokio::time::sleep(PACE).await;
    }
    acks
}

/// The shelf caller until `until`: one or two named seats taken (sold, or
/// held one to three seconds and then confirmed, rolled back or left to
/// expire; some sold ones refunded), and located stock sold from a named
/// place or wherever the ledger chooses, moved between the places, and
/// restocked one to four units at a time.
pub async fn shelf_caller(ledger: Ledger, seed: u64, until: Instant) -> Vec<Ack> {
    let mut rng = caller_rng(seed, 301);
    let (seats, located) = (ids::sku(SEATS), ids::sku(LOCATED));
    let mut acks = Vec::new();
    let mut i = 0u64;
    while Instant::now() < until {
        i += 1;
        let order = ids::order(format!("s-{i}"));
        let mut sent: Vec<Result<Receipt, _>> = Vec::new();
        if rng.chance(50) {
            let first = rng.between(1, SEAT_COUNT);
            let wanted: Vec<UnitId> = [first, first % SEAT_COUNT + 1]
                .into_iter()
                .take(rng.between(1, 2) as usize)
                .map(seat)
                .collect();
            let hold = rng
                .chance(60)
                .then(|| Duration::from_millis(rng.between(1_000, 3_000)));
            sent.push(ledger.take_units(&seats, &order, &wanted, hold, None).await);
            match rng.below(4) {
                0 => sent.push(ledger.confirm(&seats, &order).await),
                1 => sent.push(ledger.rollback(&seats, &order, None).await),
                2 => sent.push(ledger.refund(&seats, &order, None).await),
                _ => {} // sold as it is, or left to expire
            }
        } else {
            let (from, to) = if rng.chance(50) {
                (PLACES[0], PLACES[1])
            } else {
                (PLACES[1], PLACES[0])
            };
            let (from, to) = (ids::location(from), ids::location(to));
            let quantity = ids::qty(rng.between(1, 2) as i64);
            sent.push(match rng.below(10) {
                0..=4 => {
                    let taken = ledger.deduct_from(&located, &from, &order, quantity, None);
                    taken.await
                }
                5 | 6 => ledger.deduct(&located, &order, quantity, None).await,
                7 | 8 => {
                    let transfer = ids::transfer(format!("t-{i}"));
                    let moved = ids::qty(rng.between(1, 3) as i64);
                    ledger
                        .transfer(&located, &transfer, &from, &to, moved)
                        .await
                }
                _ => {
                    let adjustment = ids::adjustment(format!("l-{i}"));
                    let units = rng.between(1, 4) as i64;
                    let added =
                        ledger.restock_at(&located, &adjustment, &from, RestockMode::Add, units);
                    added.await
                }
            });
        }
        acks.extend(sent.into_iter().flatten().map(Ack::from));
        tokio::time::sleep(PACE).await;
    }
    acks
}

/// One caller through the gateway until `until`: deducts and holds, each
/// retried with the same order id while the gateway is away or answers
/// 5xx, as an order service retries (the ledger decides a repeat
/// `DUPLICATE`, so the effect stays once). Every answer that says the
/// command is in the log is written down, with a position or without.
pub async fn http_caller(base: String, caller: u64, seed: u64, until: Instant) -> Vec<Ack> {
    let mut rng = caller_rng(seed, caller + 101);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap_or_default();
    let mut acks = Vec::new();
    let mut i = 0u64;
    while Instant::now() < until {
        i += 1;
        let sku = any_sku(&mut rng);
        let order = format!("h{caller}-{i}");
        let quantity = rng.between(1, 3);
        let body = if rng.chance(50) {
            json!({"quantity": quantity, "hold_ms": rng.between(1_000, 4_000)})
        } else {
            json!({"quantity": quantity})
        };
        let url = format!("{base}/v1/skus/{sku}/orders/{order}/deduct?wait_ms=1000");
        for _attempt in 0..40 {
            let answer = client.post(&url).json(&body).send().await;
            let Ok(answer) = answer else {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            };
            let status = answer.status().as_u16();
            if status >= 500 || status == 429 {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            let body = answer.json::<serde_json::Value>().await;
            match (status, body) {
                (200..=299, Ok(body)) => match http_ack(&body, sku, &order) {
                    Some(ack) => acks.push(ack),
                    // An acknowledgement the run cannot find in the log
                    // would leave a lost command unseen: the run ends.
                    None => panic!("{status} answer with no position, id or repeat: {body}"),
                },
                // The gateway died mid-answer: ask again, as a client
                // would; a repeat is answered as one.
                (200..=299, Err(_)) => {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
                // Refused (sold out before the log, invalid): not in the log.
                _ => {}
            }
            break;
        }
        tokio::time::sleep(PACE).await;
    }
    acks
}

/// What a gateway answer acknowledges, if anything.
fn http_ack(body: &serde_json::Value, sku: &str, order: &str) -> Option<Ack> {
    let command_id = body["command_id"].as_str().map(str::to_owned);
    match (&body["position"], command_id) {
        (position, Some(command_id)) if position.is_object() => Some(Ack::At {
            partition: position["partition"].as_i64()? as i32,
            offset: position["offset"].as_i64()?,
            command_id,
        }),
        (_, Some(command_id)) => Some(Ack::Id(command_id)),
        (_, None) if body["repeat"] == json!(true) => Some(Ack::Repeat {
            sku: sku.to_owned(),
            order: order.to_owned(),
        }),
        _ => None,
    }
}

/// The ledger, writing down every command the basket protocol sent that
/// it acknowledged.
struct Recording {
    ledger: Ledger,
    acks: Mutex<Vec<Ack>>,
}

impl Decide for Recording {
    async fn send(&self, sku: &Sku, body: CommandBody) -> Result<Receipt, ProducerError> {
        let sent = self.ledger.send(sku, body).await;
        if let (Ok(receipt), Ok(mut acks)) = (&sent, self.acks.lock()) {
            acks.push(Ack::from(receipt.clone()));
        }
        sent
    }

    async fn wait(&self, receipt: &Receipt) -> Result<Decision, OutcomeError> {
        self.ledger.decision(receipt).await
    }
}

/// What a basket caller did.
#[derive(Default)]
pub struct Baskets {
    /// Every basket it tried to hold.
    pub used: Vec<BasketId>,
    /// Those the ledger held.
    pub held: usize,
    pub acks: Vec<Ack>,
}

/// One caller of baskets until `until`: two SKUs (the second scarce one
/// time in three), one to three units each, held one to four seconds,
/// then confirmed (60 %), released (20 %) or left to expire. A confirm or
/// release that cannot settle a line is asked again, as the protocol tells
/// callers to, until it does or `give_up`; a hold that cannot is left (its
/// lines expire).
pub async fn basket_caller(
    ledger: Ledger,
    caller: u64,
    seed: u64,
    until: Instant,
    give_up: Instant,
) -> anyhow::Result<Baskets> {
    let mut rng = caller_rng(seed, caller + 201);
    let settler = Recording {
        ledger,
        acks: Mutex::new(Vec::new()),
    };
    let (mut used, mut held) = (Vec::new(), 0);
    let mut i = 0u64;
    while Instant::now() < until {
        i += 1;
        let first = PLENTIFUL[rng.below(PLENTIFUL.len() as u64) as usize];
        let second = any_sku(&mut rng);
        let second = if second == first { SCARCE[0] } else { second };
        let lines = [first, second]
            .into_iter()
            .map(|sku| {
                Ok(Line {
                    sku: Sku::new(sku)?,
                    quantity: Quantity::new(rng.between(1, 3) as i64)?,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let id = BasketId::new(format!("k{caller}-{i}"))?;
        let deadline = stockledger_runtime::clock::now_ms() + rng.between(1_000, 4_000) as i64;
        let hold = BasketHold::new(id.clone(), None, deadline, lines)?;
        used.push(id.clone());
        let Ok(answer) = basket::hold(&settler, &hold).await else {
            continue;
        };
        if answer.status != BasketStatus::Held {
            continue;
        }
        held += 1;
        let skus: Vec<Sku> = answer.lines.iter().map(|l| l.sku.clone()).collect();
        let then = rng.below(5);
        while then < 4 && Instant::now() < give_up {
            let settled = if then < 3 {
                basket::confirm(&settler, &id, &skus).await
            } else {
                basket::release(&settler, &id, &skus, None).await
            };
            if settled.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        tokio::time::sleep(PACE).await;
    }
    let acks = settler
        .acks
        .into_inner()
        .map_err(|_| anyhow::anyhow!("a basket send panicked"))?;
    Ok(Baskets { used, held, acks })
}
