//! The strict reading of a datum: it must be exactly the bytes its value
//! encodes to under its writer schema, to its last byte.
//!
//! apache-avro's decoder is lenient at the end of its input: a union index
//! or a string's bytes cut off by the end decode as null, so a `Deduct`
//! datum one byte short (its `location` union index missing) read as a
//! whole deduct. Apache Avro Java refuses such bytes. This walk runs over
//! the bytes first, allocates nothing, and refuses every datum that is not
//! the canonical encoding of one value: cut short, followed by bytes, a
//! varint longer than it needs to be, an index out of range, an array in
//! more than one block, text that is not UTF-8. It is written here because
//! no Avro library for Rust offers such a check.

use std::collections::HashMap;

use apache_avro::schema::{Name, RecordSchema};
use apache_avro::Schema;

/// Why a datum is refused, and where in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Flaw {
    /// The payload ends before the datum does: `needed` more bytes (at
    /// least) were wanted at `at`.
    Short { at: String, needed: usize },
    /// `trailing` bytes follow the datum.
    Trailing(usize),
    /// The bytes read as a value, but not as the one encoding of it that
    /// every Avro writer produces.
    NonCanonical { at: String, what: String },
    /// The bytes are no value of the schema at all.
    Malformed { at: String, what: String },
}

/// What a walk stopped at, its path built on the way out.
struct Stop {
    kind: StopKind,
    path: Vec<String>,
}

enum StopKind {
    Short(usize),
    NonCanonical(String),
    Malformed(String),
}

impl Stop {
    fn new(kind: StopKind) -> Self {
        Self {
            kind,
            path: Vec::new(),
        }
    }

    fn within(mut self, step: impl Into<String>) -> Self {
        self.path.push(step.into());
        self
    }

    fn into_flaw(self) -> Flaw {
        let at = if self.path.is_empty() {
            "the datum".to_owned()
        } else {
            self.path
                .iter()
                .rev()
                .cloned()
                .collect::<Vec<_>>()
                .join(".")
        };
        match self.kind {
            StopKind::Short(needed) => Flaw::Short { at, needed },
            StopKind::NonCanonical(what) => Flaw::NonCanonical { at, what },
            StopKind::Malformed(what) => Flaw::Malformed { at, what },
        }
    }
}

type Step<T> = Result<T, Stop>;

fn malformed<T>(what: impl Into<String>) -> Step<T> {
    Err(Stop::new(StopKind::Malformed(what.into())))
}

fn non_canonical<T>(what: impl Into<String>) -> Step<T> {
    Err(Stop::new(StopKind::NonCanonical(what.into())))
}

/// One writer schema's named types, by full name, for its references.
pub(super) struct Strict {
    named: HashMap<String, Schema>,
}

impl Strict {
    pub(super) fn new(schema: &Schema) -> Self {
        let mut named = HashMap::new();
        collect_named(schema, &mut named);
        Self { named }
    }

    /// Whether `datum` is exactly one canonical datum of `schema`.
    pub(super) fn check(&self, schema: &Schema, datum: &[u8]) -> Result<(), Flaw> {
        let mut bytes = Bytes::new(datum);
        self.walk(schema, &mut bytes).map_err(Stop::into_flaw)?;
        match datum.len() - bytes.at {
            0 => Ok(()),
            trailing => Err(Flaw::Trailing(trailing)),
        }
    }

    /// `datum` (which passes [`Strict::check`]) with every block in the
    /// form apache-avro's `Value` writer gives it, the count positive: an
    /// accepted datum must equal its value written again, block form aside.
    pub(super) fn positive_blocks(&self, schema: &Schema, datum: &[u8]) -> Vec<u8> {
        let mut bytes = Bytes::new(datum);
        bytes.copy = Some(Vec::with_capacity(datum.len()));
        match self.walk(schema, &mut bytes) {
            Ok(()) => bytes.copy.unwrap_or_default(),
            Err(_) => Vec::new(),
        }
    }

