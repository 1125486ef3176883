//! The Redis key layout, shared by the applier, the readers and the tools.
//!
//! Every key of one SKU carries the SKU as its hash tag (`{…}`), so one
//! transaction may touch them all in a Redis Cluster and a whole prefix can
//! be renamed key by key.

use stockledger_core::ids::check_id;
use stockledger_core::ValidationError;

/// Checks a key prefix: the identifier rules (not empty, at most 128 bytes,
/// no control characters, no braces: a `{` in the prefix would become every
/// SKU's hash tag and put the whole projection on one Cluster slot).
pub fn check_prefix(prefix: &str) -> Result<(), ValidationError> {
    check_id("prefix", prefix)
}

/// The hash marking that `prefix` holds a fold of a log: the command
/// topic's name and partition count, per partition the furthest offset
/// folded (`applied:{partition}`), and the generation the fence checks
/// (counting restores and swaps).
pub fn marker_key(prefix: &str) -> String {
    format!("{prefix}:meta")
}

/// The keys holding one SKU's state under one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkuKeys {
    /// Hash: `available`, `total`, `partition` (whose records built it),
    /// `offset` (last record applied there), and the other stock fields
    /// of [`crate::encoding`]; and, in fields named by an
    /// offset (digits only, which no other field is), the decision on
    /// each record applied ([`stockledger_core::Decision`] compact form).
    pub stock: String,
    /// Hash: order id -> [`stockledger_core::OrderEntry`] compact form;
    /// and, in fields starting with `{` (no order id has one), each user's
    /// counted units and, for a SKU of named units, each unit's place and
    /// state, their list and the seat map (see [`crate::encoding`]).
    pub orders: String,
    /// Hash: applied restock adjustment id -> offset that applied it.
    pub adjustments: String,
    /// Hash: offset -> [`stockledger_core::Decision`] compact form, where
    /// releases before decisions moved into [`SkuKeys::stock`] kept them.
    /// Nothing writes it now: it is read where a decision is not found in
    /// the stock hash, pruned by compaction and moved by swaps, so a Redis
    /// an earlier release filled is applied onto and read as before.
    pub decisions: String,
}

/// The hash of `sku`'s orders ([`SkuKeys::orders`]), alone: for a read
/// that needs no other key of the SKU.
pub fn orders_key(prefix: &str, sku: &str) -> String {
    sku_key(prefix, sku, "orders")
}

/// `prefix:{sku}:suffix`.
fn sku_key(prefix: &str, sku: &str, suffix: &str) -> String {
    [prefix, ":{", sku, "}:", suffix].concat()
}

impl SkuKeys {
    pub fn new(prefix: &str, sku: &str) -> Self {
        // Four keys a SKU a batch: the stock key's start put together
        // once, copied into the others, with no formatting machinery.
        let mut stock = String::with_capacity(prefix.len() + sku.len() + 4 + "stock".len());
        for part in [prefix, ":{", sku, "}:"] {
            stock.push_str(part);
        }
        let start = stock.len();
        let key = |suffix: &str| {
            let mut key = String::with_capacity(start + suffix.len());
            key.push_str(&stock[..start]);
            key.push_str(suffix);
            key
        };
        let (orders, adjustments, decisions) =
            (key("orders"), key("adjustments"), key("decisions"));
        stock.push_str("stock");
        Self {
            stock,
            orders,
            adjustments,
            decisions,
        }
    }

    /// The hashes a batch writes, in the order the write script takes them
    /// as `KEYS`.
    pub fn written(&self) -> [&str; 3] {
        [&self.stock, &self.orders, &self.adjustments]
    }

    /// In the order the load script takes them as `KEYS`.
    pub fn as_array(&self) -> [&str; 4] {
        [
            &self.stock,
            &self.orders,
            &self.adjustments,
            &self.decisions,
        ]
    }
}

/// The sorted set of live reservations whose SKUs live on `partition`:
/// member [`hold_member`], score the deadline (ms). The expirer reads it
/// to know which holds are due; the apply path keeps it. Each member is
/// touched alone, so it needs no hash tag in a Redis Cluster.
pub fn holds_key(prefix: &str, partition: i32) -> String {
    format!("{prefix}:holds:{partition}")
}

/// A member of [`holds_key`]: the SKU and the order, split by a newline
/// (identifiers cannot hold control characters).
pub fn hold_member(sku: &str, order_id: &str) -> String {
    format!("{sku}\n{order_id}")
}

/// The SKU and order of a [`hold_member`], if it is one.
pub fn decode_hold_member(member: &str) -> Option<(&str, &str)> {
    member.split_once('\n')
}

/// The hash of basket `basket_id`'s lines: SKU (each line is the order
/// `basket_id` of its SKU) -> `partition:offset` of the line's record, so
/// a line refused (which leaves no order) is told from one not decided
/// yet. Written by the fold before the lines are applied, so a basket's
/// lines are found as soon as any is decided; touched alone, so it needs
/// no hash tag in a Redis Cluster.
pub fn basket_key(prefix: &str, basket_id: &str) -> String {
    format!("{prefix}:basket:{basket_id}")
}

/// The pattern matching every basket's key under `prefix` (for `SCAN`).
pub fn basket_key_pattern(prefix: &str) -> String {
    format!("{prefix}:basket:*")
}

