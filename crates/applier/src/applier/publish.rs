//! A decided batch to the brokers: outcomes and dead letters published,
//! and, once the brokers hold them all, the offsets committed.

use std::collections::BTreeMap;
use std::time::Duration;
use stockledger_core::report::Chain;

use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use stockledger_core::codec;
use stockledger_core::trace::TRACEPARENT_HEADER;
use stockledger_core::{
    Decision, LogPosition, OutcomeView, ResultCode, StockEvent, StockEventKind, StockEvents,
};
use stockledger_runtime::retry;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinError;
use tracing::{debug, instrument, warn};

use super::batch::{Applied, Applying, Decided, Decoded, Item};
use super::hops::Pending;
use super::letter;
use super::start::offset_list;
use super::{Applier, ApplierConfig, ApplierError, DEAD_LETTERS_METRIC, RECORDS_METRIC};
use crate::deliveries::{Delivered, Numbering};

/// What the applier publishes for a record.
#[derive(Debug, Clone, Copy)]
pub(super) enum Kind {
    Outcome,
    DeadLetter,
    Event,
}

impl Kind {
    pub(super) fn what(self) -> &'static str {
        match self {
            Self::Outcome => "outcome",
            Self::DeadLetter => "dead letter",
            Self::Event => "stock event",
        }
    }

    pub(super) fn topic(self, config: &ApplierConfig) -> String {
        match self {
            Self::Outcome => config.outcomes_topic.clone(),
            Self::DeadLetter => config.dlq_topic.clone(),
            Self::Event => config.events_topic(),
        }
    }
}

/// A record to publish for one item of a batch.
pub(super) struct Outgoing<'a> {
    pub(super) kind: Kind,
    pub(super) key: &'a [u8],
    /// `None`: a record without a value (a dead letter's digest).
    pub(super) payload: Option<&'a [u8]>,
    pub(super) headers: Option<OwnedHeaders>,
    pub(super) position: &'a LogPosition,
    /// The partition to write to (stock events: the command partition's
    /// number); `None`: the partitioner's choice by key.
    pub(super) partition: Option<i32>,
}

/// For each command partition, how far its stock events are published
/// (the last event on the events topic, [`Mark`]), and the next command
/// offset this applier expects there. A batch that does not start where
/// the last one ended follows a rewind (a redelivery after a crash) or
/// another member's work, so the events topic is read again and only the
/// events after its last one are published: a partition's events are
/// written by its one applier, in log order, without holes (the producer
/// is gapless), so its last event says what was published.
#[derive(Debug, Default)]
pub(super) struct EventMarks {
    published: BTreeMap<i32, Mark>,
    next: BTreeMap<i32, i64>,
}

/// The last stock event published for a command partition: its causing
/// offset (`-1`: none) and its kind. A record may raise several events
/// (sold out and low stock), and a crash may leave only the first of them
/// on the topic; `None`: every event of that record is there.
#[derive(Debug, Clone, Copy)]
pub(super) struct Mark {
    offset: i64,
    kind: Option<StockEventKind>,
}

impl Mark {
    /// Of `events`, raised by the record at `offset` in their order, those
    /// not published yet.
    fn unpublished(self, offset: i64, events: &[StockEvent]) -> &[StockEvent] {
        let from = match self.kind {
            _ if offset > self.offset => 0,
            Some(last) if offset == self.offset => events
                .iter()
                .position(|e| e.kind == last)
                .map_or(events.len(), |at| at + 1),
            _ => events.len(),
        };
        &events[from..]
    }
}

/// A batch applied to Redis whose outcomes are on their way to the brokers.
pub(super) struct InFlight {
    /// Answered once the brokers reported on every record of the batch
    /// ([`crate::deliveries::Reports`]).
    pub(super) deliveries: oneshot::Receiver<Delivered>,
    /// What each record handed over carries and for which record
    /// (partition and offset of the command topic), in the order handed
    /// over.
    pub(super) sent: Vec<(Kind, i32, i64)>,
    /// The next offset of each partition the batch read.
    pub(super) offsets: TopicPartitionList,
    pub(super) records: usize,
    /// With hops timed, the batch's steps until its delivery.
    pub(super) hops: Option<Pending>,
}

/// The delivery answer of the batch in flight; never ready without one. A
/// producer gone before answering (dropped) is a cancelled first record.
pub(super) async fn delivered(in_flight: &mut Option<InFlight>) -> Delivered {
    match in_flight {
        Some(batch) => answer(&mut batch.deliveries).await,
        None => std::future::pending().await,
    }
}

