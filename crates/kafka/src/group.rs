//! Membership of a consumer group: who a process is across restarts,
//! noticing partitions stranded on a member that is gone, and leaving
//! without hanging when the brokers are away.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::TopicPartitionList;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::config::KafkaConfig;
use crate::topic::{committed_on, partitions_of, watermarks};

/// A member's progress line, logged once a stats interval by the applier
/// and the archiver: the rate of its work since the line before, or, while
/// it holds no partition, that it waits for the group.
#[derive(Debug)]
pub struct ProgressLine {
    /// The service, as the line names it (`"applier"`).
    service: &'static str,
    /// Its consumer group.
    group: String,
    every: Duration,
    /// When the line before was taken, and the count then.
    last: (Instant, u64),
}

impl ProgressLine {
    pub fn new(service: &'static str, group: &str, every: Duration) -> Self {
        Self {
            service,
            group: group.to_owned(),
            every,
            last: (Instant::now(), 0),
        }
    }

    /// Whether an interval has passed since the line before.
    pub fn due(&self) -> bool {
        self.last.0.elapsed() >= self.every
    }

    /// The partitions `consumer` holds and the rate of `done` per second
    /// since the line before, for the caller to log with its own figures;
    /// `None`, with the wait logged here, while it holds none.
    pub fn take<C: ConsumerContext>(
        &mut self,
        group: &GroupWatch,
        consumer: &impl Consumer<C>,
        done: u64,
    ) -> Option<(usize, f64)> {
        let (at, before) = self.last;
        let rate = done.saturating_sub(before) as f64 / at.elapsed().as_secs_f64();
        self.last = (Instant::now(), done);
        let partitions = group.assigned(consumer);
        if partitions == 0 {
            info!(
                done,
                group = %self.group,
                "{} progress: no partitions assigned; waiting for the group",
                self.service
            );
            return None;
        }
        Some((partitions, rate.round()))
    }
}

/// How long a stopping consumer waits for its final commit and for leaving
/// its group. With the brokers unreachable either would wait until they
/// come back; past this the process exits anyway, which is safe: what was
/// not committed is redelivered and skipped as already applied or archived.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The `group.instance.id` a consumer uses unless told otherwise: the host's
/// name. Static membership makes a process restarted under the same id take
/// its partitions back at once, instead of waiting for the broker to expire
/// the dead member (Apache Kafka does after `session.timeout.ms`; tansu 0.6
/// only when another member joins). Two members of one group on one host
/// need distinct ids.
pub fn default_instance_id() -> String {
    let name = nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .unwrap_or_default();
    let name: String = name
        .chars()
        .map(|c| if allowed_in_instance_id(c) { c } else { '_' })
        .collect();
    if name.is_empty() {
        "stockledger".to_owned()
    } else {
        name
    }
}

/// Checks a `group.instance.id`: Kafka takes at most 249 characters of
/// ASCII letters, digits, `.`, `_` and `-`.
pub fn check_instance_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > 249 {
        return Err(format!("must be 1 to 249 characters, got {}", id.len()));
    }
    match id.chars().find(|&c| !allowed_in_instance_id(c)) {
        Some(c) => Err(format!(
            "{c:?} is not allowed; use ASCII letters, digits, '.', '_' and '-'"
        )),
        None => Ok(()),
    }
}

