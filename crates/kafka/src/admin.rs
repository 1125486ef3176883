//! Creating the ledger's topics and checking that the command topic keeps
//! every record.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

use crate::config::KafkaConfig;

/// A topic to create.
#[derive(Debug, Clone)]
pub struct TopicSpec {
    pub name: String,
    pub partitions: i32,
    pub replication: i32,
    /// Topic configuration set at creation (`retention.ms`, …).
    pub configs: Vec<(String, String)>,
}

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("cannot create a Kafka admin client")]
    Client(#[source] KafkaError),
    /// An admin request (`what`: creating topics, deleting topics,
    /// describing a topic's configuration) the brokers did not answer.
    #[error("{what} failed")]
    Request {
        what: &'static str,
        #[source]
        source: KafkaError,
    },
    #[error("creating or deleting topic {topic} failed: {code}")]
    Topic {
        topic: String,
        code: RDKafkaErrorCode,
    },
    /// Created, but the brokers' metadata did not show every partition of
    /// the topic with a leader within `waited`.
    #[error("topic {topic} was created but its partitions had no leaders within {waited:?}")]
    NotServed { topic: String, waited: Duration },
}

/// Deletes each topic (its records and partitions, for good); one that
/// does not exist is not an error. For a bench or test run's own topics,
/// never the ledger's.
pub async fn delete_topics(kafka: &KafkaConfig, topics: &[String]) -> Result<(), AdminError> {
    if topics.is_empty() {
        return Ok(());
    }
    let admin: AdminClient<DefaultClientContext> = kafka
        .client_config(&[])
        .create()
        .map_err(AdminError::Client)?;
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = admin
        .delete_topics(&names, &options)
        .await
        .map_err(|source| AdminError::Request {
            what: "deleting topics",
            source,
        })?;
    for result in results {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::UnknownTopicOrPartition)) => {}
            Err((topic, code)) => return Err(AdminError::Topic { topic, code }),
        }
    }
    Ok(())
}

/// How long [`create_topics`] waits for the brokers to serve the topics it
/// created.
const SERVED_WAIT: Duration = Duration::from_secs(30);

/// Creates each topic; one that already exists is left as it is.
/// Returns the names of the topics that were created, once the brokers'
/// metadata shows every partition of each with a leader: a broker answers
/// the creation once the controller has recorded it, and may learn of it
/// a second later under load, so a client started at once (an applier
/// checking the topic) would be told it does not exist.
pub async fn create_topics(
    kafka: &KafkaConfig,
    topics: &[TopicSpec],
) -> Result<Vec<String>, AdminError> {
    let admin: AdminClient<DefaultClientContext> = kafka
        .client_config(&[])
        .create()
        .map_err(AdminError::Client)?;
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|t| {
            t.configs.iter().fold(
                NewTopic::new(
                    &t.name,
                    t.partitions,
                    TopicReplication::Fixed(t.replication),
                ),
                |topic, (k, v)| topic.set(k, v),
            )
        })
        .collect();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = admin
        .create_topics(&new, &options)
        .await
        .map_err(|source| AdminError::Request {
            what: "creating topics",
            source,
        })?;
    let mut created = Vec::new();
    for result in results {
        match result {
            Ok(name) => created.push(name),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => return Err(AdminError::Topic { topic, code }),
        }
    }
    let wanted: Vec<(String, i32)> = topics
        .iter()
        .filter(|t| created.contains(&t.name))
        .map(|t| (t.name.clone(), t.partitions))
        .collect();
    let consumer: BaseConsumer = kafka
        .client_config(&[])
        .create()
        .map_err(AdminError::Client)?;
    tokio::task::spawn_blocking(move || wait_until_served(&consumer, &wanted, SERVED_WAIT))
        .await
        // Only a runtime shutting down cancels the wait.
        .map_err(|_| AdminError::Request {
            what: "waiting for the created topics",
            source: KafkaError::Canceled,
        })??;
    Ok(created)
}

