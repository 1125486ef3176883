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
    pub records: Vec<(i64, &'a CommandBody)>,
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
    /// Groups `(partition, offset, command)` records of a topic with
    /// `partitions` partitions, in delivery order.
    pub fn group(
        records: impl IntoIterator<Item = (i32, i64, &'a Command)>,
        partitions: i32,
    ) -> Self {
        let mut batch = Batch::default();
        let mut run_of: HashMap<(i32, &'a str), usize> = HashMap::new();
        for (partition, offset, command) in records {
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
            batch.runs[r].records.push((offset, &command.body));
        }
        batch
    }

    /// Arranges per-run decisions back into the order records were given.
    pub fn in_record_order(&self, decisions: &[Vec<Decision>]) -> Vec<Decision> {
        self.slots
            .iter()
            .map(|&(r, k)| decisions[r][k].clone())
            .collect()
    }
}
