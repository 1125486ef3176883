//! One SKU of a batch on its way through the applier: the part of its
//! state the batch's records read, loaded from Redis; every record decided
//! by the core's machine; and the fields those decisions changed, as the
//! machine's change sets name them, ready for the fenced write (see
//! `fence`, and `lua/write.lua` on a cluster).
//!
//! A SKU's state in Redis can be large (every order it ever took), and a
//! batch reads little of it: the stock hash, the orders its records name,
//! their users' counters and named units, the restocks' adjustment ids and,
//! for a redelivered record, its stored decision. [`SkuStage::wanted`]
//! names those fields, [`SkuStage::load`] takes them in, and the machine
//! decides on that part as it would on the whole: it looks everything up
//! by name.

use foldhash::{HashMap, HashMapExt};

use stockledger_core::{Changes, Command, CommandBody, Decision, Hold, Placement, SkuState, Unit};

use crate::encoding::{
    decode_decision, decode_locations, decode_order, decode_stock, decode_unit, encode_decision,
    encode_locations, encode_order, encode_sale, encode_unit, int_text, seat_letter, stock_field,
    unit_of_field, user_of_field, ALERTS_FIELD, LIMIT, LOCATED, LOCATIONS_FIELD, LOW, OFFSET, SALE,
    SALE_FIELD, SEATMAP_FIELD, STOCK_FIELDS, UNITS_FIELD, UNIT_FIELD_PREFIX, USER_FIELD_PREFIX,
};
use crate::keys::SkuKeys;
use crate::projection::ProjectionError;

/// How many of [`STOCK_FIELDS`] every applied record writes (the rest are
/// set and deleted by the records that change them).
const CORE_FIELDS: usize = 7;

/// One record of a prepared batch.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub partition: i32,
    pub offset: i64,
    /// The record's timestamp as the machine compares it.
    pub time: i64,
    pub command: Command,
}

/// Fields to read from a SKU's hashes.
#[derive(Debug, Default)]
pub(crate) struct Wanted {
    pub stock: Vec<&'static str>,
    pub orders: Vec<String>,
    pub adjustments: Vec<String>,
    pub decisions: Vec<String>,
}

impl Wanted {
    pub fn is_empty(&self) -> bool {
        self.stock.is_empty()
            && self.orders.is_empty()
            && self.adjustments.is_empty()
            && self.decisions.is_empty()
    }
}

/// A hash's changes, as the fenced write takes them.
#[derive(Debug, Default, Clone)]
pub(crate) struct HashWrite {
    pub deletes: Vec<String>,
    /// (field, value), in the order they must be set.
    pub sets: Vec<(String, String)>,
}

/// What a SKU's batch writes, fenced by the offset its stock hash held.
#[derive(Debug, Clone)]
pub(crate) struct SkuWrite {
    /// The SKU's keys.
    pub keys: SkuKeys,
    /// The stock hash's `offset` the decisions were taken on (`None`: the
    /// SKU had none).
    pub fence: Option<String>,
    /// Stock (with the decisions), orders and adjustments, as
    /// [`SkuKeys::written`].
    pub hashes: [HashWrite; 3],
}

/// A hash's fields as a batch changes them. Redis lays a small hash out in
/// the order its fields were first written, so the writes keep the order
/// of the log: a field written again stays where it is, a new one goes
/// after those created before it, and a field deleted and created again in
/// one batch is deleted first and created where it was created last. The
/// bytes of a SKU's hashes then follow from the log alone, however it was
/// cut into batches.
#[derive(Debug, Default)]
struct Tracker {
    fields: Vec<Tracked>,
    index: HashMap<String, usize>,
    /// What Redis held for each field read, before the batch.
    start: HashMap<String, Option<String>>,
    seq: u64,
}

#[derive(Debug)]
struct Tracked {
    name: String,
    start: Option<String>,
    now: Option<String>,
    /// Deleted at some point, having been there before the batch.
    deleted: bool,
    /// When it was last created in this batch.
    created: Option<u64>,
    /// Its value is filled in when the batch is written (a seat map or a
    /// list of units, costly to copy at every record).
    deferred: bool,
}

