//! Archived rows to a file for offline analysis: CSV (with a header) or
//! Parquet (one row group per 64k rows, Snappy-compressed).
//!
//! Rows stream from PostgreSQL as they are written, so memory holds one row
//! group at most. They go to a hidden `.NAME.partial-PID` file beside the
//! target, which takes the target's name only once complete and synced, and
//! never over an existing file: a failed or killed export leaves no file
//! that reads as a complete, shorter one.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::TryStreamExt;
use parquet::basic::Compression;
use parquet::data_type::{ByteArray, ByteArrayType, Int32Type, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use sqlx::PgPool;
use stockledger_core::report::printable;

use crate::query::{self, Entry};

/// The file formats `export` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Csv,
    Parquet,
}

impl std::str::FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "csv" => Ok(Self::Csv),
            "parquet" => Ok(Self::Parquet),
            other => Err(format!("{other:?} is not a format (csv or parquet)")),
        }
    }
}

/// The columns of an export, in order; `occurred_at` is RFC 3339 in CSV and
/// a UTC timestamp (milliseconds) in Parquet; `events` is the stock events'
/// names, space-separated. (A deduct's named units are not exported.)
pub const COLUMNS: [&str; 23] = [
    "topic",
    "partition",
    "log_offset",
    "sku",
    "command",
    "order_id",
    "adjustment_id",
    "quantity",
    "restock_mode",
    "result",
    "delta",
    "available_after",
    "total_after",
    "reason",
    "rollback_reason",
    "command_id",
    "occurred_at",
    "user_id",
    "expires_at",
    "basket_id",
    "location",
    "to_location",
    "events",
];

/// Rows per Parquet row group.
const ROW_GROUP: usize = 65_536;

