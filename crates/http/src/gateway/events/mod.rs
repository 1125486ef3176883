//! Stock events as Server-Sent Events: `GET /v1/skus/{sku}/events` and
//! `GET /v1/events?sku=A&sku=B`.
//!
//! One reader per gateway (the `Hub`) follows every partition of the
//! stock events topic from where it stood when the gateway started and
//! hands each event, once the consumers' rule ([`EventDedupe`]) keeps it,
//! to every open stream; a stream sends those of its SKUs.
//!
//! A stream's event id is where it has read the events topic up to: the
//! next offset of each partition, `0:1841,1:977,2:1203`. A browser's
//! `EventSource` sends the last one back as `Last-Event-ID` when it
//! reconnects; the stream then reads the topic from there to where the hub
//! stands, with a reader of its own, before it follows the hub again, so
//! nothing published in between is lost or sent twice. A stream opened
//! without one starts with a `stock` event per SKU, read from Redis after
//! the stream joined the hub, and sends no event the snapshot already
//! reflects (those whose record's offset is not after the SKU's last
//! applied one).
//!
//! With `levels=true` a stream also gets a `level` event at each change of
//! its SKUs' stock: the hub reads the SKUs some stream wants levels of from
//! Redis every [`LEVEL_EVERY`] and hands on what changed; a stream sends a
//! level only if it is newer than what it sent of that SKU.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::IntoResponse;
use axum::Extension;
use futures::StreamExt;
use rdkafka::message::Message;
use serde::Serialize;
use stockledger_core::{EventDedupe, LocationStock, Sku, StockEvent};
use stockledger_kafka::topic::{watermarks_of, LogError};
use stockledger_projection::{Projection, Stock};
use tokio::sync::{broadcast, mpsc, watch};
use tracing::{debug, warn};
use utoipa::ToSchema;

mod hub;
mod positions;
mod slots;

pub(crate) use hub::Hub;
use hub::{decode, reader, LevelInterest, Read};
pub use positions::Positions;
pub(crate) use slots::StreamSlots;
pub use slots::REFUSED_METRIC;

use super::auth::KeyName;
use super::bodies::LocationBody;
use super::problem::{path_problem, redis_problem, Problem};
use super::{Answer, Shared};

/// Gauge: the event streams open now.
pub const STREAMS_GAUGE: &str = "stockledger_sse_streams";
/// Counter: stock events sent on streams, by `kind`.
pub const SENT_METRIC: &str = "stockledger_sse_events_sent_total";
/// The most SKUs one stream follows.
pub const MAX_SKUS: usize = 100;
/// What the stream tells `EventSource` to wait before reconnecting.
const RETRY: Duration = Duration::from_secs(1);
/// A comment this often keeps proxies and the gateway's idle timeout from
/// closing a quiet stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Events the hub holds for a stream that reads slowly; one that falls
/// further behind is closed, and resumes from the log when it reconnects.
const BACKLOG: usize = 4096;
/// Longest a reconnecting stream reads the log to catch up with the hub.
const CATCH_UP_LIMIT: Duration = Duration::from_secs(30);
/// Longest a stream waits for a starting gateway's hub to find where the
/// events topic stands.
const PLACE_LIMIT: Duration = Duration::from_secs(10);
/// How often the hub looks again for an events topic that does not exist.
const TOPIC_RETRY: Duration = Duration::from_secs(2);
/// How often the SKUs whose levels a stream asked for are read from Redis.
pub const LEVEL_EVERY: Duration = Duration::from_millis(200);

/// A stock event as a stream sends it (the SSE `data`; the SSE `event` is
/// its `kind`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StockEventBody {
    /// `sold_out`, `back_in_stock`, `low_stock`, `opened`, `closed`,
    /// `paused` or `resumed`.
    pub kind: String,
    pub sku: String,
    /// The location the causing command named or acted on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// The SKU's stock after the causing record.
    pub available: i64,
    pub total: i64,
    /// The causing command record.
    pub position: super::bodies::Position,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command_id: Option<String>,
    /// RFC 3339, UTC, milliseconds: when the causing command occurred.
    pub occurred_at: String,
}

impl From<&StockEvent> for StockEventBody {
    fn from(e: &StockEvent) -> Self {
        Self {
            kind: e.kind.as_str().to_ascii_lowercase(),
            sku: e.sku.clone(),
            location: e.location.clone(),
            available: e.available,
            total: e.total,
            position: super::bodies::Position {
                topic: e.position.topic.clone(),
                partition: e.position.partition,
                offset: e.position.offset,
            },
            command_id: e.command_id.clone(),
            occurred_at: stockledger_runtime::clock::rfc3339_ms(e.occurred_at),
        }
    }
}

