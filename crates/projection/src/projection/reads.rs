//! Reading a SKU's state back: whole, as stock, one order or adjustment,
//! a command's decision, and the SKUs of the prefix page by page.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use redis::{ErrorKind, Script, ServerErrorKind};
use stockledger_core::machine::misrouted;
use stockledger_core::{Decision, LocationStock, OrderEntry, SkuState, Unit, UnitState};
use stockledger_redis::KeyScan;

use super::{BasketLine, Projection, ProjectionError};
use crate::encoding::{
    decision_offset, decode_decision, decode_locations, decode_order, decode_sale, decode_stock,
    decode_unit, seat_letter, state_of_letter, unit_of_field, user_of_field, ALERTS_FIELD,
    AVAILABLE, LIMIT, LOCATED, LOCATIONS_FIELD, NAMED, OFFSET, PARTITION, RESERVED, SALE,
    SALE_FIELD, SEATMAP_FIELD, TOTAL, UNITS_FIELD,
};
use crate::keys::{self, SkuKeys};

/// The script that reads a seat map; see the file.
static UNITS: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/units.lua")));

impl Projection {
    /// The state of `sku`, or `None` if nothing was ever applied to it.
    pub async fn read_sku(&self, sku: &str) -> Result<Option<SkuState>, ProjectionError> {
        let keys = SkuKeys::new(&self.prefix, sku);
        let mut conn = self.redis.clone();
        let (stock, orders, adjustments, decisions): (Hash, Hash, Hash, Hash) = redis::pipe()
            .hgetall(&keys.stock)
            .hgetall(&keys.orders)
            .hgetall(&keys.adjustments)
            .hgetall(&keys.decisions)
            .query_async(&mut conn)
            .await?;
        if stock.is_empty() {
            return Ok(None);
        }
        let Some(mut state) = decode_stock(|f| stock.get(f).map(String::as_str))
            .map_err(|value: String| corrupt(&keys.stock, &value))?
        else {
            return Err(corrupt(&keys.stock, ""));
        };
        let copies = take_orders(&mut state, orders, &keys.orders)?;
        copies.check(&mut state, &stock, &keys)?;
        for (adjustment, value) in adjustments {
            let offset = value
                .parse()
                .map_err(|_| corrupt(&keys.adjustments, &value))?;
            state.adjustments.insert(adjustment, offset);
        }
        // Decisions an earlier release kept in a hash of their own, then
        // those the stock hash holds.
        for (offset, value) in decisions {
            let offset = offset
                .parse()
                .map_err(|_| corrupt(&keys.decisions, &offset))?;
            let decision =
                decode_decision(&value).ok_or_else(|| corrupt(&keys.decisions, &value))?;
            state.decisions.insert(offset, decision);
        }
        for (field, value) in &stock {
            if let Some(offset) = decision_offset(field) {
                let decision = decode_decision(value).ok_or_else(|| corrupt(&keys.stock, value))?;
                state.decisions.insert(offset, decision);
            }
        }
        Ok(Some(state))
    }

    /// How many decisions Redis holds for `skus`: one for each record
    /// applied to them, less those compaction pruned.
    pub async fn decisions_held(&self, skus: &[&str]) -> Result<u64, ProjectionError> {
        let reads = (skus.iter())
            .flat_map(|sku| {
                let keys = SkuKeys::new(&self.prefix, sku);
                [
                    redis::Cmd::hkeys(keys.stock),
                    redis::Cmd::hkeys(keys.decisions),
                ]
            })
            .collect();
        let fields: Vec<Vec<String>> = self.redis.query_each(reads).await?;
        Ok(fields
            .iter()
            .flatten()
            .filter(|field| decision_offset(field).is_some())
            .count() as u64)
    }

    /// Every SKU with state under this prefix (by `SCAN`, so Redis is never
    /// blocked).
    pub async fn skus(&self) -> Result<Vec<String>, ProjectionError> {
        let keys = self
            .redis
            .scan_all(&keys::stock_key_pattern(&self.prefix))
            .await?;
        Ok(keys
            .iter()
            .filter_map(|k| keys::sku_of_stock_key(&self.prefix, k))
            .map(str::to_owned)
            .collect())
    }

