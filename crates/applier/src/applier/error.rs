//! Why an applier stops.

use rdkafka::error::KafkaError;
use stockledger_core::codec::EncodeError;
use stockledger_core::LogPosition;
use stockledger_kafka::admin::{AdminError, NotPermanent};

use stockledger_projection::ProjectionError;

#[derive(Debug, thiserror::Error)]
pub enum ApplierError {
    #[error("cannot create the Kafka {what}")]
    Client {
        what: &'static str,
        #[source]
        source: KafkaError,
    },
    #[error("cannot subscribe to {topic}")]
    Subscribe {
        topic: String,
        #[source]
        source: KafkaError,
    },
    #[error("the Redis projection failed")]
    Projection(#[from] ProjectionError),
    /// A batch could not be applied for a reason retrying does not cure;
    /// nothing of it was published or committed.
    #[error("applying records {offsets} of {topic} to Redis")]
    Apply {
        topic: String,
        /// `partition:first..=last` of each partition in the batch.
        offsets: String,
        #[source]
        source: ProjectionError,
    },
    #[error("reading the group's committed offsets")]
    Offsets(#[from] stockledger_kafka::topic::LogError),
    /// The command topic's partition count decides which partition each
    /// SKU lives on; without it nothing can be applied.
    #[error("reading the partitions of {topic}")]
    Partitions {
        topic: String,
        #[source]
        source: stockledger_kafka::topic::LogError,
    },
    /// The prefix holds the fold of another topic; applying this one onto it
    /// would mix two ledgers.
    #[error(
        "prefix {prefix} is the projection of topic {marked}, not {topic}; choose another prefix"
    )]
    OtherLog {
        prefix: String,
        marked: String,
        topic: String,
    },
    /// The broker's log ends before positions this projection has applied:
    /// the log was lost (an in-memory broker restarted) or the topic was
    /// deleted and recreated, so new records would reuse offsets the
    /// projection already holds decisions for.
    #[error(
        "the projection under {prefix} has applied {topic} up to {applied}, but the broker's log \
         ends before that ({ends}): the broker lost the log (an in-memory broker restarted, or \
         the topic was deleted and recreated). Nothing was applied and no offset was committed. \
         Rebuild from the log the broker has with `stockledger replay --into NEW_PREFIX`, then \
         run the applier with `--prefix NEW_PREFIX`; or restore the broker's log"
    )]
    LogLost {
        prefix: String,
        topic: String,
        /// `partition N offset O` of each position the log no longer reaches.
        applied: String,
        /// `partition N at offset E` of each of those partitions.
        ends: String,
    },
    /// Partitions were added to the command topic: SKUs now hash to other
    /// partitions than the ones their state was built from.
    #[error(
        "the command topic {topic} has {now} partitions, but the projection was built when it \
         had {marked}; SKUs now map to other partitions, so per-SKU order no longer holds. \
         Copy the log into a new topic with `stockledger repartition --to NEW_TOPIC \
         --partitions {now}`, rebuild with `stockledger --topic NEW_TOPIC --prefix NEW_PREFIX \
         replay --into NEW_PREFIX`, then run the applier on NEW_TOPIC and NEW_PREFIX"
    )]
    PartitionsChanged {
        topic: String,
        marked: i32,
        now: i32,
    },
    /// The command topic would lose records.
    #[error(transparent)]
    NotPermanent(#[from] NotPermanent),
    #[error("reading the configuration of a topic the applier reads or writes")]
    TopicConfig(#[from] AdminError),
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The stock events topic cannot take this command topic's events:
    /// each command partition's events go to the events partition of the
    /// same number.
    #[error(
        "the stock events topic {events} has {has} partitions, the command topic {topic} {wants}; \
         give the applier another events topic (--events-topic), or none to use {topic}.events"
    )]
    EventsPartitions {
        events: String,
        has: i32,
        topic: String,
        wants: i32,
    },
    /// A topic the applier writes takes records too small for some
    /// outcome, so the applier would stop on the first one.
    #[error(
        "{topic} takes records of at most {bytes} bytes (max.message.bytes), but an outcome may \
         take {needs}; raise it: kafka-configs.sh --bootstrap-server … --alter --entity-type \
         topics --entity-name {topic} --add-config max.message.bytes={needs}"
    )]
    RecordLimit {
        topic: String,
        bytes: usize,
        needs: usize,
    },
    /// The stock events topic could not be read or created.
    #[error("preparing the stock events topic {events}")]
    Events {
        events: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An outcome or dead letter was not delivered; offsets were not
    /// committed, so the batch is applied again (harmlessly) after restart.
    #[error("publishing the {what} for {position} to {topic} failed")]
    Publish {
        what: &'static str,
        topic: String,
        position: LogPosition,
        #[source]
        source: KafkaError,
    },
}

impl ApplierError {
    /// Whether the error may pass once the brokers or Redis answer again
    /// (a start's checks could not be made), rather than saying something
    /// about the log, the projection or the settings that waiting does not
    /// change.
    pub fn is_transient(&self) -> bool {
        match self {
            // A topic that does not exist is a setting to fix, not a wait.
            Self::Offsets(e) | Self::Partitions { source: e, .. } => {
                !matches!(e, stockledger_kafka::topic::LogError::NoSuchTopic(_))
            }
            Self::TopicConfig(_) | Self::Events { .. } => true,
            Self::Projection(e) => e.is_transient(),
            Self::Client { .. }
            | Self::Subscribe { .. }
            | Self::Apply { .. }
            | Self::OtherLog { .. }
            | Self::LogLost { .. }
            | Self::PartitionsChanged { .. }
            | Self::EventsPartitions { .. }
            | Self::RecordLimit { .. }
            | Self::NotPermanent(_)
            | Self::Encode(_)
            | Self::Publish { .. } => false,
        }
    }
}