impl Tracker {
    /// Sets `name` to `value` (`None` deletes it).
    fn set(&mut self, name: &str, value: Option<String>) {
        self.seq += 1;
        let at = match self.index.get(name) {
            Some(&at) => at,
            None => {
                let start = self.start.get(name).cloned().flatten();
                self.fields.push(Tracked {
                    name: name.to_owned(),
                    now: start.clone(),
                    start,
                    deleted: false,
                    created: None,
                    deferred: false,
                });
                self.index.insert(name.to_owned(), self.fields.len() - 1);
                self.fields.len() - 1
            }
        };
        let field = &mut self.fields[at];
        match (field.now.is_some(), value.is_some()) {
            (false, true) => field.created = Some(self.seq),
            (true, false) => {
                field.deleted |= field.start.is_some();
                field.created = None;
            }
            _ => {}
        }
        field.now = value;
    }

    /// Creates `name`, a field neither read nor set before in this batch
    /// (a record's decision, at an offset past every one the SKU had), set
    /// to `value`: as [`Tracker::set`] would, without looking it up.
    fn create(&mut self, name: String, value: String) {
        debug_assert!(!self.index.contains_key(&name) && !self.start.contains_key(&name));
        self.seq += 1;
        self.fields.push(Tracked {
            name,
            start: None,
            now: Some(value),
            deleted: false,
            created: Some(self.seq),
            deferred: false,
        });
    }

    /// Marks `name` as present, its value given when written.
    fn set_deferred(&mut self, name: &str) {
        self.set(name, Some(String::new()));
        if let Some(&at) = self.index.get(name) {
            self.fields[at].deferred = true;
        }
    }

    /// The writes that take the hash from where it was to where it is:
    /// deletes, values changed in place, then fields created, in the order
    /// they were last created.
    fn write(self, fill: impl Fn(&str) -> String) -> HashWrite {
        let mut out = HashWrite::default();
        let mut created = Vec::new();
        for mut field in self.fields {
            if field.deferred && field.now.is_some() {
                field.now = Some(fill(&field.name));
            }
            if field.start.is_some() && (field.deleted || field.now.is_none()) {
                out.deletes.push(field.name.clone());
            }
            let Some(now) = field.now else { continue };
            match field.created {
                Some(seq) => created.push((seq, field.name, now)),
                None if field.start.as_ref() != Some(&now) => out.sets.push((field.name, now)),
                None => {}
            }
        }
        created.sort_by_key(|(seq, _, _)| *seq);
        out.sets
            .extend(created.into_iter().map(|(_, name, now)| (name, now)));
        out
    }
}

/// One SKU's share of a batch.
#[derive(Debug)]
pub(crate) struct SkuStage {
    pub keys: SkuKeys,
    /// The SKU's home partition for the topic's partition count.
    pub home: i32,
    /// Its records, as indexes into the batch's records, in log order.
    pub records: Vec<usize>,
    state: SkuState,
    /// The stock hash's fields as loaded, as [`STOCK_FIELDS`].
    stock: Vec<Option<String>>,
    /// Each named unit's place among the SKU's units, for those loaded.
    places: HashMap<String, usize>,
    /// The seat map as loaded, then as the batch leaves it.
    seatmap: Vec<u8>,
    /// The list of units as loaded, then as the batch leaves it.
    listed: String,
    orders: Tracker,
    /// The stock hash's fields past the core ones: the limit, the
    /// threshold, the sale and each record's decision (by offset), in log
    /// order.
    extras: Tracker,
    adjustments: Vec<(String, String)>,
    /// Whether a record of the batch applied (and so wrote a decision).
    applied: bool,
    /// Whether the stock hash came from the projection's cache, not Redis.
    cached: bool,
}

impl SkuStage {
    /// A SKU's stage; `cached` is its stock hash as last written or read,
    /// when the projection kept it (see `heads`).
    pub fn new(
        prefix: &str,
        sku: &str,
        home: i32,
        cached: Option<Vec<Option<String>>>,
    ) -> Result<Self, ProjectionError> {
        let mut stage = Self {
            keys: SkuKeys::new(prefix, sku),
            home,
            records: Vec::new(),
            state: SkuState::default(),
            stock: Vec::new(),
            places: HashMap::new(),
            seatmap: Vec::new(),
            listed: String::new(),
            orders: Tracker::default(),
            extras: Tracker::default(),
            adjustments: Vec::new(),
            applied: false,
            cached: false,
        };
        if let Some(stock) = cached {
            stage.load_stock(stock)?;
            stage.cached = true;
        }
        Ok(stage)
    }

