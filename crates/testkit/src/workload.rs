//! Random command logs and delivery schedules for property tests.
//!
//! A [`Scenario`] is a log (commands over a few SKUs in two partitions,
//! with offsets per partition as Kafka assigns them; now and then a record
//! on the wrong partition, as a producer with another partitioner would
//! write it) and the order in which
//! an applier is handed its records: every record in log order, plus
//! redeliveries of single earlier records and rewinds (a suffix of the log
//! delivered again, as after a crash before the offset commit), cut into
//! batches of random sizes.

// Every generated id and quantity is within the validated ranges by
// construction; an unwrap failing here is a bug in the generator.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use proptest::sample::Index;
use stockledger_core::ids::{MAX_QUANTITY, MAX_STOCK};
use stockledger_core::partition::home_partition;
use stockledger_core::{
    AdjustmentId, Command, CommandBody, CommandId, Deduct, OrderId, Quantity, Restock, RestockMode,
    Rollback, Sku,
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
    /// A command for SKU `.0`, on its home partition unless `.2`.
    Send(usize, CommandBody, bool),
    Redeliver(Index),
    Rewind(Index),
}

fn order_id() -> impl Strategy<Value = OrderId> {
    (0..6u8).prop_map(|n| OrderId::new(format!("o{n}")).unwrap())
}

fn body() -> impl Strategy<Value = CommandBody> {
    let quantity =
        prop_oneof![8 => 1..=3i64, 1 => Just(MAX_QUANTITY)].prop_map(|q| Quantity::new(q).unwrap());
    let deduct = (order_id(), quantity)
        .prop_map(|(order_id, quantity)| CommandBody::Deduct(Deduct { order_id, quantity }));
    let rollback = order_id()
        .prop_map(|order_id| CommandBody::Rollback(Rollback::new(order_id, None).unwrap()));
    let add = prop_oneof![
        8 => (1..=6i64, any::<bool>()).prop_map(|(q, neg)| if neg { -q } else { q }),
        1 => Just(MAX_STOCK),
        1 => Just(-MAX_STOCK),
    ]
    .prop_map(|q| (RestockMode::Add, q));
    let set = prop_oneof![8 => 0..=12i64, 1 => Just(MAX_STOCK)].prop_map(|q| (RestockMode::Set, q));
    let restock = ((0..4u8), prop_oneof![add, set]).prop_map(|(a, (mode, q))| {
        let id = AdjustmentId::new(format!("a{a}")).unwrap();
        CommandBody::Restock(Restock::new(id, mode, q).unwrap())
    });
    prop_oneof![5 => deduct, 3 => rollback, 2 => restock]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        12 => (0..SKUS.len(), body()).prop_map(|(sku, body)| Step::Send(sku, body, false)),
        1 => (0..SKUS.len(), body()).prop_map(|(sku, body)| Step::Send(sku, body, true)),
        1 => any::<Index>().prop_map(Step::Redeliver),
        1 => any::<Index>().prop_map(Step::Rewind),
    ]
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
            for (n, step) in steps.into_iter().enumerate() {
                match step {
                    Step::Send(sku, body, misrouted) => {
                        let home = home_partition(SKUS[sku].as_bytes(), PARTITIONS);
                        let partition = if misrouted { 1 - home } else { home };
                        let offset = next_offset[partition as usize];
                        next_offset[partition as usize] += 1;
                        log.push(Record {
                            partition,
                            offset,
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
                    Step::Redeliver(_) | Step::Rewind(_) => {}
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
