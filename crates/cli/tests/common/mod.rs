//! Running the `stockledger` binary in a test's namespace.

#![allow(dead_code)] // each test file uses its own part

use std::process::{Child, Command, Stdio};

use stockledger_testkit::Harness;

/// `stockledger` with the connection settings and names of `h`'s namespace.
pub fn stockledger(h: &Harness) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_stockledger"));
    cmd.env("KAFKA_BROKERS", &h.kafka.brokers)
        .env("REDIS_URL", &h.redis_url)
        .env("DATABASE_URL", &h.services.database_url)
        .env("STOCKLEDGER_TOPIC", &h.ns.topic)
        .env("STOCKLEDGER_OUTCOMES_TOPIC", &h.ns.outcomes_topic)
        .env("STOCKLEDGER_DLQ_TOPIC", &h.ns.dlq_topic)
        .env("STOCKLEDGER_PREFIX", &h.ns.prefix)
        .env("STOCKLEDGER_APPLIER_GROUP", &h.ns.applier_group)
        .env("STOCKLEDGER_ARCHIVER_GROUP", &h.ns.archiver_group)
        .stdin(Stdio::null());
    cmd
}

/// Where [`spawn`] writes the log of `args`.
pub fn log_path(h: &Harness, args: &[&str]) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("{}-{}.log", h.ns.id, args.join("-")))
}

/// Starts a long-running subcommand (`apply`, `archive`) in the background,
/// its log in a file named after the namespace ([`log_path`]).
pub fn spawn(h: &Harness, args: &[&str]) -> std::io::Result<Child> {
    let log = log_path(h, args);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    stockledger(h)
        .args(args)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
}

/// Sends SIGTERM, as an orchestrator stopping the process does.
pub fn terminate(child: &Child) -> std::io::Result<()> {
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other("kill -TERM failed"))
    }
}
