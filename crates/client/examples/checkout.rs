//! A checkout as an order service would run it, against a running ledger
//! (`stockledger topics create` and `stockledger apply`):
//!
//! ```sh
//! cargo run -p stockledger-client --example checkout            # 127.0.0.1:9092
//! KAFKA_BROKERS=host:9092 STOCKLEDGER_TOPIC=… cargo run -p stockledger-client --example checkout
//! ```
//!
//! It stocks a SKU with two units, limits each buyer to one, then: a buyer
//! holds a unit and pays (confirmed); a second holds one and cancels
//! (released); the first tries a second unit (over the limit); a third buys
//! the last unit outright, and a fourth finds none left. It prints each decision and exits 1 unless each
//! is what the ledger's rules give.

use std::process::ExitCode;
use std::time::Duration;

use stockledger_client::{
    AdjustmentId, Ledger, OrderId, Quantity, Receipt, RestockMode, ResultCode, Sku, UserId,
};

#[tokio::main]
async fn main() -> ExitCode {
    match checkout().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

async fn checkout() -> Result<bool, Box<dyn std::error::Error>> {
    let env = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.into());
    let ledger = Ledger::builder()
        .brokers(env("KAFKA_BROKERS", "127.0.0.1:9092"))
        .topic(env("STOCKLEDGER_TOPIC", "stock.ledger"))
        .outcomes_topic(env("STOCKLEDGER_OUTCOMES_TOPIC", "stock.ledger.outcomes"))
        .decision_timeout(Duration::from_secs(30))
        .build()
        .await?;
    // A run of its own: a SKU no earlier run has touched.
    let run = uuid_like();
    let sku = Sku::new(format!("CHECKOUT-{run}"))?;
    let order = |n: u32| OrderId::new(format!("{run}-order-{n}"));
    let ann = UserId::new("ann")?;
    let bob = UserId::new("bob")?;
    let cat = UserId::new("cat")?;
    let dan = UserId::new("dan")?;
    let one = Quantity::new(1)?;
    let hold = Duration::from_secs(15 * 60);

    let mut steps: Vec<(&str, Receipt, ResultCode)> = Vec::new();
    let stocked = ledger
        .restock(
            &sku,
            &AdjustmentId::new(format!("{run}-stock"))?,
            RestockMode::Set,
            2,
        )
        .await?;
    steps.push(("stock two units", stocked, ResultCode::Applied));
    let limited = ledger.limit(&sku, Some(one)).await?;
    steps.push(("one per buyer", limited, ResultCode::Applied));

    let held = ledger
        .reserve(&sku, &order(1)?, one, hold, Some(&ann))
        .await?;
    steps.push(("ann holds one", held, ResultCode::Applied));
    let paid = ledger.confirm(&sku, &order(1)?).await?;
    steps.push(("ann pays", paid, ResultCode::Confirmed));

    let held = ledger
        .reserve(&sku, &order(2)?, one, hold, Some(&bob))
        .await?;
    steps.push(("bob holds one", held, ResultCode::Applied));
    let cancelled = ledger
        .rollback(&sku, &order(2)?, Some("cart emptied"))
        .await?;
    steps.push(("bob cancels", cancelled, ResultCode::Applied));

    let again = ledger
        .reserve(&sku, &order(3)?, one, hold, Some(&ann))
        .await?;
    steps.push(("ann wants another", again, ResultCode::RejectedLimit));
    let bought = ledger.deduct(&sku, &order(4)?, one, Some(&cat)).await?;
    steps.push(("cat buys the last", bought, ResultCode::Applied));
    let late = ledger
        .reserve(&sku, &order(5)?, one, hold, Some(&dan))
        .await?;
    steps.push(("dan is too late", late, ResultCode::RejectedInsufficient));

    let mut all_as_expected = true;
    for (what, receipt, expected) in &steps {
        let decision = ledger.decision(receipt).await?;
        let ok = decision.result == *expected;
        all_as_expected &= ok;
        println!(
            "{} {what:<20} {} -> {} (available {})",
            if ok { "ok  " } else { "FAIL" },
            receipt.position,
            decision.result,
            decision.available
        );
    }
    Ok(all_as_expected)
}

/// A name for this run from the clock (no extra dependency for an example).
fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{nanos:x}")
}
