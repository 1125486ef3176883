//! Random command logs and delivery schedules for property tests.
//!
//! A [`Scenario`] is a log (every kind of command over a few SKUs in two
//! partitions: deducts, reservations with deadlines a few milliseconds
//! either side of the records that meet them, confirms, expires, refunds,
//! limits and restocks, for a few users; named units added, held and sold
//! as well as counted stock; stock put in, taken from and moved between
//! three locations; low-stock thresholds set and lifted; whole
//! checkouts now and then;
//! offsets per partition as Kafka assigns them, timestamps mostly rising
//! but sometimes behind; now and then a record on the wrong partition, as
//! a producer with another partitioner would write it) and the order in which
//! an applier is handed its records: every record in log order, plus
//! redeliveries of single earlier records and rewinds (a suffix of the log
//! delivered again, as after a crash before the offset commit), cut into
//! batches of random sizes.

// Every generated id and quantity is within the validated ranges by
// construction; an unwrap failing here is a bug in the generator.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use proptest::sample::Index;
use stockledger_core::command::MAX_WINDOW_AHEAD_MS;
use stockledger_core::ids::{MAX_HOLD_MS, MAX_QUANTITY, MAX_STOCK};
use stockledger_core::partition::home_partition;
use stockledger_core::{
    AdjustmentId, Alerts, ChangeId, Command, CommandBody, CommandId, CommandKind, Confirm, Deduct,
    Expire, Limit, LocationId, OrderId, Pause, Quantity, Refund, Refused, Restock, RestockMode,
    Resume, Rollback, SaleWindow, Sku, Transfer, TransferId, UnitId, UserId, Window,
};

/// The partitions of generated logs.
pub const PARTITIONS: i32 = 2;

/// The SKUs of generated logs; their home partitions (murmur2) are 0, 1, 0.
pub const SKUS: [&str; 3] = ["S0", "S1", "S2"];

/// One record of a generated log.
#[derive(Debug, Clone)]
pub struct Record {
    pub partition: i32,
    pub offset: i64,
    /// The record's timestamp in the log (ms): mostly rising, sometimes
    /// equal to or behind the one before, as producers' clocks are.
    pub timestamp: i64,
    pub command: Command,
}

#[derive(Debug, Clone)]
pub struct Scenario {
    pub log: Vec<Record>,
    /// Indices into `log`, in delivery order.
    pub deliveries: Vec<usize>,
    /// Sizes of consecutive batches of `deliveries` (cycled).
    pub batch_sizes: Vec<usize>,
}

impl Scenario {
    /// The deliveries cut into batches.
    pub fn batches(&self) -> Vec<&[usize]> {
        let mut batches = Vec::new();
        let mut rest = &self.deliveries[..];
        let mut sizes = self.batch_sizes.iter().cycle();
        while !rest.is_empty() {
            let size = (*sizes.next().unwrap_or(&1)).clamp(1, rest.len());
            let (batch, tail) = rest.split_at(size);
            batches.push(batch);
            rest = tail;
        }
        batches
    }
}

#[derive(Debug, Clone)]
enum Step {
    /// A command for SKU `.0`, on its home partition unless `.2`, stamped
    /// `.3` ms after the step's own instant (negative: a clock behind).
    Send(usize, Body, bool, i64),
    /// One buyer's checkout on SKU `.0`: a reservation (the body, always
    /// a `Body::Reserve`), its confirm and a refund of up to `.2` units,
    /// in consecutive steps; a reservation of named units is preceded by
    /// a restock adding them.
    Checkout(usize, Body, Option<i64>),
    Redeliver(Index),
    Rewind(Index),
}

fn order_id() -> impl Strategy<Value = OrderId> {
    (0..6u8).prop_map(|n| OrderId::new(format!("o{n}")).unwrap())
}

/// A command body, or a reservation whose deadline is relative to its
/// record's timestamp (fixed once the timestamp is known).
#[derive(Debug, Clone)]
enum Body {
    Ready(CommandBody),
    Reserve(Deduct, i64),
    /// A sale window opening and closing this many ms after its record's
    /// timestamp (either absent).
    Window(ChangeId, Option<i64>, Option<i64>),
}

fn user_id() -> impl Strategy<Value = Option<UserId>> {
    prop_oneof![1 => Just(None), 2 => (0..3u8).prop_map(|n| Some(UserId::new(format!("u{n}")).unwrap()))]
}

