//! The contract check (`stockledger_maintenance::check::compare`) that the
//! harness, the demo, the bench and every fault test rely on: each field of
//! a SKU's state that Redis gets wrong is named, not only stock and orders:
//! units, locations and the low-stock threshold too.

use redis::AsyncCommands;
use stockledger_core::RestockMode;
use stockledger_maintenance::check;
use stockledger_projection::encoding::{
    ALERTS_FIELD, AVAILABLE, LIMIT, LOCATED, LOCATIONS_FIELD, LOW, NAMED, OFFSET, PARTITION,
    RESERVED, SEATMAP_FIELD, TOTAL, UNIT_FIELD_PREFIX, USER_FIELD_PREFIX,
};
use stockledger_projection::keys::SkuKeys;
use stockledger_testkit::harness::CATCH_UP;
use stockledger_testkit::ids;
use stockledger_testkit::{wait_until, Harness};

const SKU: &str = "CHECKED";
const SEATS: &str = "CHECKED-SEATS";
const PLACES: &str = "CHECKED-PLACES";

/// Writes to Redis (hash, field, value; `None` deletes the field) that
/// make one field of a SKU's state wrong, and what the check must say.
struct Corruption {
    writes: Vec<(String, String, Option<String>)>,
    named: String,
}

fn wrong(writes: &[(&String, &str, Option<&str>)], named: &str) -> Corruption {
    Corruption {
        writes: writes
            .iter()
            .map(|(key, field, value)| {
                (
                    (*key).clone(),
                    (*field).to_owned(),
                    value.map(str::to_owned),
                )
            })
            .collect(),
        named: named.to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_contract_check_names_each_field_redis_got_wrong() -> anyhow::Result<()> {
    let h = Harness::new("contract-check", 2).await?;
    let applier = h.start_applier();
    // States with every field in use: stock, a limit, a low-stock
    // threshold, a live hold counted against a user, a confirmed sale, an
    // adjustment and their decisions; named units, one held; stock in two
    // places.
    let in_an_hour = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64
        + 3_600_000;
    let p = &h.ledger;
    let sku = ids::sku(SKU);
    p.restock(&sku, &ids::adjustment("initial"), RestockMode::Set, 10)
        .await?;
    p.limit(&sku, Some(ids::qty(3))).await?;
    p.alerts(&sku, Some(ids::qty(4))).await?;
    let (held, sold) = (ids::order("held"), ids::order("sold"));
    let hour = ids::at_ms(in_an_hour);
    p.reserve_until(&sku, &held, ids::qty(2), hour, Some(&ids::user("u1")))
        .await?;
    p.reserve_until(&sku, &sold, ids::qty(1), hour, Some(&ids::user("u2")))
        .await?;
    let last = p.confirm(&sku, &sold).await?;
    let seats = ids::sku(SEATS);
    let names = ["A", "B", "C"].map(ids::unit);
    p.add_units(&seats, &ids::adjustment("seats"), &names)
        .await?;
    let an_hour = Some(std::time::Duration::from_secs(3_600));
    (p.take_units(&seats, &ids::order("seat"), &names[..1], an_hour, None)).await?;
    let places = ids::sku(PLACES);
    for place in ["paris", "berlin"] {
        let (adjustment, at) = (ids::adjustment(place), ids::location(place));
        (p.restock_at(&places, &adjustment, &at, RestockMode::Set, 5)).await?;
    }
    wait_until("the commands applied", CATCH_UP, || async {
        Ok((h.applied(&[SKU, SEATS, PLACES]).await? >= 10).then_some(()))
    })
    .await?;
    applier.stop().await?;
    let reference = h.fold_log().await?;
    assert_eq!(check::compare(&h.projection, &reference).await?, vec![]);

    let mut redis = redis::Client::open(h.redis_url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let corruptions = corruptions(&h.ns.prefix, &last.position.offset.to_string());
    assert_eq!(
        corruptions.len(),
        17,
        "every field of SkuState, and the flags"
    );
    for corruption in corruptions {
        let mut right = Vec::new();
        for (key, field, value) in &corruption.writes {
            let was: Option<String> = redis.hget(key, field).await?;
            match value {
                Some(value) => redis.hset::<_, _, _, ()>(key, field, value).await?,
                None => redis.hdel::<_, _, ()>(key, field).await?,
            }
            right.push((key, field, was));
        }
        let mismatches = check::compare(&h.projection, &reference).await?;
        assert!(
            mismatches.len() == 1 && mismatches[0].detail.starts_with(&corruption.named),
            "{:?}: {mismatches:?}",
            corruption.writes
        );
        for (key, field, was) in right {
            match was {
                Some(was) => redis.hset::<_, _, _, ()>(key, field, was).await?,
                None => redis.hdel::<_, _, ()>(key, field).await?,
            }
        }
    }
    assert_eq!(check::compare(&h.projection, &reference).await?, vec![]);
    Ok(())
}

/// One corruption per field of the state and per flag: the counted SKU's
/// numbers, orders, users, adjustments and decisions; the named SKU's
/// units and flag; the located SKU's places and flag. A flag or a
/// threshold copy that disagrees with the rest makes the state unreadable,
/// which the check says naming the key.
fn corruptions(prefix: &str, last_offset: &str) -> Vec<Corruption> {
    let counted = SkuKeys::new(prefix, SKU);
    let named = SkuKeys::new(prefix, SEATS);
    let located = SkuKeys::new(prefix, PLACES);
    let user = format!("{USER_FIELD_PREFIX}u1");
    let unreadable = |key: &str| format!("unreadable value in Redis key {key}");
    vec![
        wrong(&[(&counted.stock, AVAILABLE, Some("8"))], "available"),
        wrong(&[(&counted.stock, TOTAL, Some("11"))], "total"),
        wrong(&[(&counted.stock, RESERVED, Some("3"))], "reserved"),
        wrong(&[(&counted.stock, LIMIT, Some("4"))], "limit"),
        wrong(
            &[
                (&counted.stock, LOW, Some("5")),
                (&counted.orders, ALERTS_FIELD, Some("5")),
            ],
            "low_stock_below",
        ),
        wrong(
            &[(&counted.stock, LOW, Some("5"))],
            &unreadable(&counted.orders),
        ),
        wrong(&[(&counted.stock, PARTITION, Some("7"))], "partition"),
        wrong(&[(&counted.stock, OFFSET, Some("999"))], "last offset"),
        wrong(&[(&counted.orders, &user, Some("3"))], "users"),
        wrong(&[(&counted.orders, "sold", None)], "order sold"),
        wrong(&[(&counted.adjustments, "initial", None)], "adjustments"),
        wrong(&[(&counted.stock, last_offset, None)], "decision at offset"),
        wrong(
            &[
                (
                    &named.orders,
                    &format!("{UNIT_FIELD_PREFIX}A"),
                    Some("0|Sseat"),
                ),
                (&named.orders, SEATMAP_FIELD, Some("SAA")),
            ],
            "units",
        ),
        wrong(
            &[(&named.stock, NAMED, Some("0"))],
            &unreadable(&named.orders),
        ),
        wrong(
            &[(
                &located.orders,
                LOCATIONS_FIELD,
                Some("paris|6|5\nberlin|4|5"),
            )],
            "locations",
        ),
        wrong(
            &[(&located.stock, LOCATED, Some("0"))],
            &unreadable(&located.stock),
        ),
        wrong(
            &[(&counted.stock, LOCATED, Some("1"))],
            &unreadable(&counted.stock),
        ),
    ]
}