    /// The SKUs with state under this prefix, a page of about `page_size`
    /// at a time (by `SCAN`), for walks that must stay bounded in memory.
    pub async fn sku_pages(&self, page_size: usize) -> Result<SkuPages, ProjectionError> {
        let scan = self
            .redis
            .scan(&keys::stock_key_pattern(&self.prefix), page_size)
            .await?;
        Ok(SkuPages {
            scan,
            prefix: self.prefix.clone(),
        })
    }

    /// How many SKUs have state under this prefix, counted a page of
    /// `page_size` keys at a time (a whole `SCAN`; a SKU written while it
    /// runs may or may not be counted). For a progress display's total.
    pub async fn count_skus(&self, page_size: usize) -> Result<u64, ProjectionError> {
        let mut pages = self.sku_pages(page_size).await?;
        let mut count = 0u64;
        while let Some(skus) = pages.next_page().await? {
            count += skus.len() as u64;
        }
        Ok(count)
    }

    /// The decision taken for the record at `partition`/`offset` of `sku`,
    /// if the applier has taken it. A record on another partition than the
    /// one `sku`'s state was built on is answered `MISROUTED`: the applier
    /// decides it so whenever it reaches it, and its offset must not be
    /// looked up among that partition's decisions. (A misrouted record of a
    /// SKU with no state yet leaves nothing in Redis: `None`.)
    pub async fn decision(
        &self,
        sku: &str,
        partition: i32,
        offset: i64,
    ) -> Result<Option<Decision>, ProjectionError> {
        let keys = SkuKeys::new(&self.prefix, sku);
        // Where this release keeps a decision, then where earlier ones did.
        let (owner, stored, earlier): (Option<String>, Option<String>, Option<String>) =
            redis::pipe()
                .hget(&keys.stock, PARTITION)
                .hget(&keys.stock, offset)
                .hget(&keys.decisions, offset)
                .query_async(&mut self.redis.clone())
                .await?;
        if let Some(owner) = owner {
            let owner: i32 = owner.parse().map_err(|_| ProjectionError::Corrupt {
                key: keys.stock.clone(),
                value: owner,
            })?;
            if owner != partition {
                return Ok(Some(misrouted(partition, owner)));
            }
        }
        let (key, stored) = match stored {
            Some(stored) => (keys.stock, Some(stored)),
            None => (keys.decisions, earlier),
        };
        stored
            .map(|s| decode_decision(&s).ok_or(ProjectionError::Corrupt { key, value: s }))
            .transpose()
    }

    /// What the ledger knows of `order_id` on `sku` (`None` if no deduct or
    /// rollback of it was applied): one field of the orders hash, so a SKU
    /// with millions of orders costs what one with a single order does.
    pub async fn order(
        &self,
        sku: &str,
        order_id: &str,
    ) -> Result<Option<OrderEntry>, ProjectionError> {
        let key = keys::orders_key(&self.prefix, sku);
        let stored: Option<String> = redis::cmd("HGET")
            .arg(&key)
            .arg(order_id)
            .query_async(&mut self.redis.clone())
            .await?;
        stored
            .map(|value| decode_order(&value).ok_or(ProjectionError::Corrupt { key, value }))
            .transpose()
    }

    /// Each line of basket `basket_id` as the projection holds it (empty
    /// for a basket the fold has not seen), sorted by SKU.
    pub async fn basket(&self, basket_id: &str) -> Result<Vec<BasketLine>, ProjectionError> {
        let mut lines = Vec::new();
        for (sku, partition, offset) in self.basket_lines(basket_id).await? {
            let order = self.order(&sku, basket_id).await?;
            // No order: the hold was refused, or is not decided yet.
            let refusal = match order {
                Some(_) => None,
                None => self.decision(&sku, partition, offset).await?,
            };
            lines.push(BasketLine {
                sku,
                partition,
                order,
                refusal,
            });
        }
        Ok(lines)
    }

    /// The lines of basket `basket_id`: each SKU with the partition and
    /// offset of its line's record, sorted by SKU (empty for a basket the
    /// fold has not seen).
    async fn basket_lines(
        &self,
        basket_id: &str,
    ) -> Result<Vec<(String, i32, i64)>, ProjectionError> {
        let key = keys::basket_key(&self.prefix, basket_id);
        let stored: BTreeMap<String, String> = redis::cmd("HGETALL")
            .arg(&key)
            .query_async(&mut self.redis.clone())
            .await?;
        stored
            .into_iter()
            .map(|(sku, at)| match keys::decode_line_position(&at) {
                Some((partition, offset)) => Ok((sku, partition, offset)),
                None => Err(ProjectionError::Corrupt {
                    key: key.clone(),
                    value: at,
                }),
            })
            .collect()
    }

