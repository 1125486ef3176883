//! The `stages` scenario: the instructions a record costs in each stage of
//! the apply path, counted by callgrind over a fixed set of records, so no
//! neighbour on the machine moves the figure (the hardware counters of
//! `perf_event_open` are not offered on every machine this runs on).
//!
//! The bench starts itself again under `valgrind --tool=callgrind` with
//! [`WORKER_ENV`] set; that process runs each stage over the records once
//! and exits. Each stage is a function of its own, never inlined, and its
//! inclusive count in callgrind's profile, divided by the records, is its
//! figure. The write is the projection's staging of the same records,
//! SKU by SKU, with no Redis (`stage_without_redis`): what noting each
//! record's changes and building each SKU's fenced write cost.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::process::Command as Process;
use std::time::Instant;

use anyhow::Context;
use stockledger_core::codec::{
    decode_command, decode_outcome, encode_command, encode_outcome_into,
};
use stockledger_core::partition::home_partition;
use stockledger_core::{
    AdjustmentId, Command, CommandBody, CommandId, Decision, Deduct, LogPosition, OrderId,
    OutcomeView, Placement, Quantity, Restock, RestockMode, Rollback, Sku, SkuState, UserId,
};

use crate::Measurement;

/// Set to the number of records, it makes the bench the worker that
/// callgrind counts (see the module's documentation).
pub const WORKER_ENV: &str = "STOCKLEDGER_BENCH_STAGES";

/// The stages, in the order a record passes them, as results.json names
/// them, with the functions whose inclusive counts add up to each: the
/// worker's own, or (the write) the projection's noting of what a record
/// changed and its building of a SKU's fenced write. The last is the order
/// service's: reading the outcome that answers it.
const STAGES: [(&str, &[&str]); 5] = [
    ("decode", &["stages::stage_decode"]),
    ("decide", &["stages::stage_decide"]),
    ("encode_outcome", &["stages::stage_encode_outcome"]),
    ("write", &["SkuStage::note", "SkuStage::finish"]),
    ("read_outcome", &["stages::stage_read_outcome"]),
];

/// Partitions of the records' topic, as the e2e scenarios have.
const PARTITIONS: i32 = 8;

/// `n` command records as an order service writes them: a restock of each
/// of 100 SKUs, then deducts (one in four a hold of a named buyer) and a
/// rollback every tenth record, spread over the SKUs. Fixed: the same
/// records every run.
fn records(n: usize) -> anyhow::Result<Vec<Vec<u8>>> {
    let skus: Vec<Sku> = (0..100)
        .map(|i| Sku::new(format!("SKU-{i:03}")))
        .collect::<Result<_, _>>()?;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let sku = skus[i % skus.len()].clone();
        let order = OrderId::new(format!("order-{}", i / 10))?;
        let body = if i < skus.len() {
            CommandBody::Restock(Restock::new(
                AdjustmentId::new(format!("stock-{i}"))?,
                RestockMode::Set,
                1_000_000,
            )?)
        } else if i % 10 == 9 {
            CommandBody::Rollback(Rollback::new(order, Some("payment failed".into()))?)
        } else if i % 4 == 0 {
            CommandBody::Deduct(Deduct {
                user_id: Some(UserId::new(format!("user-{}", i % 1000))?),
                expires_at: Some(1_700_000_600_000),
                ..Deduct::new(order, Quantity::new(1)?)
            })
        } else {
            CommandBody::Deduct(Deduct::new(order, Quantity::new(1 + (i % 3) as i64)?))
        };
        let command = Command {
            command_id: CommandId::new(format!("c-{i}"))?,
            sku,
            occurred_at: 1_700_000_000_000 + i as i64,
            body,
        };
        out.push(encode_command(&command)?);
    }
    Ok(out)
}

/// Decodes every record (the strict walk included), into room taken
/// once: the applier's batch knows its count, so growing a vector of
/// commands is no cost of decoding.
#[inline(never)]
pub fn stage_decode(payloads: &[Vec<u8>]) -> Vec<Command> {
    let mut commands = Vec::with_capacity(payloads.len());
    commands.extend((payloads.iter()).filter_map(|p| decode_command(black_box(p)).ok()));
    commands
}

/// Decides every command with the machine, each SKU's state in memory
/// (a `BTreeMap`: a hash map's random seed moves the count run to run).
#[inline(never)]
pub fn stage_decide(commands: &[Command]) -> Vec<Decision> {
    let mut states: BTreeMap<&str, SkuState> = BTreeMap::new();
    commands
        .iter()
        .enumerate()
        .map(|(offset, c)| {
            let sku = c.sku.as_str();
            let home = home_partition(sku.as_bytes(), PARTITIONS);
            let state = states.entry(sku).or_default();
            state.apply(Placement::home(home), offset as i64, c.occurred_at, &c.body)
        })
        .collect()
}

/// Encodes every decision's outcome.
#[inline(never)]
pub fn stage_encode_outcome(commands: &[Command], decisions: &[Decision]) -> Vec<Vec<u8>> {
    commands
        .iter()
        .zip(decisions)
        .enumerate()
        .map(|(offset, (c, d))| {
            let position = LogPosition {
                topic: "stock.ledger".into(),
                partition: home_partition(c.sku.as_str().as_bytes(), PARTITIONS),
                offset: offset as i64,
            };
            // Encoded where the command and decision lie, as the applier
            // does, each into a buffer of its own (the room `encode_outcome`
            // takes) kept for the next stage.
            let mut out = Vec::with_capacity(256);
            encode_outcome_into(&OutcomeView::of_command(&position, c, d), &mut out);
            out
        })
        .collect()
}