    fn walk(&self, schema: &Schema, bytes: &mut Bytes<'_>) -> Step<()> {
        match schema {
            Schema::Null => Ok(()),
            Schema::Boolean => match bytes.take(1)? {
                [0 | 1] => Ok(()),
                [other] => malformed(format!("boolean byte {other:#04x} is neither 0 nor 1")),
                _ => unreachable!("take(1) gives one byte"),
            },
            Schema::Int | Schema::Date | Schema::TimeMillis => bytes.int().map(drop),
            Schema::Long
            | Schema::TimeMicros
            | Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos => bytes.long().map(drop),
            Schema::Float => bytes.take(4).map(drop),
            Schema::Double => bytes.take(8).map(drop),
            Schema::Bytes | Schema::BigDecimal => bytes.sized().map(drop),
            Schema::String => {
                let text = bytes.sized()?;
                match std::str::from_utf8(text) {
                    Ok(_) => Ok(()),
                    Err(e) => malformed(format!("string is not UTF-8 ({e})")),
                }
            }
            Schema::Uuid(_) | Schema::Decimal(_) => {
                malformed("uuid and decimal are not used by the ledger's schemas")
            }
            Schema::Fixed(fixed) | Schema::Duration(fixed) => bytes.take(fixed.size).map(drop),
            Schema::Enum(e) => {
                let index = bytes.int()?;
                if usize::try_from(index).is_ok_and(|i| i < e.symbols.len()) {
                    Ok(())
                } else {
                    malformed(format!(
                        "enum index {index} is out of range (0..{})",
                        e.symbols.len()
                    ))
                }
            }
            Schema::Union(union) => {
                let index = bytes.long()?;
                let variants = union.variants();
                let Some(branch) = usize::try_from(index).ok().and_then(|i| variants.get(i)) else {
                    return malformed(format!(
                        "union index {index} is out of range (0..{})",
                        variants.len()
                    ));
                };
                self.walk(branch, bytes)
                    .map_err(|stop| stop.within(branch_name(branch)))
            }
            Schema::Record(RecordSchema { fields, .. }) => {
                for field in fields {
                    self.walk(&field.schema, bytes)
                        .map_err(|stop| stop.within(field.name.as_str()))?;
                }
                Ok(())
            }
            Schema::Array(array) => self.blocks(bytes, |walk, bytes, i| {
                walk.walk(&array.items, bytes)
                    .map_err(|stop| stop.within(format!("[{i}]")))
            }),
            Schema::Map(map) => self.blocks(bytes, |walk, bytes, i| {
                let key = bytes
                    .sized()
                    .map_err(|stop| stop.within(format!("key {i}")))?;
                if std::str::from_utf8(key).is_err() {
                    return malformed(format!("map key {i} is not UTF-8"));
                }
                walk.walk(&map.types, bytes)
                    .map_err(|stop| stop.within(format!("value {i}")))
            }),
            Schema::Ref { name } => match self.named.get(&full_name(name)) {
                Some(named) => self.walk(named, bytes),
                None => malformed(format!("unknown named type {}", full_name(name))),
            },
        }
    }

    /// An array's or a map's items: one block of `n` items, its count
    /// positive, or negative and followed by the block's size in bytes (as
    /// apache-avro's serializer writes it), then the closing 0; or the 0
    /// alone.
    fn blocks(
        &self,
        bytes: &mut Bytes<'_>,
        item: impl Fn(&Self, &mut Bytes<'_>, usize) -> Step<()>,
    ) -> Step<()> {
        let mark = bytes.written();
        let count = bytes.long()?;
        if count == 0 {
            return Ok(());
        }
        let size = match count {
            ..0 => match usize::try_from(bytes.long()?) {
                Ok(size) => Some(size),
                Err(_) => return malformed("block byte size is negative"),
            },
            _ => None,
        };
        let count = usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX);
        // Each item takes a byte at least (the ledger's schemas have no
        // arrays of null): a count beyond the bytes left is a datum cut
        // short, found without looping over it.
        if count > bytes.left() {
            return Err(Stop::new(StopKind::Short(count - bytes.left())));
        }
        bytes.rewrite_count(mark, count);
        let start = bytes.at;
        for i in 0..count {
            item(self, bytes, i)?;
        }
        if let Some(size) = size.filter(|&size| size != bytes.at - start) {
            return malformed(format!(
                "block byte size {size} is not its items' {} bytes",
                bytes.at - start
            ));
        }
        match bytes.long()? {
            0 => Ok(()),
            _ => non_canonical("items in more than one block"),
        }
    }
}

