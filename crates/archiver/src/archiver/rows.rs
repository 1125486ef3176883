//! A page's rows: decoded from its messages into columns, then written
//! by a binary `COPY` or, when a row is archived already, by one `INSERT
//! … SELECT FROM UNNEST(…) ON CONFLICT DO NOTHING`.

use std::collections::HashMap;

use rdkafka::message::{Headers, Message, OwnedMessage};
use sqlx::PgConnection;
use stockledger_core::codec;
use stockledger_core::command::check_instant;
use stockledger_core::report::Chain;
use stockledger_core::trace::traceparent_among;
use stockledger_core::Outcome;
use tracing::error;

/// What a page adds to the archive: its rows not archived yet, the next
/// offset of each partition it covers, and how many messages could not be
/// decoded (logged, never archived).
#[derive(Debug, Default)]
pub(super) struct PageRows {
    pub(super) columns: Columns,
    pub(super) next_offsets: HashMap<i32, i64>,
    pub(super) undecodable: u64,
}

/// The rows of `page`, skipping messages that `progress` (next offset per
/// partition) says an earlier page archived.
pub(super) fn page_rows(page: &[OwnedMessage], progress: &HashMap<i32, i64>) -> PageRows {
    let mut rows = PageRows::default();
    for message in page {
        let (partition, offset) = (message.partition(), message.offset());
        if progress.get(&partition).is_some_and(|&next| offset < next) {
            continue; // archived by an earlier page
        }
        let next = rows.next_offsets.entry(partition).or_insert(0);
        *next = (*next).max(offset + 1);
        // The applier writes no outcome stamped outside the instants every
        // part of the ledger holds; another writer's would stop every page.
        let decoded =
            codec::decode_outcome(message.payload().unwrap_or_default()).and_then(|outcome| {
                match check_instant("occurred_at", outcome.occurred_at) {
                    Ok(_) => Ok(outcome),
                    Err(e) => Err(e.into()),
                }
            });
        match decoded {
            Ok(outcome) => rows.columns.push(outcome, traceparent_of(message)),
            Err(e) => {
                rows.undecodable += 1;
                error!(topic = message.topic(), partition, offset, error = %Chain(&e), "undecodable outcome message; not archived");
            }
        }
    }
    rows
}

/// The outcome's W3C `traceparent` header, if it carries a valid one.
fn traceparent_of(message: &OwnedMessage) -> Option<String> {
    let headers = message.headers()?;
    traceparent_among(headers.iter().map(|h| (h.key, h.value))).map(str::to_owned)
}

/// The page as columns, ready for `UNNEST`.
#[derive(Debug, Default)]
pub(super) struct Columns {
    pub(super) topic: Vec<String>,
    pub(super) partition: Vec<i32>,
    pub(super) offset: Vec<i64>,
    pub(super) sku: Vec<String>,
    pub(super) command: Vec<Option<String>>,
    pub(super) command_id: Vec<Option<String>>,
    pub(super) order_id: Vec<Option<String>>,
    pub(super) adjustment_id: Vec<Option<String>>,
    pub(super) quantity: Vec<Option<i64>>,
    pub(super) result: Vec<String>,
    pub(super) delta: Vec<i64>,
    /// The stock after the record (`None` for a record not decided on
    /// it: see `Decision::figures`).
    pub(super) available_after: Vec<Option<i64>>,
    pub(super) total_after: Vec<Option<i64>>,
    pub(super) reason: Vec<Option<String>>,
    pub(super) occurred_at_ms: Vec<i64>,
    pub(super) restock_mode: Vec<Option<&'static str>>,
    pub(super) rollback_reason: Vec<Option<String>>,
    pub(super) user_id: Vec<Option<String>>,
    pub(super) expires_at_ms: Vec<Option<i64>>,
    pub(super) traceparent: Vec<Option<String>>,
    pub(super) basket_id: Vec<Option<String>>,
    /// The named units, one per line (`None` when there are none).
    pub(super) units: Vec<Option<String>>,
    pub(super) location: Vec<Option<String>>,
    pub(super) to_location: Vec<Option<String>>,
    /// The stock events, one per line (`None` when there are none).
    pub(super) events: Vec<Option<String>>,
    /// The sale window a window command set.
    pub(super) opens_at_ms: Vec<Option<i64>>,
    pub(super) closes_at_ms: Vec<Option<i64>>,
}

/// PostgreSQL's text cannot hold NUL; it stands in the archive as `␀`
/// (U+2400, the symbol for null). Commands with a NUL in their text are
/// refused since the strict reading, but outcomes an older release wrote
/// may hold one, and one such row must not stop the archive.
pub(super) fn storable(text: String) -> String {
    if text.contains('\0') {
        text.replace('\0', "\u{2400}")
    } else {
        text
    }
}

fn storable_opt(text: Option<String>) -> Option<String> {
    text.map(storable)
}