/// Reads every outcome back, as an order service's reader of decisions
/// does; how many were read.
#[inline(never)]
pub fn stage_read_outcome(outcomes: &[Vec<u8>]) -> usize {
    outcomes
        .iter()
        .filter(|o| decode_outcome(black_box(o)).is_ok())
        .count()
}

/// The worker: each stage once over `n` records. Run by callgrind.
pub fn worker(n: &str) -> anyhow::Result<()> {
    let n: usize = n
        .parse()
        .with_context(|| format!("{WORKER_ENV}={n}: a count"))?;
    let payloads = records(n)?;
    let commands = stage_decode(&payloads);
    anyhow::ensure!(
        commands.len() == n,
        "{} of {n} records decoded",
        commands.len()
    );
    let decisions = stage_decide(&commands);
    let outcomes = stage_encode_outcome(&commands, &decisions);
    anyhow::ensure!(
        outcomes.len() == n,
        "{} of {n} outcomes encoded",
        outcomes.len()
    );
    let read = stage_read_outcome(&outcomes);
    anyhow::ensure!(read == n, "{read} of {n} outcomes read back");
    // The same records through the projection's staging, each at its
    // SKU's home partition, offsets in log order.
    let staged = commands
        .into_iter()
        .enumerate()
        .map(|(offset, c)| {
            let home = home_partition(c.sku.as_str().as_bytes(), PARTITIONS);
            (home, offset as i64, c.occurred_at, c)
        })
        .collect();
    let written = stockledger_projection::stage_without_redis(staged, PARTITIONS)?;
    anyhow::ensure!(written > 0, "the staged batch writes nothing");
    Ok(())
}

/// Counts each stage's instructions a record over `n` records, by running
/// this bench again as the worker under callgrind.
pub(crate) fn stages(n: u64) -> anyhow::Result<Measurement> {
    let exe = std::env::current_exe().context("the bench's own path")?;
    let profile = std::env::temp_dir().join(format!(
        "stockledger-stages-{}.callgrind",
        std::process::id()
    ));
    let started = Instant::now();
    let status = Process::new("valgrind")
        .args(["--tool=callgrind", "--quiet"])
        .arg(format!("--callgrind-out-file={}", profile.display()))
        .arg(&exe)
        .env(WORKER_ENV, n.to_string())
        .status()
        .context("running valgrind (Debian's valgrind package) for the stages scenario")?;
    let seconds = started.elapsed().as_secs_f64();
    anyhow::ensure!(
        status.success(),
        "the stages worker under callgrind: {status}"
    );
    let annotated = Process::new("callgrind_annotate")
        .args(["--inclusive=yes", "--threshold=100"])
        .arg(&profile)
        .output()
        .context("running callgrind_annotate")?;
    let _ = std::fs::remove_file(&profile);
    anyhow::ensure!(
        annotated.status.success(),
        "callgrind_annotate: {}",
        annotated.status
    );
    let text = String::from_utf8_lossy(&annotated.stdout);
    let mut instructions = Vec::new();
    for (stage, functions) in STAGES {
        let mut total = 0;
        for function in functions {
            total += inclusive(&text, function)
                .with_context(|| format!("{function} is not in callgrind's profile"))?;
        }
        instructions.push((stage, total as f64 / n.max(1) as f64));
    }
    let shown: Vec<String> = instructions
        .iter()
        .map(|(stage, per)| format!("{stage} {per:.0}"))
        .collect();
    Ok(Measurement {
        scenario: "stages",
        records: n,
        seconds,
        setup: format!(
            "instructions a record (callgrind, the run under it timed): {}",
            shown.join(", ")
        ),
        latency_ms: None,
        peak_rss_mib: None,
        failed: None,
        machine_cpu: None,
        hops: None,
        instructions: Some(instructions),
    })
}

/// The inclusive instruction count callgrind_annotate gives `function`
/// (a line such as `1,234,567 (12.34%)  ???:stockledger_bench::stages::stage_decode [...]`).
fn inclusive(annotated: &str, function: &str) -> Option<u64> {
    annotated
        .lines()
        .find(|line| line.contains(&format!("{function} ")) || line.ends_with(function))
        .and_then(|line| line.split_whitespace().next())
        .and_then(|count| count.replace(',', "").parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inclusive_count_is_read_from_callgrind_annotate_output() {
        let text = "--------\n\
            8,123,456 (45.10%)  ???:stockledger_bench::stages::stage_decode [/x/stockledger-bench]\n\
              912,000 ( 5.00%)  ???:stockledger_bench::stages::stage_decide [/x/stockledger-bench]\n";
        assert_eq!(inclusive(text, "stages::stage_decode"), Some(8_123_456));
        assert_eq!(inclusive(text, "stages::stage_decide"), Some(912_000));
        assert_eq!(inclusive(text, "stages::stage_encode_outcome"), None);
    }

    #[test]
    fn the_worker_decodes_decides_and_encodes_every_record() {
        worker("500").unwrap();
    }
}
