//! The buyers of the demo's sale: the hot SKU's orders, the baskets and
//! the show's parties, each sent the way an order service would send them
//! and told what they were answered.

use std::time::Duration;

use futures::future::try_join_all;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use stockledger_client::{Ledger, ProducerError};
use stockledger_core::{OrderId, Quantity, ResultCode, Sku, UnitId, UserId};
use stockledger_runtime::clock::now_ms;
use tokio::time::Instant;

/// The SKU every buyer wants.
pub const HOT_SKU: &str = "DEMO-HOT";

/// The two SKUs the basket shoppers buy together (a cap and a tee: both
/// or neither), scarcer than the baskets that want them.
pub const BASKET_SKUS: [&str; 2] = ["DEMO-CAP", "DEMO-TEE"];

/// The show whose named seats the cinema's parties buy.
pub const SHOW_SKU: &str = "DEMO-SHOW";

/// Seats per row of the show's hall: seat `n` is `R{n / 20 + 1}-{n % 20 + 1}`.
const SEATS_PER_ROW: usize = 20;

/// The name of seat `n` of the hall.
pub fn seat_name(n: usize) -> String {
    format!("R{}-{}", n / SEATS_PER_ROW + 1, n % SEATS_PER_ROW + 1)
}

/// How long a buyer waits for the decision on their reservation: the
/// demo's ledger's decision timeout.
pub const DECISION_WAIT: Duration = Duration::from_secs(60);

/// Who buys, and how they behave. Order `i` is placed by user
/// `user-{i / 2}` (each user tries twice, so a per-user limit of one
/// refuses the second) and handled by task `i % buyers`.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    /// Orders placed in total.
    pub orders: usize,
    /// Concurrent tasks placing them.
    pub buyers: usize,
    /// How long each reservation holds its unit (ms).
    pub hold_ms: i64,
    /// Percent of reserved orders released by a rollback (the buyer
    /// cancelled before paying).
    pub cancel_percent: u32,
    /// Percent of reserved orders never paid: their holds expire.
    pub abandon_percent: u32,
    /// Percent of reserved orders paid, then refunded.
    pub refund_percent: u32,
    /// Percent of orders whose reservation is sent twice (a client retry).
    pub duplicate_percent: u32,
    /// Percent of orders whose rollback is sent before their reservation.
    pub early_rollback_percent: u32,
    /// Seed of each task's random choices.
    pub seed: u64,
}

/// What the buyers sent, and what the ledger answered them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    pub records: u64,
    /// Reservations the ledger granted.
    pub reserved: u64,
    pub paid: u64,
    pub cancelled: u64,
    pub abandoned: u64,
    pub refunded: u64,
    pub duplicated: u64,
    pub early_rollbacks: u64,
    /// Reservations the sold-out fast path refused without logging them.
    pub refused_unlogged: u64,
    /// Reservations refused because the sale had not opened yet (each
    /// sent again after a pause).
    pub not_open: u64,
}

impl std::ops::AddAssign for Sent {
    fn add_assign(&mut self, o: Self) {
        self.records += o.records;
        self.reserved += o.reserved;
        self.paid += o.paid;
        self.cancelled += o.cancelled;
        self.abandoned += o.abandoned;
        self.refunded += o.refunded;
        self.duplicated += o.duplicated;
        self.early_rollbacks += o.early_rollbacks;
        self.refused_unlogged += o.refused_unlogged;
        self.not_open += o.not_open;
    }
}

