//! The contract, checked against the reference fold of the log: Redis
//! holds the fold, every outcome says what the fold decided, every stock
//! event the fold raised is on its topic.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use stockledger_core::{codec, Decision, StockEventKind};
use stockledger_kafka::topic::{self, LogRecord};

use crate::harness::Harness;

impl Harness {
    /// The reference fold of the command topic as it is now.
    pub async fn fold_log(&self) -> anyhow::Result<stockledger_core::LogFold> {
        let records = self.read(&self.ns.topic).await?;
        let partitions = topic::partition_count(&self.kafka, &self.ns.topic).await?;
        Ok(stockledger_maintenance::check::fold(&records, partitions))
    }

    /// Fails unless Redis holds exactly the reference fold of the log.
    pub async fn assert_projection_matches_log(&self) -> anyhow::Result<()> {
        let reference = self.fold_log().await?;
        let mismatches =
            stockledger_maintenance::check::compare(&self.projection, &reference).await?;
        anyhow::ensure!(
            mismatches.is_empty(),
            "Redis differs from the reference fold of the log: {mismatches:#?}"
        );
        Ok(())
    }

    /// The stock events the reference fold of the log raised, each as
    /// (partition, offset, kind) of its causing record.
    pub async fn expected_stock_events(
        &self,
    ) -> anyhow::Result<std::collections::BTreeSet<(i32, i64, stockledger_core::StockEventKind)>>
    {
        let reference = self.fold_log().await?;
        let mut expected = std::collections::BTreeSet::new();
        for state in reference.skus.values() {
            let Some(partition) = state.partition else {
                continue;
            };
            for (offset, decision) in &state.decisions {
                expected.extend(decision.events.kinds().map(|k| (partition, *offset, k)));
            }
        }
        Ok(expected)
    }

