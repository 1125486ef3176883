//! Reservations end to end: a hold on a SKU that sees no further traffic
//! expires by a record the applier's expirer appends, the log alone
//! decides it (the reference fold of the log equals Redis), limits and
//! refunds hold, and the archive keeps the buyer and the deadline.

use std::time::Duration;

use stockledger_client::producer::{ProducerError, Receipt};
use stockledger_client::{OrderChecks, RedisDecisions, SoldOutGuard};
use stockledger_core::{
    CommandBody, Decision, OrderStatus, Quantity, RestockMode, ResultCode, UserId,
};
use stockledger_runtime::clock::now_ms;
use stockledger_testkit::ids;
use stockledger_testkit::{wait_until, Harness};

async fn decided(reader: &RedisDecisions, receipt: Receipt) -> anyhow::Result<Decision> {
    Ok(reader.wait(&receipt, Duration::from_secs(30)).await?)
}

fn refused_field(e: ProducerError) -> &'static str {
    match e {
        ProducerError::Invalid(v) => v.field,
        other => panic!("expected a refused field, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_skus_hold_expires_by_the_log_while_limits_and_refunds_hold() -> anyhow::Result<()>
{
    let h = Harness::new("reservations", 2).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    let reader = RedisDecisions::connect(&h.redis_url, h.ns.prefix.clone()).await?;
    let wait = Duration::from_secs(30);

    let p = &h.ledger;
    assert_eq!(
        decided(
            &reader,
            p.restock(
                &ids::sku("SKU-R"),
                &ids::adjustment("a0"),
                RestockMode::Set,
                5
            )
            .await?
        )
        .await?
        .result,
        ResultCode::Applied
    );
    assert_eq!(
        decided(
            &reader,
            p.limit(&ids::sku("SKU-R"), Some(ids::qty(2))).await?
        )
        .await?
        .result,
        ResultCode::Applied
    );

    // u1 holds 2 for a moment; a third unit is over u1's limit.
    let deadline = now_ms() + 1_500;
    let held = decided(
        &reader,
        p.reserve_until(
            &ids::sku("SKU-R"),
            &ids::order("a"),
            ids::qty(2),
            ids::at_ms(deadline),
            Some(&ids::user("u1")),
        )
        .await?,
    )
    .await?;
    assert_eq!((held.result, held.available), (ResultCode::Applied, 3));
    let over = decided(
        &reader,
        p.reserve_until(
            &ids::sku("SKU-R"),
            &ids::order("b"),
            ids::qty(1),
            ids::at_ms(deadline),
            Some(&ids::user("u1")),
        )
        .await?,
    )
    .await?;
    assert_eq!(over.result, ResultCode::RejectedLimit);
    // u2 buys 2 and has 1 refunded (a running total: sent twice, refunded once).
    let c_deadline = now_ms() + 60_000;
    decided(
        &reader,
        p.reserve_until(
            &ids::sku("SKU-R"),
            &ids::order("c"),
            ids::qty(2),
            ids::at_ms(c_deadline),
            Some(&ids::user("u2")),
        )
        .await?,
    )
    .await?;
    assert_eq!(
        decided(
            &reader,
            p.confirm(&ids::sku("SKU-R"), &ids::order("c")).await?
        )
        .await?
        .result,
        ResultCode::Confirmed
    );
    assert_eq!(
        decided(
            &reader,
            p.refund(&ids::sku("SKU-R"), &ids::order("c"), Some(ids::qty(1)))
                .await?
        )
        .await?
        .result,
        ResultCode::Refunded
    );
    assert_eq!(
        decided(
            &reader,
            p.refund(&ids::sku("SKU-R"), &ids::order("c"), Some(ids::qty(1)))
                .await?
        )
        .await?
        .result,
        ResultCode::Duplicate
    );
    let too_much = decided(
        &reader,
        p.refund(&ids::sku("SKU-R"), &ids::order("c"), Some(ids::qty(3)))
            .await?,
    )
    .await?;
    assert_eq!(too_much.result, ResultCode::RejectedRefund);

    // Nothing more is sent for SKU-R: the expirer must end hold "a".
    let expired = wait_until("hold a to expire", Duration::from_secs(30), || async {
        let order = h.projection.order("SKU-R", "a").await?;
        Ok(order.filter(|o| o.status == OrderStatus::Expired))
    })
    .await?;
    assert_eq!(expired.quantity, 2);
    let state = h
        .projection
        .read_sku("SKU-R")
        .await?
        .expect("SKU-R has state");
    assert_eq!((state.available, state.reserved, state.total), (4, 0, 5));
    assert_eq!(state.users.get("u1"), None, "expired units stop counting");
    assert_eq!(state.users.get("u2"), Some(&1));
    let late = decided(
        &reader,
        p.confirm(&ids::sku("SKU-R"), &ids::order("a")).await?,
    )
    .await?;
    assert_eq!(late.result, ResultCode::RejectedExpired);
    // With the order checks, a refund above what was bought, and a confirm
    // or refund of an unknown order, are refused before they are published
    // (no hold is left to expire, so the log must not grow).
    let checked = h
        .ledger_builder()
        .order_checks_from(OrderChecks::new(h.projection.clone()))
        .build()
        .await?;
    let logged = h.read(&h.ns.topic).await?.len();
    assert_eq!(
        refused_field(
            checked
                .refund(&ids::sku("SKU-R"), &ids::order("c"), Some(ids::qty(3)))
                .await
                .unwrap_err()
        ),
        "quantity"
    );
    assert_eq!(
        refused_field(
            checked
                .confirm(&ids::sku("SKU-R"), &ids::order("nobody"))
                .await
                .unwrap_err()
        ),
        "order_id"
    );
    assert_eq!(
        refused_field(
            checked
                .refund(&ids::sku("SKU-R"), &ids::order("nobody"), None)
                .await
                .unwrap_err()
        ),
        "order_id"
    );
    assert_eq!(
        h.read(&h.ns.topic).await?.len(),
        logged,
        "nothing was published"
    );
    // The checks ask the machine: a refund it refuses is refused with its
    // reason; a repeat of the total reached is harmless and is sent (the
    // log answers DUPLICATE).
    match checked
        .refund(&ids::sku("SKU-R"), &ids::order("c"), Some(ids::qty(3)))
        .await
    {
        Err(ProducerError::Invalid(v)) => assert!(
            v.to_string().contains("more than the 2 units bought"),
            "{v}"
        ),
        other => panic!("expected the machine's refusal, got {other:?}"),
    }
    let repeat = checked
        .refund(&ids::sku("SKU-R"), &ids::order("c"), Some(ids::qty(1)))
        .await?;
    assert_eq!(
        decided(&reader, repeat).await?.result,
        ResultCode::Duplicate
    );

    // The log alone decides: its reference fold (expire records and their
    // timestamps included) is what Redis holds.
    h.assert_projection_matches_log().await?;

    // Bad input is refused before anything is sent.
    assert_eq!(
        refused_field(
            p.reserve_until(
                &ids::sku("SKU-R"),
                &ids::order("d"),
                ids::qty(1),
                ids::at_ms(now_ms() - 1),
                None
            )
            .await
            .unwrap_err()
        ),
        "expires_at"
    );
    let far = now_ms() + 8 * 24 * 3_600_000;
    assert_eq!(
        refused_field(
            p.reserve_until(
                &ids::sku("SKU-R"),
                &ids::order("d"),
                ids::qty(1),
                ids::at_ms(far),
                None
            )
            .await
            .unwrap_err()
        ),
        "expires_at"
    );
    // A quantity or user id the rules refuse cannot be made.
    assert_eq!(Quantity::new(0).unwrap_err().field, "quantity");
    assert_eq!(UserId::new(" u").unwrap_err().field, "user_id");

    // The archive keeps the buyer, the deadline and the expiry.
    let rows: Vec<(String, String, Option<String>, Option<i64>)> =
        wait_until("the expiry in the archive", wait, || async {
            let rows: Vec<(String, String, Option<String>, Option<i64>)> = sqlx::query_as(
                "SELECT command, result, user_id,
                        (extract(epoch FROM expires_at) * 1000)::bigint
                 FROM ledger_entries WHERE topic = $1 AND order_id = 'a' ORDER BY log_offset",
            )
            .bind(&h.ns.topic)
            .fetch_all(&h.pool)
            .await?;
            Ok(rows.iter().any(|r| r.1 == "EXPIRED").then_some(rows))
        })
        .await?;
    assert_eq!(
        rows[0],
        (
            "DEDUCT".into(),
            "APPLIED".into(),
            Some("u1".into()),
            Some(deadline)
        )
    );
    assert!(
        rows.iter().any(|r| r.0 == "EXPIRE" && r.1 == "EXPIRED"),
        "{rows:?}"
    );
    // The analysts' view pairs each reservation with the record that ended
    // it (c's confirm is before a's expire on the SKU's partition, so it is
    // archived too).
    type Ended = (String, Option<String>, Option<String>, Option<String>);
    let ended: Vec<Ended> = sqlx::query_as(
        "SELECT order_id, user_id, ended_by, ended_with FROM ledger_reservations
         WHERE topic = $1 AND sku = 'SKU-R' ORDER BY order_id",
    )
    .bind(&h.ns.topic)
    .fetch_all(&h.pool)
    .await?;
    let some = |s: &str| Some(s.to_owned());
    assert_eq!(
        ended,
        vec![
            ("a".into(), some("u1"), some("EXPIRE"), some("EXPIRED")),
            ("c".into(), some("u2"), some("CONFIRM"), some("CONFIRMED")),
        ]
    );

    applier.stop().await?;
    archiver.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sold_out_fast_path_refuses_without_logging_only_when_nothing_can_come_back(
) -> anyhow::Result<()> {
    let h = Harness::new("sold-out", 1).await?;
    let applier = h.start_applier();
    let reader = RedisDecisions::connect(&h.redis_url, h.ns.prefix.clone()).await?;
    let guard = SoldOutGuard::new(h.projection.clone());
    let p = h
        .ledger_builder()
        .sold_out_guard_from(guard.clone())
        .build()
        .await?;

    // No state yet: not sold out (the first restock may be on its way).
    let early = decided(
        &reader,
        p.deduct(&ids::sku("SKU-S"), &ids::order("o0"), ids::qty(1), None)
            .await?,
    )
    .await?;
    assert_eq!(early.result, ResultCode::RejectedInsufficient);
    decided(
        &reader,
        p.restock(
            &ids::sku("SKU-S"),
            &ids::adjustment("a0"),
            RestockMode::Set,
            1,
        )
        .await?,
    )
    .await?;
    let hold = decided(
        &reader,
        p.reserve_until(
            &ids::sku("SKU-S"),
            &ids::order("o1"),
            ids::qty(1),
            ids::at_ms(now_ms() + 60_000),
            None,
        )
        .await?,
    )
    .await?;
    assert_eq!((hold.result, hold.available), (ResultCode::Applied, 0));
    // Nothing available but a unit held that may come back: logged.
    let logged = decided(
        &reader,
        p.deduct(&ids::sku("SKU-S"), &ids::order("o2"), ids::qty(1), None)
            .await?,
    )
    .await?;
    assert_eq!(logged.result, ResultCode::RejectedInsufficient);
    assert_eq!(guard.refused(), 0);
    decided(
        &reader,
        p.confirm(&ids::sku("SKU-S"), &ids::order("o1")).await?,
    )
    .await?;

    // Sold: refused here, and the log does not grow.
    let before = h.read(&h.ns.topic).await?.len();
    match p
        .deduct(&ids::sku("SKU-S"), &ids::order("o3"), ids::qty(1), None)
        .await
    {
        Err(ProducerError::SoldOut(s)) => {
            assert_eq!(s.sku, "SKU-S");
            assert!(format!("{}", ProducerError::SoldOut(s)).contains("not logged"));
        }
        other => panic!("expected a sold-out refusal, got {other:?}"),
    }
    assert_eq!(guard.refused(), 1);
    // Other commands pass the guard.
    decided(
        &reader,
        p.refund(&ids::sku("SKU-S"), &ids::order("o1"), None)
            .await?,
    )
    .await?;
    assert_eq!(h.read(&h.ns.topic).await?.len(), before + 1);
    // The refund brought a unit back: deducts are logged again.
    let again = decided(
        &reader,
        p.deduct(&ids::sku("SKU-S"), &ids::order("o4"), ids::qty(1), None)
            .await?,
    )
    .await?;
    assert_eq!(again.result, ResultCode::Applied);
    applier.stop().await?;
    Ok(())
}

/// The expires on the command log for `sku`: (order, stamped at).
async fn expires_logged(h: &Harness, sku: &str) -> anyhow::Result<Vec<(String, i64)>> {
    let mut expires = Vec::new();
    for record in h.read(&h.ns.topic).await? {
        let command =
            stockledger_core::codec::decode_command(record.payload.as_deref().unwrap_or_default())?;
        if let (true, CommandBody::Expire(e)) = (command.sku.as_str() == sku, &command.body) {
            expires.push((e.order_id.as_str().to_owned(), command.occurred_at));
        }
    }
    Ok(expires)
}

async fn status(h: &Harness, sku: &str, order: &str) -> anyhow::Result<Option<OrderStatus>> {
    Ok(h.projection.order(sku, order).await?.map(|o| o.status))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_applier_down_past_the_deadlines_holds_end_by_expires_logged_once_it_is_back(
) -> anyhow::Result<()> {
    let h = Harness::new("holds-applier-down", 2).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    let reader = RedisDecisions::connect(&h.redis_url, h.ns.prefix.clone()).await?;
    let p = &h.ledger;
    decided(
        &reader,
        p.restock(
            &ids::sku("SKU-D"),
            &ids::adjustment("d0"),
            RestockMode::Set,
            10,
        )
        .await?,
    )
    .await?;
    let deadline = now_ms() + 2_000;
    for order in ["kept", "late"] {
        let held = decided(
            &reader,
            p.reserve_until(
                &ids::sku("SKU-D"),
                &ids::order(order),
                ids::qty(2),
                ids::at_ms(deadline),
                Some(&ids::user("u1")),
            )
            .await?,
        )
        .await?;
        assert_eq!(held.result, ResultCode::Applied, "{order}");
    }
    applier.stop().await?;

    // The deadlines pass while no applier runs (the clock is this test's
    // subject: nothing else can be awaited).
    wait_until("the deadlines to pass", Duration::from_secs(30), || async {
        Ok((now_ms() > deadline + 500).then_some(()))
    })
    .await?;
    // A confirm reaches the log after the deadline, ahead of any expire.
    let late_confirm = p.confirm(&ids::sku("SKU-D"), &ids::order("late")).await?;
    for order in ["kept", "late"] {
        assert_eq!(
            status(&h, "SKU-D", order).await?,
            Some(OrderStatus::Reserved),
            "{order}: no clock ends a hold"
        );
    }
    assert!(expires_logged(&h, "SKU-D").await?.is_empty());

    let back = now_ms();
    let applier = h.start_applier();
    let confirmed = decided(&reader, late_confirm).await?;
    assert_eq!(
        (confirmed.result, confirmed.delta),
        (ResultCode::RejectedExpired, 2),
        "decided by the confirm's own timestamp; the hold ends with it"
    );
    wait_until("hold kept to expire", Duration::from_secs(30), || async {
        Ok((status(&h, "SKU-D", "kept").await? == Some(OrderStatus::Expired)).then_some(()))
    })
    .await?;
    assert_eq!(
        status(&h, "SKU-D", "late").await?,
        Some(OrderStatus::Expired)
    );
    let expires = expires_logged(&h, "SKU-D").await?;
    assert!(
        expires.iter().any(|(order, _)| order == "kept"),
        "{expires:?}"
    );
    assert!(
        expires.iter().all(|&(_, at)| at >= back),
        "expires are stamped once the applier is back ({back}): {expires:?}"
    );
    let state = h
        .projection
        .read_sku("SKU-D")
        .await?
        .expect("SKU-D has state");
    assert_eq!((state.available, state.reserved), (10, 0));
    h.assert_contract().await?;
    applier.stop().await?;
    archiver.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expire_lost_on_its_way_is_sent_again_after_five_seconds() -> anyhow::Result<()> {
    let h = Harness::new("lost-expire", 2).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    let reader = RedisDecisions::connect(&h.redis_url, h.ns.prefix.clone()).await?;
    let p = &h.ledger;
    decided(
        &reader,
        p.restock(
            &ids::sku("SKU-L"),
            &ids::adjustment("l0"),
            RestockMode::Set,
            10,
        )
        .await?,
    )
    .await?;
    let deadline = now_ms() + 2_000;
    let hold = p
        .reserve_until(
            &ids::sku("SKU-L"),
            &ids::order("lost"),
            ids::qty(3),
            ids::at_ms(deadline),
            None,
        )
        .await?;
    let partition = hold.position.partition;
    decided(&reader, hold).await?;
    applier.stop().await?;
    wait_until("the deadline to pass", Duration::from_secs(30), || async {
        Ok((now_ms() > deadline).then_some(()))
    })
    .await?;

    // What an expirer leaves behind when the expire it sent never reaches
    // the log: the hold deferred by RETRY_MS, and no record.
    let lost_at = now_ms();
    h.projection
        .defer_holds(
            partition,
            &[("SKU-L".to_owned(), "lost".to_owned())],
            lost_at + stockledger_applier::expiry::RETRY_MS,
        )
        .await?;
    let applier = h.start_applier();
    wait_until("the hold to expire", Duration::from_secs(30), || async {
        Ok((status(&h, "SKU-L", "lost").await? == Some(OrderStatus::Expired)).then_some(()))
    })
    .await?;
    let expires = expires_logged(&h, "SKU-L").await?;
    assert_eq!(expires.len(), 1, "one expire, sent again: {expires:?}");
    assert!(
        expires[0].1 >= lost_at + stockledger_applier::expiry::RETRY_MS,
        "sent again no sooner than {} ms after the lost one: {expires:?}",
        stockledger_applier::expiry::RETRY_MS
    );
    h.assert_contract().await?;
    applier.stop().await?;
    archiver.stop().await?;
    Ok(())
}