/// What `deliveries` answers, a producer that went without answering being
/// a cancelled first record.
pub(super) async fn answer(deliveries: &mut oneshot::Receiver<Delivered>) -> Delivered {
    deliveries.await.unwrap_or(Err((0, KafkaError::Canceled)))
}

/// What stands for a decision the projection did not give (it gives one
/// for each valid command): nothing applied, no reason.
static UNDECIDED: Decision = Decision {
    result: ResultCode::Invalid,
    delta: 0,
    available: 0,
    total: 0,
    reason: None,
    location: None,
    events: StockEvents::NONE,
};

/// The outcome of one item of a batch, borrowed from the item and its
/// decision, and why it is dead-lettered too, if it is: a record that is
/// not a valid command (refused without a decision by the machine, so
/// decided `INVALID` here), or a misrouted one (decided, but not applied).
fn outcome_of<'a>(item: &'a Item, decision: &'a Decision) -> (OutcomeView<'a>, Option<&'a str>) {
    match &item.command {
        Ok(command) => {
            let refusal = (decision.result == ResultCode::Misrouted)
                .then(|| decision.reason.as_deref().unwrap_or_default());
            let outcome = OutcomeView::of_command(&item.position, command, decision);
            (outcome, refusal)
        }
        Err(refused) => {
            let outcome =
                OutcomeView::invalid(&item.position, &refused.key, decision, item.timestamp);
            (outcome, Some(&refused.reason))
        }
    }
}

/// The headers of `item`'s outcome and stock events: its producer's W3C
/// `traceparent`, when it has a valid one, so the order can be followed
/// past the ledger.
fn trace_of(item: &Item) -> Option<OwnedHeaders> {
    let traceparent = item.traceparent.as_deref()?;
    Some(OwnedHeaders::new_with_capacity(1).insert(Header {
        key: TRACEPARENT_HEADER,
        value: Some(traceparent),
    }))
}

/// The offsets to commit once `batch` is published: the next offset of
/// each partition it read.
fn offsets_to_commit(topic: &str, batch: &Decoded) -> TopicPartitionList {
    let mut offsets = TopicPartitionList::new();
    for (&partition, &offset) in &batch.next {
        // The list is built from offsets just read; adding cannot fail
        // except on an invalid offset, which Kafka never hands out.
        if let Err(e) = offsets.add_partition_offset(topic, partition, Offset::Offset(offset)) {
            warn!(error = %Chain(&e), topic, partition, offset, "cannot record an offset to commit");
        }
    }
    offsets
}