/// Lets `workload.buyers` concurrent tasks check out their orders of one
/// unit of [`HOT_SKU`] through `ledger`: each reserves, waits for the
/// ledger's answer, and when granted pays, cancels, abandons, or pays and
/// is refunded. A reservation the ledger's sold-out guard refuses is
/// counted, not sent. Returns what was sent.
pub async fn buy(ledger: &Ledger, workload: &Workload) -> anyhow::Result<Sent> {
    anyhow::ensure!(workload.buyers > 0, "buyers must be at least 1");
    let buyers = (0..workload.buyers).map(|buyer| async move {
        let w = workload;
        let mut rng = StdRng::seed_from_u64(w.seed.wrapping_add(buyer as u64));
        let mut sent = Sent::default();
        let sku = Sku::new(HOT_SKU)?;
        let (one, hold) = (
            Quantity::new(1)?,
            Duration::from_millis(w.hold_ms.unsigned_abs()),
        );
        for order in (buyer..w.orders).step_by(w.buyers) {
            let order_id = OrderId::new(format!("order-{order}"))?;
            let user = UserId::new(format!("user-{}", order / 2))?;
            let reserve = || ledger.reserve(&sku, &order_id, one, hold, Some(&user));
            let roll: u32 = rng.random_range(0..100);
            if roll < w.early_rollback_percent {
                ledger
                    .rollback(&sku, &order_id, Some("cancelled before reserving"))
                    .await?;
                sent.early_rollbacks += 1;
                sent.records += 1;
                match reserve().await {
                    Ok(_) => sent.records += 1,
                    Err(ProducerError::SoldOut(_)) => sent.refused_unlogged += 1,
                    Err(e) => return Err(e.into()),
                }
                continue;
            }
            let twice = rng.random_range(0..100) < w.duplicate_percent;
            let Some(decision) = reserve_once_open(reserve, twice, &mut sent, ledger).await? else {
                continue;
            };
            if decision.result != ResultCode::Applied {
                continue;
            }
            sent.reserved += 1;
            let then: u32 = rng.random_range(0..100);
            if then < w.cancel_percent {
                ledger
                    .rollback(&sku, &order_id, Some("changed their mind"))
                    .await?;
                sent.cancelled += 1;
                sent.records += 1;
            } else if then < w.cancel_percent + w.abandon_percent {
                sent.abandoned += 1;
            } else {
                ledger.confirm(&sku, &order_id).await?;
                sent.paid += 1;
                sent.records += 1;
                if then < w.cancel_percent + w.abandon_percent + w.refund_percent {
                    ledger.refund(&sku, &order_id, None).await?;
                    sent.refunded += 1;
                    sent.records += 1;
                }
            }
        }
        Ok::<_, anyhow::Error>(sent)
    });
    let mut sent = Sent::default();
    for s in try_join_all(buyers).await? {
        sent += s;
    }
    Ok(sent)
}

/// How long a buyer whose reservation came before the sale opened waits
/// before sending it again.
const NOT_OPEN_RETRY: Duration = Duration::from_millis(200);