/// One to three distinct named units out of six, so that restocks meet
/// units already there and deducts meet units taken.
fn units() -> impl Strategy<Value = Vec<UnitId>> {
    let names: Vec<UnitId> = (0..6)
        .map(|n| UnitId::new(format!("A{n}")).unwrap())
        .collect();
    prop::sample::subsequence(names, 1..=3)
}

/// One of three locations.
fn location() -> impl Strategy<Value = LocationId> {
    (0..3u8).prop_map(|n| LocationId::new(format!("L{n}")).unwrap())
}

/// No location half the time (the ledger chooses, or the SKU has none).
fn maybe_location() -> impl Strategy<Value = Option<LocationId>> {
    prop_oneof![1 => Just(None), 1 => location().prop_map(Some)]
}

fn quantity() -> impl Strategy<Value = Quantity> {
    prop_oneof![8 => 1..=3i64, 1 => Just(MAX_QUANTITY)].prop_map(|q| Quantity::new(q).unwrap())
}

/// A reservation, its deadline from before its record (refused) to past
/// the longest hold.
fn reserve() -> impl Strategy<Value = Body> {
    let hold = prop_oneof![
        1 => -1..=0i64,
        8 => 1..=8i64,
        1 => Just(MAX_HOLD_MS),
        1 => Just(MAX_HOLD_MS + 1),
    ];
    // A third of the holds take named units instead of a quantity.
    let take = prop_oneof![2 => quantity().prop_map(Err), 1 => units().prop_map(Ok)];
    (order_id(), take, user_id(), hold, maybe_location()).prop_map(
        |(order_id, take, user_id, hold, location)| {
            let deduct = match take {
                Err(quantity) => Deduct {
                    location,
                    ..Deduct::new(order_id, quantity)
                },
                Ok(units) => Deduct::for_units(order_id, &units).unwrap(),
            };
            Body::Reserve(Deduct { user_id, ..deduct }, hold)
        },
    )
}

fn body() -> impl Strategy<Value = Body> {
    let deduct = (order_id(), quantity(), user_id(), maybe_location()).prop_map(
        |(order_id, quantity, user_id, location)| {
            CommandBody::Deduct(Deduct {
                user_id,
                location,
                ..Deduct::new(order_id, quantity)
            })
        },
    );
    let reserve = reserve();
    let confirm = order_id().prop_map(|order_id| CommandBody::Confirm(Confirm { order_id }));
    let expire = order_id().prop_map(|order_id| CommandBody::Expire(Expire { order_id }));
    let refund = (order_id(), prop::option::of(1..=6i64)).prop_map(|(order_id, q)| {
        CommandBody::Refund(Refund {
            order_id,
            quantity: q.map(|q| Quantity::new(q).unwrap()),
        })
    });
    let limit = prop::option::of(1..=4i64).prop_map(|q| {
        CommandBody::Limit(Limit {
            per_user: q.map(|q| Quantity::new(q).unwrap()),
        })
    });
    let alerts = prop::option::of(1..=8i64).prop_map(|q| {
        CommandBody::Alerts(Alerts {
            low_stock_below: q.map(|q| Quantity::new(q).unwrap()),
        })
    });
    let rollback = order_id()
        .prop_map(|order_id| CommandBody::Rollback(Rollback::new(order_id, None).unwrap()));
    let add = prop_oneof![
        8 => (1..=6i64, any::<bool>()).prop_map(|(q, neg)| if neg { -q } else { q }),
        1 => Just(MAX_STOCK),
        1 => Just(-MAX_STOCK),
    ]
    .prop_map(|q| (RestockMode::Add, q));
    let set = prop_oneof![8 => 0..=12i64, 1 => Just(MAX_STOCK)].prop_map(|q| (RestockMode::Set, q));
    // Restocks of a location are the more frequent, so that SKUs keep
    // stock by location often enough to meet every rule of it.
    let restock_at = prop_oneof![1 => Just(None), 2 => location().prop_map(Some)];
    let restock =
        ((0..8u8), prop_oneof![add, set], restock_at).prop_map(|(a, (mode, q), location)| {
            let id = AdjustmentId::new(format!("a{a}")).unwrap();
            let restock = Restock::new(id, mode, q).unwrap();
            CommandBody::Restock(match location {
                Some(at) => restock.at(at).unwrap(),
                None => restock,
            })
        });
    let seats = (order_id(), units(), user_id()).prop_map(|(order_id, units, user_id)| {
        CommandBody::Deduct(Deduct {
            user_id,
            ..Deduct::for_units(order_id, &units).unwrap()
        })
    });
    let add_seats = ((0..4u8), units()).prop_map(|(a, units)| {
        let id = AdjustmentId::new(format!("a{a}")).unwrap();
        CommandBody::Restock(Restock::units(id, &units).unwrap())
    });
    prop_oneof![
        3 => deduct.prop_map(Body::Ready),
        1 => refused().prop_map(Body::Ready),
        1 => sale(),
        1 => seats.prop_map(Body::Ready),
        1 => add_seats.prop_map(Body::Ready),
        4 => reserve,
        3 => rollback.prop_map(Body::Ready),
        3 => restock.prop_map(Body::Ready),
        3 => confirm.prop_map(Body::Ready),
        2 => expire.prop_map(Body::Ready),
        2 => refund.prop_map(Body::Ready),
        1 => limit.prop_map(Body::Ready),
        2 => transfer().prop_map(Body::Ready),
        1 => alerts.prop_map(Body::Ready),
    ]
}

