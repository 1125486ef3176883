//! Finding or starting the services a test needs, in this order:
//! the URL from the environment; else a container when a Docker engine
//! answers (`redis:7`, `apache/kafka` in KRaft mode, `postgres:15`); else a
//! local process on a free loopback port (`redis-server`; Apache Kafka
//! through `deploy/local/kafka.sh`, or tansu when `STOCKLEDGER_BROKER=tansu`)
//! or, for PostgreSQL, the server on 127.0.0.1:5432. Whatever is started is
//! stopped by a watchdog once the test process is gone.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use stockledger_kafka::KafkaConfig;
use tokio::sync::OnceCell;

/// Connection settings of the services shared by the tests of one process.
#[derive(Debug, Clone)]
pub struct Services {
    pub kafka: KafkaConfig,
    pub redis_url: String,
    pub database_url: String,
}

static SERVICES: OnceCell<Services> = OnceCell::const_new();
static REDIS: OnceCell<String> = OnceCell::const_new();

/// Redis alone, for tests that need nothing else: `REDIS_URL`, or a
/// `redis-server` started for this process.
pub async fn redis_url() -> anyhow::Result<&'static str> {
    crate::log::init();
    let url = REDIS
        .get_or_try_init(|| async {
            match env_url("REDIS_URL") {
                Some(u) => Ok(u),
                None => tokio::task::spawn_blocking(start_redis)
                    .await
                    .context("redis start task")?,
            }
        })
        .await?;
    Ok(url)
}

/// The services for this test process, started on first use.
pub async fn services() -> anyhow::Result<&'static Services> {
    crate::log::init();
    SERVICES
        .get_or_try_init(|| async {
            let redis_url = redis_url().await?.to_owned();
            tokio::task::spawn_blocking(move || discover(redis_url))
                .await
                .context("service discovery task")?
        })
        .await
}

fn discover(redis_url: String) -> anyhow::Result<Services> {
    let brokers = match env_url("KAFKA_BROKERS") {
        Some(b) => b,
        None => start_broker()?,
    };
    let database_url = match env_url("DATABASE_URL") {
        Some(u) => u,
        None if docker_engine() => start_postgres_container()?,
        None => "postgres://postgres:stockledger@127.0.0.1:5432/postgres".to_owned(),
    };
    Ok(Services {
        kafka: KafkaConfig::new(brokers),
        redis_url,
        database_url,
    })
}