/// Sends a reservation and waits for its decision; one refused because
/// the sale had not opened is sent again after [`NOT_OPEN_RETRY`], as a
/// buyer's page retries, for up to [`DECISION_WAIT`]. When `twice`, a
/// client's retry of it is sent once the sale has answered (sent before,
/// that copy could be granted after the opening in place of the first),
/// and its decision is awaited too: the copy of a refused reservation may
/// be granted, and the buyer then holds it, so the counts the demo prints
/// match the log's. `None` when the sold-out guard refused it unlogged.
async fn reserve_once_open<F, R>(
    reserve: F,
    twice: bool,
    sent: &mut Sent,
    ledger: &Ledger,
) -> anyhow::Result<Option<stockledger_core::Decision>>
where
    F: Fn() -> R,
    R: std::future::Future<Output = Result<stockledger_client::Receipt, ProducerError>>,
{
    let deadline = Instant::now() + DECISION_WAIT;
    loop {
        let receipt = match reserve().await {
            Ok(receipt) => receipt,
            Err(ProducerError::SoldOut(_)) => {
                sent.refused_unlogged += 1;
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        };
        sent.records += 1;
        let decision = ledger.decision(&receipt).await?;
        if decision.result == ResultCode::RejectedNotOpen {
            sent.not_open += 1;
            if Instant::now() <= deadline {
                tokio::time::sleep(NOT_OPEN_RETRY).await;
                continue;
            }
        }
        if twice {
            sent.duplicated += 1;
            match reserve().await {
                Ok(copy) => {
                    sent.records += 1;
                    // A copy of a refused reservation is decided afresh, and
                    // stock may have come back since: the buyer holds what
                    // the copy was granted.
                    let again = ledger.decision(&copy).await?;
                    if decision.result != ResultCode::Applied && again.result == ResultCode::Applied
                    {
                        return Ok(Some(again));
                    }
                }
                Err(ProducerError::SoldOut(_)) => sent.refused_unlogged += 1,
                Err(e) => return Err(e.into()),
            }
        }
        return Ok(Some(decision));
    }
}

/// What the basket shoppers did, and the baskets they used.
#[derive(Debug, Default, Clone)]
pub struct BasketsSent {
    pub held: u64,
    pub refused: u64,
    pub paid: u64,
    /// Confirms that could not sell every line, undone by refunds.
    pub failed: u64,
    pub released: u64,
    pub abandoned: u64,
    pub ids: Vec<stockledger_core::BasketId>,
}

/// Lets `shoppers` concurrent tasks check out `baskets` baskets of one
/// unit of each of [`BASKET_SKUS`] (named `{run_id}-basket-{i}`), each
/// held `hold_ms`: when held, 70 % are paid, 15 % released, 15 %
/// abandoned (their holds expire).
pub async fn buy_baskets(
    ledger: &Ledger,
    run_id: &str,
    baskets: usize,
    shoppers: usize,
    hold_ms: i64,
    seed: u64,
) -> anyhow::Result<BasketsSent> {
    use stockledger_client::basket::{self, BasketHold, BasketStatus, Line};
    use stockledger_core::BasketId;
    let shoppers = shoppers.clamp(1, baskets.max(1));
    let tasks = (0..shoppers).map(|shopper| async move {
        let mut rng = StdRng::seed_from_u64(seed.wrapping_add(1_000_000 + shopper as u64));
        let mut sent = BasketsSent::default();
        for i in (shopper..baskets).step_by(shoppers) {
            let id = BasketId::new(format!("{run_id}-basket-{i}"))?;
            let lines = BASKET_SKUS
                .iter()
                .map(|sku| {
                    Ok(Line {
                        sku: Sku::new(*sku)?,
                        quantity: Quantity::new(1)?,
                    })
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            let hold = BasketHold::new(id.clone(), None, now_ms() + hold_ms, lines)?;
            sent.ids.push(id.clone());
            let held = basket::hold(ledger, &hold).await?;
            if held.status != BasketStatus::Held {
                sent.refused += 1;
                continue;
            }
            sent.held += 1;
            let skus: Vec<Sku> = held.lines.iter().map(|l| l.sku.clone()).collect();
            match rng.random_range(0..100) {
                0..70 => match basket::confirm(ledger, &id, &skus).await?.status {
                    BasketStatus::Confirmed => sent.paid += 1,
                    _ => sent.failed += 1,
                },
                70..85 => {
                    let why = stockledger_core::Reason::new("changed their mind")?;
                    basket::release(ledger, &id, &skus, Some(&why)).await?;
                    sent.released += 1;
                }
                _ => sent.abandoned += 1,
            }
        }
        anyhow::Ok(sent)
    });
    let mut all = BasketsSent::default();
    for s in try_join_all(tasks).await? {
        all += s;
    }
    Ok(all)
}

impl std::ops::AddAssign for BasketsSent {
    fn add_assign(&mut self, o: Self) {
        self.held += o.held;
        self.refused += o.refused;
        self.paid += o.paid;
        self.failed += o.failed;
        self.released += o.released;
        self.abandoned += o.abandoned;
        self.ids.extend(o.ids);
    }
}

/// What the cinema's parties did, and which seats the ledger sold to whom.
#[derive(Debug, Default, Clone)]
pub struct SeatsSent {
    /// Records sent: holds, confirms and rollbacks.
    pub records: u64,
    pub held: u64,
    /// Parties refused because a seat they wanted was taken.
    pub refused: u64,
    pub paid: u64,
    pub released: u64,
    pub abandoned: u64,
    /// Each seat a party was told it bought, and that party's order.
    pub sold: std::collections::BTreeMap<String, String>,
    /// Seats two parties were both told they bought (must stay empty).
    pub sold_twice: Vec<String>,
}

/// Lets `tasks` concurrent tasks seat `parties` parties at the show
/// [`SHOW_SKU`] of `seats` seats: each party wants 1 to 4 adjacent seats
/// of one row, chosen at random (so parties collide), and holds them,
/// all or none, for `hold_ms`; when held, 70 % pay, 15 % cancel, 15 %
/// never come back (their holds expire).
pub async fn buy_seats(
    ledger: &Ledger,
    run_id: &str,
    (seats, parties, tasks): (usize, usize, usize),
    hold_ms: i64,
    seed: u64,
) -> anyhow::Result<SeatsSent> {
    let tasks = tasks.clamp(1, parties.max(1));
    let hold = Duration::from_millis(hold_ms.unsigned_abs());
    let work = (0..tasks).map(|task| async move {
        let mut rng = StdRng::seed_from_u64(seed.wrapping_add(2_000_000 + task as u64));
        let mut sent = SeatsSent::default();
        for party in (task..parties).step_by(tasks) {
            let size = rng.random_range(1..=4usize).min(seats);
            let row_start = rng.random_range(0..seats.div_ceil(SEATS_PER_ROW)) * SEATS_PER_ROW;
            let in_row = (seats - row_start).min(SEATS_PER_ROW);
            let first = row_start + rng.random_range(0..=in_row.saturating_sub(size));
            let wanted: Vec<String> = (first..first + size.min(in_row)).map(seat_name).collect();
            let units = (wanted.iter().map(UnitId::new)).collect::<Result<Vec<_>, _>>()?;
            let order = OrderId::new(format!("{run_id}-party-{party}"))?;
            let sku = Sku::new(SHOW_SKU)?;
            let sent_hold = ledger
                .take_units(&sku, &order, &units, Some(hold), None)
                .await?;
            sent.records += 1;
            let decision = ledger.decision(&sent_hold).await?;
            if decision.result != ResultCode::Applied {
                sent.refused += 1;
                continue;
            }
            sent.held += 1;
            match rng.random_range(0..100) {
                0..70 => {
                    sent.records += 1;
                    let paid = ledger
                        .decision(&ledger.confirm(&sku, &order).await?)
                        .await?;
                    if paid.result == ResultCode::Confirmed {
                        sent.paid += 1;
                        for seat in wanted {
                            if sent.sold.insert(seat.clone(), order.to_string()).is_some() {
                                sent.sold_twice.push(seat);
                            }
                        }
                    } else {
                        sent.abandoned += 1; // paid too late: the hold had expired
                    }
                }
                70..85 => {
                    sent.records += 1;
                    let why = Some("the party changed its plans");
                    ledger
                        .decision(&ledger.rollback(&sku, &order, why).await?)
                        .await?;
                    sent.released += 1;
                }
                _ => sent.abandoned += 1,
            }
        }
        anyhow::Ok(sent)
    });
    let mut all = SeatsSent::default();
    for s in try_join_all(work).await? {
        all += s;
    }
    Ok(all)
}

impl std::ops::AddAssign for SeatsSent {
    fn add_assign(&mut self, o: Self) {
        self.records += o.records;
        self.held += o.held;
        self.refused += o.refused;
        self.paid += o.paid;
        self.released += o.released;
        self.abandoned += o.abandoned;
        self.sold_twice.extend(o.sold_twice);
        for (seat, order) in o.sold {
            if self.sold.insert(seat.clone(), order).is_some() {
                self.sold_twice.push(seat);
            }
        }
    }
}
