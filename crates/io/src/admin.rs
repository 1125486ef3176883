//! Creating the ledger's topics.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

use crate::kafka::KafkaConfig;

/// A topic to create.
#[derive(Debug, Clone)]
pub struct TopicSpec {
    pub name: String,
    pub partitions: i32,
    pub replication: i32,
}

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("cannot create a Kafka admin client: {0}")]
    Client(#[source] KafkaError),
    #[error("creating topics failed: {0}")]
    Request(#[source] KafkaError),
    #[error("creating topic {topic} failed: {code}")]
    Topic {
        topic: String,
        code: RDKafkaErrorCode,
    },
}

/// Creates each topic; one that already exists is left as it is.
/// Returns the names of the topics that were created.
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
            NewTopic::new(
                &t.name,
                t.partitions,
                TopicReplication::Fixed(t.replication),
            )
        })
        .collect();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = admin
        .create_topics(&new, &options)
        .await
        .map_err(AdminError::Request)?;
    let mut created = Vec::new();
    for result in results {
        match result {
            Ok(name) => created.push(name),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => return Err(AdminError::Topic { topic, code }),
        }
    }
    Ok(created)
}