impl Columns {
    fn push(&mut self, o: Outcome, traceparent: Option<String>) {
        self.traceparent.push(traceparent);
        self.topic.push(storable(o.position.topic));
        self.partition.push(o.position.partition);
        self.offset.push(o.position.offset);
        self.sku.push(storable(o.sku));
        self.command.push(o.kind.map(|k| k.as_str().to_owned()));
        self.command_id.push(storable_opt(o.command_id));
        self.order_id.push(storable_opt(o.order_id));
        self.adjustment_id.push(storable_opt(o.adjustment_id));
        self.quantity.push(o.quantity);
        self.result.push(o.decision.result.as_str().to_owned());
        self.delta.push(o.decision.delta);
        let figures = o.decision.figures();
        self.available_after.push(figures.map(|f| f.available));
        self.total_after.push(figures.map(|f| f.total));
        self.reason.push(storable_opt(o.decision.reason));
        self.location.push(storable_opt(o.decision.location));
        self.to_location.push(storable_opt(o.to_location));
        let events: Vec<&str> = o.decision.events.kinds().map(|k| k.as_str()).collect();
        self.events
            .push((!events.is_empty()).then(|| events.join("\n")));
        self.occurred_at_ms.push(o.occurred_at);
        self.restock_mode.push(o.restock_mode.map(|m| m.as_str()));
        self.rollback_reason.push(storable_opt(o.rollback_reason));
        self.user_id.push(storable_opt(o.user_id));
        self.expires_at_ms.push(o.expires_at);
        self.basket_id.push(storable_opt(o.basket_id));
        self.units
            .push((!o.units.is_empty()).then(|| storable(o.units.join("\n"))));
        self.opens_at_ms.push(o.opens_at);
        self.closes_at_ms.push(o.closes_at);
    }
}

/// How a page's rows go in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Via {
    Copy,
    Insert,
}

/// Whether `e` is a unique violation: a row of the page is archived already.
pub(super) fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().is_some_and(|c| c == "23505"))
}

/// Inserts the page's rows, skipping any already archived (`ON CONFLICT DO
/// NOTHING` on the log position).
pub(super) async fn insert_rows(
    conn: &mut PgConnection,
    columns: &Columns,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO ledger_entries (topic, partition, log_offset, sku, command, command_id,
             order_id, adjustment_id, quantity, result, delta, available_after, total_after,
             reason, occurred_at, restock_mode, rollback_reason, user_id, expires_at, traceparent,
             basket_id, units, location, to_location, events, opens_at, closes_at)
         SELECT topic, partition, log_offset, sku, command, command_id, order_id,
             adjustment_id, quantity, result, delta, available_after, total_after, reason,
             timestamptz 'epoch' + occurred_ms * interval '1 millisecond', restock_mode,
             rollback_reason, user_id,
             timestamptz 'epoch' + expires_ms * interval '1 millisecond', traceparent, basket_id,
             string_to_array(units, E'\\n'), location, to_location,
             string_to_array(events, E'\\n'),
             timestamptz 'epoch' + opens_ms * interval '1 millisecond',
             timestamptz 'epoch' + closes_ms * interval '1 millisecond'
         FROM UNNEST($1::text[], $2::int[], $3::bigint[], $4::text[], $5::text[], $6::text[],
             $7::text[], $8::text[], $9::bigint[], $10::text[], $11::bigint[], $12::bigint[],
             $13::bigint[], $14::text[], $15::bigint[], $16::text[], $17::text[], $18::text[],
             $19::bigint[], $20::text[], $21::text[], $22::text[], $23::text[], $24::text[],
             $25::text[], $26::bigint[], $27::bigint[])
             AS page(topic, partition, log_offset, sku, command, command_id, order_id,
                 adjustment_id, quantity, result, delta, available_after, total_after, reason,
                 occurred_ms, restock_mode, rollback_reason, user_id, expires_ms, traceparent,
                 basket_id, units, location, to_location, events, opens_ms, closes_ms)
         ON CONFLICT DO NOTHING",
    )
    .bind(&columns.topic)
    .bind(&columns.partition)
    .bind(&columns.offset)
    .bind(&columns.sku)
    .bind(&columns.command)
    .bind(&columns.command_id)
    .bind(&columns.order_id)
    .bind(&columns.adjustment_id)
    .bind(&columns.quantity)
    .bind(&columns.result)
    .bind(&columns.delta)
    .bind(&columns.available_after)
    .bind(&columns.total_after)
    .bind(&columns.reason)
    .bind(&columns.occurred_at_ms)
    .bind(&columns.restock_mode)
    .bind(&columns.rollback_reason)
    .bind(&columns.user_id)
    .bind(&columns.expires_at_ms)
    .bind(&columns.traceparent)
    .bind(&columns.basket_id)
    .bind(&columns.units)
    .bind(&columns.location)
    .bind(&columns.to_location)
    .bind(&columns.events)
    .bind(&columns.opens_at_ms)
    .bind(&columns.closes_at_ms)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The columns [`copy_rows`] writes, in the order it writes them.