/// A transfer between two of the three locations. Transfer ids share the
/// adjustments' namespace: "a0" may meet a restock.
fn transfer() -> impl Strategy<Value = CommandBody> {
    let transfer_id = prop_oneof![Just("t"), Just("a")];
    (transfer_id, 0..4u8, 0..3u8, 1..3u8, 1..=4i64).prop_map(|(kind, n, from, step, q)| {
        let at = |i: u8| LocationId::new(format!("L{}", i % 3)).unwrap();
        let id = TransferId::new(format!("{kind}{n}")).unwrap();
        let moved = Transfer::new(id, at(from), at(from + step), Quantity::new(q).unwrap());
        CommandBody::Transfer(moved.unwrap())
    })
}

/// Records another producer wrote with values the rules refuse: a deduct
/// of nothing, or a transfer that spends no id.
fn refused() -> impl Strategy<Value = CommandBody> {
    let refused_deduct = order_id().prop_map(|order_id| {
        CommandBody::Refused(Refused {
            kind: CommandKind::Deduct,
            order_id: Some(order_id),
            adjustment_id: None,
            quantity: Some(0),
            problem: Quantity::new(0).unwrap_err(),
        })
    });
    let refused_transfer = (0..4u8).prop_map(|n| {
        CommandBody::Refused(Refused {
            kind: CommandKind::Transfer,
            order_id: None,
            adjustment_id: Some(format!("t{n}")),
            quantity: Some(-1),
            problem: Quantity::new(-1).unwrap_err(),
        })
    });
    prop_oneof![refused_deduct, refused_transfer]
}

/// A change of the sale: a window that opens or closes within a few
/// steps of its record (now and then more than a year ahead, refused), a
/// pause or a resume. Change ids share the adjustments' namespace: "a0"
/// may meet a restock.
fn sale() -> impl Strategy<Value = Body> {
    let id = (prop_oneof![Just("w"), Just("a")], 0..4u8)
        .prop_map(|(kind, n)| ChangeId::new(format!("{kind}{n}")).unwrap());
    let at = prop_oneof![
        2 => Just(None),
        6 => (-8..=24i64).prop_map(Some),
        1 => Just(Some(MAX_WINDOW_AHEAD_MS + 1)),
    ];
    let length = prop_oneof![1 => Just(None), 3 => (1..=24i64).prop_map(Some)];
    let window = (id.clone(), at, length).prop_map(|(id, opens, length)| {
        let closes = match (opens, length) {
            (Some(opens), Some(length)) => Some(opens.saturating_add(length)),
            (None, Some(length)) => Some(length - 8),
            (_, None) => None,
        };
        Body::Window(id, opens, closes)
    });
    let pause = id
        .clone()
        .prop_map(|change_id| Body::Ready(CommandBody::Pause(Pause { change_id })));
    let resume = id.prop_map(|change_id| Body::Ready(CommandBody::Resume(Resume { change_id })));
    prop_oneof![3 => window, 1 => pause, 2 => resume]
}

/// The instant of the first step.
const T0: i64 = 1_700_000_000_000;

