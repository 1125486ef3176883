//! `stockledger`: parses arguments, sets up logging, runs one command.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

/// mimalloc rather than glibc's malloc: the apply path allocates and frees
/// many small buffers per record, where glibc's arenas were the top of the
/// applier's profile (docs/BENCHMARKS.md has the same-run comparison).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use stockledger_cli::{Cli, LogFormat};

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Err(e) = stockledger_cli::prepare(&mut cli, &matches) {
        eprintln!("error: {}", stockledger_core::report::Chain(e.as_ref()));
        return stockledger_cli::exit::Exit::Usage.into();
    }
    init_tracing(cli.global.log_format, cli.default_log_filter());
    stockledger_cli::block_on(stockledger_cli::run(cli))
}

fn init_tracing(format: LogFormat, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