fn env_url(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Whether a Docker engine answers (checked once per process).
fn docker_engine() -> bool {
    static ANSWERS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ANSWERS.get_or_init(|| {
        Command::new("docker")
            .args(["info", "--format", "{{.ServerVersion}}"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// Runs `image` with `container_port` published on loopback `port`; returns
/// the container id. The container is removed once this process is gone.
/// Through the docker CLI, not testcontainers: no machine these tests run on
/// has an engine or an image registry, so nothing could exercise the crate.
fn start_container(
    port: u16,
    image: &str,
    container_port: u16,
    env: &[(&str, String)],
    args: &[&str],
) -> anyhow::Result<String> {
    let mut cmd = Command::new("docker");
    cmd.args(["run", "-d", "--rm", "-p"])
        .arg(format!("127.0.0.1:{port}:{container_port}"));
    for (k, v) in env {
        cmd.arg("-e").arg(format!("{k}={v}"));
    }
    let out = cmd
        .arg(image)
        .args(args)
        .output()
        .with_context(|| format!("docker run {image}"))?;
    anyhow::ensure!(
        out.status.success(),
        "docker run {image} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let watchdog = format!(
        "while kill -0 {parent} 2>/dev/null; do sleep 1; done; docker rm -f {id} >/dev/null 2>&1",
        parent = std::process::id()
    );
    Command::new("sh")
        .arg("-c")
        .arg(watchdog)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the container watchdog")?;
    wait_for_port(port, image, &format!("`docker logs {id}`"))?;
    Ok(id)
}

fn start_postgres_container() -> anyhow::Result<String> {
    let port = free_port()?;
    let id = start_container(
        port,
        "postgres:15",
        5432,
        &[("POSTGRES_PASSWORD", "stockledger".into())],
        &[],
    )?;
    // The port opens before initdb's restart; wait until the server accepts.
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let ready = Command::new("docker")
            .args([
                "exec",
                &id,
                "pg_isready",
                "-U",
                "postgres",
                "-h",
                "127.0.0.1",
            ])
            .output()
            .is_ok_and(|o| o.status.success());
        if ready {
            return Ok(format!(
                "postgres://postgres:stockledger@127.0.0.1:{port}/postgres"
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    bail!("PostgreSQL in container {id} was not ready within 60 s")
}

/// A loopback port free now (the listener is dropped at once).
pub fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding a free loopback port")?;
    Ok(listener.local_addr()?.port())
}

/// Starts `program args…` in the background, tied to this process: a small
/// shell watchdog stops it once the test process is gone.
pub(crate) fn spawn_tied(program: &str, args: &[String], log: &str) -> anyhow::Result<()> {
    let quoted: Vec<String> = std::iter::once(program.to_owned())
        .chain(args.iter().cloned())
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect();
    let script = format!(
        "{cmd} >'{log}' 2>&1 & child=$!
         while kill -0 {parent} 2>/dev/null && kill -0 $child 2>/dev/null; do sleep 0.5; done
         kill $child 2>/dev/null; kill -CONT $child 2>/dev/null",
        cmd = quoted.join(" "),
        parent = std::process::id(),
    );
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {program}"))?;
    Ok(())
}

pub(crate) fn wait_for_port(port: u16, what: &str, log: &str) -> anyhow::Result<()> {
    match wait_to_listen(port, what, log)? {
        Listening::Up => Ok(()),
        Listening::PortTaken => bail!("{what} found 127.0.0.1:{port} taken; see {log}"),
    }
}

/// Whether a server started on a [`free_port`] came up.
pub(crate) enum Listening {
    Up,
    /// Another process bound one of its ports first (a free port is free
    /// only until someone takes it, e.g. as an outgoing connection's
    /// ephemeral port); its log, the file `log`, says so.
    PortTaken,
}

/// Waits up to 30 s for `port` to take connections, telling a server that
/// gave up on a taken port (its log says so) from one that is slow.
pub(crate) fn wait_to_listen(port: u16, what: &str, log: &str) -> anyhow::Result<Listening> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(Listening::Up);
        }
        let said = std::fs::read_to_string(log).unwrap_or_default();
        if said.contains("Address already in use") {
            return Ok(Listening::PortTaken);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("{what} did not listen on 127.0.0.1:{port} within 30 s; see {log}")
}

/// The broker the tests start for themselves, by `STOCKLEDGER_BROKER`:
/// Apache Kafka unless it says `tansu`, as `deploy/local/stack.sh` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Broker {
    Kafka,
    Tansu,
}

impl Broker {
    pub fn configured() -> anyhow::Result<Self> {
        match std::env::var("STOCKLEDGER_BROKER").as_deref() {
            Err(_) | Ok("") | Ok("kafka") => Ok(Self::Kafka),
            Ok("tansu") => Ok(Self::Tansu),
            Ok(other) => bail!("STOCKLEDGER_BROKER must be kafka or tansu, got {other:?}"),
        }
    }
}

/// `deploy/local/kafka.sh`, which fetches and runs Apache Kafka.
pub fn kafka_script() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/local/kafka.sh"
    ))
}

/// The tansu binary: `$STOCKLEDGER_TANSU`, the one the local stack scripts
/// build under the home directory, or `tansu` on `PATH`.
pub fn tansu_binary() -> anyhow::Result<PathBuf> {
    if let Ok(path) = std::env::var("STOCKLEDGER_TANSU") {
        return Ok(PathBuf::from(path));
    }
    if let Ok(home) = std::env::var("HOME") {
        let built = PathBuf::from(home).join(".stockledger/tansu/bin/tansu");
        if built.exists() {
            return Ok(built);
        }
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join("tansu"))
        .find(|p| p.exists());
    on_path.context(
        "no tansu broker: set STOCKLEDGER_TANSU, or build it with STOCKLEDGER_BROKER=tansu deploy/local/stack.sh up",
    )
}

/// A broker of the caller's own on a free loopback port, whatever the
/// environment says (for tests that pause or kill it); returns its port.
pub async fn start_own_broker() -> anyhow::Result<u16> {
    let started = tokio::task::spawn_blocking(start_local_broker)
        .await
        .context("broker start task")??;
    Ok(started)
}

/// The command line that tells the broker on `port` started here from any
/// other process.
fn broker_pattern(port: u16) -> anyhow::Result<String> {
    Ok(match Broker::configured()? {
        Broker::Kafka => format!("{}/server.properties", kafka_dir(port).display()),
        Broker::Tansu => format!("tansu broker --listener-url tcp://127.0.0.1:{port}"),
    })
}

/// Sends `signal` (`STOP`, `CONT`, `KILL`, …) to the broker started here on
/// `port`: a frozen broker keeps its log, a killed one recovers it from
/// disk when [`restart_own_broker`] starts it again (Apache Kafka).
pub fn signal_broker(port: u16, signal: &str) -> anyhow::Result<()> {
    signal_matching(&broker_pattern(port)?, signal)
        .with_context(|| format!("no broker on port {port} to {signal}"))
}

/// Sends `signal` (`KILL`, `STOP`, …) to the processes whose command line
/// matches `pattern`; an error if none does.
pub(crate) fn signal_matching(pattern: &str, signal: &str) -> anyhow::Result<()> {
    let status = Command::new("pkill")
        .arg(format!("-{signal}"))
        .arg("-f")
        .arg(pattern)
        .status()
        .context("running pkill")?;
    anyhow::ensure!(status.success(), "no process matches {pattern}");
    Ok(())
}

/// Waits until no process's command line matches `pattern`.
pub(crate) async fn await_gone(pattern: &str) -> anyhow::Result<()> {
    crate::wait_until("the old process gone", Duration::from_secs(60), || async {
        let running = Command::new("pgrep")
            .arg("-f")
            .arg(pattern)
            .stdout(Stdio::null())
            .status()?
            .success();
        Ok((!running).then_some(()))
    })
    .await
}

/// Starts the Apache Kafka broker of [`start_own_broker`] again on the same
/// port and log directory, once the old process is gone.
pub async fn restart_own_broker(port: u16) -> anyhow::Result<()> {
    anyhow::ensure!(
        Broker::configured()? == Broker::Kafka,
        "only an Apache Kafka broker keeps its log across a restart"
    );
    await_gone(&broker_pattern(port)?).await?;
    let controller = std::fs::read_to_string(kafka_dir(port).join("controller.port"))
        .context("the broker's controller port")?;
    let controller = controller.trim().parse()?;
    tokio::task::spawn_blocking(move || start_kafka(port, controller))
        .await
        .context("broker start task")?
}

fn start_broker() -> anyhow::Result<String> {
    if docker_engine() {
        let port = free_port()?;
        let env = [
            ("KAFKA_NODE_ID", "1".to_owned()),
            ("KAFKA_PROCESS_ROLES", "broker,controller".to_owned()),
            (
                "KAFKA_CONTROLLER_QUORUM_VOTERS",
                "1@localhost:9093".to_owned(),
            ),
            (
                "KAFKA_LISTENERS",
                "PLAINTEXT://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093".to_owned(),
            ),
            (
                "KAFKA_ADVERTISED_LISTENERS",
                format!("PLAINTEXT://127.0.0.1:{port}"),
            ),
            (
                "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP",
                "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT".to_owned(),
            ),
            ("KAFKA_CONTROLLER_LISTENER_NAMES", "CONTROLLER".to_owned()),
            ("KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "1".to_owned()),
            (
                "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
                "1".to_owned(),
            ),
            ("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1".to_owned()),
            ("KAFKA_AUTO_CREATE_TOPICS_ENABLE", "false".to_owned()),
        ];
        // The broker advertises the published loopback port to clients.
        start_container(port, "apache/kafka:4.3.1", 9092, &env, &[])?;
        return Ok(format!("127.0.0.1:{port}"));
    }
    Ok(format!("127.0.0.1:{}", start_local_broker()?))
}

fn start_local_broker() -> anyhow::Result<u16> {
    let port = free_port()?;
    match Broker::configured()? {
        Broker::Kafka => {
            let controller = free_port()?;
            let dir = kafka_dir(port);
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir)?;
            std::fs::write(dir.join("controller.port"), controller.to_string())?;
            start_kafka(port, controller)?;
        }
        Broker::Tansu => start_tansu(port)?,
    }
    Ok(port)
}

/// Where the Apache Kafka broker on `port` keeps its settings and log.
fn kafka_dir(port: u16) -> PathBuf {
    std::env::temp_dir().join(format!("stockledger-kafka-{port}"))
}

fn start_kafka(port: u16, controller: u16) -> anyhow::Result<()> {
    let dir = kafka_dir(port);
    let log = dir.join("console.log").to_string_lossy().into_owned();
    // Half of the stack's heap: several test brokers may run at once.
    spawn_tied(
        "env",
        &[
            "KAFKA_HEAP_OPTS=-Xmx512m -Xms512m".into(),
            kafka_script().to_string_lossy().into_owned(),
            "run".into(),
            dir.to_string_lossy().into_owned(),
            port.to_string(),
            controller.to_string(),
        ],
        &log,
    )?;
    wait_for_kafka(port, &log)
}

/// Waits until the broker on `port` answers a metadata request with itself
/// as a broker, so the first test request does not race its start.
fn wait_for_kafka(port: u16, log: &str) -> anyhow::Result<()> {
    wait_for_brokers(
        &format!("127.0.0.1:{port}"),
        1,
        Duration::from_secs(90),
        log,
    )
}

/// Waits until the brokers at `bootstrap` answer a metadata request listing
/// `count` brokers or more (blocking); the error names `log`.
pub(crate) fn wait_for_brokers(
    bootstrap: &str,
    count: usize,
    within: Duration,
    log: &str,
) -> anyhow::Result<()> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .context("a client to await the brokers")?;
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if consumer
            .fetch_metadata(None, Duration::from_secs(2))
            .is_ok_and(|m| m.brokers().len() >= count)
        {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("Apache Kafka at {bootstrap} did not list {count} brokers within {within:?}; see {log}")
}

fn start_tansu(port: u16) -> anyhow::Result<()> {
    let binary = tansu_binary()?;
    let url = format!("tcp://127.0.0.1:{port}");
    let log = std::env::temp_dir().join(format!("stockledger-tansu-{port}.log"));
    let log = log.to_string_lossy().into_owned();
    spawn_tied(
        &binary.to_string_lossy(),
        &[
            "broker".into(),
            "--listener-url".into(),
            url.clone(),
            "--advertised-listener-url".into(),
            url,
            "--storage-engine".into(),
            "memory://tansu/".into(),
        ],
        &log,
    )?;
    wait_for_port(port, "the tansu broker", &log)
}

fn start_redis() -> anyhow::Result<String> {
    if docker_engine() {
        let port = free_port()?;
        start_container(
            port,
            "redis:7",
            6379,
            &[],
            &["--save", "", "--appendonly", "no"],
        )?;
        return Ok(format!("redis://127.0.0.1:{port}"));
    }
    let port = free_port()?;
    let log = std::env::temp_dir().join(format!("stockledger-redis-{port}.log"));
    let log = log.to_string_lossy().into_owned();
    spawn_tied(
        "redis-server",
        &[
            "--bind".into(),
            "127.0.0.1".into(),
            "--port".into(),
            port.to_string(),
            "--save".into(),
            String::new(),
            "--appendonly".into(),
            "no".into(),
        ],
        &log,
    )?;
    wait_for_port(port, "redis-server", &log)?;
    Ok(format!("redis://127.0.0.1:{port}"))
}