/// Milliseconds between consecutive steps' instants.
const STEP_MS: i64 = 2;

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        12 => (0..SKUS.len(), body(), skew()).prop_map(|(sku, body, skew)| Step::Send(sku, body, false, skew)),
        1 => (0..SKUS.len(), body(), skew()).prop_map(|(sku, body, skew)| Step::Send(sku, body, true, skew)),
        2 => (0..SKUS.len(), reserve(), prop::option::of(1..=4i64))
            .prop_map(|(sku, reserve, refund)| Step::Checkout(sku, reserve, refund)),
        1 => any::<Index>().prop_map(Step::Redeliver),
        1 => any::<Index>().prop_map(Step::Rewind),
    ]
}

/// `steps` with each checkout spelled out as the records it sends.
fn spelled_out(steps: Vec<Step>) -> Vec<Step> {
    let mut out = Vec::with_capacity(steps.len());
    for step in steps {
        let Step::Checkout(sku, reserve, refund) = step else {
            out.push(step);
            continue;
        };
        let Body::Reserve(d, _) = &reserve else {
            out.push(Step::Send(sku, reserve, false, 0));
            continue;
        };
        let order_id = d.order_id.clone();
        if !d.units.is_empty() {
            // A show's seats are put on sale before they are sold (refused
            // when the units are there already or the SKU is counted).
            let id = AdjustmentId::new(format!("seats-{}", out.len())).unwrap();
            let restock = Restock::units(id, &d.units).unwrap();
            out.push(Step::Send(
                sku,
                Body::Ready(CommandBody::Restock(restock)),
                false,
                0,
            ));
        }
        out.push(Step::Send(sku, reserve.clone(), false, 0));
        out.push(Step::Send(
            sku,
            Body::Ready(CommandBody::Confirm(Confirm {
                order_id: order_id.clone(),
            })),
            false,
            0,
        ));
        out.push(Step::Send(
            sku,
            Body::Ready(CommandBody::Refund(Refund {
                order_id,
                quantity: refund.map(|q| Quantity::new(q).unwrap()),
            })),
            false,
            0,
        ));
    }
    out
}

/// How far a record's timestamp is from its step's instant.
fn skew() -> impl Strategy<Value = i64> {
    prop_oneof![6 => Just(0i64), 1 => -3..=3i64]
}

/// Scenarios of up to `max_steps` steps.
pub fn scenario(max_steps: usize) -> impl Strategy<Value = Scenario> {
    (
        prop::collection::vec(step(), 1..=max_steps),
        prop::collection::vec(1..=8usize, 1..=6),
    )
        .prop_map(|(steps, batch_sizes)| {
            let mut log: Vec<Record> = Vec::new();
            let mut deliveries = Vec::new();
            let mut next_offset = [0i64; PARTITIONS as usize];
            for (n, step) in spelled_out(steps).into_iter().enumerate() {
                match step {
                    Step::Send(sku, body, misrouted, skew) => {
                        let timestamp = T0 + n as i64 * STEP_MS + skew;
                        let body = match body {
                            Body::Ready(body) => body,
                            Body::Reserve(d, hold) => CommandBody::Deduct(Deduct {
                                expires_at: Some(timestamp + hold),
                                ..d
                            }),
                            Body::Window(change_id, opens, closes) => {
                                let at = |ms: Option<i64>| ms.map(|ms| timestamp + ms);
                                CommandBody::Window(Window {
                                    change_id,
                                    window: SaleWindow::new(at(opens), at(closes)).unwrap(),
                                })
                            }
                        };
                        let home = home_partition(SKUS[sku].as_bytes(), PARTITIONS);
                        let partition = if misrouted { 1 - home } else { home };
                        let offset = next_offset[partition as usize];
                        next_offset[partition as usize] += 1;
                        log.push(Record {
                            partition,
                            offset,
                            timestamp,
                            command: Command {
                                command_id: CommandId::new(format!("c{n}")).unwrap(),
                                sku: Sku::new(SKUS[sku]).unwrap(),
                                occurred_at: n as i64,
                                body,
                            },
                        });
                        deliveries.push(log.len() - 1);
                    }
                    Step::Redeliver(i) if !log.is_empty() => deliveries.push(i.index(log.len())),
                    Step::Rewind(i) if !log.is_empty() => {
                        deliveries.extend(i.index(log.len())..log.len())
                    }
                    Step::Redeliver(_) | Step::Rewind(_) | Step::Checkout(..) => {}
                }
            }
            Scenario {
                log,
                deliveries,
                batch_sizes,
            }
        })
}

/// Cases per property: `PROPTEST_CASES` when set (for long local runs),
/// else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
