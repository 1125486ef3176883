//! `stockledger status`: how far the applier and the archiver are behind
//! the log, what the projection has folded, the holds waiting for the
//! expirer, the dead letters, and which service does not answer.
//!
//! Each service is asked on its own, within [`ASK_WITHIN`], so one that is
//! down leaves the others' figures in the report. The exit code says what
//! an operator's script needs: healthy, lagging or a service unreachable.

use std::collections::BTreeMap;
use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args as ClapArgs, ValueEnum};
use serde::Serialize;
use stockledger_core::report::Chain;
use stockledger_kafka::topic::{committed_offsets, read_at, watermarks_of, LogError};
use stockledger_projection::Projection;

use super::ApplierGroup;
use crate::exit::Exit;
use crate::Global;

/// How long each service is given to answer.
const ASK_WITHIN: Duration = Duration::from_secs(15);

#[derive(Debug, ClapArgs)]
#[command(after_help = "Examples:
  stockledger status
  stockledger status --format json --max-lag 10000 || alert \"ledger exit $?\"

Exit codes: 0 healthy, 3 lagging (a partition beyond --max-lag, or a hold
overdue beyond --max-hold-overdue-ms) or stalled (the oldest record the
applier or the archiver has not taken waiting beyond --max-wait-ms: it is
not advancing, and its log says why), 69 a service unreachable, 4 a
ledger topic missing; the rest as `stockledger --help` lists them.")]
pub struct Args {
    #[command(flatten)]
    pub applier: ApplierGroup,
    /// Consumer group of the archivers.
    #[arg(
        long,
        env = "STOCKLEDGER_ARCHIVER_GROUP",
        default_value = stockledger_archiver::DEFAULT_GROUP
    )]
    pub archiver_group: String,
    /// Records a partition may be behind its log end and still count as
    /// healthy (for the applier on the command topic, for the archiver on
    /// the outcomes topic).
    #[arg(long, default_value_t = 1000)]
    pub max_lag: i64,
    /// Milliseconds a hold may stay past its deadline before the expirer
    /// counts as behind (it looks every few seconds).
    #[arg(long, default_value_t = 30_000)]
    pub max_hold_overdue_ms: i64,
    /// Milliseconds the oldest record the applier has not applied, or the
    /// archiver not archived, may have waited in the log before that
    /// service counts as stalled: a small lag that never shrinks is a
    /// service that stopped advancing.
    #[arg(long, default_value_t = 60_000)]
    pub max_wait_ms: i64,
    /// A table for people, or one JSON document for scripts.
    #[arg(long, value_enum, default_value = "table")]
    pub format: StatusFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusFormat {
    Table,
    Json,
}

