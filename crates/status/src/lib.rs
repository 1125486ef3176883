//! How the ledger stands, for `stockledger status` and the gateway's
//! console (`GET /v1/status`, `/console`): how far the applier and the
//! archiver are behind the log and how long their oldest record has
//! waited, what the projection has folded, the holds waiting for the
//! expirer, the dead letters kept and the newest of them, the last
//! minute's decisions by result, and which service does not answer.
//!
//! Each service is asked on its own, within [`Limits::ask_within`], so one
//! that is down leaves the others' figures in the report, and its part is
//! marked unreachable with why, never shown as zeros. [`Report::state`]
//! judges the whole against the [`Limits`].

mod gather;

use std::time::Duration;

use serde::Serialize;

pub use gather::{gather, reach, Failure};

/// The names that say where the ledger's state is.
#[derive(Debug, Clone)]
pub struct Names {
    pub topic: String,
    pub outcomes_topic: String,
    pub dlq_topic: String,
    /// The projection's key prefix in Redis.
    pub prefix: String,
    pub applier_group: String,
    pub archiver_group: String,
}

/// What counts as behind, and how long each service is given to answer.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Records a partition may be behind its log end and still count as
    /// healthy (the applier on the command topic, the archiver on the
    /// outcomes topic).
    pub max_lag: i64,
    /// How long a hold may stay past its deadline before the expirer
    /// counts as behind.
    pub max_hold_overdue_ms: i64,
    /// How long the oldest record not applied (or not archived) may have
    /// waited before that service counts as stalled.
    pub max_wait_ms: i64,
    /// How long each service is given to answer.
    pub ask_within: Duration,
}

impl Default for Limits {
    /// `stockledger status`'s defaults.
    fn default() -> Self {
        Self {
            max_lag: 1000,
            max_hold_overdue_ms: 30_000,
            max_wait_ms: 60_000,
            ask_within: Duration::from_secs(15),
        }
    }
}

/// The whole's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = StatusState))]
pub enum State {
    #[serde(rename = "healthy")]
    Healthy,
    /// A partition beyond `max_lag`, or a hold overdue beyond
    /// `max_hold_overdue_ms`.
    #[serde(rename = "lagging")]
    Lagging,
    /// The oldest record the applier or the archiver has not taken has
    /// waited beyond `max_wait_ms`: it is not advancing.
    #[serde(rename = "stalled")]
    Stalled,
    /// Kafka, Redis or PostgreSQL does not answer.
    #[serde(rename = "unreachable")]
    Unreachable,
    /// A ledger topic does not exist.
    #[serde(rename = "topics missing")]
    TopicsMissing,
}

impl State {
    /// The state as the report's JSON and the CLI's table say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::Lagging => "lagging",
            Self::Stalled => "stalled",
            Self::Unreachable => "unreachable",
            Self::TopicsMissing => "topics missing",
        }
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a service answered, and if not, why.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Reach {
    pub reachable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One partition of the command topic.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CommandPartition {
    pub partition: i32,
    /// The offset the next record will get.
    pub log_end: i64,
    /// The applier group's committed offset (the next record it reads).
    pub applier_committed: Option<i64>,
    pub applier_lag: i64,
    /// How long the oldest record not applied has been in the log (ms).
    pub applier_waiting_ms: Option<i64>,
    /// The furthest offset folded into the projection (its marker).
    pub projection_applied: Option<i64>,
    /// Holds the expirer's index keeps for this partition.
    pub holds: Option<u64>,
    /// How long past its due time the earliest hold is (ms), if it is.
    pub hold_overdue_ms: Option<i64>,
}

/// One partition of the outcomes topic.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OutcomesPartition {
    pub partition: i32,
    pub log_end: i64,
    pub archiver_committed: Option<i64>,
    pub archiver_lag: i64,
    /// How long the oldest outcome not archived has been in the log (ms).
    pub archiver_waiting_ms: Option<i64>,
}

/// A dead letter: where it is, where it came from and why.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeadLetter {
    /// Its partition and offset in the dead-letter topic.
    pub partition: i32,
    pub offset: i64,
    /// When it was dead-lettered, RFC 3339 UTC.
    pub time: Option<String>,
    /// The record it was, `topic/partition@offset`.
    pub source: Option<String>,
    pub reason: Option<String>,
}