/// The characters Kafka accepts in a `group.instance.id`.
fn allowed_in_instance_id(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// librdkafka's default `session.timeout.ms`.
const DEFAULT_SESSION: Duration = Duration::from_secs(45);

/// How often [`GroupWatch`] looks at the group's committed offsets.
const WATCH_EVERY: Duration = Duration::from_secs(5);

/// How long past the session timeout a partition held by another member may
/// show lag without committed progress before the group is nudged.
const STALL_MARGIN: Duration = Duration::from_secs(5);

/// Watches a group for partitions stranded on a member that is gone.
///
/// A static member (`group.instance.id`) does not leave its group when it
/// stops: Apache Kafka hands its partitions to the others once its session
/// times out, but tansu 0.6 expires members only when a dynamic member
/// joins, heartbeats or leaves, so with static members alone the
/// partitions of a member scaled away stay with it for good. The watch
/// sees them as partitions someone else holds that have lag and no
/// committed progress for longer than a session; it then has a dynamic
/// member join and leave the group, which makes any broker expire the dead
/// member and rebalance. On a healthy group it never acts.
#[derive(Debug)]
pub struct GroupWatch {
    mine: Arc<Mutex<HashSet<i32>>>,
}

impl GroupWatch {
    /// Starts watching `group`'s progress on `topic` until `stop` turns
    /// true. The session timeout is the one `kafka` sets, or librdkafka's.
    pub fn start(
        kafka: &KafkaConfig,
        group: &str,
        topic: &str,
        stop: watch::Receiver<bool>,
    ) -> Self {
        let mine = Arc::new(Mutex::new(HashSet::new()));
        let session = kafka
            .property("session.timeout.ms")
            .and_then(|ms| ms.parse().ok())
            .map_or(DEFAULT_SESSION, Duration::from_millis);
        tokio::spawn(watch_group(
            kafka.clone(),
            group.to_owned(),
            topic.to_owned(),
            session + STALL_MARGIN,
            mine.clone(),
            stop,
        ));
        Self { mine }
    }

    /// Tells the watch which partitions `consumer` (this member) holds now;
    /// returns how many.
    pub fn assigned<C: ConsumerContext>(&self, consumer: &impl Consumer<C>) -> usize {
        let assignment = consumer.assignment().unwrap_or_default();
        if let Ok(mut mine) = self.mine.lock() {
            *mine = assignment
                .elements()
                .iter()
                .map(|e| e.partition())
                .collect();
        }
        assignment.count()
    }
}

async fn watch_group(
    kafka: KafkaConfig,
    group: String,
    topic: String,
    patience: Duration,
    mine: Arc<Mutex<HashSet<i32>>>,
    mut stop: watch::Receiver<bool>,
) {
    let reader: Arc<BaseConsumer> = match kafka
        .client_config(&[("group.id", &group), ("enable.auto.commit", "false")])
        .create()
    {
        Ok(reader) => Arc::new(reader),
        Err(e) => {
            warn!(error = %e, "cannot watch the group's progress");
            return;
        }
    };
    let mut stalls = Stalls::default();
    let mut nudged: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(WATCH_EVERY) => {}
        }
        let look = {
            let (reader, topic) = (reader.clone(), topic.clone());
            tokio::task::spawn_blocking(move || progress_of(&reader, &topic)).await
        };
        let Ok(Ok((committed, ends))) = look else {
            continue; // brokers away: nothing to judge by
        };
        let held = mine.lock().map(|m| m.clone()).unwrap_or_default();
        let stalled = stalls.observe(Instant::now(), &held, &committed, &ends, patience);
        if stalled.is_empty() || nudged.is_some_and(|at| at.elapsed() < patience) {
            continue;
        }
        warn!(
            %group,
            partitions = ?stalled,
            "partitions held by another member show lag and no committed progress for \
             longer than a session; a dynamic member joins and leaves the group so the \
             broker expires the member that is gone"
        );
        nudged = Some(Instant::now());
        let (kafka, group, topic) = (kafka.clone(), group.clone(), topic.clone());
        match tokio::task::spawn_blocking(move || nudge(&kafka, &group, &topic)).await {
            Ok(Ok(())) => info!("the group was nudged"),
            Ok(Err(e)) => warn!(error = %e, "nudging the group failed"),
            Err(e) => warn!(error = %e, "nudging the group failed"),
        }
        stalls = Stalls::default();
    }
}

/// The group's committed offset and the high watermark of each partition.
#[allow(clippy::type_complexity)]
fn progress_of(
    reader: &BaseConsumer,
    topic: &str,
) -> Result<(HashMap<i32, i64>, HashMap<i32, i64>), KafkaError> {
    let partitions = partitions_of(reader, topic)?;
    let mut ends = HashMap::new();
    for &p in &partitions {
        ends.insert(p, watermarks(reader, topic, p, Duration::from_secs(10))?.1);
    }
    Ok((committed_on(reader, topic, &partitions)?, ends))
}

