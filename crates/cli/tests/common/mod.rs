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
    let pid = i32::try_from(child.id()).map_err(std::io::Error::other)?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .map_err(std::io::Error::from)
}

/// A child process killed (and reaped) when the test ends, whichever way.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `stockledger serve` on a free port with `extra` flags; returns
/// it and its base URL (read from the line it prints once listening).
pub fn serve(h: &Harness, extra: &[&str]) -> anyhow::Result<(Running, String)> {
    use std::io::BufRead;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path(h, &["serve"]))?;
    let mut child = stockledger(h)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(extra)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let running = Running(child);
    let mut line = String::new();
    std::io::BufReader::new(stdout).read_line(&mut line)?;
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .ok_or_else(|| anyhow::anyhow!("serve printed {line:?}, not its address"))?
        .to_owned();
    Ok((running, url))
}

/// Runs Prometheus' own checker (`promtool check metrics`: HELP and TYPE
/// on every metric, names, units) on a `/metrics` text. promtool is
/// `STOCKLEDGER_PROMTOOL` (deploy/local/test.sh fetches it) or on PATH.
pub fn promtool_check(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let tool = std::env::var("STOCKLEDGER_PROMTOOL").unwrap_or_else(|_| "promtool".into());
    let mut child = Command::new(&tool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            anyhow::anyhow!("running {tool}: {e} (deploy/local/promtool.sh fetches it)")
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(text.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    anyhow::ensure!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics: {said}"
    );
    Ok(())
}

/// A port nothing listens on now, for a `--metrics-addr`.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The value of the Prometheus sample `name{labels}` in `text` (labels as
/// rendered, e.g. `result="APPLIED"`; all of them must appear), or 0.
/// (Read by hand: `prometheus-parse` drops a sample whose label value holds
/// a `}`, as the gateway's route labels do; the format itself is checked
/// by `promtool` in the tests that scrape.)
pub fn sample(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(series, _)| {
            let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
            metric == name && labels.iter().all(|label| rest.contains(label))
        })
        .filter_map(|(_, value)| value.parse::<f64>().ok())
        .sum()
}

/// A self-signed server certificate for localhost and 127.0.0.1, made by
/// openssl in `dir`: (certificate, key). Clients trust it as its own root.
pub fn certificate(dir: &std::path::Path) -> anyhow::Result<(String, String)> {
    let cert = dir.join("cert.pem").to_string_lossy().into_owned();
    let key = dir.join("key.pem").to_string_lossy().into_owned();
    let out = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args([
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-keyout",
            &key,
        ])
        .args([
            "-out",
            &cert,
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            // Not a CA: rustls (webpki) refuses a CA certificate used as a
            // server's own; OpenSSL's clients take either.
            "-addext",
            "basicConstraints=critical,CA:FALSE",
        ])
        .output()?;
    anyhow::ensure!(out.status.success(), "openssl: {out:?}");
    Ok((cert, key))
}

/// A key as `keys new` printed it: the token and the stanza for the file.
pub struct Made {
    pub token: String,
    pub stanza: String,
}

/// Makes a key with `stockledger keys new`, checking that the stanza for
/// the keys file names it and does not hold the token.
pub fn new_key(h: &Harness, name: &str, role: &str) -> anyhow::Result<Made> {
    let out = stockledger(h)
        .args(["keys", "new", "--name", name, "--role", role])
        .output()?;
    anyhow::ensure!(out.status.success(), "keys new: {out:?}");
    let text = String::from_utf8(out.stdout)?;
    let token = text
        .lines()
        .find(|l| l.starts_with("slk_"))
        .ok_or_else(|| anyhow::anyhow!("no token in {text}"))?
        .to_owned();
    let stanza = text[text.find("[[keys]]").unwrap_or(text.len())..].to_owned();
    anyhow::ensure!(stanza.contains(&format!("name = \"{name}\"")), "{text}");
    anyhow::ensure!(
        !stanza.contains(&token),
        "the stanza holds the token: {text}"
    );
    Ok(Made { token, stanza })
}

/// A directory of the test's own for screenshots, kept for a look (CI's
/// artifacts): under the tests' log directory when there is one, else the
/// system's temporary directory.
pub fn screenshots_dir(h: &Harness) -> anyhow::Result<std::path::PathBuf> {
    let root = std::env::var_os("STOCKLEDGER_TEST_LOG_DIR")
        .map_or_else(std::env::temp_dir, std::path::PathBuf::from);
    let dir = root.join(format!("screenshots-{}", h.ns.id));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
