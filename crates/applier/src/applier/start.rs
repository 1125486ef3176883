//! The checks a start makes before it applies anything: the log this
//! projection is a fold of, and whether the broker still has it.

use std::time::Duration;

use rdkafka::TopicPartitionList;
use tracing::info;

use stockledger_projection::{Marker, Projection, ProjectionError};

use stockledger_core::codec::MAX_PAYLOAD_LEN;
use stockledger_kafka::admin::{max_message_bytes, DEFAULT_MAX_MESSAGE_BYTES};

use super::{ApplierConfig, ApplierError};

/// The smallest `max.message.bytes` the topics the applier writes may
/// have: an outcome quotes at most one command (at most
/// [`MAX_PAYLOAD_LEN`]) and a reason that may quote it again.
pub(super) const MIN_RECORD_LIMIT: usize = 4 * MAX_PAYLOAD_LEN;

/// The largest record the applier's producer may write: the smallest
/// `max.message.bytes` of the topics it writes (outcomes, dead letters,
/// stock events; Kafka's default for one not created yet), or a smaller
/// `message.max.bytes` given to it. Refused below [`MIN_RECORD_LIMIT`],
/// naming the topic, since some outcome could then never be published.
pub(super) async fn record_limit(config: &ApplierConfig) -> Result<usize, ApplierError> {
    let mut topics = vec![config.outcomes_topic.clone(), config.dlq_topic.clone()];
    if config.stock_events {
        topics.push(config.events_topic());
    }
    let mut limit = DEFAULT_MAX_MESSAGE_BYTES;
    for topic in topics {
        let bytes = max_message_bytes(&config.kafka, &topic)
            .await?
            .unwrap_or(DEFAULT_MAX_MESSAGE_BYTES);
        if bytes < MIN_RECORD_LIMIT {
            return Err(ApplierError::RecordLimit {
                topic,
                bytes,
                needs: MIN_RECORD_LIMIT,
            });
        }
        limit = limit.min(bytes);
    }
    if let Some(given) = config.kafka.property("message.max.bytes") {
        let given: usize = given.trim().parse().unwrap_or(limit);
        if given < MIN_RECORD_LIMIT {
            return Err(ApplierError::RecordLimit {
                topic: "the producer's message.max.bytes".into(),
                bytes: given,
                needs: MIN_RECORD_LIMIT,
            });
        }
        limit = limit.min(given);
    }
    Ok(limit)
}

/// Refuses a projection that is the fold of another topic, or that lost its
/// state while the group has already committed progress (a Redis restarted
/// empty would otherwise be taken for "no stock" and the rest of the log
/// applied onto nothing). A new projection of a new group is marked.
pub(super) async fn check_marker(
    config: &ApplierConfig,
    projection: &Projection,
    partitions: i32,
) -> Result<(), ApplierError> {
    match projection.marker().await? {
        Some(marked) if marked.topic != config.topic => Err(ApplierError::OtherLog {
            prefix: config.prefix.clone(),
            marked: marked.topic,
            topic: config.topic.clone(),
        }),
        Some(Marker {
            partitions: Some(marked),
            ..
        }) if marked != partitions => Err(ApplierError::PartitionsChanged {
            topic: config.topic.clone(),
            marked,
            now: partitions,
        }),
        Some(Marker {
            partitions: Some(_),
            applied,
            ..
        }) => check_log_reaches(config, applied).await,
        Some(Marker {
            partitions: None, ..
        }) => {
            // Marked by a release that did not record the count: the fold
            // so far was made with today's.
            projection.mark(&config.topic, partitions).await?;
            Ok(())
        }
        None => {
            let committed = stockledger_kafka::topic::committed_offsets(
                &config.kafka,
                &config.group_id,
                &config.topic,
            )
            .await?;
            if committed.values().any(|&offset| offset > 0) {
                return Err(ProjectionError::StateLost {
                    prefix: config.prefix.clone(),
                    key: projection.marker_key(),
                }
                .into());
            }
            projection.mark(&config.topic, partitions).await?;
            Ok(())
        }
    }
}

/// Refuses a projection that has applied positions the broker's log no
/// longer reaches.
pub(super) async fn check_log_reaches(
    config: &ApplierConfig,
    applied: std::collections::BTreeMap<i32, i64>,
) -> Result<(), ApplierError> {
    let missing = stockledger_kafka::topic::missing_positions(
        &config.kafka,
        &config.topic,
        applied.into_iter().collect(),
        Duration::from_secs(30),
    )
    .await
    .map_err(|source| ApplierError::Partitions {
        topic: config.topic.clone(),
        source,
    })?;
    if missing.is_empty() {
        return Ok(());
    }
    let list = |f: &dyn Fn(&stockledger_kafka::topic::Missing) -> String| {
        missing.iter().map(f).collect::<Vec<_>>().join(", ")
    };
    Err(ApplierError::LogLost {
        prefix: config.prefix.clone(),
        topic: config.topic.clone(),
        applied: list(&|m| format!("partition {} offset {}", m.partition, m.offset)),
        ends: list(&|m| format!("partition {} at offset {}", m.partition, m.end)),
    })
}

/// `partition@next offset` of a commit, for the log.
pub(super) fn offset_list(offsets: &TopicPartitionList) -> String {
    offsets
        .elements()
        .iter()
        .map(|e| format!("{}@{:?}", e.partition(), e.offset()))
        .collect::<Vec<_>>()
        .join(" ")
}

pub(super) async fn partition_count(config: &ApplierConfig) -> Result<i32, ApplierError> {
    stockledger_kafka::topic::partition_count(&config.kafka, &config.topic)
        .await
        .map_err(|source| ApplierError::Partitions {
            topic: config.topic.clone(),
            source,
        })
}

/// The stock events topic, created with the command topic's partition
/// count and replication when missing; refused when it has another count.
pub(super) async fn prepare_events_topic(
    config: &ApplierConfig,
    partitions: i32,
) -> Result<(), ApplierError> {
    let events = config.events_topic();
    let failed = |source: Box<dyn std::error::Error + Send + Sync>| ApplierError::Events {
        events: events.clone(),
        source,
    };
    match stockledger_kafka::topic::partition_count(&config.kafka, &events).await {
        Ok(has) if has == partitions => Ok(()),
        Ok(has) => Err(ApplierError::EventsPartitions {
            events: events.clone(),
            has,
            topic: config.topic.clone(),
            wants: partitions,
        }),
        Err(stockledger_kafka::topic::LogError::NoSuchTopic(_)) => {
            let replication =
                stockledger_kafka::topic::replication_of(&config.kafka, &config.topic)
                    .await
                    .map_err(|e| failed(Box::new(e)))?;
            let spec =
                stockledger_kafka::admin::events_topic_spec(&events, partitions, replication);
            stockledger_kafka::admin::create_topics(&config.kafka, &[spec])
                .await
                .map_err(|e| failed(Box::new(e)))?;
            info!(topic = %events, partitions, replication, "created the stock events topic");
            Ok(())
        }
        Err(e) => Err(failed(Box::new(e))),
    }
}