/// The record a service last stopped on, from its note (the applier's in
/// the projection, the archiver's in the archive): two stops in a row on
/// one record are a crash loop.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ServiceStop {
    /// The service (`applier` or `archiver`).
    pub service: String,
    /// The record it stopped on, `topic/partition@offset` (the archiver's:
    /// an outcome).
    pub record: String,
    /// How many times in a row it stopped on that record.
    pub times: u32,
    /// When it last did, RFC 3339 UTC.
    pub at: String,
    /// Why, as its log's last line says.
    pub error: String,
}

/// Decisions of one result.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResultCount {
    /// `APPLIED`, `REJECTED_INSUFFICIENT`, …
    pub result: String,
    pub count: i64,
}

/// Most dead letters [`Report::newest_dead_letters`] lists.
pub const NEWEST_DEAD_LETTERS: usize = 5;
/// The span [`Report::decisions_last_minute`] counts over (ms).
pub const DECISIONS_SPAN_MS: i64 = 60_000;

/// How the ledger stands.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = StatusReport))]
pub struct Report {
    pub state: State,
    /// What is wrong, a sentence each; empty when healthy.
    pub problems: Vec<String>,
    /// When the figures were asked for, RFC 3339 UTC: the last minute of
    /// `decisions_last_minute` ends here.
    pub checked_at: String,
    pub topic: String,
    pub prefix: String,
    pub kafka: Reach,
    pub redis: Reach,
    pub postgres: Reach,
    pub commands: Vec<CommandPartition>,
    pub outcomes: Vec<OutcomesPartition>,
    /// Dead letters kept in the dead-letter topic (`None`: Kafka did not
    /// answer).
    pub dead_letters: Option<i64>,
    /// The newest dead letters, newest first, at most
    /// [`NEWEST_DEAD_LETTERS`].
    pub newest_dead_letters: Vec<DeadLetter>,
    /// Decisions archived for records of the last minute, by result, most
    /// first (`None`: PostgreSQL did not answer).
    pub decisions_last_minute: Option<Vec<ResultCount>>,
    /// The ledger's topics the brokers do not have (`stockledger topics
    /// create` makes them).
    pub missing_topics: Vec<String>,
    /// The records services last stopped on, until they go past them.
    pub stops: Vec<ServiceStop>,
}

impl Report {
    /// Judges the report against `limits`: sets its state and problems.
    pub fn judge(&mut self, limits: &Limits) {
        self.problems.clear();
        if !(self.kafka.reachable && self.redis.reachable && self.postgres.reachable) {
            self.state = State::Unreachable;
            for (name, reach) in [
                ("Kafka", &self.kafka),
                ("Redis", &self.redis),
                ("PostgreSQL", &self.postgres),
            ] {
                if let Some(why) = &reach.error {
                    self.problems.push(format!("{name} does not answer: {why}"));
                }
            }
            return;
        }
        if !self.missing_topics.is_empty() {
            self.state = State::TopicsMissing;
            self.problems = self
                .missing_topics
                .iter()
                .map(|t| format!("topic {t} does not exist (`stockledger topics create` makes it)"))
                .collect();
            return;
        }
        let (stalled, behind) = self.delays(limits);
        self.state = match (stalled.is_empty(), behind.is_empty()) {
            (true, true) => State::Healthy,
            (false, _) => State::Stalled,
            (true, false) => State::Lagging,
        };
        self.problems = stalled.into_iter().chain(behind).collect();
    }