/// Returns once the metadata `consumer` is given shows each topic with its
/// partition count and a leader for every partition; [`AdminError::NotServed`]
/// naming a topic that still lacks one after `within`. Blocking.
fn wait_until_served(
    consumer: &BaseConsumer,
    topics: &[(String, i32)],
    within: Duration,
) -> Result<(), AdminError> {
    let deadline = Instant::now() + within;
    for (topic, partitions) in topics {
        loop {
            let served = consumer
                .fetch_metadata(Some(topic), Duration::from_secs(5))
                .is_ok_and(|metadata| {
                    metadata.topics().iter().any(|t| {
                        t.name() == topic
                            && t.error().is_none()
                            && t.partitions().len() == *partitions as usize
                            && t.partitions()
                                .iter()
                                .all(|p| p.error().is_none() && p.leader() >= 0)
                    })
                });
            if served {
                break;
            }
            if Instant::now() >= deadline {
                return Err(AdminError::NotServed {
                    topic: topic.clone(),
                    waited: within,
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}

/// The topics of one ledger.
#[derive(Debug, Clone, Copy)]
pub struct LedgerTopics<'a> {
    pub commands: &'a str,
    pub outcomes: &'a str,
    pub dead_letters: &'a str,
    /// Stock events: one partition per command partition (a command
    /// partition's events go to the partition of the same number).
    pub events: &'a str,
}

/// How long the outcomes and dead-letter topics keep records, in
/// milliseconds (`-1`: forever). The command topic is always permanent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub outcomes_ms: i64,
    pub dead_letters_ms: i64,
}

impl Default for Retention {
    /// Outcomes for 7 days (waiters read them within seconds; the archive
    /// keeps them for good), dead letters forever (each is a record to fix).
    fn default() -> Self {
        Self {
            outcomes_ms: 7 * 24 * 3600 * 1000,
            dead_letters_ms: -1,
        }
    }
}

/// `min.insync.replicas` for a replication factor: a majority, so an
/// acknowledged command survives the loss of any minority of replicas.
pub fn min_insync_replicas(replication: i32) -> i32 {
    replication.max(1) / 2 + 1
}

/// The specification of a command topic. It is the truth and keeps every
/// record: `retention.ms` and `retention.bytes` are `-1`, and no
/// `cleanup.policy` is set, so it stays Kafka's `delete` (never `compact`,
/// which keeps one record per SKU; and tansu 0.6's SQLite engine deletes
/// every record of a topic whose policy is set to `delete` with
/// `retention.ms=-1`).
pub fn command_topic_spec(name: &str, partitions: i32, replication: i32) -> TopicSpec {
    TopicSpec {
        name: name.to_owned(),
        partitions,
        replication,
        configs: vec![
            ("retention.ms".into(), "-1".into()),
            ("retention.bytes".into(), "-1".into()),
            in_sync(replication),
        ],
    }
}

fn in_sync(replication: i32) -> (String, String) {
    (
        "min.insync.replicas".to_owned(),
        min_insync_replicas(replication).to_string(),
    )
}

/// The stock events topic of command topic `topic` when none is named:
/// `<topic>.events` (`stock.ledger.events`), beside its outcomes and dead
/// letters, so a repartitioned log gets a topic of its own.
///
/// ```
/// assert_eq!(stockledger_kafka::admin::default_events_topic("stock.ledger"), "stock.ledger.events");
/// ```
pub fn default_events_topic(topic: &str) -> String {
    format!("{topic}.events")
}

/// The stock events topic of a command topic with `partitions`
/// partitions: as many partitions (a command partition's events go to the
/// partition of the same number, written by its one applier), kept 7 days
/// like outcomes.
pub fn events_topic_spec(name: &str, partitions: i32, replication: i32) -> TopicSpec {
    TopicSpec {
        name: name.to_owned(),
        partitions,
        replication,
        configs: vec![
            (
                "retention.ms".into(),
                Retention::default().outcomes_ms.to_string(),
            ),
            in_sync(replication),
        ],
    }
}

/// The specifications of a ledger's topics: the command topic as
/// [`command_topic_spec`] makes it; outcomes (as many partitions) and dead
/// letters (one partition, so they read in order) with `retention`.
pub fn ledger_topic_specs(
    topics: LedgerTopics<'_>,
    partitions: i32,
    replication: i32,
    retention: Retention,
) -> [TopicSpec; 4] {
    let with_retention = |name: &str, partitions: i32, ms: i64| TopicSpec {
        name: name.to_owned(),
        partitions,
        replication,
        configs: vec![
            ("retention.ms".into(), ms.to_string()),
            in_sync(replication),
        ],
    };
    [
        command_topic_spec(topics.commands, partitions, replication),
        with_retention(topics.outcomes, partitions, retention.outcomes_ms),
        with_retention(topics.dead_letters, 1, retention.dead_letters_ms),
        events_topic_spec(topics.events, partitions, replication),
    ]
}

/// The configuration a broker reports for `topic` (name → value; entries
/// without a value are left out). Empty if the broker reports none.
pub async fn topic_config(
    kafka: &KafkaConfig,
    topic: &str,
) -> Result<HashMap<String, String>, AdminError> {
    let admin: AdminClient<DefaultClientContext> = kafka
        .client_config(&[])
        .create()
        .map_err(AdminError::Client)?;
    let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(30)));
    let results = admin
        .describe_configs(&[ResourceSpecifier::Topic(topic)], &options)
        .await
        .map_err(|source| AdminError::Request {
            what: "describing the topic's configuration",
            source,
        })?;
    let mut config = HashMap::new();
    for result in results {
        let resource = result.map_err(|code| AdminError::Topic {
            topic: topic.to_owned(),
            code,
        })?;
        for entry in resource.entries {
            if let Some(value) = entry.value {
                config.insert(entry.name, value);
            }
        }
    }
    Ok(config)
}

/// The largest record batch a topic takes when nothing says otherwise:
/// Kafka's default `message.max.bytes` (1 MiB plus a batch header).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 1_048_588;

/// The largest record batch `topic` takes, in bytes (its
/// `max.message.bytes`); `None` when the topic does not exist yet (the
/// broker creates it with its own default on first write).
pub async fn max_message_bytes(
    kafka: &KafkaConfig,
    topic: &str,
) -> Result<Option<usize>, AdminError> {
    let config = match topic_config(kafka, topic).await {
        Ok(config) => config,
        Err(AdminError::Topic {
            code: RDKafkaErrorCode::UnknownTopicOrPartition,
            ..
        }) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(Some(
        config
            .get("max.message.bytes")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(DEFAULT_MAX_MESSAGE_BYTES),
    ))
}

/// The command topic would lose records: its configuration says so.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the command topic {topic} has {setting}={value}, so the broker will delete its records \
     and replay, reconcile and the archive would rest on a truncated log. {fix}"
)]
pub struct NotPermanent {
    pub topic: String,
    pub setting: &'static str,
    pub value: String,
    pub fix: String,
}