/// The sorted set of baskets that may not be settled yet: member the
/// basket id, score its holds' deadline (ms), pushed later each time the
/// settler finds it still open. Past the deadline every line is sold or
/// given back, or about to be; the applier's settler then refunds the sold
/// lines of a basket with a line given back, so no basket stays partly
/// sold. Touched alone, so it needs no hash tag in a Redis Cluster.
pub fn open_baskets_key(prefix: &str) -> String {
    format!("{prefix}:baskets-open")
}

/// A line's record position as [`basket_key`] keeps it.
pub fn encode_line_position(partition: i32, offset: i64) -> String {
    format!("{partition}:{offset}")
}

/// The partition and offset of a [`basket_key`] value, if it is one.
pub fn decode_line_position(value: &str) -> Option<(i32, i64)> {
    let (partition, offset) = value.split_once(':')?;
    Some((partition.parse().ok()?, offset.parse().ok()?))
}

/// The hash of dead letters re-driven to the command topic: field the
/// dead letter's position (`topic/partition@offset`), value the position
/// of its copy. `dlq redrive` reads it so a dead letter goes back once.
pub fn redriven_key(prefix: &str) -> String {
    format!("{prefix}:redriven")
}

/// The hash of the stops of the services that fold into `prefix`: field
/// the service (`applier`), value why it last stopped on a record and how
/// many times in a row it did ([`crate::StopNote`]). `status` reads it.
pub fn stops_key(prefix: &str) -> String {
    format!("{prefix}:stops")
}

/// The pattern matching every SKU's stock key under `prefix` (for `SCAN`).
pub fn stock_key_pattern(prefix: &str) -> String {
    format!("{prefix}:{{*}}:stock")
}

/// The SKU named by a stock key under `prefix`, if it is one.
pub fn sku_of_stock_key<'a>(prefix: &str, key: &'a str) -> Option<&'a str> {
    key.strip_prefix(prefix)?
        .strip_prefix(":{")?
        .strip_suffix("}:stock")
}

/// The pub/sub channel on which the applier announces, after each batch is
/// in Redis, the last offset it applied on each partition, so an order
/// service waiting for a decision wakes when it lands instead of polling.
/// Announcements are best effort (pub/sub keeps nothing for a subscriber
/// that is away); readers still poll, less often, as a fallback.
pub fn applied_channel(prefix: &str) -> String {
    format!("{prefix}:applied")
}

/// An announcement on [`applied_channel`]: `<topic> <partition>:<offset> …`
/// (topic names hold no spaces or colons).
pub fn encode_applied(topic: &str, marks: impl IntoIterator<Item = (i32, i64)>) -> String {
    let mut payload = topic.to_owned();
    for (partition, offset) in marks {
        payload.push_str(&format!(" {partition}:{offset}"));
    }
    payload
}

/// The topic and `(partition, last applied offset)` pairs of an
/// announcement, or `None` if it is not one.
pub fn decode_applied(payload: &str) -> Option<(&str, Vec<(i32, i64)>)> {
    let mut parts = payload.split(' ');
    let topic = parts.next().filter(|t| !t.is_empty())?;
    let marks = parts
        .map(|mark| {
            let (partition, offset) = mark.split_once(':')?;
            Some((partition.parse().ok()?, offset.parse().ok()?))
        })
        .collect::<Option<Vec<_>>>()?;
    Some((topic, marks))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_one_sku_share_its_hash_tag() {
        let k = SkuKeys::new("sl", "SKU-1");
        assert_eq!(k.stock, "sl:{SKU-1}:stock");
        assert_eq!(k.decisions, "sl:{SKU-1}:decisions");
        assert_eq!(k.adjustments, "sl:{SKU-1}:adjustments");
        assert_eq!(k.orders, orders_key("sl", "SKU-1"));
        assert_eq!(k.orders, "sl:{SKU-1}:orders");
        assert_eq!(sku_of_stock_key("sl", &k.stock), Some("SKU-1"));
        assert_eq!(sku_of_stock_key("other", &k.stock), None);
        assert_eq!(stock_key_pattern("sl"), "sl:{*}:stock");
    }

    #[test]
    fn hold_members_name_their_sku_and_order() {
        assert_eq!(holds_key("sl", 3), "sl:holds:3");
        let member = hold_member("SKU-1", "o-1");
        assert_eq!(decode_hold_member(&member), Some(("SKU-1", "o-1")));
        assert_eq!(decode_hold_member("no separator"), None);
    }

    #[test]
    fn a_prefix_with_braces_is_refused_naming_the_field() {
        assert!(check_prefix("stockledger").is_ok());
        let e = check_prefix("a{b}").unwrap_err();
        assert_eq!(e.field, "prefix");
        assert!(e.problem.contains("'{'"), "{e}");
        assert_eq!(check_prefix("").unwrap_err().field, "prefix");
    }

    #[test]
    fn applied_announcements_round_trip() {
        let payload = encode_applied("orders.commands", [(0, 41), (7, 1_000_000)]);
        assert_eq!(payload, "orders.commands 0:41 7:1000000");
        assert_eq!(
            decode_applied(&payload),
            Some(("orders.commands", vec![(0, 41), (7, 1_000_000)]))
        );
        assert_eq!(applied_channel("sl"), "sl:applied");
        for bad in ["", " 0:1", "t 0", "t x:1", "t 0:y", "t 0:1 "] {
            assert_eq!(decode_applied(bad), None, "{bad:?}");
        }
    }
}
