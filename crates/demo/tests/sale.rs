//! The demo's checkout, run from its library through a test's own
//! pipeline: the contract's checks pass, and they fail on a broken state.

use std::time::{Duration, SystemTime, UNIX_EPOCH};
use stockledger_demo::{self as demo, Workload, HOT_SKU};

use stockledger_core::{
    AdjustmentId, ChangeId, CommandBody, OrderStatus, Restock, RestockMode, Sku,
};
use stockledger_testkit::harness::CATCH_UP;
use stockledger_testkit::ids;
use stockledger_testkit::Harness;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_sale_keeps_the_contract_and_its_checks_catch_a_corrupted_projection(
) -> anyhow::Result<()> {
    let h = Harness::new("demo-sale", 4).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    let buyers = h
        .ledger_builder()
        .decisions_from_redis(&h.redis_url, &h.ns.prefix)
        .decision_timeout(demo::DECISION_WAIT)
        .build()
        .await?;
    h.ledger
        .restock(
            &ids::sku(HOT_SKU),
            &ids::adjustment("initial"),
            RestockMode::Set,
            40,
        )
        .await?;
    h.ledger
        .limit(&ids::sku(HOT_SKU), Some(ids::qty(1)))
        .await?;
    // The sale opens in a moment; the buyers start now.
    let opens = SystemTime::now() + Duration::from_millis(1_500);
    h.ledger
        .window(
            &ids::sku(HOT_SKU),
            &ChangeId::new("opening")?,
            Some(opens),
            None,
        )
        .await?;
    let opens_at = i64::try_from(opens.duration_since(UNIX_EPOCH)?.as_millis())?;
    for (sku, stock) in demo::BASKET_SKUS.into_iter().zip([20, 15]) {
        h.ledger
            .restock(
                &ids::sku(sku),
                &ids::adjustment("initial"),
                RestockMode::Set,
                stock,
            )
            .await?;
    }
    // A small hall: 30 seats for 40 parties of 1 to 4.
    let hall: Vec<String> = (0..30).map(demo::seat_name).collect();
    let seats_on_sale = CommandBody::Restock(Restock::units(AdjustmentId::new("hall")?, &hall)?);
    h.ledger
        .send(&Sku::new(demo::SHOW_SKU)?, seats_on_sale)
        .await?;
    let workload = Workload {
        orders: 300,
        buyers: 30,
        hold_ms: 1_000,
        cancel_percent: 20,
        abandon_percent: 20,
        refund_percent: 10,
        duplicate_percent: 5,
        early_rollback_percent: 3,
        seed: 7,
    };
    let (sent, baskets, seats) = tokio::try_join!(
        demo::buy(&buyers, &workload),
        demo::buy_baskets(&buyers, "demo-test", 60, 10, 1_000, 7),
        demo::buy_seats(&buyers, "demo-test", (30, 40, 8), 1_000, 7)
    )?;
    assert!(
        seats.paid > 0 && seats.refused > 0 && !seats.sold.is_empty(),
        "{seats:?}"
    );
    assert!(
        baskets.paid > 0 && baskets.refused > 0 && baskets.abandoned > 0,
        "{baskets:?}"
    );
    assert!(
        sent.records >= 300 && sent.cancelled > 0 && sent.abandoned > 0 && sent.refunded > 0,
        "{sent:?}"
    );
    assert!(
        sent.not_open > 0,
        "buyers came before the opening: {sent:?}"
    );
    let records = demo::settle(&h.kafka, &h.pool, &h.projection, &h.ns.topic, CATCH_UP).await?;
    applier.stop().await?;
    archiver.stop().await?;

    let run = demo::Run {
        kafka: &h.kafka,
        pool: &h.pool,
        projection: &h.projection,
        topic: &h.ns.topic,
        archived: records,
        baskets: &baskets.ids,
        seats: Some(&seats),
        opens_at: Some(opens_at),
    };
    let checks = demo::check_contract(&run, CATCH_UP).await?;
    assert_eq!(
        checks.len(),
        8,
        "the baskets', the seats' and the opening's checks too"
    );
    assert!(checks.iter().all(|c| c.ok), "{checks:#?}");
    // Had the sale opened ten minutes later, every order granted would have
    // been granted before it: caught.
    let later = demo::Run {
        opens_at: Some(opens_at + 600_000),
        ..run
    };
    let checks = demo::check_contract(&later, CATCH_UP).await?;
    assert!(
        !checks[7].ok && !checks[7].what.contains(", 0 granted early"),
        "{checks:#?}"
    );
    let state = h
        .projection
        .read_sku(HOT_SKU)
        .await?
        .expect("the hot SKU has state");
    assert_eq!(state.reserved, 0, "every hold ended");
    let expired = state
        .orders
        .values()
        .filter(|o| o.status == OrderStatus::Expired)
        .count();
    assert!(expired > 0, "abandoned holds expired by themselves");

    // A unit conjured into Redis behind the applier's back is caught.
    let stock = stockledger_projection::keys::SkuKeys::new(&h.ns.prefix, HOT_SKU).stock;
    let _: () = redis::cmd("HINCRBY")
        .arg(&stock)
        .arg("available")
        .arg(1)
        .query_async(&mut h.projection.connection())
        .await?;
    let checks = demo::check_contract(&run, CATCH_UP).await?;
    assert!(!checks[1].ok, "{checks:#?}");
    assert!(checks[1].what.contains("available"), "{}", checks[1].what);

    // A hold that never ended is caught.
    let orders = stockledger_projection::keys::SkuKeys::new(&h.ns.prefix, HOT_SKU).orders;
    let _: () = redis::cmd("HSET")
        .arg(&orders)
        .arg("stuck")
        .arg("H|1|1|1700000000000|0|")
        .query_async(&mut h.projection.connection())
        .await?;
    let checks = demo::check_contract(&run, CATCH_UP).await?;
    assert!(!checks[3].ok, "{checks:#?}");
    assert!(
        checks[3].what.contains("1 still held"),
        "{}",
        checks[3].what
    );

    // A seat sold behind the ledger's back is caught.
    let free = h
        .projection
        .units(demo::SHOW_SKU)
        .await?
        .into_iter()
        .find(|(_, unit)| *unit == stockledger_core::Unit::Available)
        .map(|(seat, _)| seat)
        .expect("a free seat");
    let show = stockledger_projection::keys::SkuKeys::new(&h.ns.prefix, demo::SHOW_SKU).orders;
    let place: String = redis::cmd("HGET")
        .arg(&show)
        .arg(format!("{{unit}}{free}"))
        .query_async(&mut h.projection.connection())
        .await?;
    let _: () = redis::cmd("HSET")
        .arg(&show)
        .arg(format!("{{unit}}{free}"))
        .arg(format!("{place}Sintruder"))
        .query_async(&mut h.projection.connection())
        .await?;
    let checks = demo::check_contract(&run, CATCH_UP).await?;
    assert!(!checks[6].ok, "{checks:#?}");
    assert!(
        checks[6].what.contains("1 seats disagree"),
        "{}",
        checks[6].what
    );
    Ok(())
}