    /// What to read first: the stock hash (unless cached), and the fields
    /// of the orders and adjustments hashes that the records name; the
    /// stock per location and the seat map when the SKU or a record has
    /// them.
    pub fn wanted(&self, records: &[Record]) -> Wanted {
        let mut orders = Fields::default();
        let mut adjustments = Fields::default();
        let located = !self.cached
            || stock_field(&self.stock, LOCATED) == Some("1")
            || (self.records.iter()).any(|&i| records[i].command.body.location().is_some());
        let named = !self.cached
            || self.state.named
            || (self.records.iter()).any(|&i| !records[i].command.body.units().is_empty());
        if located {
            orders.add(LOCATIONS_FIELD.to_owned());
        }
        if named {
            orders.add(SEATMAP_FIELD.to_owned());
        }
        for &i in &self.records {
            let body = &records[i].command.body;
            if let Some(id) = body.adjustment_id() {
                adjustments.add(id.to_owned());
            }
            match body {
                CommandBody::Deduct(d) => {
                    if let Some(user) = &d.user_id {
                        orders.add([USER_FIELD_PREFIX, user.as_str()].concat());
                    }
                    for unit in &d.units {
                        orders.add([UNIT_FIELD_PREFIX, unit.as_str()].concat());
                    }
                }
                CommandBody::Restock(r) => {
                    if !r.named().is_empty() {
                        orders.add(UNITS_FIELD.to_owned());
                    }
                    for unit in r.named() {
                        orders.add([UNIT_FIELD_PREFIX, unit.as_str()].concat());
                    }
                }
                _ => {}
            }
            if let Some(order) = body.order_id() {
                orders.add(order.as_str().to_owned());
            }
        }
        Wanted {
            stock: if self.cached {
                Vec::new()
            } else {
                STOCK_FIELDS.to_vec()
            },
            orders: orders.list(),
            adjustments: adjustments.list(),
            decisions: Vec::new(),
        }
    }

    /// What to read next, once [`SkuStage::load`] took the first read in:
    /// the users and units of the orders found, and the stored decisions of
    /// records at or below the offset the SKU was applied to.
    pub fn wanted_next(&self, records: &[Record]) -> Wanted {
        let mut orders = Fields::default();
        for entry in self.state.orders.values() {
            if let Some(user) = &entry.user {
                let field = [USER_FIELD_PREFIX, user].concat();
                if !self.orders.start.contains_key(&field) {
                    orders.add(field);
                }
            }
            for unit in &entry.units {
                let field = [UNIT_FIELD_PREFIX, unit].concat();
                if !self.orders.start.contains_key(&field) {
                    orders.add(field);
                }
            }
        }
        let mut decisions = Fields::default();
        if let Some(last) = self.state.last_offset {
            for &i in &self.records {
                if records[i].offset <= last {
                    decisions.add(records[i].offset.to_string());
                }
            }
        }
        Wanted {
            orders: orders.list(),
            decisions: decisions.list(),
            ..Wanted::default()
        }
    }

    /// Takes in the values read for `wanted` (as [`Wanted`]'s four lists).
    pub fn load(
        &mut self,
        wanted: &Wanted,
        mut values: [Vec<Option<String>>; 4],
    ) -> Result<(), ProjectionError> {
        let [stock, orders, adjustments, decisions] = &mut values;
        if !wanted.stock.is_empty() {
            self.load_stock(std::mem::take(stock))?;
        }
        for (field, value) in wanted.orders.iter().zip(orders.drain(..)) {
            if let Some(value) = &value {
                self.load_order_field(field, value)?;
            }
            self.orders.start.insert(field.clone(), value);
        }
        for (id, value) in wanted.adjustments.iter().zip(adjustments.drain(..)) {
            if let Some(value) = value {
                let offset = value.parse().map_err(|_| self.corrupt(2, &value))?;
                self.state.adjustments.insert(id.clone(), offset);
            }
        }
        for (offset, value) in wanted.decisions.iter().zip(decisions.drain(..)) {
            if let Some(value) = value {
                let decision = decode_decision(&value).ok_or_else(|| self.corrupt(0, &value))?;
                let offset = offset.parse().map_err(|_| self.corrupt(0, offset))?;
                self.state.decisions.insert(offset, decision);
            }
        }
        Ok(())
    }

