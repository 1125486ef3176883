//! The record the applier stopped on, noted in the projection: an applier
//! that exits on the same record at every restart is in a crash loop,
//! which `status` names and the alert rules page on
//! ([`REPEATED_STOPS_METRIC`]). The note goes once the applier has
//! committed past that record.

use std::time::Duration;

use rdkafka::{Offset, TopicPartitionList};
use stockledger_core::report::Chain;
use stockledger_core::LogPosition;
use stockledger_kafka::topic::first_of_ranges;
use stockledger_projection::{Projection, ProjectionError};
use stockledger_runtime::clock::now_ms;
use tracing::{error, warn};

use super::{ApplierConfig, ApplierError};

/// The applier's name among the services that note their stops.
pub const SERVICE: &str = "applier";

/// Gauge: how many times in a row the applier stopped on the record its
/// note names, as read when it started (0: no note, or gone past it).
pub const REPEATED_STOPS_METRIC: &str = "stockledger_applier_repeated_stops";

impl ApplierError {
    /// The position of the record this error stopped the applier on:
    /// the one it could not publish for, or the first of the batch Redis
    /// refused. `None` for an error of no record (a setting, a service, a
    /// projection that lost its state, where nothing may be written).
    pub fn stopped_at(&self) -> Option<LogPosition> {
        match self {
            Self::Publish { position, .. } => Some(position.clone()),
            Self::Apply {
                source: ProjectionError::StateLost { .. },
                ..
            } => None,
            Self::Apply { topic, offsets, .. } => {
                let (partition, offset) = first_of_ranges(offsets)?;
                let topic = topic.clone();
                Some(LogPosition {
                    topic,
                    partition,
                    offset,
                })
            }
            _ => None,
        }
    }
}

/// Notes that the applier stopped for `error`, if it names a record; says
/// so in the log when it is the same record as last time. Bounded: Redis
/// may be what is away.
pub(super) async fn note(config: &ApplierConfig, error: &ApplierError) {
    let Some(record) = error.stopped_at().map(|at| at.to_string()) else {
        return;
    };
    let why = Chain(error).to_string();
    let noted = async {
        let projection = Projection::connect(&config.redis_url, config.prefix.clone()).await?;
        projection.note_stop(SERVICE, &record, &why, now_ms()).await
    };
    match tokio::time::timeout(Duration::from_secs(5), noted).await {
        Ok(Ok(note)) if note.times > 1 => error!(
            record,
            times = note.times,
            "the applier stopped on the same record {} times in a row: fix what the error says, \
             or the applier stops on it at every restart",
            note.times
        ),
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            warn!(error = %Chain(&e), record, "cannot note the record the applier stopped on")
        }
        Err(_) => warn!(
            record,
            "cannot note the record the applier stopped on: Redis did not answer in 5 s"
        ),
    }
}

/// The partition and offset of the record the applier's note names, if
/// it has one of `topic`; sets [`REPEATED_STOPS_METRIC`].
pub(super) async fn read(
    projection: &Projection,
    topic: &str,
) -> Result<Option<(i32, i64)>, ProjectionError> {
    let note = projection.stop_of(SERVICE).await?;
    let times = note.as_ref().map_or(0, |n| n.times);
    metrics::gauge!(REPEATED_STOPS_METRIC).set(f64::from(times));
    Ok(note
        .and_then(|n| LogPosition::parse(&n.record))
        .filter(|at| at.topic == topic)
        .map(|at| (at.partition, at.offset)))
}

/// Whether `committed` goes past the record `stuck` names.
pub(super) fn passed(stuck: (i32, i64), committed: &TopicPartitionList) -> bool {
    committed.elements().iter().any(|e| {
        e.partition() == stuck.0 && matches!(e.offset(), Offset::Offset(next) if next > stuck.1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_names_the_record_it_stopped_on() {
        let publish = ApplierError::Publish {
            what: "dead letter",
            topic: "stock.ledger.dlq".into(),
            position: LogPosition {
                topic: "stock.ledger".into(),
                partition: 7,
                offset: 0,
            },
            source: rdkafka::error::KafkaError::Canceled,
        };
        assert_eq!(
            publish.stopped_at().map(|at| at.to_string()).as_deref(),
            Some("stock.ledger/7@0")
        );
        let apply = ApplierError::Apply {
            topic: "stock.ledger".into(),
            offsets: "3:41..=90 5:7..=7".into(),
            source: ProjectionError::StateLost {
                prefix: "p".into(),
                key: "k".into(),
            },
        };
        assert_eq!(apply.stopped_at(), None, "the projection lost its state");
        let apply = ApplierError::Apply {
            topic: "stock.ledger".into(),
            offsets: "3:41..=90 5:7..=7".into(),
            source: ProjectionError::Corrupt {
                key: "k".into(),
                value: "v".into(),
            },
        };
        assert_eq!(
            apply.stopped_at().map(|at| at.to_string()).as_deref(),
            Some("stock.ledger/3@41")
        );
        let mut committed = TopicPartitionList::new();
        committed
            .add_partition_offset("stock.ledger", 3, Offset::Offset(41))
            .unwrap();
        assert!(!passed((3, 41), &committed));
        committed
            .add_partition_offset("stock.ledger", 3, Offset::Offset(42))
            .unwrap();
        assert!(passed((3, 41), &committed));
    }
}