/// Checks that `config` (as [`topic_config`] reads it) keeps every record
/// of the command topic. A finite retention is accepted when
/// `allow_finite` (snapshots then cover what it deletes); compaction never
/// is. A setting the broker does not report is taken as not limiting.
pub fn check_permanent(
    topic: &str,
    config: &HashMap<String, String>,
    allow_finite: bool,
) -> Result<(), NotPermanent> {
    let alter = |settings: &str| {
        format!(
            "Make it permanent: kafka-configs.sh --bootstrap-server … --alter --entity-type topics \
             --entity-name {topic} --add-config {settings}"
        )
    };
    if let Some(policy) = config
        .get("cleanup.policy")
        .filter(|p| p.contains("compact"))
    {
        return Err(NotPermanent {
            topic: topic.to_owned(),
            setting: "cleanup.policy",
            value: policy.clone(),
            fix: format!(
                "Compaction keeps one record per SKU and destroys the history. {}",
                alter("cleanup.policy=delete,retention.ms=-1,retention.bytes=-1")
            ),
        });
    }
    if allow_finite {
        return Ok(());
    }
    for setting in ["retention.ms", "retention.bytes"] {
        if let Some(value) = config.get(setting) {
            if value.trim().parse::<i64>().map_or(true, |v| v >= 0) {
                return Err(NotPermanent {
                    topic: topic.to_owned(),
                    setting,
                    value: value.clone(),
                    fix: format!(
                        "{}, or start with --allow-finite-retention if snapshots cover what it deletes.",
                        alter("retention.ms=-1,retention.bytes=-1")
                    ),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_permanent_log_passes_and_a_finite_one_is_refused_naming_the_setting() {
        let permanent = config(&[("retention.ms", "-1"), ("retention.bytes", "-1")]);
        assert_eq!(check_permanent("t", &permanent, false), Ok(()));
        assert_eq!(check_permanent("t", &config(&[]), false), Ok(()));

        let week = config(&[("retention.ms", "604800000"), ("retention.bytes", "-1")]);
        let refused = check_permanent("t", &week, false).unwrap_err();
        assert_eq!(
            (refused.setting, refused.value.as_str()),
            ("retention.ms", "604800000")
        );
        let message = refused.to_string();
        assert!(message.contains("retention.ms=604800000"), "{message}");
        assert!(message.contains("--allow-finite-retention"), "{message}");
        assert_eq!(check_permanent("t", &week, true), Ok(()));

        let bytes = config(&[("retention.ms", "-1"), ("retention.bytes", "1073741824")]);
        assert_eq!(
            check_permanent("t", &bytes, false).unwrap_err().setting,
            "retention.bytes"
        );
    }

    #[test]
    fn compaction_is_refused_even_when_finite_retention_is_allowed() {
        let compacted = config(&[("cleanup.policy", "compact,delete"), ("retention.ms", "-1")]);
        let refused = check_permanent("t", &compacted, true).unwrap_err();
        assert_eq!(refused.setting, "cleanup.policy");
    }

    #[test]
    fn the_command_topic_is_created_permanent_with_a_majority_in_sync() {
        let topics = LedgerTopics {
            commands: "c",
            outcomes: "o",
            dead_letters: "d",
            events: "e",
        };
        let [commands, outcomes, dead, events] =
            ledger_topic_specs(topics, 6, 3, Retention::default());
        let commands_config: HashMap<_, _> = commands.configs.into_iter().collect();
        let check = check_permanent("c", &commands_config, false);
        assert_eq!(check, Ok(()));
        assert_eq!(commands_config["min.insync.replicas"], "2");
        assert!(!commands_config.contains_key("cleanup.policy"));
        assert_eq!(
            (outcomes.partitions, dead.partitions, events.partitions),
            (6, 1, 6)
        );
        assert_eq!(
            outcomes.configs[0],
            ("retention.ms".into(), "604800000".into())
        );
        assert_eq!([1, 2, 3, 5].map(min_insync_replicas), [1, 2, 2, 3]);
    }
}