/// A SKU's stock when a stream opens (the SSE event `stock`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StockSnapshot {
    pub sku: String,
    /// False for a SKU the ledger has no state for (never restocked); its
    /// levels are then 0.
    pub known: bool,
    pub available: i64,
    pub total: i64,
    /// The stock at each location, when the SKU keeps stock by location.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub locations: Vec<LocationBody>,
    /// The offset of the last record applied to the SKU: the stream sends
    /// only events of later records.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_offset: Option<i64>,
}

/// Stock events of `sku` as Server-Sent Events.
#[utoipa::path(get, path = "/v1/skus/{sku}/events", tag = "reads",
    params(
        ("sku" = String, Path, description = "The SKU"),
        ("levels" = Option<bool>, Query, description = "Also send a `level` event (data: StockSnapshot) when the SKU's stock changes, read from the projection every 200 ms: a live counter. Default false"),
        ("Last-Event-ID" = Option<String>, Header, description = "The id of the last event received (an EventSource sends it when it reconnects): the stream resumes after it")),
    responses(
        (status = 200, description = "An endless text/event-stream: without Last-Event-ID first a `stock` event (data: StockSnapshot), then an event per stock event of the SKU (`sold_out`, `back_in_stock`, `low_stock`, `opened`, `closed`, `paused`, `resumed`; data: StockEventBody), each with an id to resume from", content_type = "text/event-stream", body = String),
        (status = 422, description = "The SKU, `levels`, another query parameter or Last-Event-ID is refused", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The caller's API key has its most event streams open (--max-streams-per-key), or the gateway has (--max-streams); retry after Retry-After", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Redis does not answer (the opening snapshot), or a starting gateway has not found where the stock events topic stands (Kafka does not answer); retry after Retry-After", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn sku_events(
    State(gateway): Shared,
    key: Option<Extension<KeyName>>,
    path: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Answer {
    let Path(sku) = path.map_err(path_problem)?;
    let sku = Sku::new(sku)?;
    let mut levels = None;
    for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match name.as_ref() {
            "levels" => levels_param(&mut levels, &value)?,
            _ => return Err(unknown_param(&name, "levels")),
        }
    }
    let levels = levels.unwrap_or(false);
    open(&gateway, key, vec![sku], levels, &headers).await
}

/// `levels=true` or `levels=false`, given once.
fn levels_param(levels: &mut Option<bool>, value: &str) -> Result<(), Problem> {
    if levels.is_some() {
        return Err(Problem::invalid("levels", "is given more than once"));
    }
    let value = value
        .parse()
        .map_err(|_| Problem::invalid("levels", format!("{value:?} is not true or false")))?;
    *levels = Some(value);
    Ok(())
}

fn unknown_param(name: &str, takes: &str) -> Problem {
    Problem::invalid(
        name,
        format!("unknown query parameter {name:?}; this route takes {takes}"),
    )
}

/// Stock events of several SKUs as one stream of Server-Sent Events.
#[utoipa::path(get, path = "/v1/events", tag = "reads",
    params(
        ("sku" = Vec<String>, Query, description = "A SKU to follow; repeat it for each (1 to 100)", explode = true),
        ("levels" = Option<bool>, Query, description = "Also send a `level` event when a SKU's stock changes (see /v1/skus/{sku}/events). Default false"),
        ("Last-Event-ID" = Option<String>, Header, description = "The id of the last event received: the stream resumes after it")),
    responses(
        (status = 200, description = "As /v1/skus/{sku}/events, for every SKU named: a `stock` event each, then their events in the order of each partition", content_type = "text/event-stream", body = String),
        (status = 422, description = "No SKU, more than 100, a SKU refused, `levels` refused, another query parameter, or Last-Event-ID refused", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The caller's API key has its most event streams open (--max-streams-per-key), or the gateway has (--max-streams); retry after Retry-After", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Redis does not answer (the opening snapshot), or a starting gateway has not found where the stock events topic stands (Kafka does not answer); retry after Retry-After", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn events(
    State(gateway): Shared,
    key: Option<Extension<KeyName>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Answer {
    let (mut skus, mut levels) = (Vec::new(), None);
    for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match name.as_ref() {
            "sku" => {}
            "levels" => {
                levels_param(&mut levels, &value)?;
                continue;
            }
            _ => return Err(unknown_param(&name, "sku (repeated) and levels")),
        }
        if skus.len() == MAX_SKUS {
            return Err(Problem::invalid(
                "sku",
                format!("a stream follows at most {MAX_SKUS} SKUs"),
            ));
        }
        skus.push(Sku::new(value.into_owned())?);
    }
    if skus.is_empty() {
        return Err(Problem::invalid(
            "sku",
            "name at least one SKU: /v1/events?sku=A&sku=B",
        ));
    }
    open(&gateway, key, skus, levels.unwrap_or(false), &headers).await
}

/// What a stream sends before it follows the hub.
enum Opening {
    /// Read the log from these positions to the hub's.
    Resume(Positions),
    /// The SKUs' stock, and the offset below which their events are in it.
    Snapshot(Vec<StockSnapshot>),
}

async fn open(
    gateway: &super::Gateway,
    key: Option<Extension<KeyName>>,
    skus: Vec<Sku>,
    levels: bool,
    headers: &HeaderMap,
) -> Answer {
    let resume = match headers.get("last-event-id") {
        None => None,
        Some(value) => {
            let text = value.to_str().map_err(|_| {
                Problem::invalid("Last-Event-ID", "is not text; send back an event's id")
            })?;
            Some(
                Positions::parse(text)
                    .map_err(|e| Problem::invalid("Last-Event-ID", format!("{text:?} {e}")))?,
            )
        }
    };
    // Taken before anything is read: a caller at its cap costs nothing.
    let slot = gateway
        .streams
        .take(key.map(|Extension(KeyName(name))| name))?;
    let hub = gateway.events.clone();
    let (receiver, at) = hub.join(PLACE_LIMIT).await.ok_or_else(|| {
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the gateway has not yet found where the stock events topic stands (Kafka does not answer)",
        )
        .retry_after(1)
    })?;
    let skus_set: HashSet<String> = skus.iter().map(|s| s.as_str().to_owned()).collect();
    let levels = levels.then(|| hub.watch_levels(&skus_set));
    let opening = match resume {
        Some(from) if !from.0.is_empty() => Opening::Resume(from),
        _ => Opening::Snapshot(snapshot(&gateway.projection, &skus).await?),
    };
    let (sender, events) = mpsc::channel::<Event>(64);
    tokio::spawn(stream(hub, skus_set, opening, receiver, levels, at, sender));
    // The body holds the stream's slot: it is given back once the client
    // goes (the body is dropped) or the stream ends.
    let body = futures::stream::unfold((events, slot), |(mut events, slot)| async move {
        events
            .recv()
            .await
            .map(|e| (Ok::<_, Infallible>(e), (events, slot)))
    });
    let mut response = Sse::new(body)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response();
    // Proxies that buffer answers (nginx) pass this one on as it comes.
    response
        .headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

async fn snapshot(projection: &Projection, skus: &[Sku]) -> Result<Vec<StockSnapshot>, Problem> {
    let mut snapshots = Vec::with_capacity(skus.len());
    for sku in skus {
        let stock = projection
            .stock_by_location(sku.as_str())
            .await
            .map_err(|e| redis_problem(&e))?;
        snapshots.push(StockSnapshot::of(sku.to_string(), stock));
    }
    Ok(snapshots)
}

impl StockSnapshot {
    /// `sku`'s stock as the projection read it (`None`: no state).
    fn of(sku: String, stock: Option<(Stock, Vec<LocationStock>)>) -> Self {
        match stock {
            Some((s, locations)) => Self {
                sku,
                known: true,
                available: s.available,
                total: s.total,
                locations: locations.iter().map(LocationBody::from).collect(),
                last_offset: Some(s.offset),
            },
            None => Self {
                sku,
                known: false,
                available: 0,
                total: 0,
                locations: Vec::new(),
                last_offset: None,
            },
        }
    }
}

/// One stream, from its opening to the client's going away (or the
/// gateway's stopping, or its falling too far behind).
async fn stream(
    hub: Arc<Hub>,
    skus: HashSet<String>,
    opening: Opening,
    receiver: broadcast::Receiver<Arc<Read>>,
    levels: Option<(broadcast::Receiver<Arc<StockSnapshot>>, LevelInterest)>,
    hub_at: Positions,
    sender: mpsc::Sender<Event>,
) {
    let (levels, _interest) = match levels {
        Some((receiver, interest)) => (Some(receiver), Some(interest)),
        None => (None, None),
    };
    metrics::gauge!(STREAMS_GAUGE).increment(1.0);
    let _open = OpenStream;
    let mut out = Out {
        skus,
        floors: HashMap::new(),
        shown: HashMap::new(),
        next: hub_at.clone(),
        dedupe: EventDedupe::default(),
        sender,
    };
    let mut stop = hub.stop.clone();
    if begin(&hub, opening, &hub_at, &mut out, &mut stop)
        .await
        .is_ok()
    {
        follow(&mut out, receiver, levels, &mut stop).await;
    }
}

/// Sends a stream's greeting, then its snapshot, or what it missed since
/// the id it resumes from; `Err` when the stream is to end.
async fn begin(
    hub: &Hub,
    opening: Opening,
    hub_at: &Positions,
    out: &mut Out,
    stop: &mut watch::Receiver<bool>,
) -> Result<(), ()> {
    let hello = Event::default()
        .retry(RETRY)
        .comment("stockledger stock events");
    out.sender.send(hello).await.map_err(|_| ())?;
    match opening {
        Opening::Snapshot(snapshots) => {
            for s in snapshots {
                if let Some(offset) = s.last_offset {
                    out.floors.insert(s.sku.clone(), offset);
                    out.shown.insert(s.sku.clone(), offset);
                }
                // No id: a client that got no event since reconnects
                // afresh, with a new snapshot, rather than resuming from
                // positions its snapshot's floors no longer guard.
                let event = Event::default()
                    .event("stock")
                    .json_data(&s)
                    .unwrap_or_default();
                out.sender.send(event).await.map_err(|_| ())?;
            }
            Ok(())
        }
        Opening::Resume(from) => {
            let caught_up = tokio::select! {
                caught_up = tokio::time::timeout(CATCH_UP_LIMIT, catch_up(hub, &from, hub_at, out)) => caught_up,
                _ = stop.wait_for(|stopped| *stopped) => return Err(()),
            };
            match caught_up {
                Ok(Ok(())) => Ok(()),
                Ok(Err(error)) => {
                    warn!(error = %error, "a stream could not read the stock events topic to resume; closed");
                    Err(())
                }
                Err(_) => {
                    warn!(limit = ?CATCH_UP_LIMIT, "a stream did not catch up with the stock events topic in time; closed (it resumes when the client reconnects)");
                    Err(())
                }
            }
        }
    }
}

/// Sends the hub's events (and levels) of the stream's SKUs until the
/// client goes, the gateway stops, or the stream falls behind the hub.
async fn follow(
    out: &mut Out,
    mut receiver: broadcast::Receiver<Arc<Read>>,
    mut levels: Option<broadcast::Receiver<Arc<StockSnapshot>>>,
    stop: &mut watch::Receiver<bool>,
) {
    loop {
        let level = async {
            match &mut levels {
                Some(levels) => levels.recv().await,
                None => std::future::pending().await,
            }
        };
        let read = tokio::select! {
            read = receiver.recv() => Ok(read),
            level = level => Err(level),
            _ = stop.wait_for(|stopped| *stopped) => return,
            _ = out.sender.closed() => return,
        };
        let read = match read {
            Ok(read) => read,
            // A level missed is made good by the next one read.
            Err(Ok(level)) => {
                if out.level(&level).await.is_err() {
                    return;
                }
                continue;
            }
            Err(Err(_)) => continue,
        };
        match read {
            Ok(read) => {
                if out.offer(&read).await.is_err() {
                    return;
                }
            }
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                debug!(
                    missed,
                    "a stream fell behind the hub; closed, to resume from the log"
                );
                return;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Counts a stream as open while it lives.
struct OpenStream;

impl Drop for OpenStream {
    fn drop(&mut self) {
        metrics::gauge!(STREAMS_GAUGE).decrement(1.0);
    }
}

/// What a stream sends, and where it stands.
struct Out {
    skus: HashSet<String>,
    /// Per SKU, the last offset its snapshot reflects.
    floors: HashMap<String, i64>,
    /// Per SKU, the offset of the newest stock sent (a snapshot, a level
    /// or an event): an older level is not sent.
    shown: HashMap<String, i64>,
    next: Positions,
    dedupe: EventDedupe,
    sender: mpsc::Sender<Event>,
}

impl Out {
    /// Sends `read` if it is new to the stream, kept by the rule, of one
    /// of its SKUs and not in its snapshot; `Err` once the client is gone.
    async fn offer(&mut self, read: &Read) -> Result<(), ()> {
        if read.offset < self.next.next(read.partition) {
            return Ok(());
        }
        self.next.0.insert(read.partition, read.offset + 1);
        let event = &read.event;
        if !self.dedupe.keep(event) || !self.skus.contains(&event.sku) {
            return Ok(());
        }
        if self
            .floors
            .get(&event.sku)
            .is_some_and(|floor| event.position.offset <= *floor)
        {
            return Ok(());
        }
        let shown = self.shown.entry(event.sku.clone()).or_insert(-1);
        *shown = (*shown).max(event.position.offset);
        let body = StockEventBody::from(event);
        let sse = Event::default()
            .event(&body.kind)
            .id(self.next.id())
            .json_data(&body)
            .unwrap_or_default();
        self.sender.send(sse).await.map_err(|_| ())?;
        metrics::counter!(SENT_METRIC, "kind" => body.kind).increment(1);
        Ok(())
    }
}

impl Out {
    /// Sends `level` if it is of one of the stream's SKUs and newer than
    /// what the stream sent of it; `Err` once the client is gone.
    async fn level(&mut self, level: &StockSnapshot) -> Result<(), ()> {
        if !self.skus.contains(&level.sku) {
            return Ok(());
        }
        let offset = level.last_offset.unwrap_or(-1);
        let shown = self.shown.entry(level.sku.clone()).or_insert(-1);
        if offset <= *shown {
            return Ok(());
        }
        *shown = offset;
        let sse = Event::default()
            .event("level")
            .json_data(level)
            .unwrap_or_default();
        self.sender.send(sse).await.map_err(|_| ())
    }
}

/// Reads the events topic from `from` up to `to` (where the hub stood when
/// the stream joined it), offering each event to the stream.
async fn catch_up(
    hub: &Hub,
    from: &Positions,
    to: &Positions,
    out: &mut Out,
) -> Result<(), LogError> {
    out.next = from.clone();
    for (&p, &o) in &to.0 {
        out.next.0.entry(p).or_insert(o);
    }
    let marks = watermarks_of(&hub.kafka, &hub.topic).await?;
    let behind: BTreeMap<i32, (i64, i64)> = marks
        .into_iter()
        .filter(|(p, _)| out.next.next(*p) < to.next(*p))
        .collect();
    if behind.is_empty() {
        return Ok(());
    }
    let consumer = reader(&hub.kafka, &hub.topic, &out.next, &behind)?;
    let mut pending: HashSet<i32> = behind.keys().copied().collect();
    let mut messages = consumer.stream();
    while !pending.is_empty() {
        let Some(message) = messages.next().await else {
            break;
        };
        // Owned before anything is awaited: a message borrows the consumer.
        let (partition, offset, event) = {
            let message = message?;
            let (partition, offset) = (message.partition(), message.offset());
            if offset + 1 >= to.next(partition) {
                pending.remove(&partition);
            }
            if offset >= to.next(partition) {
                continue;
            }
            let event = decode(&hub.topic, partition, offset, message.payload());
            (partition, offset, event)
        };
        let Some(event) = event else {
            out.next.0.insert(partition, offset + 1);
            continue;
        };
        if offset < out.next.next(partition) {
            out.dedupe.keep(&event);
            continue;
        }
        let read = Read {
            partition,
            offset,
            event,
        };
        if out.offer(&read).await.is_err() {
            return Ok(());
        }
    }
    Ok(())
}

/// Help texts and zeros of the streams' metrics.
pub(crate) fn describe_metrics() {
    metrics::describe_gauge!(
        STREAMS_GAUGE,
        "Stock event streams (Server-Sent Events) open now."
    );
    metrics::describe_counter!(SENT_METRIC, "Stock events sent on event streams, by kind.");
    metrics::describe_counter!(
        REFUSED_METRIC,
        "Event streams refused with 429 because a cap was reached: the caller's key's (key) or the gateway's (all)."
    );
    metrics::gauge!(STREAMS_GAUGE).set(0.0);
    for cap in ["key", "all"] {
        metrics::counter!(REFUSED_METRIC, "cap" => cap).absolute(0);
    }
    for kind in stockledger_core::StockEventKind::ALL {
        metrics::counter!(SENT_METRIC, "kind" => kind.as_str().to_ascii_lowercase()).absolute(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_id_reads_back_as_the_positions_it_was_written_from() {
        let positions = Positions(BTreeMap::from([(0, 1841), (1, 0), (7, 12)]));
        assert_eq!(positions.id(), "0:1841,1:0,7:12");
        assert_eq!(Positions::parse(&positions.id()), Ok(positions));
        assert_eq!(Positions::parse(""), Ok(Positions::default()));
    }

    #[test]
    fn an_event_id_that_is_not_partitions_and_offsets_is_refused_naming_the_entry() {
        for bad in ["0", "a:1", "0:-1", "-1:0", "0:1,x", "0:1:2"] {
            let error = Positions::parse(bad).expect_err(bad);
            assert!(error.contains("partition:offset"), "{bad}: {error}");
        }
        let many = (0..5000)
            .map(|p| format!("{p}:0"))
            .collect::<Vec<_>>()
            .join(",");
        assert!(Positions::parse(&many).is_err());
    }
}