/// The name a union branch goes by in a path: a record's or enum's own
/// name, else its type.
fn branch_name(schema: &Schema) -> String {
    match schema {
        Schema::Record(r) => r.name.name().to_owned(),
        Schema::Enum(e) => e.name.name().to_owned(),
        Schema::Ref { name } => name.name().to_owned(),
        other => format!("{:?}", apache_avro::schema::SchemaKind::from(other)).to_lowercase(),
    }
}

fn full_name(name: &Name) -> String {
    name.fullname(None)
}

fn collect_named(schema: &Schema, named: &mut HashMap<String, Schema>) {
    match schema {
        Schema::Record(r) => {
            named.insert(full_name(&r.name), schema.clone());
            for field in &r.fields {
                collect_named(&field.schema, named);
            }
        }
        Schema::Enum(e) => {
            named.insert(full_name(&e.name), schema.clone());
        }
        Schema::Fixed(f) => {
            named.insert(full_name(&f.name), schema.clone());
        }
        Schema::Union(u) => u.variants().iter().for_each(|v| collect_named(v, named)),
        Schema::Array(a) => collect_named(&a.items, named),
        Schema::Map(m) => collect_named(&m.types, named),
        _ => {}
    }
}

/// The datum's bytes and how far the walk has read; for
/// [`Strict::positive_blocks`], also the bytes read so far with every block
/// count made positive.
struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
    copy: Option<Vec<u8>>,
}

impl<'a> Bytes<'a> {
    fn new(data: &'a [u8]) -> Self {
        Self {
            data,
            at: 0,
            copy: None,
        }
    }

    fn written(&self) -> usize {
        self.copy.as_ref().map_or(0, Vec::len)
    }

    /// In the copy, the block count and size read since `mark` become the
    /// positive count alone.
    fn rewrite_count(&mut self, mark: usize, count: usize) {
        if let Some(copy) = &mut self.copy {
            copy.truncate(mark);
            let mut z = (count as u64) << 1;
            while z > 0x7F {
                copy.push((z as u8 & 0x7F) | 0x80);
                z >>= 7;
            }
            copy.push(z as u8);
        }
    }

    fn left(&self) -> usize {
        self.data.len() - self.at
    }