pub(super) const COPY: &str =
    "COPY ledger_entries (topic, partition, log_offset, sku, command, command_id,
    order_id, adjustment_id, quantity, result, delta, available_after, total_after, reason,
    occurred_at, restock_mode, rollback_reason, user_id, expires_at, traceparent, basket_id,
    units, location, to_location, events, opens_at, closes_at)
    FROM STDIN (FORMAT binary)";

/// Writes the page's rows with a binary `COPY`: no statement to plan, no
/// per-row conflict check. A row already archived (possible only when two
/// archivers briefly hold the same partition) fails the whole page with a
/// unique violation; the page is then written again with [`insert_rows`].
pub(super) async fn copy_rows(
    conn: &mut PgConnection,
    columns: &Columns,
) -> Result<(), sqlx::Error> {
    let mut copy = conn.copy_in_raw(COPY).await?;
    if let Err(e) = copy.send(binary_copy(columns)).await {
        return Err(match copy.abort("page not sent").await {
            Ok(()) => e,
            Err(abort) => abort,
        });
    }
    copy.finish().await?;
    Ok(())
}

/// Microseconds between the Unix epoch and PostgreSQL's, 2000-01-01 UTC.
pub(super) const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// The page in PostgreSQL's binary `COPY` format, columns as in [`COPY`].
pub(super) fn binary_copy(c: &Columns) -> Vec<u8> {
    fn text(out: &mut Vec<u8>, value: Option<&str>) {
        match value {
            Some(v) => {
                out.extend_from_slice(&(v.len() as i32).to_be_bytes());
                out.extend_from_slice(v.as_bytes());
            }
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    /// A one-dimensional `text[]` of the names in `joined` (one per
    /// line), in the array's binary form: dimensions, no nulls, element
    /// type `text` (oid 25), then each element as a length and its bytes.
    fn text_array(out: &mut Vec<u8>, joined: Option<&str>) {
        let Some(joined) = joined else {
            out.extend_from_slice(&(-1i32).to_be_bytes());
            return;
        };
        let names: Vec<&str> = joined.split('\n').collect();
        let mut array = Vec::with_capacity(20 + joined.len() + 4 * names.len());
        for header in [1i32, 0, 25, names.len() as i32, 1] {
            array.extend_from_slice(&header.to_be_bytes());
        }
        for name in names {
            text(&mut array, Some(name));
        }
        out.extend_from_slice(&(array.len() as i32).to_be_bytes());
        out.extend_from_slice(&array);
    }
    fn int8(out: &mut Vec<u8>, value: Option<i64>) {
        match value {
            Some(v) => {
                out.extend_from_slice(&8i32.to_be_bytes());
                out.extend_from_slice(&v.to_be_bytes());
            }
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    // An instant PostgreSQL cannot hold (beyond the range of i64
    // microseconds) is sent as one it refuses, as the SQL form would be.
    let micros = |ms: i64| {
        ms.checked_mul(1000)
            .and_then(|us| us.checked_sub(PG_EPOCH_MICROS))
            .unwrap_or(i64::MAX)
    };
    let mut out = Vec::with_capacity(64 + c.offset.len() * 256);
    out.extend_from_slice(b"PGCOPY\n\xff\r\n\0");
    out.extend_from_slice(&0i32.to_be_bytes()); // flags
    out.extend_from_slice(&0i32.to_be_bytes()); // no header extension
    for i in 0..c.offset.len() {
        out.extend_from_slice(&27i16.to_be_bytes());
        text(&mut out, Some(&c.topic[i]));
        out.extend_from_slice(&4i32.to_be_bytes());
        out.extend_from_slice(&c.partition[i].to_be_bytes());
        int8(&mut out, Some(c.offset[i]));
        text(&mut out, Some(&c.sku[i]));
        text(&mut out, c.command[i].as_deref());
        text(&mut out, c.command_id[i].as_deref());
        text(&mut out, c.order_id[i].as_deref());
        text(&mut out, c.adjustment_id[i].as_deref());
        int8(&mut out, c.quantity[i]);
        text(&mut out, Some(&c.result[i]));
        int8(&mut out, Some(c.delta[i]));
        int8(&mut out, c.available_after[i]);
        int8(&mut out, c.total_after[i]);
        text(&mut out, c.reason[i].as_deref());
        int8(&mut out, Some(micros(c.occurred_at_ms[i])));
        text(&mut out, c.restock_mode[i]);
        text(&mut out, c.rollback_reason[i].as_deref());
        text(&mut out, c.user_id[i].as_deref());
        int8(&mut out, c.expires_at_ms[i].map(micros));
        text(&mut out, c.traceparent[i].as_deref());
        text(&mut out, c.basket_id[i].as_deref());
        text_array(&mut out, c.units[i].as_deref());
        text(&mut out, c.location[i].as_deref());
        text(&mut out, c.to_location[i].as_deref());
        text_array(&mut out, c.events[i].as_deref());
        int8(&mut out, c.opens_at_ms[i].map(micros));
        int8(&mut out, c.closes_at_ms[i].map(micros));
    }
    out.extend_from_slice(&(-1i16).to_be_bytes());
    out
}
