//! Grouping a batch of records into the runs the apply script takes.

use std::collections::HashMap;

use stockledger_core::partition::home_partition;
use stockledger_core::{Command, CommandBody, Decision, Placement};

/// Consecutive records of one SKU on one partition to apply in one script
/// call, in log order.
#[derive(Debug)]
pub struct Run<'a> {
    pub sku: &'a str,
    /// Where the records are, and where the SKU belongs.
    pub at: Placement,
    /// (offset, record timestamp in ms, command).
    pub records: Vec<(i64, i64, &'a CommandBody)>,
}

/// The runs of one batch: records grouped by (partition, SKU), log order
/// kept within each group. Only per-SKU order matters and a SKU lives in one
/// partition, so this is the fewest script calls that keep the contract.
#[derive(Debug, Default)]
pub struct Batch<'a> {
    pub runs: Vec<Run<'a>>,
    /// For each record given to [`Batch::group`], its (run, index in run).
    pub slots: Vec<(usize, usize)>,
}

impl<'a> Batch<'a> {
    /// Groups `(partition, offset, timestamp, command)` records of a topic
    /// with `partitions` partitions, in delivery order.
    pub fn group(
        records: impl IntoIterator<Item = (i32, i64, i64, &'a Command)>,
        partitions: i32,
    ) -> Self {
        let mut batch = Batch::default();
        let mut run_of: HashMap<(i32, &'a str), usize> = HashMap::new();
        for (partition, offset, timestamp, command) in records {
            let sku = command.sku.as_str();
            let runs = &mut batch.runs;
            let r = *run_of.entry((partition, sku)).or_insert_with(|| {
                runs.push(Run {
                    sku,
                    at: Placement {
                        partition,
                        home: home_partition(sku.as_bytes(), partitions),
                    },
                    records: Vec::new(),
                });
                runs.len() - 1
            });
            batch.slots.push((r, batch.runs[r].records.len()));
            batch.runs[r]
                .records
                .push((offset, timestamp, &command.body));
        }
        batch
    }
}

/// Arranges per-run decisions back into the order records were given to
/// [`Batch::group`], whose `slots` say where each went.
pub fn in_record_order(slots: &[(usize, usize)], decisions: &[Vec<Decision>]) -> Vec<Decision> {
    slots
        .iter()
        .map(|&(r, k)| decisions[r][k].clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use stockledger_core::{CommandId, Deduct, OrderId, Quantity, ResultCode, Sku};

    use super::*;

    fn deduct(sku: &str, order: &str) -> Command {
        Command {
            command_id: CommandId::new(format!("{sku}-{order}")).unwrap(),
            sku: Sku::new(sku).unwrap(),
            occurred_at: 0,
            body: CommandBody::Deduct(Deduct::new(
                OrderId::new(order).unwrap(),
                Quantity::new(1).unwrap(),
            )),
        }
    }

    fn order_of(body: &CommandBody) -> &str {
        body.order_id().map(OrderId::as_str).unwrap_or_default()
    }

    #[test]
    fn records_group_by_partition_and_sku_in_log_order() {
        let commands = [
            deduct("A", "a1"),
            deduct("B", "b1"),
            deduct("A", "a2"),
            deduct("A", "x1"),
            deduct("B", "b2"),
        ];
        // (partition, offset): A on 0 twice, B on 1, A again on 1 (misrouted).
        let placed = [(0, 10), (1, 20), (0, 11), (1, 21), (1, 22)];
        let batch = Batch::group(
            placed
                .iter()
                .zip(&commands)
                .map(|(&(p, o), c)| (p, o, 0, c)),
            2,
        );
        type Shown<'a> = (i32, &'a str, Vec<(i64, &'a str)>);
        let runs: Vec<Shown> = batch
            .runs
            .iter()
            .map(|r| {
                let records = r
                    .records
                    .iter()
                    .map(|(o, _, b)| (*o, order_of(b)))
                    .collect();
                (r.at.partition, r.sku, records)
            })
            .collect();
        assert_eq!(
            runs,
            vec![
                (0, "A", vec![(10, "a1"), (11, "a2")]),
                (1, "B", vec![(20, "b1"), (22, "b2")]),
                (1, "A", vec![(21, "x1")]),
            ]
        );
        for run in &batch.runs {
            assert_eq!(run.at.home, home_partition(run.sku.as_bytes(), 2));
        }
        assert_eq!(batch.slots, vec![(0, 0), (1, 0), (0, 1), (2, 0), (1, 1)]);
    }

    #[test]
    fn decisions_come_back_in_the_order_records_were_given() {
        let commands = [deduct("A", "1"), deduct("B", "2"), deduct("A", "3")];
        let batch = Batch::group(
            commands
                .iter()
                .enumerate()
                .map(|(i, c)| (0, i as i64, 0, c)),
            1,
        );
        let decision = |delta| Decision {
            result: ResultCode::Applied,
            delta,
            available: 0,
            total: 0,
            reason: None,
            location: None,
            events: stockledger_core::StockEvents::NONE,
        };
        // Run 0 is A (records 0 and 2), run 1 is B (record 1).
        let per_run = vec![vec![decision(-1), decision(-3)], vec![decision(-2)]];
        let deltas: Vec<i64> = in_record_order(&batch.slots, &per_run)
            .iter()
            .map(|d| d.delta)
            .collect();
        assert_eq!(deltas, [-1, -2, -3]);
    }

    #[test]
    fn an_empty_batch_has_no_runs() {
        let batch = Batch::group(std::iter::empty(), 3);
        assert!(batch.runs.is_empty() && batch.slots.is_empty());
    }
}