    /// The seat map of `sku`: each named unit, in the order they were
    /// added, and whether it is available, held or sold (empty for a
    /// SKU of counted stock). Two fields of one hash, one command: what a
    /// busy seat picker reads.
    pub async fn seat_map(&self, sku: &str) -> Result<Vec<(String, UnitState)>, ProjectionError> {
        let keys = SkuKeys::new(&self.prefix, sku);
        let (names, letters): (Option<String>, Option<String>) = redis::cmd("HMGET")
            .arg(&keys.orders)
            .arg(UNITS_FIELD)
            .arg(SEATMAP_FIELD)
            .query_async(&mut self.redis.clone())
            .await?;
        let (Some(names), Some(letters)) = (names, letters) else {
            return Ok(Vec::new());
        };
        let corrupt = || ProjectionError::Corrupt {
            key: keys.orders.clone(),
            value: letters.clone(),
        };
        let names = names.split('\n');
        if names.clone().count() != letters.len() {
            return Err(corrupt());
        }
        names
            .zip(letters.bytes())
            .map(|(name, letter)| {
                let state = state_of_letter(letter).ok_or_else(corrupt)?;
                Ok((name.to_owned(), state))
            })
            .collect()
    }

    /// Each named unit of `sku`, in the order they were added, with the
    /// order holding or owning it (empty for a SKU of counted stock). One
    /// script call: it costs the SKU's units, not its orders.
    pub async fn units(&self, sku: &str) -> Result<Vec<(String, Unit)>, ProjectionError> {
        let keys = SkuKeys::new(&self.prefix, sku);
        let mut conn = self.redis.clone();
        let flat: Vec<String> = match UNITS.key(&keys.orders).invoke_async(&mut conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                UNITS.prepare_invoke().load_async(&mut conn).await?;
                UNITS.key(&keys.orders).invoke_async(&mut conn).await?
            }
            other => other?,
        };
        let mut units = Vec::with_capacity(flat.len() / 2);
        let mut flat = flat.into_iter();
        while let (Some(name), Some(value)) = (flat.next(), flat.next()) {
            let (_, unit) = decode_unit(&value).ok_or_else(|| ProjectionError::Corrupt {
                key: keys.orders.clone(),
                value,
            })?;
            units.push((name, unit));
        }
        Ok(units)
    }

    /// The offset that applied restock `adjustment_id` of `sku`, if any.
    pub async fn adjustment(
        &self,
        sku: &str,
        adjustment_id: &str,
    ) -> Result<Option<i64>, ProjectionError> {
        let keys = SkuKeys::new(&self.prefix, sku);
        let stored: Option<String> = redis::cmd("HGET")
            .arg(&keys.adjustments)
            .arg(adjustment_id)
            .query_async(&mut self.redis.clone())
            .await?;
        stored
            .map(|s| {
                s.parse().map_err(|_| ProjectionError::Corrupt {
                    key: keys.adjustments,
                    value: s,
                })
            })
            .transpose()
    }

    /// The stock fields of each of `skus` (`None` for a SKU with no state),
    /// in one round trip per node.
    pub async fn stock(&self, skus: &[&str]) -> Result<Vec<Option<Stock>>, ProjectionError> {
        let reads: Vec<redis::Cmd> = skus
            .iter()
            .map(|sku| {
                let mut cmd = redis::cmd("HMGET");
                cmd.arg(SkuKeys::new(&self.prefix, sku).stock)
                    .arg(&[AVAILABLE, TOTAL, OFFSET, PARTITION, RESERVED, LIMIT]);
                cmd
            })
            .collect();
        type Fields = (
            Option<i64>,
            Option<i64>,
            Option<i64>,
            Option<i32>,
            Option<i64>,
            Option<i64>,
        );
        let rows: Vec<Fields> = self.redis.query_each(reads).await?;
        Ok(rows
            .into_iter()
            .map(|row| match row {
                (Some(available), Some(total), Some(offset), partition, reserved, limit) => {
                    Some(Stock {
                        available,
                        total,
                        offset,
                        partition,
                        reserved: reserved.unwrap_or(0),
                        limit,
                    })
                }
                _ => None,
            })
            .collect())
    }
}

