//! Asking Kafka, Redis and PostgreSQL, each within its time.

use std::collections::BTreeMap;
use std::error::Error;
use std::future::Future;
use std::time::Duration;

use sqlx::PgPool;
use stockledger_core::report::Chain;
use stockledger_kafka::names::{DLQ_REASON_HEADER, DLQ_SOURCE_HEADER};
use stockledger_kafka::topic::{committed_offsets, last_records, read_at, watermarks_of, LogError};
use stockledger_kafka::KafkaConfig;
use stockledger_projection::Projection;
use stockledger_runtime::clock::{now_ms, rfc3339_ms};

use crate::{
    CommandPartition, DeadLetter, Limits, Names, OutcomesPartition, Reach, Report, ResultCount,
    ServiceStop, State, DECISIONS_SPAN_MS, NEWEST_DEAD_LETTERS,
};

/// Why a service's question failed.
pub type Failure = Box<dyn Error + Send + Sync>;

/// Asks every service and judges the answers against `limits`. `redis` is
/// the projection, or why it could not be connected to.
pub async fn gather(
    kafka: &KafkaConfig,
    redis: Result<&Projection, String>,
    archive: &PgPool,
    names: &Names,
    limits: &Limits,
) -> Report {
    let now = now_ms();
    let mut missing_topics = Vec::new();
    // Redis is read for the command topic's partitions, so after Kafka;
    // PostgreSQL meanwhile, so services that are down are waited for at
    // once, not one after another.
    let mut stops = Vec::new();
    let kafka_then_redis = async {
        let figures = read_kafka(kafka, names, limits, &mut missing_topics).await;
        let mut commands = figures.commands.unwrap_or_default();
        let redis = match redis {
            Ok(projection) => ask(limits, read_redis(projection, &mut commands, &mut stops)).await,
            Err(why) => Reach {
                reachable: false,
                error: Some(why),
            },
        };
        (
            figures.reach,
            commands,
            figures.outcomes,
            figures.dead,
            redis,
        )
    };
    let mut decisions = None;
    let mut archiver_stop = None;
    let postgres = ask(limits, async {
        let since = now - DECISIONS_SPAN_MS;
        archiver_stop =
            stockledger_analysts::live::archiver_stop(archive, &names.archiver_group).await?;
        let counts =
            stockledger_analysts::live::decisions_by_result_since(archive, &names.topic, since)
                .await?;
        decisions = Some(
            counts
                .into_iter()
                .map(|(result, count)| ResultCount { result, count })
                .collect(),
        );
        Ok(())
    });
    let ((kafka, commands, outcomes, dead, redis), postgres) =
        tokio::join!(kafka_then_redis, postgres);
    stops.extend(
        archiver_stop.map(|(record, times, at_ms, error)| ServiceStop {
            service: "archiver".into(),
            record,
            times: u32::try_from(times).unwrap_or(0),
            at: rfc3339_ms(at_ms),
            error,
        }),
    );
    let mut report = Report {
        state: State::Healthy,
        problems: Vec::new(),
        checked_at: rfc3339_ms(now),
        topic: names.topic.clone(),
        prefix: names.prefix.clone(),
        kafka,
        redis,
        postgres,
        commands,
        outcomes: outcomes.unwrap_or_default(),
        dead_letters: dead.as_ref().map(|d| d.0),
        newest_dead_letters: dead.map(|d| d.1).unwrap_or_default(),
        decisions_last_minute: decisions,
        missing_topics,
        stops,
    };
    report.judge(limits);
    report
}

/// Runs `question` within `limits.ask_within`: [`reach`].
async fn ask(limits: &Limits, question: impl Future<Output = Result<(), Failure>>) -> Reach {
    reach(limits.ask_within, question).await
}

/// Runs `question` within `within`; a failure or silence is the service's
/// reach, with why.
pub async fn reach(within: Duration, question: impl Future<Output = Result<(), Failure>>) -> Reach {
    let error = match tokio::time::timeout(within, question).await {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(format!("{}", Chain(e.as_ref()))),
        Err(_) => Some(format!("no answer within {within:?}")),
    };
    Reach {
        reachable: error.is_none(),
        error,
    }
}

/// What Kafka told: each topic's figures, `None` for a topic it lacks.
struct KafkaFigures {
    reach: Reach,
    commands: Option<Vec<CommandPartition>>,
    outcomes: Option<Vec<OutcomesPartition>>,
    /// Dead letters kept, and the newest.
    dead: Option<(i64, Vec<DeadLetter>)>,
}