/// Whether a service answered, and if not, why.
#[derive(Debug, Serialize)]
struct Reach {
    reachable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// One partition of the command topic.
#[derive(Debug, Serialize)]
struct CommandPartition {
    partition: i32,
    /// The offset the next record will get.
    log_end: i64,
    /// The applier group's committed offset (the next record it reads).
    applier_committed: Option<i64>,
    applier_lag: i64,
    /// How long the oldest record not applied has been in the log.
    applier_waiting_ms: Option<i64>,
    /// The furthest offset folded into the projection (its marker).
    projection_applied: Option<i64>,
    /// Holds the expirer's index keeps for this partition.
    holds: Option<u64>,
    /// How long past its due time the earliest hold is, if it is.
    hold_overdue_ms: Option<i64>,
}

/// One partition of the outcomes topic.
#[derive(Debug, Serialize)]
struct OutcomesPartition {
    partition: i32,
    log_end: i64,
    archiver_committed: Option<i64>,
    archiver_lag: i64,
    /// How long the oldest outcome not archived has been in the log.
    archiver_waiting_ms: Option<i64>,
}

#[derive(Debug, Serialize)]
struct Report {
    state: &'static str,
    /// What is wrong, a sentence each; empty when healthy.
    problems: Vec<String>,
    topic: String,
    prefix: String,
    kafka: Reach,
    redis: Reach,
    postgres: Reach,
    commands: Vec<CommandPartition>,
    outcomes: Vec<OutcomesPartition>,
    dead_letters: Option<i64>,
    /// The ledger's topics the brokers do not have (`stockledger topics
    /// create` makes them).
    missing_topics: Vec<String>,
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let mut missing_topics = Vec::new();
    // Redis is read for the command topic's partitions, so after Kafka;
    // PostgreSQL meanwhile, so services that are down are waited for at
    // once, not one after another.
    let kafka_then_redis = async {
        let (kafka, commands, outcomes, dead_letters) =
            read_kafka(g, &args, &mut missing_topics).await;
        let mut commands = commands.unwrap_or_default();
        let redis = ask(read_redis(g, &mut commands)).await;
        (kafka, commands, outcomes, dead_letters, redis)
    };
    let postgres = ask(async {
        let pool = crate::connect_analyst(g, 1).await?;
        sqlx::query("SELECT 1").execute(&pool).await?;
        anyhow::Ok(())
    });
    let ((kafka, commands, outcomes, dead_letters, redis), postgres) =
        tokio::join!(kafka_then_redis, postgres);
    let mut report = Report {
        state: "healthy",
        problems: Vec::new(),
        topic: g.topic.clone(),
        prefix: g.prefix.clone(),
        kafka,
        redis,
        postgres,
        commands,
        outcomes: outcomes.unwrap_or_default(),
        dead_letters,
        missing_topics,
    };
    let code = judge(&mut report, &args);
    match args.format {
        StatusFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        StatusFormat::Table => print_table(&report),
    }
    Ok(code)
}

/// Runs `question` within [`ASK_WITHIN`]; a failure or silence is the
/// service's reach.
async fn ask(question: impl Future<Output = anyhow::Result<()>>) -> Reach {
    let error = match tokio::time::timeout(ASK_WITHIN, question).await {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(format!("{}", Chain(e.as_ref()))),
        Err(_) => Some(format!("no answer within {ASK_WITHIN:?}")),
    };
    Reach {
        reachable: error.is_none(),
        error,
    }
}

type KafkaFigures = (
    Reach,
    Option<Vec<CommandPartition>>,
    Option<Vec<OutcomesPartition>>,
    Option<i64>,
);

/// The log ends of the command and outcomes topics, the groups' committed
/// offsets, and the dead letters kept; a topic that does not exist is
/// named in `missing`, and the rest is still read.
async fn read_kafka(g: &Global, args: &Args, missing: &mut Vec<String>) -> KafkaFigures {
    let kafka = g.kafka();
    let mut commands = None;
    let mut outcomes = None;
    let mut dead_letters = None;
    let reach = ask(async {
        if let Some(applier) =
            progress(&kafka, &g.topic, &args.applier.applier_group, missing).await?
        {
            commands = Some(
                applier
                    .into_iter()
                    .map(|p| CommandPartition {
                        partition: p.partition,
                        log_end: p.log_end,
                        applier_committed: p.committed,
                        applier_lag: p.lag,
                        applier_waiting_ms: p.waiting_ms,
                        projection_applied: None,
                        holds: None,
                        hold_overdue_ms: None,
                    })
                    .collect(),
            );
        }
        let archiver = progress(&kafka, &g.outcomes_topic, &args.archiver_group, missing).await?;
        if let Some(archiver) = archiver {
            outcomes = Some(
                archiver
                    .into_iter()
                    .map(|p| OutcomesPartition {
                        partition: p.partition,
                        log_end: p.log_end,
                        archiver_committed: p.committed,
                        archiver_lag: p.lag,
                        archiver_waiting_ms: p.waiting_ms,
                    })
                    .collect(),
            );
        }
        if let Some(marks) = ends_of(&kafka, &g.dlq_topic, missing).await? {
            dead_letters = Some(marks.values().map(|(first, end)| end - first).sum());
        }
        anyhow::Ok(())
    })
    .await;
    (reach, commands, outcomes, dead_letters)
}

/// Where `group` stands on one partition.
struct Progress {
    partition: i32,
    log_end: i64,
    /// The group's committed offset, if it has committed one.
    committed: Option<i64>,
    /// Records from the committed offset (or the first kept) to the end.
    lag: i64,
    /// How long the first of those records has been in the log.
    waiting_ms: Option<i64>,
}

/// Where `group` stands on each partition of `topic`, or `None` (and the
/// topic added to `missing`) if the brokers have no such topic.
async fn progress(
    kafka: &stockledger_kafka::KafkaConfig,
    topic: &str,
    group: &str,
    missing: &mut Vec<String>,
) -> Result<Option<Vec<Progress>>, LogError> {
    let Some(ends) = ends_of(kafka, topic, missing).await? else {
        return Ok(None);
    };
    let committed = committed_offsets(kafka, group, topic).await?;
    let now = stockledger_runtime::clock::now_ms();
    let mut all = Vec::with_capacity(ends.len());
    for (partition, (first, end)) in ends {
        let committed = committed.get(&partition).copied();
        let next = committed.unwrap_or(first).max(first);
        let waiting_ms = match next < end {
            true => read_at(kafka, topic, partition, next, ASK_WITHIN)
                .await?
                .and_then(|r| r.timestamp)
                .map(|t| (now - t).max(0)),
            false => None,
        };
        all.push(Progress {
            partition,
            log_end: end,
            committed,
            lag: end - next,
            waiting_ms,
        });
    }
    Ok(Some(all))
}

/// The first offset kept and the log end of each partition of `topic`, or
/// `None` (and the topic added to `missing`) if the brokers have no such
/// topic.
async fn ends_of(
    kafka: &stockledger_kafka::KafkaConfig,
    topic: &str,
    missing: &mut Vec<String>,
) -> Result<Option<BTreeMap<i32, (i64, i64)>>, LogError> {
    match watermarks_of(kafka, topic).await {
        Ok(marks) => Ok(Some(marks)),
        Err(LogError::NoSuchTopic(topic)) => {
            missing.push(topic);
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The projection's marker and holds, per partition of `commands`.
async fn read_redis(g: &Global, commands: &mut [CommandPartition]) -> anyhow::Result<()> {
    let partitions: Vec<i32> = commands.iter().map(|c| c.partition).collect();
    let projection = Projection::connect(&g.redis_url, g.prefix.clone()).await?;
    let applied: BTreeMap<i32, i64> = projection
        .marker()
        .await?
        .map(|m| m.applied)
        .unwrap_or_default();
    let holds = projection.holds_summary(&partitions).await?;
    let now = stockledger_runtime::clock::now_ms();
    for (c, (count, due)) in commands.iter_mut().zip(holds) {
        c.projection_applied = applied.get(&c.partition).copied();
        c.holds = Some(count);
        c.hold_overdue_ms = due.map(|due| now - due).filter(|&late| late > 0);
    }
    Ok(())
}

/// The report's state, and the exit code that says it.
fn judge(report: &mut Report, args: &Args) -> ExitCode {
    if !(report.kafka.reachable && report.redis.reachable && report.postgres.reachable) {
        report.state = "unreachable";
        return Exit::Unavailable.into();
    }
    if !report.missing_topics.is_empty() {
        report.state = "topics missing";
        return Exit::NotFound.into();
    }
    let mut stalled = Vec::new();
    let mut behind = Vec::new();
    for c in &report.commands {
        let p = c.partition;
        if let Some(waited) = c.applier_waiting_ms.filter(|&w| w > args.max_wait_ms) {
            stalled.push(format!(
                "applier stalled: partition {p}'s oldest record not applied has waited {waited} ms \
                 (more than --max-wait-ms {}); the applier's log says why",
                args.max_wait_ms
            ));
        }
        if c.applier_lag > args.max_lag {
            behind.push(format!(
                "applier lagging: partition {p} is {} records behind (more than --max-lag {})",
                c.applier_lag, args.max_lag
            ));
        }
        if let Some(late) = c.hold_overdue_ms.filter(|&l| l > args.max_hold_overdue_ms) {
            behind.push(format!(
                "expirer lagging: partition {p} has a hold {late} ms past its deadline (more than \
                 --max-hold-overdue-ms {})",
                args.max_hold_overdue_ms
            ));
        }
    }
    for o in &report.outcomes {
        let p = o.partition;
        if let Some(waited) = o.archiver_waiting_ms.filter(|&w| w > args.max_wait_ms) {
            stalled.push(format!(
                "archiver stalled: outcomes partition {p}'s oldest outcome not archived has waited \
                 {waited} ms (more than --max-wait-ms {}); the archiver's log says why",
                args.max_wait_ms
            ));
        }
        if o.archiver_lag > args.max_lag {
            behind.push(format!(
                "archiver lagging: outcomes partition {p} is {} records behind (more than \
                 --max-lag {})",
                o.archiver_lag, args.max_lag
            ));
        }
    }
    report.state = match (stalled.is_empty(), behind.is_empty()) {
        (true, true) => return ExitCode::SUCCESS,
        (false, _) => "stalled",
        (true, false) => "lagging",
    };
    report.problems = stalled.into_iter().chain(behind).collect();
    Exit::Check.into()
}

fn print_table(report: &Report) {
    println!(
        "stockledger status: {} (topic {}, Redis prefix {})",
        report.state, report.topic, report.prefix
    );
    for problem in &report.problems {
        println!("  {problem}");
    }
    for (name, reach) in [
        ("kafka", &report.kafka),
        ("redis", &report.redis),
        ("postgres", &report.postgres),
    ] {
        match &reach.error {
            None => println!("  {name:<9} reachable"),
            Some(why) => println!("  {name:<9} UNREACHABLE: {why}"),
        }
    }
    let cell = |v: Option<i64>| v.map_or("-".to_owned(), |v| v.to_string());
    let rows: Vec<Vec<serde_json::Value>> = report
        .commands
        .iter()
        .map(|c| {
            vec![
                c.partition.into(),
                c.log_end.into(),
                cell(c.applier_committed).into(),
                c.applier_lag.into(),
                cell(c.applier_waiting_ms).into(),
                cell(c.projection_applied).into(),
                c.holds.map_or("-".to_owned(), |n| n.to_string()).into(),
                cell(c.hold_overdue_ms).into(),
            ]
        })
        .collect();
    println!();
    super::table::print(
        super::table::Format::Table,
        &[
            "partition",
            "log end",
            "applier at",
            "lag",
            "waiting ms",
            "folded to",
            "holds",
            "overdue ms",
        ],
        &rows,
    );
    let rows: Vec<Vec<serde_json::Value>> = report
        .outcomes
        .iter()
        .map(|o| {
            vec![
                o.partition.into(),
                o.log_end.into(),
                cell(o.archiver_committed).into(),
                o.archiver_lag.into(),
                cell(o.archiver_waiting_ms).into(),
            ]
        })
        .collect();
    println!();
    super::table::print(
        super::table::Format::Table,
        &[
            "outcomes partition",
            "log end",
            "archiver at",
            "lag",
            "waiting ms",
        ],
        &rows,
    );
    println!();
    println!("  dead letters kept: {}", cell(report.dead_letters));
    for topic in &report.missing_topics {
        println!("  topic {topic} does not exist (`stockledger topics create` makes the ledger's topics)");
    }
}
