//! The checkout of `stockledger demo`, as a library the tests use too:
//! the buyers' workload, waiting for the sale to settle, and the
//! contract's checks.

use std::time::Duration;
use stockledger_runtime::clock::now_ms;

use futures::future::try_join_all;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use sqlx::PgPool;
use stockledger_analysts::query;
use stockledger_client::{Ledger, ProducerError};
use stockledger_core::{OrderId, OrderStatus, Quantity, ResultCode, Sku, UnitId, UserId};
use stockledger_kafka::topic;
use stockledger_kafka::KafkaConfig;
use stockledger_projection::Projection;
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

/// Waits until no hold of [`HOT_SKU`] or [`BASKET_SKUS`] is left (abandoned ones expire by
/// the applier's expire records) and the archive has a row for every
/// record of `topic`; returns the rows archived, or what was reached when
/// `timeout` ran out (the checks then say what is missing).
pub async fn settle(
    kafka: &KafkaConfig,
    pool: &PgPool,
    projection: &Projection,
    topic: &str,
    timeout: Duration,
) -> anyhow::Result<i64> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut held = 0;
        for sku in [HOT_SKU, SHOW_SKU].into_iter().chain(BASKET_SKUS) {
            held += projection.read_sku(sku).await?.map_or(0, |s| s.reserved);
        }
        let rows = query::count_rows(pool, topic).await?;
        let done = held == 0 && rows >= topic::record_count(kafka, topic).await?;
        if done || Instant::now() >= deadline {
            return Ok(rows);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One of the contract's checks, passed or failed, and what it compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub ok: bool,
    pub what: String,
}

/// Where a run's log, projection and archive are.
#[derive(Debug)]
pub struct Run<'a> {
    pub kafka: &'a KafkaConfig,
    pub pool: &'a PgPool,
    pub projection: &'a Projection,
    /// The command topic.
    pub topic: &'a str,
    /// Rows archived for it when the pipeline caught up.
    pub archived: i64,
    /// The baskets the shoppers used (none: no basket check).
    pub baskets: &'a [stockledger_core::BasketId],
    /// What the cinema's parties were told (`None`: no show, no check).
    pub seats: Option<&'a SeatsSent>,
    /// When the hot SKU's sale window opened (`None`: no window, no check).
    pub opens_at: Option<i64>,
}

/// The contract, once the sale has settled: stock never below zero
/// (archive and Redis), Redis equal to the reference fold of the whole log,
/// one archived row per log record, every reservation ended (confirmed,
/// released or expired), no user above the per-user limit; and, when the
/// run had baskets, every basket sold whole or not at all.
pub async fn check_contract(run: &Run<'_>, timeout: Duration) -> anyhow::Result<Vec<Check>> {
    let mut checks = Vec::new();
    let lowest = query::min_available(run.pool, run.topic).await?;
    let state = run.projection.read_sku(HOT_SKU).await?;
    let redis_available = state.as_ref().map_or(0, |s| s.available);
    checks.push(Check {
        ok: lowest.is_some_and(|l| l >= 0) && redis_available >= 0,
        what: format!(
            "stock never below zero (lowest archived {}, Redis {redis_available})",
            lowest.map_or("none".into(), |l| l.to_string())
        ),
    });
    let records = topic::read_topic(run.kafka, run.topic, timeout).await?;
    let partitions = topic::partition_count(run.kafka, run.topic).await?;
    let reference = stockledger_applier::check::fold(&records, partitions);
    let mismatches = stockledger_applier::check::compare(run.projection, &reference).await?;
    checks.push(Check {
        ok: mismatches.is_empty(),
        what: format!(
            "Redis equals the reference fold of the log ({} SKU, {} records){}",
            reference.skus.len(),
            records.len(),
            mismatches
                .iter()
                .map(|m| format!("\n        {m}"))
                .collect::<String>()
        ),
    });
    checks.push(Check {
        ok: run.archived == records.len() as i64,
        what: format!(
            "archive rows equal log records ({} = {})",
            run.archived,
            records.len()
        ),
    });
    checks.push(check_reservations(run, state.as_ref()).await?);
    let limit = state.as_ref().and_then(|s| s.limit);
    let highest = state
        .as_ref()
        .and_then(|s| s.users.values().max().copied())
        .unwrap_or(0);
    checks.push(Check {
        ok: limit.is_none_or(|l| highest <= l),
        what: format!(
            "no user above the per-user limit (highest {highest}, limit {})",
            limit.map_or("none".into(), |l| l.to_string())
        ),
    });
    if !run.baskets.is_empty() {
        checks.push(check_baskets(run).await?);
    }
    if let Some(seats) = run.seats {
        checks.push(check_seats(run.projection, seats).await?);
    }
    if let Some(opens_at) = run.opens_at {
        checks.push(check_opening(&records, state.as_ref(), opens_at));
    }
    Ok(checks)
}