/// The log ends of the command and outcomes topics, the groups' committed
/// offsets, and the dead letters kept; a topic that does not exist is
/// named in `missing`, and the rest is still read.
async fn read_kafka(
    kafka: &KafkaConfig,
    names: &Names,
    limits: &Limits,
    missing: &mut Vec<String>,
) -> KafkaFigures {
    let mut commands = None;
    let mut outcomes = None;
    let mut dead = None;
    let reach = ask(limits, async {
        let applier = progress(kafka, &names.topic, &names.applier_group, limits, missing).await?;
        commands = applier.map(|all| all.into_iter().map(CommandPartition::from).collect());
        let archiver = progress(
            kafka,
            &names.outcomes_topic,
            &names.archiver_group,
            limits,
            missing,
        )
        .await?;
        outcomes = archiver.map(|all| all.into_iter().map(OutcomesPartition::from).collect());
        if let Some(marks) = ends_of(kafka, &names.dlq_topic, missing).await? {
            let kept = marks.values().map(|(first, end)| end - first).sum();
            dead = Some((
                kept,
                newest_dead_letters(kafka, names, limits, &marks).await?,
            ));
        }
        Ok(())
    })
    .await;
    KafkaFigures {
        reach,
        commands,
        outcomes,
        dead,
    }
}

/// The newest dead letters of every partition, newest first.
async fn newest_dead_letters(
    kafka: &KafkaConfig,
    names: &Names,
    limits: &Limits,
    marks: &BTreeMap<i32, (i64, i64)>,
) -> Result<Vec<DeadLetter>, LogError> {
    let mut all = Vec::new();
    for (&partition, (first, end)) in marks {
        if end <= first {
            continue;
        }
        let records = last_records(
            kafka,
            &names.dlq_topic,
            partition,
            NEWEST_DEAD_LETTERS,
            limits.ask_within,
        )
        .await?;
        all.extend(records);
    }
    all.sort_by_key(|r| std::cmp::Reverse((r.timestamp, r.partition, r.offset)));
    all.truncate(NEWEST_DEAD_LETTERS);
    Ok(all
        .into_iter()
        .map(|r| DeadLetter {
            partition: r.partition,
            offset: r.offset,
            time: r.timestamp.map(rfc3339_ms),
            source: r.header(DLQ_SOURCE_HEADER),
            reason: r.header(DLQ_REASON_HEADER),
        })
        .collect())
}

/// Where a group stands on one partition.
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

impl From<Progress> for CommandPartition {
    fn from(p: Progress) -> Self {
        Self {
            partition: p.partition,
            log_end: p.log_end,
            applier_committed: p.committed,
            applier_lag: p.lag,
            applier_waiting_ms: p.waiting_ms,
            projection_applied: None,
            holds: None,
            hold_overdue_ms: None,
        }
    }
}

impl From<Progress> for OutcomesPartition {
    fn from(p: Progress) -> Self {
        Self {
            partition: p.partition,
            log_end: p.log_end,
            archiver_committed: p.committed,
            archiver_lag: p.lag,
            archiver_waiting_ms: p.waiting_ms,
        }
    }
}

/// Where `group` stands on each partition of `topic`, or `None` (and the
/// topic added to `missing`) if the brokers have no such topic.
async fn progress(
    kafka: &KafkaConfig,
    topic: &str,
    group: &str,
    limits: &Limits,
    missing: &mut Vec<String>,
) -> Result<Option<Vec<Progress>>, LogError> {
    let Some(ends) = ends_of(kafka, topic, missing).await? else {
        return Ok(None);
    };
    let committed = committed_offsets(kafka, group, topic).await?;
    let now = now_ms();
    let mut all = Vec::with_capacity(ends.len());
    for (partition, (first, end)) in ends {
        let committed = committed.get(&partition).copied();
        let next = committed.unwrap_or(first).max(first);
        let waiting_ms = match next < end {
            true => read_at(kafka, topic, partition, next, limits.ask_within)
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
    kafka: &KafkaConfig,
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
async fn read_redis(
    projection: &Projection,
    commands: &mut [CommandPartition],
    stops: &mut Vec<ServiceStop>,
) -> Result<(), Failure> {
    *stops = projection
        .stops()
        .await?
        .into_iter()
        .map(|n| ServiceStop {
            service: n.service,
            record: n.record,
            times: n.times,
            at: rfc3339_ms(n.at_ms),
            error: n.error,
        })
        .collect();
    let partitions: Vec<i32> = commands.iter().map(|c| c.partition).collect();
    let applied: BTreeMap<i32, i64> = projection
        .marker()
        .await?
        .map(|m| m.applied)
        .unwrap_or_default();
    let holds = projection.holds_summary(&partitions).await?;
    let now = now_ms();
    for (c, (count, due)) in commands.iter_mut().zip(holds) {
        c.projection_applied = applied.get(&c.partition).copied();
        c.holds = Some(count);
        c.hold_overdue_ms = due.map(|due| now - due).filter(|&late| late > 0);
    }
    Ok(())
}
