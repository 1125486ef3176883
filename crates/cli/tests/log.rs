//! The command log stays the truth: a topic that would delete records and
//! a topic whose partition count changed are refused with the way out, and
//! that way out (`repartition`, then `replay`) rebuilds the fold of the log;
//! the local stack's broker keeps the log and the group's offsets through
//! `stack.sh down` and `up` and through a `kill -9` under load.

mod common;

use std::collections::HashMap;

use common::{spawn, stockledger, terminate};
use stockledger_applier::ApplierError;
use stockledger_kafka::admin::{create_topics, topic_config, TopicSpec};
use stockledger_kafka::topic::{committed_offsets, partition_count, LogRecord};
use stockledger_kafka::KafkaConfig;
use stockledger_maintenance::check;
use stockledger_projection::Projection;
use stockledger_testkit::harness::CATCH_UP;
use stockledger_testkit::services::{tansu_binary, Broker};
use stockledger_testkit::{traffic, wait_until, Harness};

const SKUS: [&str; 12] = [
    "G0", "G1", "G2", "G3", "G4", "G5", "G6", "G7", "G8", "G9", "G10", "G11",
];

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Each SKU's command ids in the order they were written: by record time,
/// then partition and offset.
fn per_sku(records: &[LogRecord]) -> anyhow::Result<HashMap<String, Vec<String>>> {
    let mut order: HashMap<String, Vec<String>> = HashMap::new();
    let mut sorted: Vec<&LogRecord> = records.iter().collect();
    sorted.sort_by_key(|r| (r.timestamp, r.partition, r.offset));
    for r in sorted {
        let command =
            stockledger_core::codec::decode_command(r.payload.as_deref().unwrap_or_default())?;
        order
            .entry(command.sku.to_string())
            .or_default()
            .push(command.command_id.to_string());
    }
    Ok(order)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grown_command_topic_is_refused_and_repartition_then_replay_rebuild_its_fold(
) -> anyhow::Result<()> {
    let h = Harness::new("grow", 4).await?;
    let applier = h.start_applier();
    let mut sent = traffic::restock_all(&h.ledger, &SKUS, 500).await?;
    sent += traffic::orders(&h.ledger, &SKUS, 0, 150).await?;
    wait_until("the first records applied", CATCH_UP, || async {
        Ok((h.applied(&SKUS).await? >= sent).then_some(()))
    })
    .await?;
    applier.stop().await?;

    // The operator adds partitions; the applier refuses to go on, naming
    // the way out, and touches neither Redis nor the group's offsets.
    h.grow_command_topic(8).await?;
    let offsets = committed_offsets(&h.kafka, &h.ns.applier_group, &h.ns.topic).await?;
    let refused = stockledger_applier::run(h.applier_config(), std::future::pending()).await;
    match refused {
        Err(
            e @ ApplierError::PartitionsChanged {
                marked: 4, now: 8, ..
            },
        ) => {
            let message = e.to_string();
            assert!(
                message.contains("stockledger repartition --to"),
                "{message}"
            );
        }
        other => panic!("expected PartitionsChanged 4 -> 8, got {other:?}"),
    }
    assert_eq!(
        committed_offsets(&h.kafka, &h.ns.applier_group, &h.ns.topic).await?,
        offsets
    );
    let before = check::fold(&h.read(&h.ns.topic).await?, 4);
    assert!(check::compare(&h.projection, &before).await?.is_empty());

    // Producers go on: their SKUs now map over 8 partitions.
    let grown = Harness::ledger_on(&h.kafka, &h.ns.topic).await?;
    traffic::orders(&grown, &SKUS, 150, 150).await?;
    let log = h.read(&h.ns.topic).await?;

    // The way out: copy into a new topic, rebuild a new prefix from it,
    // and apply there.
    let new_topic = format!("{}.by8", h.ns.topic);
    let new_prefix = format!("{}:by8", h.ns.prefix);
    let out = stockledger(&h)
        .args(["repartition", "--to", &new_topic, "--partitions", "8"])
        .output()?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(&format!("copied {} records", log.len())),
        "{}",
        text(&out.stdout)
    );
    let copy = h.read(&new_topic).await?;
    assert_eq!(copy.len(), log.len());
    for r in &copy {
        let key = r.key.as_deref().unwrap_or_default();
        assert_eq!(
            r.partition,
            stockledger_core::partition::home_partition(key, 8),
            "every record on its SKU's home partition"
        );
    }
    assert_eq!(per_sku(&copy)?, per_sku(&log)?, "per-SKU order preserved");

    let out = stockledger(&h)
        .args(["--topic", &new_topic, "replay", "--into", &new_prefix])
        .output()?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut config = h.applier_config();
    config.topic = new_topic.clone();
    config.prefix = new_prefix.clone();
    config.group_id = format!("{}.by8", h.ns.applier_group);
    let applier = h.start_applier_with(config);
    let moved = Harness::ledger_on(&h.kafka, &new_topic).await?;
    traffic::orders(&moved, &SKUS, 300, 100).await?;

    let rebuilt = Projection::connect(&h.redis_url, new_prefix).await?;
    let settled = wait_until(
        "the new prefix to equal the fold of the new log",
        CATCH_UP,
        || async {
            let records = h.read(&new_topic).await?;
            Ok(check::compare(&rebuilt, &check::fold(&records, 8))
                .await?
                .is_empty()
                .then_some(()))
        },
    )
    .await;
    if settled.is_err() {
        let records = h.read(&new_topic).await?;
        let mismatches = check::compare(&rebuilt, &check::fold(&records, 8)).await?;
        panic!("the new prefix differs from the fold of the new log: {mismatches:#?}");
    }
    applier.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_topic_with_finite_retention_is_refused_unless_allowed() -> anyhow::Result<()> {
    let h = Harness::new("retention", 1).await?;
    let finite = format!("{}.weekly", h.ns.topic);
    create_topics(
        &h.kafka,
        &[TopicSpec {
            name: finite.clone(),
            partitions: 1,
            replication: 1,
            configs: vec![("retention.ms".into(), "86400000".into())],
        }],
    )
    .await?;

    for args in [
        vec!["--topic", &finite, "apply"],
        vec!["--topic", &finite, "replay", "--into", "x"],
    ] {
        let out = stockledger(&h).args(&args).output()?;
        assert!(!out.status.success(), "{args:?} must be refused");
        let stderr = text(&out.stderr);
        for expected in ["retention.ms=86400000", "--allow-finite-retention", &finite] {
            assert!(stderr.contains(expected), "{args:?}: {stderr}");
        }
    }
    assert_eq!(h.projection.marker().await?, None, "Redis untouched");
    assert!(
        committed_offsets(&h.kafka, &h.ns.applier_group, &finite)
            .await?
            .is_empty(),
        "no offsets committed"
    );

    // Allowed explicitly, it runs.
    let mut applier = spawn(
        &h,
        &["--topic", &finite, "apply", "--allow-finite-retention"],
    )?;
    let marked = wait_until("the applier to mark the projection", CATCH_UP, || async {
        Ok(h.projection.marker().await?)
    })
    .await;
    terminate(&applier)?;
    let status = applier.wait()?;
    assert_eq!(marked?.topic, finite);
    assert!(status.success());
    let out = stockledger(&h)
        .args([
            "--topic",
            &finite,
            "replay",
            "--into",
            &format!("{}:copy", h.ns.prefix),
            "--allow-finite-retention",
        ])
        .output()?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_create_makes_topics_the_broker_reports_as_keeping_every_command(
) -> anyhow::Result<()> {
    let h = Harness::new("topics-create", 1).await?;
    let name = |what: &str| format!("{}.created.{what}", h.ns.topic);
    let (commands, outcomes, dead) = (name("ledger"), name("outcomes"), name("dlq"));
    let out = stockledger(&h)
        .args(["--topic", &commands, "--outcomes-topic", &outcomes])
        .args([
            "--dlq-topic",
            &dead,
            "topics",
            "create",
            "--partitions",
            "3",
        ])
        .output()?;
    assert!(out.status.success(), "{}", text(&out.stderr));

    // What the broker says, not what was asked for.
    let expected = [
        (&commands, 3, "-1", "-1"),
        (&outcomes, 3, "604800000", "-1"),
        (&dead, 1, "-1", "-1"),
    ];
    for (topic, partitions, retention_ms, retention_bytes) in expected {
        let config = topic_config(&h.kafka, topic).await?;
        let setting = |key: &str| config.get(key).map(String::as_str);
        assert_eq!(setting("retention.ms"), Some(retention_ms), "{topic}");
        assert_eq!(setting("retention.bytes"), Some(retention_bytes), "{topic}");
        assert_eq!(
            setting("cleanup.policy"),
            Some("delete"),
            "{topic}: never compacted"
        );
        assert_eq!(setting("min.insync.replicas"), Some("1"), "{topic}");
        assert_eq!(
            partition_count(&h.kafka, topic).await?,
            partitions,
            "{topic}"
        );
    }
    Ok(())
}

/// A record's partition, offset, key and value.
type Identity = (i32, i64, Option<Vec<u8>>, Option<Vec<u8>>);

/// What identifies the log's records: position, key and bytes.
fn positions(log: &[LogRecord]) -> Vec<Identity> {
    let mut all: Vec<_> = log
        .iter()
        .map(|r| (r.partition, r.offset, r.key.clone(), r.payload.clone()))
        .collect();
    all.sort();
    all
}

/// Restocks and 100 orders over [`SKUS`], applied by an applier that is
/// then stopped; how many records were sent.
async fn first_traffic_applied(h: &Harness) -> anyhow::Result<u64> {
    let applier = h.start_applier();
    let mut sent = traffic::restock_all(&h.ledger, &SKUS, 500).await?;
    sent += traffic::orders(&h.ledger, &SKUS, 0, 100).await?;
    wait_until("the first records applied", CATCH_UP, || async {
        Ok((h.applied(&SKUS).await? >= sent).then_some(()))
    })
    .await?;
    applier.stop().await?;
    Ok(sent)
}

/// `deploy/local/stack.sh` with its broker on a port and in a state
/// directory of this test's own (Redis and PostgreSQL are the shared ones).
/// A local stack of the test's own (`deploy/local/stack.sh` with its own
/// home and broker ports), with the broker the environment chooses
/// (`STOCKLEDGER_BROKER`: Apache Kafka unless it says tansu, whose durable
/// engine is then used).
struct Stack {
    home: std::path::PathBuf,
    port: u16,
    controller_port: u16,
    sasl_port: u16,
    broker: Broker,
}

impl Stack {
    fn new() -> anyhow::Result<Self> {
        let free = || -> anyhow::Result<u16> {
            Ok(std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port())
        };
        let port = free()?;
        let home = std::env::temp_dir().join(format!("stockledger-stack-{port}"));
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(&home)?;
        Ok(Self {
            home,
            port,
            controller_port: free()?,
            sasl_port: free()?,
            broker: Broker::configured()?,
        })
    }

    /// Runs `stack.sh verb`; its stderr.
    fn run(&self, verb: &str) -> anyhow::Result<String> {
        let out = self.command(verb).output()?;
        let stderr = text(&out.stderr);
        anyhow::ensure!(out.status.success(), "stack.sh {verb} failed: {stderr}");
        Ok(stderr)
    }

    fn command(&self, verb: &str) -> std::process::Command {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/local/stack.sh");
        let mut command = std::process::Command::new(script);
        command
            .arg(verb)
            .env("STOCKLEDGER_HOME", &self.home)
            .env("STOCKLEDGER_KAFKA_PORT", self.port.to_string())
            .env(
                "STOCKLEDGER_KAFKA_CONTROLLER_PORT",
                self.controller_port.to_string(),
            )
            .env("STOCKLEDGER_KAFKA_SASL_PORT", self.sasl_port.to_string());
        if self.broker == Broker::Tansu {
            command
                .env("STOCKLEDGER_BROKER", "tansu")
                .env("STOCKLEDGER_BROKER_STORAGE", "libsql");
            if let Ok(tansu) = tansu_binary() {
                command.env("STOCKLEDGER_TANSU", tansu);
            }
        }
        command
    }

    /// What `up` says when it starts the broker.
    fn starting(&self) -> &'static str {
        match self.broker {
            Broker::Kafka => "starting Apache Kafka",
            Broker::Tansu => "starting tansu",
        }
    }

    fn broker_pid(&self) -> anyhow::Result<i32> {
        Ok(std::fs::read_to_string(self.home.join("broker.pid"))?
            .trim()
            .parse()?)
    }

    /// Moves the broker's log away, as a lost disk would.
    fn lose_log(&self) -> anyhow::Result<()> {
        let data = match self.broker {
            Broker::Kafka => self.home.join("kafka/data"),
            Broker::Tansu => self.home.join("broker"),
        };
        std::fs::rename(&data, self.home.join("lost"))?;
        Ok(())
    }

    fn listening(&self) -> bool {
        std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        let _ = self.run("down");
    }
}

/// Checks that a replay of the log rebuilds its fold, and that the live
/// projection equals it too.
async fn replay_matches_the_fold(h: &Harness) -> anyhow::Result<()> {
    let copy = format!("{}:copy", h.ns.prefix);
    let out = stockledger(h).args(["replay", "--into", &copy]).output()?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let replayed = Projection::connect(&h.redis_url, copy).await?;
    let fold = check::fold(&h.read(&h.ns.topic).await?, 2);
    for (what, projection) in [
        ("the replay", &replayed),
        ("the live prefix", &h.projection),
    ] {
        let mismatches = check::compare(projection, &fold).await?;
        assert!(mismatches.is_empty(), "{what}: {mismatches:#?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_stacks_log_survives_down_and_up_and_the_applier_resumes_where_it_was(
) -> anyhow::Result<()> {
    let stack = Stack::new()?;
    let said = stack.run("up")?;
    assert!(said.contains("log kept in"), "{said}");
    let kafka = KafkaConfig::new(format!("127.0.0.1:{}", stack.port));
    let h = Harness::with_kafka("stack", 2, kafka).await?;
    let archiver = h.start_archiver();
    let mut sent = first_traffic_applied(&h).await?;
    let log = h.read(&h.ns.topic).await?;
    let offsets = committed_offsets(&h.kafka, &h.ns.applier_group, &h.ns.topic).await?;
    assert_eq!(log.len() as u64, sent);

    // `down` returns once the broker is gone, so `up` starts a new one.
    stack.run("down")?;
    assert!(
        !stack.listening(),
        "down returned with the broker still listening"
    );
    assert!(!stack.home.join("broker.pid").exists());
    let said = stack.run("up")?;
    assert!(said.contains(stack.starting()), "{said}");
    assert_eq!(
        positions(&h.read(&h.ns.topic).await?),
        positions(&log),
        "the log after the restart is the log before it"
    );
    assert_eq!(
        committed_offsets(&h.kafka, &h.ns.applier_group, &h.ns.topic).await?,
        offsets,
        "the group's offsets survive the restart"
    );
    let said = stack.run("up")?;
    assert!(
        !said.contains(stack.starting()),
        "a running broker is kept: {said}"
    );

    // The applier resumes from its offsets and goes on with new traffic.
    let applier = h.start_applier();
    sent += traffic::orders(&h.ledger, &SKUS, 100, 100).await?;
    wait_until("the new records applied", CATCH_UP, || async {
        Ok((h.applied(&SKUS).await? >= sent).then_some(()))
    })
    .await?;
    applier.stop().await?;
    h.assert_contract().await?;
    archiver.stop().await?;
    replay_matches_the_fold(&h).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_brokers_log_survives_a_kill_9_under_load() -> anyhow::Result<()> {
    let stack = Stack::new()?;
    if stack.broker == Broker::Tansu {
        // tansu's durable engine is not what this test is about.
        return Ok(());
    }
    stack.run("up")?;
    let kafka = KafkaConfig::new(format!("127.0.0.1:{}", stack.port));
    let h = Harness::with_kafka("stack-kill", 2, kafka).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    // SIGKILL while producers and the applier are busy; `up` starts it
    // again on the same log, and every client reconnects by itself.
    h.orders_through(&SKUS, || async {
        let pid = stack.broker_pid()?;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )?;
        wait_until("the killed broker gone", CATCH_UP, || async {
            Ok((!stack.listening()).then_some(()))
        })
        .await?;
        let said = stack.run("up")?;
        assert!(said.contains(stack.starting()), "{said}");
        Ok(())
    })
    .await?;
    h.assert_contract().await?;
    applier.stop().await?;
    archiver.stop().await?;
    replay_matches_the_fold(&h).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_broker_loses_its_log_the_applier_refuses_the_fold_of_the_lost_log(
) -> anyhow::Result<()> {
    let stack = Stack::new()?;
    stack.run("up")?;
    let kafka = KafkaConfig::new(format!("127.0.0.1:{}", stack.port));
    let h = Harness::with_kafka("lost", 2, kafka).await?;
    first_traffic_applied(&h).await?;
    let fold = check::fold(&h.read(&h.ns.topic).await?, 2);
    let marker = h.projection.marker().await?;
    assert!(marker.as_ref().is_some_and(|m| !m.applied.is_empty()));

    // The broker restarts with an empty log; the topics are created again
    // and producers go on, from offset 0.
    stack.run("down")?;
    stack.lose_log()?;
    stack.run("up")?;
    let out = stockledger(&h)
        .args(["topics", "create", "--partitions", "2"])
        .output()?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let producer = Harness::ledger_on(&h.kafka, &h.ns.topic).await?;
    traffic::orders(&producer, &SKUS, 100, 10).await?;

    let refused = stockledger_applier::run(h.applier_config(), std::future::pending()).await;
    match refused {
        Err(e @ ApplierError::LogLost { .. }) => {
            let message = e.to_string();
            for expected in ["broker lost the log", "partition 0 offset", "replay --into"] {
                assert!(message.contains(expected), "{message}");
            }
        }
        other => panic!("expected LogLost, got {other:?}"),
    }
    assert_eq!(h.projection.marker().await?, marker, "marker untouched");
    let mismatches = check::compare(&h.projection, &fold).await?;
    assert!(mismatches.is_empty(), "Redis untouched: {mismatches:#?}");
    assert!(
        committed_offsets(&h.kafka, &h.ns.applier_group, &h.ns.topic)
            .await?
            .is_empty(),
        "no offsets committed"
    );
    Ok(())
}

/// Runs `deploy/local/kafka.sh args` with `env` on top of the test's; its
/// exit status and the last line it wrote to stderr.
fn kafka_script(args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> anyhow::Result<(bool, String)> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/local/kafka.sh");
    let out = std::process::Command::new(script)
        .args(args)
        .envs(env.iter().copied())
        .output()?;
    let stderr = text(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default().to_owned();
    Ok((out.status.success(), last))
}

/// A directory of fake programs put first on PATH, each a shell script.
fn fake_programs(
    dir: &std::path::Path,
    programs: &[(&str, &str)],
) -> anyhow::Result<std::ffi::OsString> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    for (name, body) in programs {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n"))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    }
    let mut path = dir.as_os_str().to_owned();
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap_or_default());
    Ok(path)
}

#[test]
fn the_stack_refuses_what_it_cannot_use_in_one_line_naming_the_fix_and_deletes_nothing(
) -> anyhow::Result<()> {
    let stack = Stack::new()?;
    if stack.broker != Broker::Kafka {
        return Ok(()); // these are Apache Kafka's refusals
    }
    // A port held by something that is not a Kafka broker.
    let squatter = std::net::TcpListener::bind(("127.0.0.1", stack.port))?;
    let out = stack.command("up").output()?;
    let said = text(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains(&format!("127.0.0.1:{} is taken", stack.port))
            && said.contains("STOCKLEDGER_KAFKA_PORT"),
        "{said}"
    );
    drop(squatter);

    // A log directory of another cluster, and one that is no Kafka log.
    let dir = stack.home.join("refusals");
    std::fs::create_dir_all(dir.join("data"))?;
    std::fs::write(dir.join("cluster.id"), "ours-ours-ours-ours-oA\n")?;
    let meta = "version=1\ncluster.id=theirs-theirs-theirs-A\nnode.id=1\n";
    std::fs::write(dir.join("data/meta.properties"), meta)?;
    let dir_arg = dir.to_string_lossy().into_owned();
    let (port, controller) = (stack.port.to_string(), stack.controller_port.to_string());
    let run = ["run", dir_arg.as_str(), port.as_str(), controller.as_str()];
    let (ok, said) = kafka_script(&run, &[])?;
    assert!(
        !ok && said.contains("belongs to cluster theirs-theirs-theirs-A") && said.contains("move"),
        "{said}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("data/meta.properties"))?,
        meta
    );
    std::fs::remove_file(dir.join("data/meta.properties"))?;
    std::fs::write(dir.join("data/notes.txt"), "not a log")?;
    let (ok, said) = kafka_script(&run, &[])?;
    assert!(!ok && said.contains("no Kafka log"), "{said}");
    assert_eq!(
        std::fs::read_to_string(dir.join("data/notes.txt"))?,
        "not a log"
    );
    assert!(!stack.listening(), "no broker was started");

    // A Java that is too old.
    let old_java = fake_programs(
        &stack.home.join("old-java"),
        &[("java", "echo '    java.specification.version = 11' >&2")],
    )?;
    let (ok, said) = kafka_script(&["fetch"], &[("PATH", &old_java)])?;
    assert!(
        !ok && said.contains("Java 11") && said.contains("Java 17 or newer"),
        "{said}"
    );

    // Maven Central out of reach (a home with no fetched jars, and a Maven
    // that fails as an offline one does).
    let no_maven = fake_programs(
        &stack.home.join("no-maven"),
        &[(
            "mvn",
            "echo '[ERROR] Could not transfer artifact: Network is unreachable'; exit 1",
        )],
    )?;
    let empty_home = stack.home.join("empty-home");
    let (ok, said) = kafka_script(
        &["fetch"],
        &[("PATH", &no_maven), ("HOME", empty_home.as_os_str())],
    )?;
    assert!(
        !ok && said.contains("from Maven Central failed") && said.contains("run again"),
        "{said}"
    );
    Ok(())
}