/// No reservation of the hot SKU was granted before its sale opened, by
/// the log's own timestamps, as Redis decided them; and some came before
/// the opening (refused), or the check would prove nothing.
fn check_opening(
    records: &[topic::LogRecord],
    state: Option<&stockledger_core::SkuState>,
    opens_at: i64,
) -> Check {
    let (mut early_granted, mut refused) = (0, 0);
    for record in records {
        let hot = record.key.as_deref() == Some(HOT_SKU.as_bytes());
        let deduct = hot
            && (record.payload.as_deref())
                .and_then(|p| stockledger_core::codec::decode_command(p).ok())
                .is_some_and(|c| matches!(c.body, stockledger_core::CommandBody::Deduct(_)));
        let decision = state.and_then(|s| s.decisions.get(&record.offset));
        let (Some(decision), true) = (decision, deduct) else {
            continue;
        };
        let early = record.timestamp.is_some_and(|t| t < opens_at);
        match decision.result {
            ResultCode::Applied if early => early_granted += 1,
            ResultCode::RejectedNotOpen => refused += 1,
            _ => {}
        }
    }
    Check {
        ok: early_granted == 0 && refused > 0,
        what: format!(
            "no order granted before the sale opened at {} ({refused} reservations came \
             early and were refused REJECTED_NOT_OPEN, {early_granted} granted early)",
            stockledger_runtime::clock::rfc3339_ms(opens_at)
        ),
    }
}

/// Every reservation of the hot SKU granted ended confirmed, released or
/// expired; none is still held.
async fn check_reservations(
    run: &Run<'_>,
    state: Option<&stockledger_core::SkuState>,
) -> anyhow::Result<Check> {
    let counts = query::count_by_command_and_result(run.pool, run.topic, HOT_SKU).await?;
    let granted: i64 = counts
        .iter()
        .filter(|(c, r, _)| c.as_deref() == Some("DEDUCT") && r == ResultCode::Applied.as_str())
        .map(|(_, _, n)| n)
        .sum();
    let status = |wanted: OrderStatus| {
        state.map_or(0, |s| {
            s.orders
                .values()
                .filter(|o| o.expires_at.is_some() && o.status == wanted)
                .count() as i64
        })
    };
    let (held, confirmed, released, expired) = (
        status(OrderStatus::Reserved),
        status(OrderStatus::Confirmed),
        status(OrderStatus::RolledBack),
        status(OrderStatus::Expired),
    );
    Ok(Check {
        ok: held == 0 && confirmed + released + expired == granted,
        what: format!(
            "every reservation ended confirmed, released or expired ({granted} granted = \
             {confirmed} confirmed + {released} released + {expired} expired; {held} still held)"
        ),
    })
}

/// Every seat of the show is free or sold to the one party told it bought
/// it; none is still held, none was sold twice.
async fn check_seats(projection: &Projection, told: &SeatsSent) -> anyhow::Result<Check> {
    use stockledger_core::Unit;
    let map = projection.units(SHOW_SKU).await?;
    let (mut free, mut sold, mut held, mut wrong) = (0, 0, 0, Vec::new());
    for (seat, unit) in &map {
        let buyer = told.sold.get(seat);
        match unit {
            Unit::Available if buyer.is_none() => free += 1,
            Unit::Sold(order) if buyer == Some(order) => sold += 1,
            Unit::Held(_) => held += 1,
            other => wrong.push(format!("{seat} is {other:?}, its party was told {buyer:?}")),
        }
    }
    let unseen = told.sold.len() - sold.min(told.sold.len());
    Ok(Check {
        ok: wrong.is_empty() && held == 0 && told.sold_twice.is_empty() && unseen == 0,
        what: format!(
            "every seat free or sold to the one party told so ({} seats = {free} free + {sold} \
             sold; {held} still held; {} sold twice; {} seats disagree{})",
            map.len(),
            told.sold_twice.len(),
            wrong.len() + unseen,
            wrong
                .first()
                .map(|w| format!(", first {w}"))
                .unwrap_or_default()
        ),
    })
}

/// Every basket of the run sold whole or not at all, and none still held.
async fn check_baskets(run: &Run<'_>) -> anyhow::Result<Check> {
    use stockledger_client::basket::{self, LineState};
    let (mut whole, mut none, mut partial, mut held) = (0, 0, Vec::new(), 0);
    for id in run.baskets {
        let Some(b) = basket::read(run.projection, id).await? else {
            none += 1;
            continue;
        };
        let sold = b
            .lines
            .iter()
            .filter(|l| l.state == LineState::Confirmed)
            .count();
        held += b
            .lines
            .iter()
            .filter(|l| l.state == LineState::Held)
            .count();
        match sold {
            0 => none += 1,
            n if n == b.lines.len() => whole += 1,
            _ => partial.push(id.to_string()),
        }
    }
    Ok(Check {
        ok: partial.is_empty() && held == 0,
        what: format!(
            "every basket sold whole or not at all ({} baskets = {whole} sold whole + {none} \
             not sold; {} partly sold{}; {held} lines still held)",
            run.baskets.len(),
            partial.len(),
            partial
                .first()
                .map(|p| format!(", first {p}"))
                .unwrap_or_default()
        ),
    })
}
