//! `stockledger` components run as child processes, so each one's memory
//! can be read alone.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use stockledger_cli::Global;

/// The `stockledger` binary built next to this one.
fn stockledger_binary() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe().context("finding the bench binary")?;
    let exe = me.with_file_name("stockledger");
    anyhow::ensure!(
        exe.exists(),
        "{} is missing: build it with `cargo build --release -p stockledger-cli`",
        exe.display()
    );
    Ok(exe)
}

/// A `stockledger` subcommand run as a child process with the bench's
/// settings, stopped with SIGTERM as an orchestrator would.
pub(crate) struct Component {
    name: &'static str,
    child: std::sync::Mutex<tokio::process::Child>,
}

impl Component {
    /// Runs `stockledger <subcommand>` with the bench's connection settings
    /// and `env` on top (names and groups).
    pub(crate) fn start(
        g: &Global,
        env: &[(&str, &str)],
        subcommand: &'static str,
    ) -> anyhow::Result<Self> {
        let exe = stockledger_binary()?;
        let properties: Vec<String> = g
            .kafka_properties
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let mut command = tokio::process::Command::new(exe);
        if !properties.is_empty() {
            command.env("KAFKA_PROPERTIES", properties.join(";"));
        }
        // The settings above carry the passwords the bench read already;
        // the child would add them a second time.
        for var in stockledger_cli::secrets::PASSWORD_VARIABLES {
            command.env_remove(var).env_remove(format!("{var}_FILE"));
        }
        let child = command
            .arg(subcommand)
            .env("KAFKA_BROKERS", &g.brokers)
            .env("REDIS_URL", &g.redis_url)
            .env("DATABASE_URL", &g.database_url)
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting `stockledger {subcommand}`"))?;
        Ok(Self {
            name: subcommand,
            child: std::sync::Mutex::new(child),
        })
    }

    fn child(&self) -> std::sync::MutexGuard<'_, tokio::process::Child> {
        self.child.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fails if the process has exited (it should run until stopped).
    pub(crate) fn check_running(&self) -> anyhow::Result<()> {
        match self.child().try_wait()? {
            None => Ok(()),
            Some(status) => anyhow::bail!("`stockledger {}` exited early with {status}", self.name),
        }
    }

    /// The process's id, while it runs.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child().id()
    }

    /// The process's peak resident set so far, in MiB (Linux `VmHWM`).
    /// Read from /proc by hand: one field does not justify a /proc crate.
    pub(crate) fn peak_rss_mib(&self) -> Option<f64> {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.child().id()?)).ok()?;
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kib / 1024.0)
    }

    /// SIGTERM, then waits (up to a minute) for a clean exit.
    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        let name = self.name;
        let mut child = self.child.into_inner().unwrap_or_else(|e| e.into_inner());
        let pid = child.id().context("the process has already exited")?;
        let pid = Pid::from_raw(i32::try_from(pid).context("a process id beyond i32")?);
        kill(pid, Signal::SIGTERM).with_context(|| format!("signalling `stockledger {name}`"))?;
        let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
            .await
            .with_context(|| {
                format!("`stockledger {}` did not exit within 60 s of SIGTERM", name)
            })??;
        anyhow::ensure!(
            status.success(),
            "`stockledger {}` exited with {status}",
            name
        );
        Ok(())
    }
}