    /// Fails unless the stock events topic holds exactly the events the
    /// reference fold of the log raised, each on the partition of its
    /// causing record, in log order there. `strict`: each once. Otherwise
    /// an event that repeats one already there (not after the last event of
    /// its partition: its position and kind are not greater) is skipped, as
    /// a consumer skips it: that is what an applier that lost its
    /// partitions while frozen may still send when it wakes.
    pub async fn assert_stock_events_match_log(&self, strict: bool) -> anyhow::Result<()> {
        let expected = self.expected_stock_events().await?;
        // A batch's events may reach the brokers just after its outcomes
        // were archived: what is missing is awaited, the rest fails.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            match self.stock_events_against(&expected, strict).await? {
                None => return Ok(()),
                Some(missing) if std::time::Instant::now() > deadline => {
                    anyhow::bail!("stock events missing: {missing}")
                }
                Some(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    /// What of `expected` the events topic lacks (`None`: nothing); fails
    /// on an event not expected, one on the wrong partition, and, when
    /// `strict`, one that repeats an earlier one.
    async fn stock_events_against(
        &self,
        expected: &std::collections::BTreeSet<(i32, i64, stockledger_core::StockEventKind)>,
        strict: bool,
    ) -> anyhow::Result<Option<String>> {
        let mut published = std::collections::BTreeSet::new();
        let mut dedupe = stockledger_core::EventDedupe::default();
        for record in self.read(&self.ns.events_topic).await? {
            let event = stockledger_core::codec::decode_stock_event(
                record.payload.as_deref().unwrap_or_default(),
            )?;
            let at = &event.position;
            anyhow::ensure!(
                at.topic == self.ns.topic && at.partition == record.partition,
                "event {event:?} on partition {} of the events topic",
                record.partition
            );
            if !dedupe.keep(&event) {
                anyhow::ensure!(
                    !strict,
                    "{event:?} repeats or precedes an event already published on partition {}",
                    at.partition
                );
                continue;
            }
            published.insert((at.partition, at.offset, event.kind));
        }
        let extra: Vec<_> = published.difference(expected).collect();
        anyhow::ensure!(
            extra.is_empty(),
            "stock events not raised by the log: {extra:?}"
        );
        let missing: Vec<_> = expected.difference(&published).collect();
        Ok((!missing.is_empty()).then(|| format!("{missing:?}")))
    }

    /// The contract, checked against the reference fold of the log once the
    /// pipeline has caught up: Redis equals the fold; stock never went below
    /// zero; every record has exactly one archived row; every record has an
    /// outcome on the outcomes topic (duplicates allowed, none missing),
    /// and every copy of a valid command's, and its archived row, says
    /// what the fold decided, every field of it (result, delta, available,
    /// total, reason, location, stock events);
    /// every stock event the fold raised is on the events topic, once as a
    /// consumer reads it ([`Harness::assert_stock_events_match_log`]).
    pub async fn assert_contract(&self) -> anyhow::Result<()> {
        let log = self.read(&self.ns.topic).await?;
        self.wait_for_archive(log.len() as i64).await?;
        self.assert_projection_matches_log().await?;
        self.assert_stock_events_match_log(false).await?;
        let lowest = stockledger_analysts::query::min_available(&self.pool, &self.ns.topic).await?;
        anyhow::ensure!(lowest.unwrap_or(0) >= 0, "stock went down to {lowest:?}");
        let expected: BTreeSet<(i32, i64)> = log.iter().map(|r| (r.partition, r.offset)).collect();
        let differences = self.differences_in(&log).await?;
        anyhow::ensure!(
            differences.oversold.is_empty(),
            "stock said to go below zero: {:#?}",
            differences.oversold
        );
        anyhow::ensure!(
            differences.outcomes.is_empty(),
            "{} outcomes differ from the fold of the log: {:#?}",
            differences.outcomes.len(),
            differences.outcomes
        );
        let missing: Vec<_> = expected.difference(&differences.published).collect();
        anyhow::ensure!(
            missing.is_empty(),
            "records without an outcome: {missing:?}"
        );
        anyhow::ensure!(
            differences.published == expected,
            "outcomes for positions not in the log"
        );
        anyhow::ensure!(
            differences.rows.is_empty(),
            "{} archived rows differ from the fold of the log: {:#?}",
            differences.rows.len(),
            differences.rows
        );
        Ok(())
    }

    /// Every outcome copy and archived row of the command topic as it is
    /// now, compared by content with what the reference fold decided.
    pub async fn differences(&self) -> anyhow::Result<Differences> {
        let log = self.read(&self.ns.topic).await?;
        self.differences_in(&log).await
    }

    async fn differences_in(&self, log: &[LogRecord]) -> anyhow::Result<Differences> {
        let partitions = topic::partition_count(&self.kafka, &self.ns.topic).await?;
        let (_, decided) = stockledger_maintenance::check::fold_deciding(log, partitions);
        let mut differences = Differences {
            sold_out_crossings: decided
                .values()
                .filter(|d| d.events.kinds().any(|k| k == StockEventKind::SoldOut))
                .count(),
            ..Differences::default()
        };
        self.outcomes_against(&decided, &mut differences).await?;
        self.rows_against(&decided, &mut differences).await?;
        Ok(differences)
    }

    /// Every copy of a valid command's outcome says, field by field, what
    /// the fold `decided`; one a previous release wrote, in an older
    /// schema, what that schema holds.
    async fn outcomes_against(
        &self,
        decided: &BTreeMap<(i32, i64), Decision>,
        into: &mut Differences,
    ) -> anyhow::Result<()> {
        for record in self.read(&self.ns.outcomes_topic).await? {
            let payload = record.payload.as_deref().unwrap_or_default();
            let outcome = codec::decode_outcome(payload)?;
            anyhow::ensure!(
                outcome.position.topic == self.ns.topic,
                "outcome of another topic: {outcome:?}"
            );
            let at = (outcome.position.partition, outcome.position.offset);
            if outcome.decision.available < 0 {
                into.oversold.push(format!(
                    "outcome {}: {:?}",
                    outcome.position, outcome.decision
                ));
            }
            let current = codec::fingerprint_of(payload) == Some(codec::outcome_fingerprint());
            let held = |d: &Decision| (d.result, d.delta, d.available, d.total);
            if let Some(expected) = decided.get(&at) {
                let same = if current {
                    outcome.decision == *expected
                } else {
                    held(&outcome.decision) == held(expected)
                };
                if !same {
                    into.outcomes.push(format!(
                        "{}: {:?}, the fold {expected:?}",
                        outcome.position, outcome.decision
                    ));
                }
            }
            into.published.insert(at);
        }
        Ok(())
    }

    /// The archived row of every valid command holds what the fold
    /// `decided`, field by field (result, delta, available, total, reason,
    /// location, stock events).
    async fn rows_against(
        &self,
        decided: &BTreeMap<(i32, i64), Decision>,
        into: &mut Differences,
    ) -> anyhow::Result<()> {
        use sqlx::Row;
        let rows = sqlx::query(
            "SELECT partition, log_offset, result, delta, available_after, total_after, reason,
                    location, events
             FROM ledger_entries WHERE topic = $1",
        )
        .bind(&self.ns.topic)
        .fetch_all(&self.pool)
        .await?;
        for row in rows {
            let at: (i32, i64) = (row.try_get("partition")?, row.try_get("log_offset")?);
            let archived = (
                row.try_get::<String, _>("result")?,
                row.try_get::<i64, _>("delta")?,
                row.try_get::<Option<i64>, _>("available_after")?,
                row.try_get::<Option<i64>, _>("total_after")?,
                row.try_get::<Option<String>, _>("reason")?,
                row.try_get::<Option<String>, _>("location")?,
                (row.try_get::<Option<Vec<String>>, _>("events")?).unwrap_or_default(),
            );
            if archived.2.is_some_and(|available| available < 0) {
                into.oversold
                    .push(format!("row {}@{}: {archived:?}", at.0, at.1));
            }
            let Some(d) = decided.get(&at) else {
                continue;
            };
            let fold = (
                d.result.as_str().to_owned(),
                d.delta,
                d.figures().map(|f| f.available),
                d.figures().map(|f| f.total),
                d.reason.clone(),
                d.location.clone(),
                d.events.kinds().map(|k| k.as_str().to_owned()).collect(),
            );
            if archived != fold {
                into.rows.push(format!(
                    "{}@{}: row {archived:?}, the fold {fold:?}",
                    at.0, at.1
                ));
            }
        }
        Ok(())
    }
}

/// What the outcomes and the archive say that the reference fold of the
/// log does not, by content ([`Harness::differences`]).
#[derive(Debug, Default)]
pub struct Differences {
    /// Outcome copies whose decision is not the fold's.
    pub outcomes: Vec<String>,
    /// Archived rows whose fields are not the fold's decision's.
    pub rows: Vec<String>,
    /// Outcome copies and archived rows that say available stock went
    /// below zero.
    pub oversold: Vec<String>,
    /// The positions that have an outcome.
    pub published: BTreeSet<(i32, i64)>,
    /// Decisions of the fold that sold a SKU out: how often the point
    /// where stock could be oversold was reached.
    pub sold_out_crossings: usize,
}
