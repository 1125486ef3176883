//! Where a service that folds into this prefix last stopped on a record,
//! and how many times in a row it did: a service that exits on the same
//! record at every restart is in a crash loop, and `status` names it.

use super::{keys, Projection, ProjectionError};

/// A service's note of the record it stopped on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopNote {
    /// The service (`applier`).
    pub service: String,
    /// The record it stopped on, `topic/partition@offset`.
    pub record: String,
    /// How many times in a row it stopped on that record.
    pub times: u32,
    /// When it last did, in milliseconds since the Unix epoch.
    pub at_ms: i64,
    /// Why, as its log's last line says.
    pub error: String,
}

impl StopNote {
    fn encode(&self) -> String {
        format!(
            "{}\t{}\t{}\t{}",
            self.times, self.at_ms, self.record, self.error
        )
    }

    fn decode(service: String, value: &str) -> Option<Self> {
        let mut fields = value.splitn(4, '\t');
        Some(Self {
            service,
            times: fields.next()?.parse().ok()?,
            at_ms: fields.next()?.parse().ok()?,
            record: fields.next()?.to_owned(),
            error: fields.next()?.to_owned(),
        })
    }
}

impl Projection {
    /// Notes that `service` stopped on `record` for `error` at `at_ms`: the
    /// count goes on from the note before when that named the same record,
    /// else starts at 1. Returns the note written.
    pub async fn note_stop(
        &self,
        service: &str,
        record: &str,
        error: &str,
        at_ms: i64,
    ) -> Result<StopNote, ProjectionError> {
        let times = match self.stop_of(service).await? {
            Some(before) if before.record == record => before.times.saturating_add(1),
            _ => 1,
        };
        let note = StopNote {
            service: service.to_owned(),
            record: record.to_owned(),
            times,
            at_ms,
            error: error.replace(['\t', '\n', '\r'], " "),
        };
        let () = redis::cmd("HSET")
            .arg(keys::stops_key(&self.prefix))
            .arg(service)
            .arg(note.encode())
            .query_async(&mut self.redis.clone())
            .await?;
        Ok(note)
    }

    /// `service`'s note, if it has one.
    pub async fn stop_of(&self, service: &str) -> Result<Option<StopNote>, ProjectionError> {
        let value: Option<String> = redis::cmd("HGET")
            .arg(keys::stops_key(&self.prefix))
            .arg(service)
            .query_async(&mut self.redis.clone())
            .await?;
        Ok(value.and_then(|v| StopNote::decode(service.to_owned(), &v)))
    }

    /// Every service's note, by service.
    pub async fn stops(&self) -> Result<Vec<StopNote>, ProjectionError> {
        let all: std::collections::BTreeMap<String, String> = redis::cmd("HGETALL")
            .arg(keys::stops_key(&self.prefix))
            .query_async(&mut self.redis.clone())
            .await?;
        Ok(all
            .into_iter()
            .filter_map(|(service, value)| StopNote::decode(service, &value))
            .collect())
    }

    /// Removes `service`'s note: it went past the record it stopped on.
    pub async fn clear_stop(&self, service: &str) -> Result<(), ProjectionError> {
        let () = redis::cmd("HDEL")
            .arg(keys::stops_key(&self.prefix))
            .arg(service)
            .query_async(&mut self.redis.clone())
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_reads_back_as_written_whatever_its_error_holds() {
        let note = StopNote {
            service: "applier".into(),
            record: "stock.ledger/7@0".into(),
            times: 3,
            at_ms: 1_700_000_000_000,
            error: "publishing failed: a\tb".into(),
        };
        assert_eq!(
            StopNote::decode("applier".into(), &note.encode()),
            Some(note)
        );
        assert_eq!(StopNote::decode("applier".into(), "x"), None);
    }
}
