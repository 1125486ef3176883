//! The contract check (`stockledger_applier::check::compare`) that the
//! harness, the demo, the bench and every fault test rely on: each field of
//! a SKU's state that Redis gets wrong is named, not only stock and orders.

use redis::AsyncCommands;
use stockledger_applier::check;
use stockledger_projection::encoding::{
    AVAILABLE, LIMIT, OFFSET, PARTITION, RESERVED, TOTAL, USER_FIELD_PREFIX,
};
use stockledger_projection::keys::SkuKeys;
use stockledger_testkit::harness::CATCH_UP;
use stockledger_testkit::ids;
use stockledger_testkit::{wait_until, Harness};

const SKU: &str = "CHECKED";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_contract_check_names_each_field_redis_got_wrong() -> anyhow::Result<()> {
    let h = Harness::new("contract-check", 2).await?;
    let applier = h.start_applier();
    // A state with every field in use: stock, a limit, a live hold counted
    // against a user, a confirmed sale, an adjustment and their decisions.
    let in_an_hour = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64
        + 3_600_000;
    let p = &h.ledger;
    p.restock(
        &ids::sku(SKU),
        &ids::adjustment("initial"),
        stockledger_core::RestockMode::Set,
        10,
    )
    .await?;
    p.limit(&ids::sku(SKU), Some(ids::qty(3))).await?;
    p.reserve_until(
        &ids::sku(SKU),
        &ids::order("held"),
        ids::qty(2),
        ids::at_ms(in_an_hour),
        Some(&ids::user("u1")),
    )
    .await?;
    p.reserve_until(
        &ids::sku(SKU),
        &ids::order("sold"),
        ids::qty(1),
        ids::at_ms(in_an_hour),
        Some(&ids::user("u2")),
    )
    .await?;
    let last = p.confirm(&ids::sku(SKU), &ids::order("sold")).await?;
    wait_until("the commands applied", CATCH_UP, || async {
        Ok((h.applied(&[SKU]).await? >= 5).then_some(()))
    })
    .await?;
    applier.stop().await?;
    let reference = h.fold_log().await?;
    assert_eq!(check::compare(&h.projection, &reference).await?, vec![]);

    let keys = SkuKeys::new(&h.ns.prefix, SKU);
    let mut redis = redis::Client::open(h.redis_url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let user = format!("{USER_FIELD_PREFIX}u1");
    let offset = last.position.offset.to_string();
    // (hash, field, the name the check must give); a number is raised by
    // one, anything else deleted.
    let corruptions = [
        (&keys.stock, AVAILABLE, "available"),
        (&keys.stock, TOTAL, "total"),
        (&keys.stock, RESERVED, "reserved"),
        (&keys.stock, LIMIT, "limit"),
        (&keys.stock, PARTITION, "partition"),
        (&keys.stock, OFFSET, "last offset"),
        (&keys.orders, user.as_str(), "users"),
        (&keys.orders, "sold", "order sold"),
        (&keys.adjustments, "initial", "adjustments"),
        (&keys.decisions, offset.as_str(), "decision at offset"),
    ];
    for (key, field, name) in corruptions {
        let right: Option<String> = redis.hget(key, field).await?;
        let right = right.unwrap_or_else(|| panic!("{key} has no field {field}"));
        let wrong = match right.parse::<i64>() {
            Ok(n) if key == &keys.stock || field == user => {
                let _: () = redis.hset(key, field, n + 1).await?;
                format!("{}", n + 1)
            }
            _ => {
                let _: () = redis.hdel(key, field).await?;
                "deleted".to_owned()
            }
        };
        let mismatches = check::compare(&h.projection, &reference).await?;
        assert!(
            mismatches.len() == 1 && mismatches[0].detail.starts_with(name),
            "{field} {right} -> {wrong}: {mismatches:?}"
        );
        let _: () = redis.hset(key, field, &right).await?;
    }
    assert_eq!(check::compare(&h.projection, &reference).await?, vec![]);
    Ok(())
}
