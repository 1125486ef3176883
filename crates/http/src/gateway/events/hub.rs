//! The gateway's one reader of the stock events topic, and its fan-out:
//! every event the consumers' rule keeps goes to every open stream, and
//! the levels some stream asked for are read from Redis for all of them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use stockledger_core::{codec, EventDedupe, StockEvent};
use stockledger_kafka::topic::{watermarks_of, LogError};
use stockledger_kafka::KafkaConfig;
use stockledger_projection::Projection;
use tokio::sync::{broadcast, watch};
use tracing::{debug, info, warn};

use super::{Positions, StockSnapshot, BACKLOG, LEVEL_EVERY, TOPIC_RETRY};

/// One event of the events topic, where it lies there.
#[derive(Debug)]
pub(super) struct Read {
    pub(super) partition: i32,
    pub(super) offset: i64,
    pub(super) event: StockEvent,
}

/// The gateway's one reader of the events topic.
pub(crate) struct Hub {
    pub(super) kafka: KafkaConfig,
    pub(super) topic: String,
    state: Mutex<HubState>,
    /// True once the hub knows where it starts: a stream that joined
    /// before would be handed no positions and miss what lies between its
    /// own and the hub's start.
    placed: watch::Sender<bool>,
    pub(super) stop: watch::Receiver<bool>,
    levels: Levels,
}

/// The stock levels of the SKUs streams asked levels of, read from the
/// projection every [`LEVEL_EVERY`] while a stream wants them; each change
/// is handed to every stream.
struct Levels {
    projection: Projection,
    watched: Mutex<HashMap<String, Watched>>,
    sender: broadcast::Sender<Arc<StockSnapshot>>,
}

/// How many streams want a SKU's levels, and what was read of it last
/// (available, total, last offset).
#[derive(Default)]
struct Watched {
    streams: usize,
    last: Option<(i64, i64, i64)>,
}

/// A stream's interest in its SKUs' levels, given up when it ends.
pub(super) struct LevelInterest {
    hub: Arc<Hub>,
    skus: Vec<String>,
}

impl Drop for LevelInterest {
    fn drop(&mut self) {
        let mut watched = self.hub.levels.watched();
        for sku in &self.skus {
            if let Some(w) = watched.get_mut(sku) {
                w.streams -= 1;
                if w.streams == 0 {
                    watched.remove(sku);
                }
            }
        }
    }
}

impl Levels {
    fn watched(&self) -> std::sync::MutexGuard<'_, HashMap<String, Watched>> {
        self.watched.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

struct HubState {
    /// The next offset the hub will read, per partition (empty until the
    /// topic exists).
    at: Positions,
    sender: broadcast::Sender<Arc<Read>>,
}

impl Hub {
    /// Starts following `topic` from its end (from its start if it does
    /// not exist yet: it is then new); it stops when `stop` turns true.
    pub(crate) fn start(
        kafka: KafkaConfig,
        topic: String,
        projection: Projection,
        stop: watch::Receiver<bool>,
    ) -> Arc<Hub> {
        let (sender, _) = broadcast::channel(BACKLOG);
        let (levels, _) = broadcast::channel(BACKLOG);
        let hub = Arc::new(Hub {
            kafka,
            topic,
            state: Mutex::new(HubState {
                at: Positions::default(),
                sender,
            }),
            placed: watch::Sender::new(false),
            stop,
            levels: Levels {
                projection,
                watched: Mutex::new(HashMap::new()),
                sender: levels,
            },
        });
        tokio::spawn(hub.clone().follow());
        tokio::spawn(hub.clone().read_levels());
        hub
    }

    /// Registers a stream's interest in `skus`' levels: the changes from
    /// now on, and a guard that ends the interest.
    pub(super) fn watch_levels(
        self: &Arc<Self>,
        skus: &HashSet<String>,
    ) -> (broadcast::Receiver<Arc<StockSnapshot>>, LevelInterest) {
        let receiver = self.levels.sender.subscribe();
        let mut watched = self.levels.watched();
        for sku in skus {
            watched.entry(sku.clone()).or_default().streams += 1;
        }
        let interest = LevelInterest {
            hub: self.clone(),
            skus: skus.iter().cloned().collect(),
        };
        (receiver, interest)
    }