    fn take(&mut self, n: usize) -> Step<&'a [u8]> {
        if n > self.left() {
            return Err(Stop::new(StopKind::Short(n - self.left())));
        }
        let taken = &self.data[self.at..self.at + n];
        self.at += n;
        if let Some(copy) = &mut self.copy {
            copy.extend_from_slice(taken);
        }
        Ok(taken)
    }

    /// A varint as written, before zig-zag: at most ten bytes, none of them
    /// a redundant high zero group.
    fn varint(&mut self) -> Step<u64> {
        let mut value = 0u64;
        for i in 0..10 {
            let [byte] = self.take(1)? else {
                unreachable!("take(1) gives one byte")
            };
            let byte = *byte;
            if i == 9 && byte > 1 {
                return malformed("varint overflows 64 bits");
            }
            value |= u64::from(byte & 0x7F) << (7 * i);
            if byte & 0x80 == 0 {
                if i > 0 && byte == 0 {
                    return non_canonical("varint has redundant trailing zero bytes");
                }
                return Ok(value);
            }
        }
        malformed("varint is longer than ten bytes")
    }

    fn long(&mut self) -> Step<i64> {
        let z = self.varint()?;
        Ok(((z >> 1) as i64) ^ -((z & 1) as i64))
    }

    fn int(&mut self) -> Step<i32> {
        let n = self.long()?;
        match i32::try_from(n) {
            Ok(n) => Ok(n),
            Err(_) => malformed(format!("int {n} is out of range")),
        }
    }

    /// The bytes of a length-prefixed string or bytes.
    fn sized(&mut self) -> Step<&'a [u8]> {
        let len = self.long()?;
        match usize::try_from(len) {
            Ok(len) => self.take(len),
            Err(_) => malformed(format!("length {len} is negative")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(json: &str) -> Schema {
        Schema::parse_str(json).unwrap()
    }

    const DEDUCT: &str = r#"{"type":"record","name":"D","fields":[
        {"name":"order_id","type":"string"},
        {"name":"quantity","type":"long"},
        {"name":"units","type":{"type":"array","items":"string"}},
        {"name":"location","type":["null","string"]}]}"#;

    fn check(json: &str, datum: &[u8]) -> Result<(), Flaw> {
        let s = schema(json);
        Strict::new(&s).check(&s, datum)
    }

    #[test]
    fn the_canonical_datum_passes_and_every_flaw_is_named_with_its_place() {
        // "o1", 3, [], null
        let good = [4, b'o', b'1', 6, 0, 0];
        assert_eq!(check(DEDUCT, &good), Ok(()));
        assert_eq!(
            check(DEDUCT, &good[..5]),
            Err(Flaw::Short {
                at: "location".into(),
                needed: 1
            })
        );
        assert_eq!(
            check(DEDUCT, &[4, b'o']),
            Err(Flaw::Short {
                at: "order_id".into(),
                needed: 1
            })
        );
        assert_eq!(
            check(DEDUCT, &[4, b'o', b'1', 6, 0, 0, 9]),
            Err(Flaw::Trailing(1))
        );
        assert_eq!(
            check(DEDUCT, &[4, b'o', b'1', 0x86, 0, 0, 0]),
            Err(Flaw::NonCanonical {
                at: "quantity".into(),
                what: "varint has redundant trailing zero bytes".into()
            })
        );
        assert_eq!(
            check(DEDUCT, &[4, b'o', b'1', 6, 0, 4]),
            Err(Flaw::Malformed {
                at: "location".into(),
                what: "union index 2 is out of range (0..2)".into()
            })
        );
        assert!(matches!(
            check(DEDUCT, &[4, 0xff, b'1', 6, 0, 0]),
            Err(Flaw::Malformed { at, .. }) if at == "order_id"
        ));
        // Two blocks of one unit each, where one block of two is canonical.
        let two_blocks = [4, b'o', b'1', 6, 2, 2, b'A', 2, 2, b'B', 0, 0];
        assert!(matches!(
            check(DEDUCT, &two_blocks),
            Err(Flaw::NonCanonical { at, .. }) if at == "units"
        ));
        let one_block = [4, b'o', b'1', 6, 4, 2, b'A', 2, b'B', 0, 0];
        assert_eq!(check(DEDUCT, &one_block), Ok(()));
        // The same block as apache-avro's serializer writes it: count -2,
        // then its size, 4 bytes.
        let sized = [4, b'o', b'1', 6, 3, 8, 2, b'A', 2, b'B', 0, 0];
        assert_eq!(check(DEDUCT, &sized), Ok(()));
        let s = schema(DEDUCT);
        assert_eq!(Strict::new(&s).positive_blocks(&s, &sized), one_block);
        let wrong_size = [4, b'o', b'1', 6, 3, 6, 2, b'A', 2, b'B', 0, 0];
        assert!(matches!(
            check(DEDUCT, &wrong_size),
            Err(Flaw::Malformed { at, .. }) if at == "units"
        ));
        let in_a_unit = [4, b'o', b'1', 6, 4, 2, b'A', 2];
        assert_eq!(
            check(DEDUCT, &in_a_unit),
            Err(Flaw::Short {
                at: "units.[1]".into(),
                needed: 1
            })
        );
    }

    #[test]
    fn varints_are_read_as_java_does_and_refused_where_they_are_not_canonical() {
        let long = r#""long""#;
        assert_eq!(check(long, &[0x7f]), Ok(()));
        assert_eq!(check(long, &[0x80, 0x01]), Ok(()));
        // i64::MIN and i64::MAX take ten bytes, the last one 1.
        let mut max = vec![0xfe; 9];
        max.push(0x01);
        assert_eq!(check(long, &max), Ok(()));
        let mut over = vec![0xff; 9];
        over.push(0x02);
        assert!(matches!(check(long, &over), Err(Flaw::Malformed { .. })));
        assert!(matches!(
            check(long, &[0xff; 11]),
            Err(Flaw::Malformed { .. })
        ));
        assert!(matches!(
            check(r#""int""#, &[0xff, 0xff, 0xff, 0xff, 0x1f]),
            Err(Flaw::Malformed { .. })
        ));
        assert!(matches!(
            check(r#""boolean""#, &[2]),
            Err(Flaw::Malformed { .. })
        ));
    }
}
