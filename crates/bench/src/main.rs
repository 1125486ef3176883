//! `stockledger-bench`: parses the connection flags (those of `stockledger`)
//! and the bench's own, runs the selected scenarios.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser};

/// mimalloc rather than glibc's malloc: the apply path allocates and frees
/// many small buffers per record, where glibc's arenas were the top of the
/// applier's profile (docs/BENCHMARKS.md has the same-run comparison).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use stockledger_bench::BenchArgs;
use stockledger_cli::Global;

/// Throughput, latency and memory of stockledger next to same-run baselines;
/// writes results.json, results.md and results.svg.
#[derive(Debug, Parser)]
#[command(name = "stockledger-bench", version, about, long_about = None)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(flatten)]
    bench: BenchArgs,
}

fn main() -> ExitCode {
    // The stages scenario's worker, run by callgrind: no flags, no services.
    if let Some(records) = std::env::var_os(stockledger_bench::stages::WORKER_ENV) {
        return match stockledger_bench::stages::worker(&records.to_string_lossy()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // KAFKA_PROPERTIES and the services' passwords, as `stockledger` takes them.
    if let Err(e) = stockledger_cli::prepare_global(&mut cli.global, &matches) {
        eprintln!("error: {}", stockledger_core::report::Chain(e.as_ref()));
        return stockledger_cli::exit::Exit::Usage.into();
    }
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    stockledger_cli::block_on(stockledger_bench::run(&cli.global, cli.bench))
}