    fn corrupt(&self, hash: usize, value: &str) -> ProjectionError {
        ProjectionError::Corrupt {
            key: self.keys.as_array()[hash].to_owned(),
            value: value.to_owned(),
        }
    }

    fn load_stock(&mut self, stock: Vec<Option<String>>) -> Result<(), ProjectionError> {
        let field = |name: &str| stock_field(&stock, name).map(str::to_owned);
        // A SKU no record was applied to starts from nothing.
        let state = decode_stock(|name| stock_field(&stock, name))
            .map_err(|value: String| self.corrupt(0, &value))?
            .unwrap_or_default();
        let sale = field(SALE);
        self.orders
            .start
            .insert(SALE_FIELD.to_owned(), sale.clone());
        self.extras.start.insert(SALE.to_owned(), sale);
        let low = field(LOW);
        self.orders
            .start
            .insert(ALERTS_FIELD.to_owned(), low.clone());
        self.extras.start.insert(LIMIT.to_owned(), field(LIMIT));
        self.extras.start.insert(LOW.to_owned(), low);
        self.state = state;
        self.stock = stock;
        Ok(())
    }

    fn load_order_field(&mut self, field: &str, value: &str) -> Result<(), ProjectionError> {
        let corrupt = || self.corrupt(1, value);
        if let Some(user) = user_of_field(field) {
            let units = value.parse().map_err(|_| corrupt())?;
            self.state.users.insert(user.to_owned(), units);
        } else if let Some(name) = unit_of_field(field) {
            let (place, unit) = decode_unit(value).ok_or_else(corrupt)?;
            self.places.insert(name.to_owned(), place);
            self.state.units.insert(name.to_owned(), unit);
        } else if field == SEATMAP_FIELD {
            self.seatmap = value.as_bytes().to_vec();
        } else if field == UNITS_FIELD {
            self.listed = value.to_owned();
        } else if field == LOCATIONS_FIELD {
            self.state.locations = decode_locations(value).ok_or_else(corrupt)?;
        } else {
            let entry = decode_order(value).ok_or_else(corrupt)?;
            self.state.orders.insert(field.to_owned(), entry);
        }
        Ok(())
    }

    /// Decides each of the SKU's records with the machine, in log order,
    /// noting what each one applied changed; `decided` gets each record's
    /// decision, and where the hold of the order it names stands, at its
    /// index.
    pub fn decide(&mut self, records: &[Record], decided: &mut [Option<(Decision, Option<Hold>)>]) {
        for k in 0..self.records.len() {
            let i = self.records[k];
            let record = &records[i];
            let at = Placement {
                partition: record.partition,
                home: self.home,
            };
            let (decision, changes) =
                (self.state).apply_noting(at, record.offset, record.time, &record.command.body);
            if changes.decided {
                self.note(record, &decision, &changes);
            }
            decided[i] = Some((decision, changes.hold));
        }
    }

    /// Notes the fields `record`, just decided with `decision`, changed, as
    /// the machine's `changes` name them, in a fixed order. Never inlined:
    /// the bench's `stages` scenario counts it as the write's part of a
    /// record.
    #[inline(never)]
    fn note(&mut self, record: &Record, decision: &Decision, changes: &Changes) {
        let offset = || int_text(record.offset);
        // A record decided anew is past every offset the SKU had: its
        // decision's field is new.
        (self.extras).create(offset(), encode_decision(decision));
        self.applied = true;
        let body = &record.command.body;
        if let Some(id) = body.order_id().filter(|_| changes.order) {
            let entry = self.state.orders.get(id.as_str());
            self.orders.set(id.as_str(), entry.map(encode_order));
            if let Some(user) = entry.and_then(|e| e.user.as_deref()) {
                let counted = self.state.users.get(user).map(|&n| int_text(n));
                self.orders
                    .set(&[USER_FIELD_PREFIX, user].concat(), counted);
            }
            let units = entry.map_or(&[][..], |e| &e.units[..]);
            let units = units.iter().map(String::as_str);
            mark_units(
                &mut self.orders,
                &mut self.seatmap,
                &self.state,
                &self.places,
                units,
            );
        }
        if let Some(id) = body.adjustment_id().filter(|_| changes.adjustment) {
            self.adjustments.push((id.to_owned(), offset()));
            if let CommandBody::Restock(r) = body {
                let named = || r.named().iter().map(|u| u.as_str());
                self.add_units(named());
                mark_units(
                    &mut self.orders,
                    &mut self.seatmap,
                    &self.state,
                    &self.places,
                    named(),
                );
            }
        }
        if changes.limit {
            self.extras
                .set(LIMIT, self.state.limit.map(|l| l.to_string()));
        }
        if changes.low_stock {
            let low = self.state.low_stock_below.map(|l| l.to_string());
            self.extras.set(LOW, low.clone());
            self.orders.set(ALERTS_FIELD, low);
        }
        if changes.locations {
            let locations = encode_locations(&self.state.locations);
            self.orders.set(LOCATIONS_FIELD, Some(locations));
        }
        if changes.sale {
            let sale = encode_sale(&self.state);
            self.extras.set(SALE, sale.clone());
            self.orders.set(SALE_FIELD, sale);
        }
    }