impl Projection {
    /// The stock of `sku` and its stock per location (empty for a SKU
    /// that keeps none by location), read together (one `MULTI`), so the
    /// locations sum to the stock; `None` if nothing was applied to it.
    pub async fn stock_by_location(
        &self,
        sku: &str,
    ) -> Result<Option<(Stock, Vec<LocationStock>)>, ProjectionError> {
        Ok(self
            .stock_and_sale(sku)
            .await?
            .map(|(stock, locations, _)| (stock, locations)))
    }

    /// [`Projection::stock_by_location`] and, in the same `MULTI`, when
    /// the SKU sells: its window, where its records reached in it, and its
    /// pause.
    pub async fn stock_and_sale(
        &self,
        sku: &str,
    ) -> Result<Option<(Stock, Vec<LocationStock>, Sale)>, ProjectionError> {
        let keys = SkuKeys::new(&self.prefix, sku);
        let mut stock = redis::cmd("HMGET");
        stock
            .arg(&keys.stock)
            .arg(&[AVAILABLE, TOTAL, OFFSET, PARTITION, RESERVED, LIMIT, SALE]);
        let mut places = redis::cmd("HGET");
        places.arg(&keys.orders).arg(LOCATIONS_FIELD);
        type Fields = (
            Option<i64>,
            Option<i64>,
            Option<i64>,
            Option<i32>,
            Option<i64>,
            Option<i64>,
            Option<String>,
        );
        let read: Vec<(Fields, Option<String>)> =
            self.redis.transact_each(vec![vec![stock, places]]).await?;
        let Some((
            (Some(available), Some(total), Some(offset), partition, reserved, limit, sale),
            text,
        )) = read.into_iter().next()
        else {
            return Ok(None);
        };
        let corrupt = |key: &str, value: String| ProjectionError::Corrupt {
            key: key.to_owned(),
            value,
        };
        let locations = match text {
            None => Vec::new(),
            Some(text) => decode_locations(&text).ok_or_else(|| corrupt(&keys.orders, text))?,
        };
        let sale = match sale {
            None => Sale::default(),
            Some(text) => {
                let (window, phase, paused) =
                    decode_sale(&text).ok_or_else(|| corrupt(&keys.stock, text))?;
                Sale {
                    window,
                    phase,
                    paused,
                }
            }
        };
        let stock = Stock {
            available,
            total,
            offset,
            partition,
            reserved: reserved.unwrap_or(0),
            limit,
        };
        Ok(Some((stock, locations, sale)))
    }
}

/// When a SKU sells, as its stock hash keeps it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sale {
    pub window: stockledger_core::SaleWindow,
    /// Where the SKU's records reached in the window.
    pub phase: stockledger_core::SalePhase,
    pub paused: bool,
}

/// A walk over the SKUs of a prefix, a page at a time.
pub struct SkuPages {
    scan: KeyScan,
    prefix: String,
}

impl std::fmt::Debug for SkuPages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkuPages")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl SkuPages {
    /// The next page of SKUs (sorted, without repeats), `None` at the end.
    pub async fn next_page(&mut self) -> Result<Option<Vec<String>>, ProjectionError> {
        let Some(page) = self.scan.next_page().await? else {
            return Ok(None);
        };
        let mut skus: Vec<String> = page
            .iter()
            .filter_map(|k| keys::sku_of_stock_key(&self.prefix, k))
            .map(str::to_owned)
            .collect();
        skus.sort_unstable();
        skus.dedup();
        Ok(Some(skus))
    }
}

/// A SKU's stock hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stock {
    pub available: i64,
    pub total: i64,
    /// The last offset applied.
    pub offset: i64,
    /// The partition whose records built the state (`None` when written
    /// before partitions were recorded).
    pub partition: Option<i32>,
    /// Units held by live reservations.
    pub reserved: i64,
    /// Units one user may hold and buy, if limited.
    pub limit: Option<i64>,
}

/// A hash read whole, field by field.
type Hash = BTreeMap<String, String>;