    /// Reads the watched SKUs' stock every [`LEVEL_EVERY`] and hands on
    /// each change.
    async fn read_levels(self: Arc<Self>) {
        let mut stop = self.stop.clone();
        let mut every = tokio::time::interval(LEVEL_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = every.tick() => {}
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
            let skus: Vec<String> = self.levels.watched().keys().cloned().collect();
            for sku in skus {
                let level = match self.levels.projection.stock_by_location(&sku).await {
                    Ok(Some(stock)) => StockSnapshot::of(sku, Some(stock)),
                    Ok(None) => continue,
                    Err(error) => {
                        debug!(sku, error = %error, "cannot read a watched SKU's level");
                        continue;
                    }
                };
                let now = (
                    level.available,
                    level.total,
                    level.last_offset.unwrap_or(-1),
                );
                let mut watched = self.levels.watched();
                let Some(w) = watched.get_mut(&level.sku) else {
                    continue;
                };
                if w.last == Some(now) {
                    continue;
                }
                w.last = Some(now);
                drop(watched);
                let _ = self.levels.sender.send(Arc::new(level));
            }
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Joins the hub: every event it hands on from now, and where it
    /// stands (what came before is the log's); `None` when the hub has not
    /// found where it starts within `limit`.
    pub(super) async fn join(
        &self,
        limit: Duration,
    ) -> Option<(broadcast::Receiver<Arc<Read>>, Positions)> {
        let mut placed = self.placed.subscribe();
        tokio::time::timeout(limit, placed.wait_for(|placed| *placed))
            .await
            .ok()?
            .ok()?;
        let state = self.state();
        Some((state.sender.subscribe(), state.at.clone()))
    }

    async fn follow(self: Arc<Self>) {
        let mut stop = self.stop.clone();
        let mut missing = false;
        let marks = loop {
            match watermarks_of(&self.kafka, &self.topic).await {
                Ok(marks) => break marks,
                Err(LogError::NoSuchTopic(_)) => {
                    if !missing {
                        info!(topic = %self.topic, "no stock events topic yet; streams wait for it");
                    }
                    missing = true;
                    // The hub will read the topic from its start: a stream
                    // that joins now misses nothing.
                    self.placed.send_replace(true);
                }
                Err(error) => {
                    warn!(topic = %self.topic, error = %error, "cannot read the stock events topic; retrying")
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(TOPIC_RETRY) => {}
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
        };
        let start: Positions = Positions(
            marks
                .iter()
                .map(|(&p, &(low, high))| (p, if missing { low } else { high }))
                .collect(),
        );
        let consumer = match reader(&self.kafka, &self.topic, &start, &marks) {
            Ok(consumer) => consumer,
            Err(error) => {
                warn!(topic = %self.topic, error = %error, "cannot follow the stock events topic; no events are streamed");
                return;
            }
        };
        self.state().at = start.clone();
        self.placed.send_replace(true);
        info!(topic = %self.topic, at = %start.id(), "following the stock events topic");
        let mut dedupe = EventDedupe::default();
        loop {
            let message = tokio::select! {
                message = consumer.recv() => message,
                _ = stop.wait_for(|stopped| *stopped) => return,
            };
            let message = match message {
                Ok(message) => message,
                Err(error) => {
                    warn!(topic = %self.topic, error = %error, "reading the stock events topic");
                    continue;
                }
            };
            let (partition, offset) = (message.partition(), message.offset());
            let Some(event) = decode(&self.topic, partition, offset, message.payload()) else {
                self.state().at.0.insert(partition, offset + 1);
                continue;
            };
            if offset < start.next(partition) {
                // The record before the start: what the rule compares with.
                dedupe.keep(&event);
                continue;
            }
            let keep = dedupe.keep(&event);
            let state = &mut *self.state();
            state.at.0.insert(partition, offset + 1);
            if keep {
                // None listening is not an error.
                let _ = state.sender.send(Arc::new(Read {
                    partition,
                    offset,
                    event,
                }));
            }
        }
    }
}

/// A consumer of `topic` assigned to read each partition from the record
/// before `from` (what the consumers' rule compares the first with), or
/// from the partition's start.
pub(super) fn reader(
    kafka: &KafkaConfig,
    topic: &str,
    from: &Positions,
    marks: &BTreeMap<i32, (i64, i64)>,
) -> Result<StreamConsumer, rdkafka::error::KafkaError> {
    let consumer: StreamConsumer = kafka
        .client_config(&[
            ("group.id", "stockledger-gateway-events"),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("auto.offset.reset", "earliest"),
        ])
        .create()?;
    let mut assignment = TopicPartitionList::new();
    for (&p, &(low, _)) in marks {
        let at = (from.next(p) - 1).max(low);
        assignment.add_partition_offset(topic, p, Offset::Offset(at))?;
    }
    consumer.assign(&assignment)?;
    Ok(consumer)
}

pub(super) fn decode(
    topic: &str,
    partition: i32,
    offset: i64,
    payload: Option<&[u8]>,
) -> Option<StockEvent> {
    match codec::decode_stock_event(payload.unwrap_or_default()) {
        Ok(event) => Some(event),
        Err(error) => {
            warn!(topic, partition, offset, error = %error, "a record of the stock events topic is not a StockEvent; skipped");
            None
        }
    }
}