impl Applier {
    /// Sends the outcomes (and dead letters and stock events) of a batch
    /// decided and written, numbered for the batch's one delivery answer.
    #[instrument(name = "batch", skip_all, fields(n = self.stats.batches + 1, records = decided.batch.items.len()))]
    pub(super) async fn publish(&mut self, decided: Decided) -> Result<InFlight, ApplierError> {
        let Decided {
            batch,
            decisions,
            hops,
        } = decided;
        // The machine decides valid commands only; a record that is not
        // one is decided `INVALID` here.
        let invalid: Vec<Decision> = (batch.items.iter())
            .filter_map(|item| item.command.as_ref().err())
            .map(|refused| Decision::invalid(refused.reason.clone()))
            .collect();
        let (mut valid, mut invalid) = (decisions.iter(), invalid.iter());
        let outcomes: Vec<(OutcomeView<'_>, Option<&str>)> = (batch.items.iter())
            .map(|item| {
                let decision = match &item.command {
                    Ok(_) => valid.next(),
                    Err(_) => invalid.next(),
                };
                // The projection decides every valid command it is given.
                outcome_of(item, decision.unwrap_or(&UNDECIDED))
            })
            .collect();
        if self.config.stock_events {
            // Off, no partition is marked, so no event is published.
            self.mark_events(&batch, &outcomes).await?;
        }
        let mut numbering = self.producer.context().begin();
        let mut sent = Vec::with_capacity(batch.items.len() + 1);
        let handed = self
            .hand_over_batch(&batch, outcomes, &mut numbering, &mut sent)
            .await;
        // Sealed even when a record could not be handed over: the run
        // ends then, and no report of it waits for an answer.
        let deliveries = self.producer.context().seal(numbering);
        handed?;
        Ok(InFlight {
            deliveries,
            sent,
            offsets: offsets_to_commit(&self.config.topic, &batch),
            records: batch.items.len(),
            hops,
        })
    }

    /// Hands each item's records to the producer, in order: its dead
    /// letter, if refused, its stock events not yet published, and its
    /// outcome, encoded into the applier's one buffer. `sent` gets what
    /// each carries, in the order handed over.
    async fn hand_over_batch(
        &mut self,
        batch: &Decoded,
        outcomes: Vec<(OutcomeView<'_>, Option<&str>)>,
        numbering: &mut Numbering,
        sent: &mut Vec<(Kind, i32, i64)>,
    ) -> Result<(), ApplierError> {
        let topics = [Kind::Outcome, Kind::DeadLetter, Kind::Event].map(|k| k.topic(&self.config));
        let mut buffer = std::mem::take(&mut self.buffer);
        // Records per result, counted once per batch rather than once per
        // record (a registry lookup each).
        let mut results: Vec<(ResultCode, u64)> = Vec::new();
        let mut handed = Ok(());
        for (item, (outcome, refusal)) in batch.items.iter().zip(outcomes) {
            match results
                .iter_mut()
                .find(|(r, _)| *r == outcome.decision.result)
            {
                Some((_, n)) => *n += 1,
                None => results.push((outcome.decision.result, 1)),
            }
            handed = self
                .hand_over_item(
                    item,
                    &outcome,
                    refusal,
                    &topics,
                    &mut buffer,
                    numbering,
                    sent,
                )
                .await;
            if handed.is_err() {
                break;
            }
        }
        self.buffer = buffer;
        for (result, n) in results {
            metrics::counter!(RECORDS_METRIC, "result" => result.as_str()).increment(n);
        }
        handed
    }

    /// [`Applier::hand_over_batch`] for one item.
    #[allow(clippy::too_many_arguments)] // the batch's state, lent for one item
    async fn hand_over_item(
        &mut self,
        item: &Item,
        outcome: &OutcomeView<'_>,
        refusal: Option<&str>,
        topics: &[String; 3],
        buffer: &mut Vec<u8>,
        numbering: &mut Numbering,
        sent: &mut Vec<(Kind, i32, i64)>,
    ) -> Result<(), ApplierError> {
        if let Some(reason) = refusal {
            debug!(position = %item.position, %reason, "dead-lettering a record");
            let source = item.position.to_string();
            let letter = match &item.record {
                Some(record) => letter::dead_letter(record, reason, &source, self.record_limit),
                // Kept for every record that is not a valid command or not
                // on its SKU's home partition, so never seen; the letter
                // still names the record, which the command topic keeps.
                None => {
                    warn!(position = %item.position, "the record to dead-letter was not kept; its letter names it only");
                    letter::named(item.key().as_bytes(), reason, &source)
                }
            };
            let m = Outgoing {
                kind: Kind::DeadLetter,
                key: letter.key,
                payload: letter.payload.as_deref(),
                headers: Some(letter.headers),
                position: &item.position,
                partition: None,
            };
            self.enqueue(m, topics, numbering, sent).await?;
            self.stats.dead_lettered += 1;
            metrics::counter!(DEAD_LETTERS_METRIC).increment(1);
        }
        let partition = item.position.partition;
        if let Some(mark) = self.events.published.get(&partition).copied() {
            let events = outcome.stock_events();
            let offset = item.position.offset;
            for event in mark.unpublished(offset, &events) {
                let payload = codec::encode_stock_event(event)?;
                let m = Outgoing {
                    kind: Kind::Event,
                    key: item.key().as_bytes(),
                    payload: Some(&payload),
                    headers: trace_of(item),
                    position: &item.position,
                    partition: Some(partition),
                };
                self.enqueue(m, topics, numbering, sent).await?;
                let kind = None;
                self.events
                    .published
                    .insert(partition, Mark { offset, kind });
            }
        }
        codec::encode_outcome_into(outcome, buffer);
        let m = Outgoing {
            kind: Kind::Outcome,
            key: item.key().as_bytes(),
            payload: Some(buffer),
            headers: trace_of(item),
            position: &item.position,
            partition: None,
        };
        self.enqueue(m, topics, numbering, sent).await
    }

    /// Publishes a batch Redis has applied (`joined`) and makes it the
    /// batch in flight; `true` when the applier is to stop.
    pub(super) async fn publish_applied(
        &mut self,
        batch: Applying,
        joined: Result<Applied, JoinError>,
        in_flight: &mut Option<InFlight>,
        unfinished: &mut Vec<InFlight>,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<bool, ApplierError> {
        // Stopping with Redis away: nothing of the batch is published, so
        // nothing after it may be.
        let Some(decided) = self.conclude(batch, joined)? else {
            return Ok(true);
        };
        let next = self.publish(decided).await?;
        self.hand_over(in_flight, next, unfinished, stop).await
    }

    /// Makes `next` the batch in flight once the one before it is delivered
    /// and committed. `true` when asked to stop while waiting: both are then
    /// left in `unfinished`.
    pub(super) async fn hand_over(
        &mut self,
        in_flight: &mut Option<InFlight>,
        next: InFlight,
        unfinished: &mut Vec<InFlight>,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<bool, ApplierError> {
        if let Some(mut previous) = in_flight.take() {
            // With the brokers away, deliveries wait for them; a stop
            // then finishes both batches within the shutdown grace.
            let delivered = tokio::select! {
                delivered = answer(&mut previous.deliveries) => Some(delivered),
                _ = stop.wait_for(|s| *s) => None,
            };
            match delivered {
                Some(delivered) => self.commit(previous, delivered)?,
                None => {
                    unfinished.push(previous);
                    unfinished.push(next);
                    return Ok(true);
                }
            }
        }
        *in_flight = Some(next);
        Ok(false)
    }

    /// Hands one record to the producer, numbered for its batch's
    /// delivery answer, waiting while the producer's queue is full; `sent`
    /// gets what it carries.
    async fn enqueue(
        &self,
        m: Outgoing<'_>,
        topics: &[String; 3],
        numbering: &mut Numbering,
        sent: &mut Vec<(Kind, i32, i64)>,
    ) -> Result<(), ApplierError> {
        let topic = &topics[m.kind as usize];
        let mut record = BaseRecord::with_opaque_to(topic, numbering.number()).key(m.key);
        if let Some(payload) = m.payload {
            record = record.payload(payload);
        }
        if let Some(headers) = m.headers {
            record = record.headers(headers);
        }
        if let Some(partition) = m.partition {
            record = record.partition(partition);
        }
        sent.push((m.kind, m.position.partition, m.position.offset));
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Err((source, _)) => {
                    return Err(ApplierError::Publish {
                        what: m.kind.what(),
                        topic: topic.clone(),
                        position: m.position.clone(),
                        source,
                    })
                }
            }
        }
    }

    /// Brings [`EventMarks`] up to date for `batch`: each partition with
    /// stock events to publish whose batch does not follow on from the
    /// last one here (or that this applier has not written yet) has its
    /// events partition's last event read back.
    async fn mark_events(
        &mut self,
        batch: &Decoded,
        outcomes: &[(OutcomeView<'_>, Option<&str>)],
    ) -> Result<(), ApplierError> {
        let mut first: BTreeMap<i32, i64> = BTreeMap::new();
        for item in &batch.items {
            first
                .entry(item.position.partition)
                .or_insert(item.position.offset);
        }
        let with_events: std::collections::BTreeSet<i32> = outcomes
            .iter()
            .filter(|(o, _)| !o.decision.events.is_empty())
            .map(|(o, _)| o.position.partition)
            .collect();
        for partition in with_events {
            let follows = self.events.next.get(&partition) == first.get(&partition);
            if follows && self.events.published.contains_key(&partition) {
                continue;
            }
            // A broker restarting or without a leader is waited for, as
            // Redis is: the batch is published once the events partition
            // can be read back.
            let through = retry::until_stopped(
                || self.events_through(partition),
                ApplierError::is_transient,
                |e, wait| {
                    warn!(error = %Chain(e), retry_in = ?wait, partition, "cannot read back the stock events yet");
                },
                &mut self.stop.clone(),
            )
            .await?;
            // Asked to stop while waiting: one last try, whose error ends
            // the run (nothing of the batch was published or committed).
            let through = match through {
                Some(through) => through,
                None => self.events_through(partition).await?,
            };
            self.events.published.insert(partition, through);
        }
        for (&partition, &next) in &batch.next {
            self.events.next.insert(partition, next);
        }
        Ok(())
    }

    /// The last stock event on `partition` of the events topic (offset
    /// `-1`: none of this command topic).
    async fn events_through(&self, partition: i32) -> Result<Mark, ApplierError> {
        let none = Mark {
            offset: -1,
            kind: None,
        };
        let events = self.config.events_topic();
        let failed = |source: Box<dyn std::error::Error + Send + Sync>| ApplierError::Events {
            events: events.clone(),
            source,
        };
        let last = stockledger_kafka::topic::last_record(
            &self.config.kafka,
            &events,
            partition,
            Duration::from_secs(30),
        )
        .await
        .map_err(|e| failed(Box::new(e)))?;
        let Some(payload) = last.and_then(|r| r.payload) else {
            return Ok(none);
        };
        let event = codec::decode_stock_event(&payload).map_err(|e| failed(Box::new(e)))?;
        if event.position.topic != self.config.topic || event.position.partition != partition {
            warn!(
                topic = %events,
                partition,
                written_for = %event.position,
                "the stock events topic's last event is of another command partition; \
                 publishing this one's from the start"
            );
            return Ok(none);
        }
        debug!(topic = %events, partition, through = event.position.offset, kind = event.kind.as_str(), "stock events published so far");
        Ok(Mark {
            offset: event.position.offset,
            kind: Some(event.kind),
        })
    }

    /// Waits for every outcome of `batch` to be delivered, then commits it.
    pub(super) async fn finish(&mut self, mut batch: InFlight) -> Result<(), ApplierError> {
        let delivered = answer(&mut batch.deliveries).await;
        self.commit(batch, delivered)
    }

    /// Once every outcome of `done` is delivered (`delivered`), commits its
    /// offsets; fails on the first record the brokers did not take.
    #[allow(clippy::result_large_err)] // the applier's one error type; it ends the run
    pub(super) fn commit(
        &mut self,
        done: InFlight,
        delivered: Delivered,
    ) -> Result<(), ApplierError> {
        if let Err((index, source)) = delivered {
            let (kind, partition, offset) =
                done.sent
                    .get(index)
                    .copied()
                    .unwrap_or((Kind::Outcome, -1, -1));
            return Err(ApplierError::Publish {
                what: kind.what(),
                topic: kind.topic(&self.config),
                // The applier reads one topic: every record is from it.
                position: LogPosition {
                    topic: self.config.topic.clone(),
                    partition,
                    offset,
                },
                source,
            });
        }
        let offsets = done.offsets;
        if self
            .stuck
            .is_some_and(|stuck| super::stopped::passed(stuck, &offsets))
        {
            self.unstuck = true;
        }
        if let Err(e) = self.consumer.commit(&offsets, CommitMode::Async) {
            // Not fatal: the records are applied; a redelivery is harmless.
            warn!(error = %Chain(&e), "committing offsets failed; records may be redelivered");
        }
        for element in offsets.elements() {
            let (topic, partition) = (element.topic(), element.partition());
            match self.committed.find_partition(topic, partition) {
                Some(_) => {
                    let _ = self
                        .committed
                        .set_partition_offset(topic, partition, element.offset());
                }
                None => {
                    let _ = self
                        .committed
                        .add_partition_offset(topic, partition, element.offset());
                }
            }
        }
        if let (Some(sink), Some(hops)) = (&self.config.hops, done.hops) {
            sink.send(hops.delivered());
        }
        self.stats.records += done.records as u64;
        self.stats.batches += 1;
        debug!(
            records = done.records,
            committed = %offset_list(&offsets),
            "outcomes delivered; offsets committed"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(offset: i64, kinds: &[StockEventKind]) -> Vec<StockEvent> {
        kinds
            .iter()
            .map(|&kind| StockEvent {
                kind,
                sku: "SKU-1".into(),
                location: None,
                available: 0,
                total: 1,
                position: LogPosition {
                    topic: "stock.ledger".into(),
                    partition: 1,
                    offset,
                },
                command_id: None,
                occurred_at: 0,
            })
            .collect()
    }

    fn kinds(events: &[StockEvent]) -> Vec<StockEventKind> {
        events.iter().map(|e| e.kind).collect()
    }

    /// Found by `stock_events_are_published_once_each_through_kill_9_mid_batch`:
    /// a kill between a record's sold-out and its low-stock event left the
    /// second unpublished, and the mark by offset alone took the record as
    /// done.
    #[test]
    fn a_record_whose_first_event_alone_is_published_gets_the_rest() {
        use StockEventKind::{LowStock, SoldOut};
        let both = events(878, &[SoldOut, LowStock]);
        let after_first = Mark {
            offset: 878,
            kind: Some(SoldOut),
        };
        assert_eq!(kinds(after_first.unpublished(878, &both)), [LowStock]);
        assert_eq!(
            kinds(after_first.unpublished(879, &both)),
            [SoldOut, LowStock]
        );
        assert!(after_first.unpublished(877, &both).is_empty());
        let whole = Mark {
            offset: 878,
            kind: Some(LowStock),
        };
        assert!(whole.unpublished(878, &both).is_empty());
        let ours = Mark {
            offset: 878,
            kind: None,
        };
        assert!(ours.unpublished(878, &both).is_empty());
        let none = Mark {
            offset: -1,
            kind: None,
        };
        assert_eq!(kinds(none.unpublished(0, &both)), [SoldOut, LowStock]);
    }
}