/// A dynamic member joins `group`, waits (bounded) for an assignment,
/// consumes and commits nothing, and leaves.
fn nudge(kafka: &KafkaConfig, group: &str, topic: &str) -> Result<(), KafkaError> {
    let mut config = kafka.client_config(&[
        ("group.id", group),
        ("enable.auto.commit", "false"),
        ("enable.auto.offset.store", "false"),
    ]);
    config.remove("group.instance.id");
    let member: BaseConsumer = config.create()?;
    member.subscribe(&[topic])?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let _ = member.poll(Duration::from_millis(100));
        if member.assignment()?.count() > 0 {
            break;
        }
    }
    member.unsubscribe();
    drop(member); // closing a dynamic member sends LeaveGroup
    Ok(())
}

/// When each partition's committed offset last moved, as seen by the watch.
#[derive(Default)]
struct Stalls {
    seen: HashMap<i32, (Option<i64>, Instant)>,
}

impl Stalls {
    /// The partitions not in `mine` that have lag (committed below the high
    /// watermark) and whose committed offset has not moved for `patience`.
    fn observe(
        &mut self,
        now: Instant,
        mine: &HashSet<i32>,
        committed: &HashMap<i32, i64>,
        ends: &HashMap<i32, i64>,
        patience: Duration,
    ) -> Vec<i32> {
        let mut stalled = Vec::new();
        for (&p, &end) in ends {
            let at = committed.get(&p).copied();
            let lagging = at.unwrap_or(0) < end;
            if mine.contains(&p) || !lagging {
                self.seen.remove(&p);
                continue;
            }
            let since = match self.seen.get(&p) {
                Some(&(before, since)) if before == at => since,
                _ => {
                    self.seen.insert(p, (at, now));
                    now
                }
            };
            if now.duration_since(since) >= patience {
                stalled.push(p);
            }
        }
        stalled.sort_unstable();
        stalled
    }
}

/// How a consumer's last commit ended.
#[derive(Debug)]
pub enum FinalCommit {
    /// Nothing was left to commit, or the brokers confirmed it, and the
    /// consumer closed.
    Done,
    /// The brokers refused it.
    Failed(KafkaError),
    /// No answer within the time given.
    TimedOut,
    /// The brokers confirmed the commit, but closing the consumer (leaving
    /// its group, unless it is a static member) did not end in the time
    /// left.
    ClosedLate,
}

impl FinalCommit {
    /// Logs how the last commit ended unless it went through: `what` names
    /// what a restart would read again ("records", "pages"), `within` the
    /// time the commit was given.
    pub fn warn_unless_done(&self, what: &str, within: Duration) {
        match self {
            FinalCommit::Done => {}
            FinalCommit::Failed(e) => {
                warn!(error = %e, "final offset commit failed; {what} may be redelivered");
            }
            FinalCommit::TimedOut => warn!(
                ?within,
                "the final offset commit did not happen in time (brokers unreachable?); \
                 {what} since the last commit will be redelivered and skipped"
            ),
            FinalCommit::ClosedLate => warn!(
                ?within,
                "final offsets committed, but the consumer did not close in time; \
                 nothing will be redelivered"
            ),
        }
    }
}

/// Whether `error` leaves the consumer unusable for good: librdkafka raised
/// a fatal error. Seen with static membership when the brokers stalled past
/// the session (`FencedInstanceId`: librdkafka rejoined on its own session
/// timeout, and the broker then fenced the member's older self); the only
/// way on is a new consumer.
pub fn is_fatal(error: &KafkaError) -> bool {
    matches!(error, KafkaError::MessageConsumptionFatal(_))
}

