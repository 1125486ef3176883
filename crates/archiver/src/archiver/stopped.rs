//! The record the archiver stopped on, noted in the archive
//! (`service_stops`): an archiver that exits on the same page at every
//! restart is in a crash loop, which `status` names and the alert rules
//! page on ([`REPEATED_STOPS_METRIC`]). The note goes once the archiver
//! has written past that record.

use std::collections::HashMap;
use std::time::Duration;

use sqlx::PgPool;
use stockledger_core::report::Chain;
use stockledger_core::LogPosition;
use stockledger_kafka::topic::first_of_ranges;
use tracing::{error, info, warn};

use super::{ArchiverConfig, ArchiverError};

/// The archiver's name among the services that note their stops.
pub const SERVICE: &str = "archiver";

/// Gauge: how many times in a row the archiver stopped on the record its
/// note names, as read when it started (0: no note, or gone past it).
pub const REPEATED_STOPS_METRIC: &str = "stockledger_archiver_repeated_stops";

impl ArchiverError {
    /// The position of the outcome this error stopped the archiver on: the
    /// first of the page it could not write.
    /// `None` for an error of no record (a setting, a service).
    pub fn stopped_at(&self) -> Option<LogPosition> {
        match self {
            Self::Page { topic, offsets, .. } => {
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

/// Notes that the archiver stopped for `error`, if it names a record; says
/// so in the log when it is the same record as last time. Bounded:
/// PostgreSQL may be what is away.
pub(super) async fn note(config: &ArchiverConfig, error: &ArchiverError) {
    let Some(record) = error.stopped_at().map(|at| at.to_string()) else {
        return;
    };
    let why = Chain(error).to_string();
    let noted = async {
        let pool = crate::connect_as(
            &config.database_url,
            1,
            Duration::from_secs(5),
            crate::DbRole::Archiver,
        )?;
        let times: i32 = sqlx::query_scalar(
            "INSERT INTO service_stops (consumer_group, service, record, times, error)
             VALUES ($1, $2, $3, 1, $4)
             ON CONFLICT (consumer_group, service) DO UPDATE SET
                 times = CASE WHEN service_stops.record = EXCLUDED.record
                              THEN service_stops.times + 1 ELSE 1 END,
                 record = EXCLUDED.record, error = EXCLUDED.error, stopped_at = now()
             RETURNING times",
        )
        .bind(&config.group_id)
        .bind(SERVICE)
        .bind(&record)
        .bind(&why)
        .fetch_one(&pool)
        .await?;
        pool.close().await;
        Ok::<_, sqlx::Error>(times)
    };
    match tokio::time::timeout(Duration::from_secs(10), noted).await {
        Ok(Ok(times)) if times > 1 => error!(
            record,
            times,
            "the archiver stopped on the same record {times} times in a row: fix what the error \
             says, or the archiver stops on it at every restart"
        ),
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            warn!(error = %Chain(&e), record, "cannot note the record the archiver stopped on")
        }
        Err(_) => warn!(
            record,
            "cannot note the record the archiver stopped on: PostgreSQL did not answer in 10 s"
        ),
    }
}

/// The partition and offset of the record this group's note names, if it
/// has one of the outcomes topic; sets [`REPEATED_STOPS_METRIC`].
pub(super) async fn read(
    pool: &PgPool,
    config: &ArchiverConfig,
) -> Result<Option<(i32, i64)>, sqlx::Error> {
    let note: Option<(String, i32)> = sqlx::query_as(
        "SELECT record, times FROM service_stops WHERE consumer_group = $1 AND service = $2",
    )
    .bind(&config.group_id)
    .bind(SERVICE)
    .fetch_optional(pool)
    .await?;
    let times = note.as_ref().map_or(0, |n| n.1);
    metrics::gauge!(REPEATED_STOPS_METRIC).set(f64::from(times));
    Ok(note
        .and_then(|(record, _)| LogPosition::parse(&record))
        .filter(|at| at.topic == config.outcomes_topic)
        .map(|at| (at.partition, at.offset)))
}

/// Removes the note once `progress` (next offset per partition) is past
/// its record; `stuck` is then `None`.
pub(super) async fn forget_if_past(
    pool: &PgPool,
    config: &ArchiverConfig,
    stuck: &mut Option<(i32, i64)>,
    progress: &HashMap<i32, i64>,
) {
    let Some((partition, offset)) = *stuck else {
        return;
    };
    if progress.get(&partition).is_none_or(|&next| next <= offset) {
        return;
    }
    let removed =
        sqlx::query("DELETE FROM service_stops WHERE consumer_group = $1 AND service = $2")
            .bind(&config.group_id)
            .bind(SERVICE)
            .execute(pool)
            .await;
    match removed {
        Ok(_) => {
            info!("went past the record the archiver last stopped on; its note is removed");
            metrics::gauge!(REPEATED_STOPS_METRIC).set(0.0);
            *stuck = None;
        }
        Err(e) => warn!(error = %Chain(&e), "cannot remove the archiver's stop note yet"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_error_names_its_first_outcome() {
        let error = ArchiverError::Page {
            topic: "stock.ledger.outcomes".into(),
            offsets: "2:10..=19 4:0..=3".into(),
            source: sqlx::Error::PoolClosed,
        };
        assert_eq!(
            error.stopped_at().map(|at| at.to_string()).as_deref(),
            Some("stock.ledger.outcomes/2@10")
        );
        assert_eq!(
            ArchiverError::Client(rdkafka::error::KafkaError::Canceled).stopped_at(),
            None
        );
    }
}