fn corrupt(key: &str, value: &str) -> ProjectionError {
    ProjectionError::Corrupt {
        key: key.to_owned(),
        value: value.to_owned(),
    }
}

/// What a SKU's orders hash holds besides its orders, users and units:
/// copies of what other fields say, which [`Copies::check`] holds to them.
#[derive(Default)]
struct Copies {
    /// The list of units, one name a line.
    registry: Option<String>,
    seatmap: Option<String>,
    /// The low-stock threshold's copy.
    alerts: Option<String>,
    /// The sale's copy.
    sale: Option<String>,
    /// The name of the unit at each place, as the units' fields say.
    places: BTreeMap<usize, String>,
}

/// Takes the orders hash `orders` (at `key`) into `state`: orders, users'
/// counts, named units and the stock per location; returns the copies it
/// holds besides.
fn take_orders(state: &mut SkuState, orders: Hash, key: &str) -> Result<Copies, ProjectionError> {
    let mut copies = Copies::default();
    for (field, value) in orders {
        if let Some(user) = user_of_field(&field) {
            let units = value.parse().map_err(|_| corrupt(key, &value))?;
            state.users.insert(user.to_owned(), units);
        } else if let Some(unit) = unit_of_field(&field) {
            let (place, state_of) = decode_unit(&value).ok_or_else(|| corrupt(key, &value))?;
            copies.places.insert(place, unit.to_owned());
            state.units.insert(unit.to_owned(), state_of);
        } else if field == UNITS_FIELD {
            copies.registry = Some(value);
        } else if field == SEATMAP_FIELD {
            copies.seatmap = Some(value);
        } else if field == ALERTS_FIELD {
            copies.alerts = Some(value);
        } else if field == SALE_FIELD {
            copies.sale = Some(value);
        } else if field == LOCATIONS_FIELD {
            state.locations = decode_locations(&value).ok_or_else(|| corrupt(key, &value))?;
        } else {
            let entry = decode_order(&value).ok_or_else(|| corrupt(key, &value))?;
            state.orders.insert(field, entry);
        }
    }
    Ok(copies)
}

impl Copies {
    /// Fails unless every copy tells the story of what it copies (the
    /// stock hash `stock`, the units' fields); sets `state.named` from the
    /// stock hash's flag.
    fn check(
        &self,
        state: &mut SkuState,
        stock: &Hash,
        keys: &SkuKeys,
    ) -> Result<(), ProjectionError> {
        // The list of units, their places, the seat map, the units' fields
        // and the stock hash's flag must all tell the same story.
        let registry = self.registry.as_deref();
        let listed: Vec<&str> = registry.map_or_else(Vec::new, |r| r.split('\n').collect());
        let letters: String = (listed.iter())
            .filter_map(|name| state.units.get(*name).map(|u| seat_letter(u.state())))
            .collect();
        let named = stock.get(NAMED).is_some_and(|flag| flag == "1");
        let agree = listed.len() == state.units.len()
            && (listed.iter().enumerate())
                .all(|(i, name)| self.places.get(&i).map(String::as_str) == Some(*name))
            && self.seatmap.as_deref().unwrap_or("") == letters
            && named != state.units.is_empty();
        state.named = named;
        if !agree {
            return Err(corrupt(&keys.orders, registry.unwrap_or("")));
        }
        // The threshold's two copies must agree.
        let alerts = self.alerts.as_deref();
        if alerts.map(str::parse::<i64>).transpose().ok() != Some(state.low_stock_below) {
            return Err(corrupt(&keys.orders, alerts.unwrap_or("")));
        }
        // So must the sale's.
        if self.sale.as_ref() != stock.get(SALE) {
            return Err(corrupt(&keys.orders, self.sale.as_deref().unwrap_or("")));
        }
        // The locations must sum to the SKU's stock and agree with the flag.
        let located = stock.get(LOCATED).is_some_and(|flag| flag == "1");
        let (available, total) =
            (state.locations.iter()).fold((0, 0), |(a, t), l| (a + l.available, t + l.total));
        if located == state.locations.is_empty()
            || (located && (available, total) != (state.available, state.total))
        {
            let value = stock.get(LOCATED).map_or("", String::as_str);
            return Err(corrupt(&keys.stock, value));
        }
        Ok(())
    }
}