    /// The sentences of services stalled, and of services behind.
    fn delays(&self, limits: &Limits) -> (Vec<String>, Vec<String>) {
        let mut stalled = Vec::new();
        let mut behind = Vec::new();
        for c in &self.commands {
            let p = c.partition;
            if let Some(waited) = c.applier_waiting_ms.filter(|&w| w > limits.max_wait_ms) {
                stalled.push(format!(
                    "applier stalled: partition {p}'s oldest record not applied has waited \
                     {waited} ms (more than --max-wait-ms {}); the applier's log says why",
                    limits.max_wait_ms
                ));
            }
            if c.applier_lag > limits.max_lag {
                behind.push(format!(
                    "applier lagging: partition {p} is {} records behind (more than --max-lag {})",
                    c.applier_lag, limits.max_lag
                ));
            }
            if let Some(late) = c
                .hold_overdue_ms
                .filter(|&l| l > limits.max_hold_overdue_ms)
            {
                behind.push(format!(
                    "expirer lagging: partition {p} has a hold {late} ms past its deadline (more \
                     than --max-hold-overdue-ms {})",
                    limits.max_hold_overdue_ms
                ));
            }
        }
        for stop in self.stops.iter().filter(|s| s.times > 1) {
            stalled.push(format!(
                "{} in a crash loop: it stopped {} times in a row on the record {} (last at {}): {}",
                stop.service, stop.times, stop.record, stop.at, stop.error
            ));
        }
        for o in &self.outcomes {
            let p = o.partition;
            if let Some(waited) = o.archiver_waiting_ms.filter(|&w| w > limits.max_wait_ms) {
                stalled.push(format!(
                    "archiver stalled: outcomes partition {p}'s oldest outcome not archived has \
                     waited {waited} ms (more than --max-wait-ms {}); the archiver's log says why",
                    limits.max_wait_ms
                ));
            }
            if o.archiver_lag > limits.max_lag {
                behind.push(format!(
                    "archiver lagging: outcomes partition {p} is {} records behind (more than \
                     --max-lag {})",
                    o.archiver_lag, limits.max_lag
                ));
            }
        }
        (stalled, behind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reach(error: Option<&str>) -> Reach {
        Reach {
            reachable: error.is_none(),
            error: error.map(str::to_owned),
        }
    }

    fn report() -> Report {
        Report {
            state: State::Healthy,
            problems: Vec::new(),
            checked_at: String::new(),
            topic: "t".into(),
            prefix: "p".into(),
            kafka: reach(None),
            redis: reach(None),
            postgres: reach(None),
            commands: vec![CommandPartition {
                partition: 0,
                log_end: 10,
                applier_committed: Some(10),
                applier_lag: 0,
                applier_waiting_ms: None,
                projection_applied: Some(9),
                holds: Some(0),
                hold_overdue_ms: None,
            }],
            outcomes: vec![OutcomesPartition {
                partition: 0,
                log_end: 10,
                archiver_committed: Some(10),
                archiver_lag: 0,
                archiver_waiting_ms: None,
            }],
            dead_letters: Some(0),
            newest_dead_letters: Vec::new(),
            decisions_last_minute: Some(Vec::new()),
            missing_topics: Vec::new(),
            stops: Vec::new(),
        }
    }

    #[test]
    fn each_limit_passed_is_named_and_sets_the_state() {
        let limits = Limits::default();
        let mut r = report();
        r.judge(&limits);
        assert_eq!((r.state, r.problems.len()), (State::Healthy, 0));

        r.commands[0].applier_lag = limits.max_lag + 1;
        r.judge(&limits);
        assert_eq!(r.state, State::Lagging);
        assert!(
            r.problems[0].starts_with("applier lagging: partition 0"),
            "{r:?}"
        );

        r.outcomes[0].archiver_waiting_ms = Some(limits.max_wait_ms + 1);
        r.judge(&limits);
        assert_eq!(r.state, State::Stalled);
        assert!(r.problems[0].starts_with("archiver stalled"), "{r:?}");
        assert_eq!(r.problems.len(), 2, "{r:?}");

        r.redis = reach(Some("connection refused"));
        r.judge(&limits);
        assert_eq!(r.state, State::Unreachable);
        assert_eq!(
            r.problems,
            ["Redis does not answer: connection refused".to_owned()]
        );

        let mut r = report();
        r.missing_topics.push("t.dlq".into());
        r.judge(&limits);
        assert_eq!(r.state, State::TopicsMissing);

        // A service that stopped once on a record may have been stopped;
        // twice on the same one is a crash loop, named with the record.
        let mut r = report();
        r.stops.push(ServiceStop {
            service: "applier".into(),
            record: "t/7@0".into(),
            times: 1,
            at: "2026-11-28T10:00:00Z".into(),
            error: "publishing the dead letter failed".into(),
        });
        r.judge(&limits);
        assert_eq!(r.state, State::Healthy);
        r.stops[0].times = 2;
        r.judge(&limits);
        assert_eq!(r.state, State::Stalled);
        assert!(
            r.problems[0].starts_with(
                "applier in a crash loop: it stopped 2 times in a row on the record t/7@0"
            ),
            "{r:?}"
        );
    }

    #[test]
    fn the_states_read_as_the_cli_always_printed_them() {
        let shown = serde_json::to_string(&[
            State::Healthy,
            State::Lagging,
            State::Stalled,
            State::Unreachable,
            State::TopicsMissing,
        ])
        .unwrap_or_default();
        assert_eq!(
            shown,
            r#"["healthy","lagging","stalled","unreachable","topics missing"]"#
        );
    }
}