    /// Gives units a restock added their places, after the SKU's others.
    fn add_units<'a>(&mut self, names: impl Iterator<Item = &'a str>) {
        let mut added = false;
        for name in names {
            if self.places.contains_key(name) {
                continue;
            }
            self.places.insert(name.to_owned(), self.seatmap.len());
            self.seatmap
                .push(seat_letter(Unit::Available.state()) as u8);
            if !self.listed.is_empty() {
                self.listed.push('\n');
            }
            self.listed.push_str(name);
            added = true;
        }
        if added {
            self.orders.set_deferred(UNITS_FIELD);
        }
    }

    /// What the batch writes for this SKU (`None` when it applied
    /// nothing), and its stock hash once written. Never inlined, as
    /// [`SkuStage::note`].
    #[inline(never)]
    pub fn finish(mut self) -> (Option<SkuWrite>, Vec<Option<String>>) {
        let mut head = std::mem::take(&mut self.stock);
        let Some(write) = self.write(&head) else {
            return (None, head);
        };
        let stock = &write.hashes[0];
        for (k, field) in STOCK_FIELDS.iter().enumerate() {
            if stock.deletes.iter().any(|d| d == field) {
                head[k] = None;
            }
            if let Some((_, value)) = stock.sets.iter().find(|(f, _)| f == field) {
                head[k] = Some(value.clone());
            }
        }
        (Some(write), head)
    }

    /// The write, from the stock hash's fields as `loaded`.
    fn write(self, loaded: &[Option<String>]) -> Option<SkuWrite> {
        if !self.applied {
            return None;
        }
        let fence = stock_field(loaded, OFFSET).map(str::to_owned);
        // The core fields and a few extras at most.
        let mut stock = HashWrite {
            deletes: Vec::new(),
            sets: Vec::with_capacity(STOCK_FIELDS.len()),
        };
        let s = &self.state;
        let number = |n: Option<i64>| n.map(int_text).unwrap_or_default();
        let flag = |on: bool| if on { "1" } else { "0" }.to_owned();
        let core: [String; CORE_FIELDS] = [
            number(Some(s.available)),
            number(Some(s.total)),
            number(Some(s.reserved)),
            number(s.partition.map(i64::from)),
            number(s.last_offset),
            flag(s.named),
            flag(!s.locations.is_empty()),
        ];
        for (k, value) in core.into_iter().enumerate() {
            if loaded.get(k).and_then(Option::as_ref) != Some(&value) {
                stock.sets.push((STOCK_FIELDS[k].to_owned(), value));
            }
        }
        let extras = self.extras.write(|_| String::new());
        stock.deletes = extras.deletes;
        stock.sets.extend(extras.sets);
        let (seatmap, listed) = (self.seatmap, self.listed);
        let orders = self.orders.write(|field| {
            if field == SEATMAP_FIELD {
                String::from_utf8_lossy(&seatmap).into_owned()
            } else {
                listed.clone()
            }
        });
        Some(SkuWrite {
            keys: self.keys,
            fence,
            hashes: [
                stock,
                orders,
                HashWrite {
                    deletes: Vec::new(),
                    sets: self.adjustments,
                },
            ],
        })
    }
}