const PARQUET_SCHEMA: &str = "message ledger_entry {
    REQUIRED BYTE_ARRAY topic (UTF8);
    REQUIRED INT32 partition;
    REQUIRED INT64 log_offset;
    REQUIRED BYTE_ARRAY sku (UTF8);
    OPTIONAL BYTE_ARRAY command (UTF8);
    OPTIONAL BYTE_ARRAY order_id (UTF8);
    OPTIONAL BYTE_ARRAY adjustment_id (UTF8);
    OPTIONAL INT64 quantity;
    OPTIONAL BYTE_ARRAY restock_mode (UTF8);
    REQUIRED BYTE_ARRAY result (UTF8);
    REQUIRED INT64 delta;
    OPTIONAL INT64 available_after;
    OPTIONAL INT64 total_after;
    OPTIONAL BYTE_ARRAY reason (UTF8);
    OPTIONAL BYTE_ARRAY rollback_reason (UTF8);
    OPTIONAL BYTE_ARRAY command_id (UTF8);
    REQUIRED INT64 occurred_at (TIMESTAMP(MILLIS, true));
    OPTIONAL BYTE_ARRAY user_id (UTF8);
    OPTIONAL INT64 expires_at (TIMESTAMP(MILLIS, true));
    OPTIONAL BYTE_ARRAY basket_id (UTF8);
    OPTIONAL BYTE_ARRAY location (UTF8);
    OPTIONAL BYTE_ARRAY to_location (UTF8);
    OPTIONAL BYTE_ARRAY events (UTF8);
}";

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("--out: {path} already exists; an export never overwrites a file")]
    Exists { path: PathBuf },
    #[error("--out: cannot create {path}")]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Query(#[from] query::QueryError),
    #[error("reading the archive failed")]
    Database(#[from] sqlx::Error),
    #[error("writing {path} failed")]
    Write {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Writes the archived rows of command topic `topic` with
/// `since <= occurred_at < until` (ms since the epoch), by `occurred_at` then
/// log position, to a new file at `path`. Returns how many rows it wrote.
pub async fn export(
    pool: &PgPool,
    topic: &str,
    since_ms: i64,
    until_ms: i64,
    format: Format,
    path: &Path,
    on_rows: impl FnMut(u64) + Send,
) -> Result<u64, ExportError> {
    query::check_range(Some(since_ms), Some(until_ms))?;
    let exists = || ExportError::Exists {
        path: path.to_owned(),
    };
    if path.exists() {
        return Err(exists());
    }
    let name = path
        .file_name()
        .map_or_else(|| "export".into(), |n| n.to_string_lossy().into_owned());
    let partial = path.with_file_name(format!(".{name}.partial-{}", std::process::id()));
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&partial)
        .map_err(|source| ExportError::Create {
            path: path.to_owned(),
            source,
        })?;
    let written = write_rows(
        pool,
        topic,
        (since_ms, until_ms),
        format,
        path,
        file,
        on_rows,
    )
    .await
    .and_then(|rows| {
        // A hard link takes the name only if nothing has it.
        std::fs::hard_link(&partial, path).map_err(|source| match source.kind() {
            std::io::ErrorKind::AlreadyExists => exists(),
            _ => ExportError::Create {
                path: path.to_owned(),
                source,
            },
        })?;
        Ok(rows)
    });
    let _ = std::fs::remove_file(&partial);
    written
}

/// How often (in rows) an export says how far it is.
const ROWS_PER_REPORT: u64 = 10_000;

async fn write_rows(
    pool: &PgPool,
    topic: &str,
    (since_ms, until_ms): (i64, i64),
    format: Format,
    path: &Path,
    file: File,
    mut on_rows: impl FnMut(u64) + Send,
) -> Result<u64, ExportError> {
    let write_error = |source: Box<dyn std::error::Error + Send + Sync>| ExportError::Write {
        path: path.to_owned(),
        source,
    };
    let mut sink: Box<dyn Sink> = match format {
        Format::Csv => Box::new(CsvSink::new(file).map_err(|e| write_error(e.into()))?),
        Format::Parquet => Box::new(ParquetSink::new(file).map_err(|e| write_error(e.into()))?),
    };
    let mut rows = query::entries_between(pool, topic, since_ms, until_ms);
    let mut count = 0u64;
    while let Some(entry) = rows.try_next().await? {
        sink.push(entry).map_err(write_error)?;
        count += 1;
        if count.is_multiple_of(ROWS_PER_REPORT) {
            on_rows(count);
        }
    }
    on_rows(count);
    sink.finish().map_err(write_error)?;
    Ok(count)
}

type SinkResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

trait Sink {
    fn push(&mut self, entry: Entry) -> SinkResult;
    fn finish(self: Box<Self>) -> SinkResult;
}

struct CsvSink {
    writer: csv::Writer<BufWriter<File>>,
}

impl CsvSink {
    fn new(file: File) -> Result<Self, csv::Error> {
        let mut writer = csv::Writer::from_writer(BufWriter::new(file));
        writer.write_record(COLUMNS)?;
        Ok(Self { writer })
    }
}

impl Sink for CsvSink {
    fn push(&mut self, e: Entry) -> SinkResult {
        // Escaped as `history` and `report` print them: an invalid record's
        // SKU is the producer's key, whatever bytes it held.
        let text = |v: &Option<String>| printable(v.as_deref().unwrap_or_default()).into_owned();
        let number = |v: Option<i64>| v.map(|n| n.to_string()).unwrap_or_default();
        self.writer.write_record([
            printable(&e.topic).into_owned(),
            e.partition.to_string(),
            e.log_offset.to_string(),
            printable(&e.sku).into_owned(),
            text(&e.command),
            text(&e.order_id),
            text(&e.adjustment_id),
            number(e.quantity),
            text(&e.restock_mode),
            printable(&e.result).into_owned(),
            e.delta.to_string(),
            number(e.available_after),
            number(e.total_after),
            text(&e.reason),
            text(&e.rollback_reason),
            text(&e.command_id),
            e.occurred_at,
            text(&e.user_id),
            text(&e.expires_at),
            text(&e.basket_id),
            text(&e.location),
            text(&e.to_location),
            text(&events_text(&e.events)),
        ])?;
        Ok(())
    }

    fn finish(self: Box<Self>) -> SinkResult {
        let mut inner = self.writer.into_inner().map_err(|e| e.into_error())?;
        inner.flush()?;
        inner.get_ref().sync_all()?;
        Ok(())
    }
}

/// A row group being gathered, one vector per column (optional columns hold
/// only their present values, with definition levels beside them).
#[derive(Default)]
struct Group {
    rows: usize,
    topic: Vec<ByteArray>,
    partition: Vec<i32>,
    log_offset: Vec<i64>,
    sku: Vec<ByteArray>,
    command: Optional<ByteArray>,
    order_id: Optional<ByteArray>,
    adjustment_id: Optional<ByteArray>,
    quantity: Optional<i64>,
    restock_mode: Optional<ByteArray>,
    result: Vec<ByteArray>,
    delta: Vec<i64>,
    available_after: Optional<i64>,
    total_after: Optional<i64>,
    reason: Optional<ByteArray>,
    rollback_reason: Optional<ByteArray>,
    command_id: Optional<ByteArray>,
    occurred_at: Vec<i64>,
    user_id: Optional<ByteArray>,
    expires_at: Optional<i64>,
    basket_id: Optional<ByteArray>,
    location: Optional<ByteArray>,
    to_location: Optional<ByteArray>,
    events: Optional<ByteArray>,
}

struct Optional<T> {
    values: Vec<T>,
    levels: Vec<i16>,
}

impl<T> Default for Optional<T> {
    fn default() -> Self {
        Self {
            values: Vec::new(),
            levels: Vec::new(),
        }
    }
}

impl<T> Optional<T> {
    fn push(&mut self, value: Option<T>) {
        self.levels.push(i16::from(value.is_some()));
        self.values.extend(value);
    }
}

/// A row's stock events as one text: their names, space-separated.
fn events_text(events: &Option<Vec<String>>) -> Option<String> {
    events.as_ref().map(|e| e.join(" "))
}

fn bytes(s: String) -> ByteArray {
    ByteArray::from(s.into_bytes())
}

struct ParquetSink {
    writer: SerializedFileWriter<BufWriter<File>>,
    group: Group,
}

impl ParquetSink {
    fn new(file: File) -> Result<Self, parquet::errors::ParquetError> {
        let schema = Arc::new(parse_message_type(PARQUET_SCHEMA)?);
        let properties = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_created_by(concat!("stockledger ", env!("CARGO_PKG_VERSION")).to_owned())
            .build();
        let writer = SerializedFileWriter::new(BufWriter::new(file), schema, Arc::new(properties))?;
        Ok(Self {
            writer,
            group: Group::default(),
        })
    }

    fn flush_group(&mut self) -> Result<(), parquet::errors::ParquetError> {
        let g = std::mem::take(&mut self.group);
        if g.rows == 0 {
            return Ok(());
        }
        let mut rows = self.writer.next_row_group()?;
        macro_rules! column {
            ($kind:ty, $values:expr, $levels:expr) => {{
                let Some(mut column) = rows.next_column()? else {
                    return Err(parquet::errors::ParquetError::General(
                        "the schema has fewer columns than an export writes".into(),
                    ));
                };
                column
                    .typed::<$kind>()
                    .write_batch(&$values, $levels, None)?;
                column.close()?;
            }};
        }
        column!(ByteArrayType, g.topic, None);
        column!(Int32Type, g.partition, None);
        column!(Int64Type, g.log_offset, None);
        column!(ByteArrayType, g.sku, None);
        column!(ByteArrayType, g.command.values, Some(&g.command.levels));
        column!(ByteArrayType, g.order_id.values, Some(&g.order_id.levels));
        column!(
            ByteArrayType,
            g.adjustment_id.values,
            Some(&g.adjustment_id.levels)
        );
        column!(Int64Type, g.quantity.values, Some(&g.quantity.levels));
        column!(
            ByteArrayType,
            g.restock_mode.values,
            Some(&g.restock_mode.levels)
        );
        column!(ByteArrayType, g.result, None);
        column!(Int64Type, g.delta, None);
        column!(
            Int64Type,
            g.available_after.values,
            Some(&g.available_after.levels)
        );
        column!(Int64Type, g.total_after.values, Some(&g.total_after.levels));
        column!(ByteArrayType, g.reason.values, Some(&g.reason.levels));
        column!(
            ByteArrayType,
            g.rollback_reason.values,
            Some(&g.rollback_reason.levels)
        );
        column!(
            ByteArrayType,
            g.command_id.values,
            Some(&g.command_id.levels)
        );
        column!(Int64Type, g.occurred_at, None);
        column!(ByteArrayType, g.user_id.values, Some(&g.user_id.levels));
        column!(Int64Type, g.expires_at.values, Some(&g.expires_at.levels));
        column!(ByteArrayType, g.basket_id.values, Some(&g.basket_id.levels));
        column!(ByteArrayType, g.location.values, Some(&g.location.levels));
        column!(
            ByteArrayType,
            g.to_location.values,
            Some(&g.to_location.levels)
        );
        column!(ByteArrayType, g.events.values, Some(&g.events.levels));
        rows.close()?;
        Ok(())
    }
}

impl Sink for ParquetSink {
    fn push(&mut self, e: Entry) -> SinkResult {
        let g = &mut self.group;
        g.rows += 1;
        g.topic.push(bytes(e.topic));
        g.partition.push(e.partition);
        g.log_offset.push(e.log_offset);
        g.sku.push(bytes(e.sku));
        g.command.push(e.command.map(bytes));
        g.order_id.push(e.order_id.map(bytes));
        g.adjustment_id.push(e.adjustment_id.map(bytes));
        g.quantity.push(e.quantity);
        g.restock_mode.push(e.restock_mode.map(bytes));
        g.result.push(bytes(e.result));
        g.delta.push(e.delta);
        g.available_after.push(e.available_after);
        g.total_after.push(e.total_after);
        g.reason.push(e.reason.map(bytes));
        g.rollback_reason.push(e.rollback_reason.map(bytes));
        g.command_id.push(e.command_id.map(bytes));
        g.occurred_at.push(e.occurred_at_ms);
        g.user_id.push(e.user_id.map(bytes));
        g.expires_at.push(e.expires_at_ms);
        g.basket_id.push(e.basket_id.map(bytes));
        g.location.push(e.location.map(bytes));
        g.to_location.push(e.to_location.map(bytes));
        g.events.push(events_text(&e.events).map(bytes));
        if g.rows >= ROW_GROUP {
            self.flush_group()?;
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> SinkResult {
        self.flush_group()?;
        let mut inner = self.writer.into_inner()?;
        inner.flush()?;
        inner.get_ref().sync_all()?;
        Ok(())
    }
}