/// Commits `offsets` synchronously, then closes `consumer` (leaving its
/// group), on a thread of its own, waiting at most `within` for both. The
/// thread is left behind if the brokers do not answer; a process that
/// exits ends it.
pub async fn commit_and_close<C: ConsumerContext + 'static>(
    consumer: StreamConsumer<C>,
    offsets: TopicPartitionList,
    within: Duration,
) -> FinalCommit {
    let deadline = tokio::time::Instant::now() + within;
    let (committed_tx, committed_rx) = tokio::sync::oneshot::channel();
    let (closed_tx, closed_rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("consumer-close".into())
        .spawn(move || {
            let committed = if offsets.count() == 0 {
                Ok(())
            } else {
                consumer.commit(&offsets, CommitMode::Sync)
            };
            let _ = committed_tx.send(committed);
            drop(consumer);
            let _ = closed_tx.send(());
        });
    if spawned.is_err() {
        return FinalCommit::TimedOut;
    }
    let Ok(Ok(committed)) = tokio::time::timeout_at(deadline, committed_rx).await else {
        return final_commit(None, false);
    };
    let closed = tokio::time::timeout_at(deadline, closed_rx).await.is_ok();
    final_commit(Some(committed), closed)
}

/// What a last commit came to: `committed` is the brokers' answer, if one
/// came in time, and `closed` whether the consumer closed in time after it.
fn final_commit(committed: Option<Result<(), KafkaError>>, closed: bool) -> FinalCommit {
    match committed {
        None => FinalCommit::TimedOut,
        Some(Err(e)) => FinalCommit::Failed(e),
        Some(Ok(())) if closed => FinalCommit::Done,
        Some(Ok(())) => FinalCommit::ClosedLate,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_confirmed_commit_is_told_apart_from_a_late_close_and_no_answer() {
        let refused =
            KafkaError::ConsumerCommit(rdkafka::types::RDKafkaErrorCode::RebalanceInProgress);
        assert!(matches!(final_commit(None, false), FinalCommit::TimedOut));
        assert!(matches!(
            final_commit(Some(Err(refused)), true),
            FinalCommit::Failed(_)
        ));
        assert!(matches!(
            final_commit(Some(Ok(())), true),
            FinalCommit::Done
        ));
        assert!(matches!(
            final_commit(Some(Ok(())), false),
            FinalCommit::ClosedLate
        ));
    }

    #[test]
    fn only_partitions_of_others_with_lag_and_no_progress_for_the_patience_stall() {
        let patience = Duration::from_secs(50);
        let t0 = Instant::now();
        let ends = HashMap::from([(0, 10), (1, 10), (2, 10), (3, 10)]);
        // 0 is mine; 1 is caught up; 2 and 3 lag (3 has no commit yet).
        let committed = HashMap::from([(0, 4), (1, 10), (2, 7)]);
        let mine = HashSet::from([0]);
        let mut stalls = Stalls::default();
        assert!(stalls
            .observe(t0, &mine, &committed, &ends, patience)
            .is_empty());
        let later = t0 + Duration::from_secs(49);
        assert!(stalls
            .observe(later, &mine, &committed, &ends, patience)
            .is_empty());
        let later = t0 + Duration::from_secs(50);
        assert_eq!(
            stalls.observe(later, &mine, &committed, &ends, patience),
            vec![2, 3]
        );
        // Progress on 2 restarts its clock; 3 is taken over by this member.
        let moved = HashMap::from([(0, 4), (1, 10), (2, 8)]);
        let mine = HashSet::from([0, 3]);
        let later = t0 + Duration::from_secs(60);
        assert!(stalls
            .observe(later, &mine, &moved, &ends, patience)
            .is_empty());
        let later = t0 + Duration::from_secs(110);
        assert_eq!(
            stalls.observe(later, &mine, &moved, &ends, patience),
            vec![2]
        );
    }

    #[test]
    fn the_default_instance_id_is_a_valid_one() {
        let id = default_instance_id();
        assert_eq!(check_instance_id(&id), Ok(()), "{id:?}");
    }

    #[test]
    fn instance_ids_kafka_would_refuse_are_refused_here() {
        assert!(check_instance_id("applier-1.eu_west").is_ok());
        assert!(check_instance_id("").is_err());
        assert!(check_instance_id(&"a".repeat(250)).is_err());
        assert_eq!(
            check_instance_id("a b"),
            Err("' ' is not allowed; use ASCII letters, digits, '.', '_' and '-'".into())
        );
    }
}
