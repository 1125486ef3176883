//! A flash sale that opens on a timer while a hundred buyers hammer the
//! door, against real services: nothing is sold before the opening by the
//! log's own timestamps, and a replay of that log refuses exactly the same.

use std::future::pending;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::try_join_all;
use stockledger_core::codec::decode_command;
use stockledger_core::{ChangeId, CommandBody, RestockMode, ResultCode};
use stockledger_maintenance::replay::{replay, ReplayConfig};
use stockledger_projection::Projection;
use stockledger_testkit::harness::CATCH_UP;
use stockledger_testkit::{ids, Harness};

const BUYERS: usize = 100;
const UNITS: i64 = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_buyers_before_the_opening_get_nothing_early_and_a_replay_agrees(
) -> anyhow::Result<()> {
    let h = Harness::new("sale-window", 2).await?;
    let applier = h.start_applier();
    let buyers = h
        .ledger_builder()
        .decisions_from_redis(&h.redis_url, &h.ns.prefix)
        .build()
        .await?;
    let sku = ids::sku("FLASH");
    let stocked = buyers
        .restock(&sku, &ids::adjustment("a1"), RestockMode::Set, UNITS)
        .await?;
    assert_eq!(buyers.decision(&stocked).await?.result, ResultCode::Applied);
    let opens = SystemTime::now() + Duration::from_secs(3);
    let opens_at = i64::try_from(opens.duration_since(UNIX_EPOCH)?.as_millis())?;
    let window = buyers
        .window(&sku, &ChangeId::new("opening")?, Some(opens), None)
        .await?;
    assert_eq!(buyers.decision(&window).await?.result, ResultCode::Applied);

    // Each buyer asks for one unit at once, and again every 100 ms while
    // the answer is "not open yet", for at most half a minute.
    let answers = try_join_all((0..BUYERS).map(|b| {
        let (buyers, sku) = (&buyers, &sku);
        async move {
            let order = ids::order(format!("o{b}"));
            let deadline = tokio::time::Instant::now() + CATCH_UP;
            let mut early = 0;
            loop {
                let receipt = buyers.deduct(sku, &order, ids::qty(1), None).await?;
                let decision = buyers.decision(&receipt).await?;
                if decision.result != ResultCode::RejectedNotOpen
                    || tokio::time::Instant::now() > deadline
                {
                    return anyhow::Ok((decision.result, early));
                }
                early += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }))
    .await?;
    let granted = answers
        .iter()
        .filter(|(r, _)| *r == ResultCode::Applied)
        .count();
    let early: u32 = answers.iter().map(|(_, e)| e).sum();
    assert_eq!(granted, UNITS as usize, "{answers:?}");
    assert!(
        answers
            .iter()
            .all(|(r, _)| matches!(r, ResultCode::Applied | ResultCode::RejectedInsufficient)),
        "{answers:?}"
    );
    assert!(early >= BUYERS as u32, "every buyer came early: {early}");

    // By the log's own timestamps, as Redis decided them: every grant at or
    // after the opening, every "not open" before it.
    let records = h.read(&h.ns.topic).await?;
    let state = h
        .projection
        .read_sku("FLASH")
        .await?
        .expect("FLASH has state");
    let (mut granted_at, mut refused_at) = (Vec::new(), Vec::new());
    for record in &records {
        let Some(command) = record.payload.as_deref().map(decode_command).transpose()? else {
            continue;
        };
        if !matches!(command.body, CommandBody::Deduct(_)) {
            continue;
        }
        let time = record.timestamp.expect("records carry their time");
        match state.decisions.get(&record.offset).map(|d| d.result) {
            Some(ResultCode::Applied) => granted_at.push(time),
            Some(ResultCode::RejectedNotOpen) => refused_at.push(time),
            _ => {}
        }
    }
    assert_eq!(granted_at.len(), UNITS as usize);
    assert!(granted_at.iter().all(|&t| t >= opens_at), "{granted_at:?}");
    assert_eq!(refused_at.len(), early as usize);
    assert!(refused_at.iter().all(|&t| t < opens_at), "{refused_at:?}");
    applier.stop().await?;

    // A replay of the same log into a prefix of its own decides every
    // record as the live run did.
    let again = format!("{}:again", h.ns.prefix);
    let config = ReplayConfig::new(
        h.kafka.clone(),
        h.redis_url.clone(),
        h.ns.topic.clone(),
        again.clone(),
    );
    replay(config, pending(), |_| {}).await?;
    let replayed = Projection::connect(&h.redis_url, again)
        .await?
        .read_sku("FLASH")
        .await?
        .expect("the replay has FLASH");
    assert_eq!(replayed.decisions, state.decisions);
    assert_eq!(replayed, state);
    Ok(())
}