/// Stages `commands` (partition, offset, timestamp and command, in log
/// order) as the applier does, SKU by SKU, each SKU's state new and every
/// field it asks for missing: decided by the machine, noted, and built
/// into its fenced write, with no Redis. Returns the fields the writes
/// set. For the bench's `stages` scenario, which counts
/// [`SkuStage::note`] and [`SkuStage::finish`] as the write's part of a
/// record.
#[doc(hidden)]
pub fn stage_without_redis(
    commands: Vec<(i32, i64, i64, Command)>,
    partitions: i32,
) -> Result<usize, ProjectionError> {
    let records: Vec<Record> = commands
        .into_iter()
        .map(|(partition, offset, time, command)| Record {
            partition,
            offset,
            time,
            command,
        })
        .collect();
    let mut skus: Vec<(String, Vec<usize>)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for (i, r) in records.iter().enumerate() {
        let sku = r.command.sku.as_str();
        let s = *index.entry(sku.to_owned()).or_insert_with(|| {
            skus.push((sku.to_owned(), Vec::new()));
            skus.len() - 1
        });
        skus[s].1.push(i);
    }
    let mut decided = vec![None; records.len()];
    let mut written = 0;
    for (sku, indices) in skus {
        let home = stockledger_core::partition::home_partition(sku.as_bytes(), partitions);
        let fresh = vec![None; STOCK_FIELDS.len()];
        let mut stage = SkuStage::new("bench", &sku, home, Some(fresh))?;
        stage.records = indices;
        for round in 0..2 {
            let wanted = match round {
                0 => stage.wanted(&records),
                _ => stage.wanted_next(&records),
            };
            let missing = |n: usize| vec![None; n];
            let values = [
                missing(wanted.stock.len()),
                missing(wanted.orders.len()),
                missing(wanted.adjustments.len()),
                missing(wanted.decisions.len()),
            ];
            stage.load(&wanted, values)?;
        }
        stage.decide(&records, &mut decided);
        if let (Some(write), _) = stage.finish() {
            written += write.hashes.iter().map(|h| h.sets.len()).sum::<usize>();
        }
    }
    Ok(written)
}

/// Notes the state of each of the named units `names` that the stage
/// knows, in the orders hash and in the seat map.
fn mark_units<'a>(
    orders: &mut Tracker,
    seatmap: &mut [u8],
    state: &SkuState,
    places: &HashMap<String, usize>,
    names: impl Iterator<Item = &'a str>,
) {
    let mut marked = false;
    for name in names {
        let (Some(unit), Some(&place)) = (state.units.get(name), places.get(name)) else {
            continue;
        };
        if let Some(letter) = seatmap.get_mut(place) {
            *letter = seat_letter(unit.state()) as u8;
        }
        orders.set(
            &[UNIT_FIELD_PREFIX, name].concat(),
            Some(encode_unit(place, unit)),
        );
        marked = true;
    }
    if marked {
        orders.set_deferred(SEATMAP_FIELD);
    }
}

/// Field names in the order first asked for, each once: a batch names
/// a field a record (its order, its user), so each is looked up by hash
/// and held once, not copied into a set beside the list.
#[derive(Debug, Default)]
struct Fields(indexmap::IndexSet<String, foldhash::fast::RandomState>);

impl Fields {
    fn add(&mut self, field: String) {
        self.0.insert(field);
    }

    fn list(self) -> Vec<String> {
        self.0.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stock hash as [`STOCK_FIELDS`] lays it out, from `(field, value)`.
    fn hash(fields: &[(&str, &str)]) -> Vec<Option<String>> {
        (STOCK_FIELDS.iter())
            .map(|name| {
                let value = fields.iter().find(|(f, _)| f == name);
                value.map(|(_, v)| (*v).to_owned())
            })
            .collect()
    }

    #[test]
    fn a_stock_hash_missing_a_field_every_record_writes_is_corrupt_not_zero() {
        let whole = hash(&[("available", "4"), ("total", "9"), ("offset", "17")]);
        let stage = SkuStage::new("p", "S", 0, Some(whole)).unwrap();
        assert_eq!((stage.state.available, stage.state.total), (4, 9));
        let torn = hash(&[("total", "9"), ("offset", "17")]);
        let refused = SkuStage::new("p", "S", 0, Some(torn)).unwrap_err();
        assert!(
            matches!(&refused, ProjectionError::Corrupt { key, .. } if key == "p:{S}:stock"),
            "{refused:?}"
        );
        let fresh = SkuStage::new("p", "S", 0, Some(hash(&[]))).unwrap();
        assert_eq!(fresh.state.last_offset, None);
    }
}
