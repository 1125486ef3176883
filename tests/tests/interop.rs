//! Order services in other languages publish commands and read decisions
//! knowing only the schemas and docs/producers.md, each with libraries that are not
//! ours: `examples/python` (confluent-kafka, fastavro), `examples/java`
//! (Apache's kafka-clients and Avro), `examples/go` (franz-go, hamba/avro)
//! and `examples/node` (@platformatic/kafka, avsc). The Python one's commands
//! must be decided exactly as the same commands sent through the Rust
//! library: same partition per SKU, same decisions. The other three run one
//! checkout per SKU and check every decision themselves.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;
use stockledger_client::RedisDecisions;
use stockledger_core::{
    AdjustmentId, CommandBody, Deduct, OrderId, Restock, RestockMode, Sku, UserId,
};
use stockledger_testkit::harness::CATCH_UP;
use stockledger_testkit::ids;
use stockledger_testkit::Harness;

const PARTITIONS: i32 = 6;

fn example(language: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../examples/{language}/run.sh"))
}

/// Runs `examples/<language>` against `h`'s topics with `skus` SKUs named
/// `<prefix>-<n>`; its standard output.
async fn run_example(
    h: &Harness,
    language: &str,
    prefix: &str,
    skus: usize,
    extra: &[&str],
) -> anyhow::Result<String> {
    let mut command = Command::new(example(language));
    let skus = skus.to_string();
    command
        .args(["--brokers", &h.kafka.brokers, "--topic", &h.ns.topic])
        .args(["--outcomes-topic", &h.ns.outcomes_topic])
        .args(["--sku-prefix", prefix, "--skus", &skus])
        .args(extra);
    let output = tokio::task::spawn_blocking(move || command.output()).await??;
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(
        output.status.success(),
        "the {language} order service failed ({}):\n{stderr}",
        output.status
    );
    eprintln!("{language}: {}", stderr.trim_end());
    Ok(String::from_utf8(output.stdout)?)
}

/// The checkout of the Java, Go and Node.js examples: restock 5, hold 2 and
/// confirm it, deduct 2 and roll it back, deduct 1 twice, ask for 5.
const CHECKOUT: [(&str, &str); 8] = [
    ("RESTOCK", "APPLIED"),
    ("DEDUCT", "APPLIED"),
    ("CONFIRM", "CONFIRMED"),
    ("DEDUCT", "APPLIED"),
    ("ROLLBACK", "APPLIED"),
    ("DEDUCT", "APPLIED"),
    ("DEDUCT", "DUPLICATE"),
    ("DEDUCT", "REJECTED_INSUFFICIENT"),
];

/// Runs the checkout example in `language` on topics of its own and checks
/// what it printed, the dead letters and the projection.
async fn checkout_in(language: &str) -> anyhow::Result<()> {
    const SKUS: usize = 4;
    let h = Harness::new(&format!("interop-{language}"), PARTITIONS).await?;
    let applier = h.start_applier();
    let prefix = language.to_uppercase();
    let printed = run_example(&h, language, &prefix, SKUS, &[]).await?;
    // One line per command: SKU KIND TOPIC@PARTITION RESULT, in send order.
    let lines: Vec<Vec<&str>> = printed.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines.len(), SKUS * CHECKOUT.len(), "{printed}");
    for (i, line) in lines.iter().enumerate() {
        let (kind, result) = CHECKOUT[i % CHECKOUT.len()];
        let sku = format!("{prefix}-{}", i / CHECKOUT.len());
        assert_eq!(
            (line[0], line[1], line[3]),
            (sku.as_str(), kind, result),
            "{language}, command {i}"
        );
    }
    assert!(
        h.read(&h.ns.dlq_topic).await?.is_empty(),
        "nothing dead-lettered"
    );
    let skus: Vec<String> = (0..SKUS).map(|n| format!("{prefix}-{n}")).collect();
    let skus: Vec<&str> = skus.iter().map(String::as_str).collect();
    for (sku, stock) in skus.iter().zip(h.projection.stock(&skus).await?) {
        // 5, less 2 confirmed, less 1 sold; the rolled-back 2 came back.
        assert_eq!(stock.map(|s| s.available), Some(2), "{sku}");
    }
    h.assert_projection_matches_log().await?;
    applier.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_order_service_with_the_official_clients_gets_every_decision_right(
) -> anyhow::Result<()> {
    checkout_in("java").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_order_service_gets_every_decision_right() -> anyhow::Result<()> {
    checkout_in("go").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_order_service_gets_every_decision_right() -> anyhow::Result<()> {
    checkout_in("node").await
}

/// Runs the Python order service against `h`'s topics; its decided commands.
async fn run_python(h: &Harness) -> anyhow::Result<Vec<Value>> {
    run_example(h, "python", "INTEROP", 6, &["--json"])
        .await?
        .lines()
        .map(|line| Ok(serde_json::from_str(line)?))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_order_service_is_decided_exactly_as_the_rust_library() -> anyhow::Result<()> {
    let python = Harness::new("interop-python", PARTITIONS).await?;
    let applier = python.start_applier();
    let decided = run_python(&python).await?;
    assert_eq!(
        decided.len(),
        76,
        "twelve commands for each of six SKUs, four for a show's seats"
    );
    assert!(python.read(&python.ns.dlq_topic).await?.is_empty());
    python.assert_projection_matches_log().await?;
    applier.stop().await?;

    // The same commands, in the same order, through the Rust library.
    let rust = Harness::new("interop-rust", PARTITIONS).await?;
    let applier = rust.start_applier();
    let reader = RedisDecisions::connect(&rust.redis_url, &rust.ns.prefix).await?;
    let mut partitions = std::collections::BTreeSet::new();
    for entry in &decided {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let (sku, body) = (text(&entry["sku"]), &entry["body"]);
        let units: Option<Vec<&str>> = body["units"]
            .as_array()
            .map(|names| names.iter().filter_map(Value::as_str).collect());
        let receipt = match entry["kind"].as_str() {
            Some("DEDUCT") if units.is_some() => {
                let order = OrderId::new(text(&body["order_id"]))?;
                let taken = Deduct::taking(order, body["quantity"].as_i64(), units.as_deref())?;
                let user_id = body["user_id"].as_str().map(UserId::new).transpose()?;
                let deduct = Deduct {
                    user_id,
                    expires_at: body["expires_at"].as_i64(),
                    ..taken
                };
                rust.ledger
                    .send(&Sku::new(sku.clone())?, CommandBody::Deduct(deduct))
                    .await?
            }
            Some("RESTOCK") if units.is_some() => {
                let id = AdjustmentId::new(text(&body["adjustment_id"]))?;
                let restock = Restock::units(id, units.as_deref().unwrap_or_default())?;
                rust.ledger
                    .send(&Sku::new(sku.clone())?, CommandBody::Restock(restock))
                    .await?
            }
            Some("DEDUCT") => {
                let (order, quantity) = (text(&body["order_id"]), body["quantity"].as_i64());
                let quantity = quantity.unwrap_or_default();
                match body["expires_at"].as_i64() {
                    Some(expires_at) => {
                        let user = body["user_id"].as_str();
                        rust.ledger
                            .reserve_until(
                                &ids::sku(&sku),
                                &ids::order(&order),
                                ids::qty(quantity),
                                ids::at_ms(expires_at),
                                user.map(ids::user).as_ref(),
                            )
                            .await?
                    }
                    None => {
                        rust.ledger
                            .deduct(
                                &ids::sku(&sku),
                                &ids::order(&order),
                                ids::qty(quantity),
                                None,
                            )
                            .await?
                    }
                }
            }
            Some("CONFIRM") => {
                rust.ledger
                    .confirm(&ids::sku(&sku), &ids::order(text(&body["order_id"])))
                    .await?
            }
            Some("ROLLBACK") => {
                let reason = body["reason"].as_str().map(str::to_owned);
                rust.ledger
                    .rollback(
                        &ids::sku(&sku),
                        &ids::order(text(&body["order_id"])),
                        reason.as_deref(),
                    )
                    .await?
            }
            Some("RESTOCK") => {
                assert_eq!(body["mode"], "SET");
                let quantity = body["quantity"].as_i64().unwrap_or_default();
                let id = text(&body["adjustment_id"]);
                rust.ledger
                    .restock(
                        &ids::sku(&sku),
                        &ids::adjustment(&id),
                        RestockMode::Set,
                        quantity,
                    )
                    .await?
            }
            other => anyhow::bail!("unexpected kind {other:?}"),
        };
        assert_eq!(
            i64::from(receipt.position.partition),
            entry["partition"].as_i64().unwrap_or(-1),
            "{sku}: the Python producer and the Rust library chose different partitions"
        );
        partitions.insert(receipt.position.partition);
        let decision = reader.wait(&receipt, CATCH_UP).await?;
        let got = (
            decision.result.as_str(),
            decision.delta,
            decision.available,
            decision.total,
        );
        let expected = (
            entry["result"].as_str().unwrap_or_default(),
            entry["delta"].as_i64().unwrap_or_default(),
            entry["available_after"].as_i64().unwrap_or_default(),
            entry["total_after"].as_i64().unwrap_or_default(),
        );
        assert_eq!(got, expected, "{sku} {entry}");
    }
    assert!(
        partitions.len() > 1,
        "the SKUs spread over several partitions"
    );
    rust.assert_projection_matches_log().await?;
    applier.stop().await?;
    Ok(())
}

/// Builds (if need be) and runs `crates/client/examples/checkout.rs`
/// against `h`'s topics; its standard output.
fn run_rust_checkout(h: &Harness) -> anyhow::Result<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let built = Command::new(&cargo)
        .args(["build", "--quiet", "--locked", "-p", "stockledger-client"])
        .args(["--example", "checkout", "--message-format", "json"])
        .output()?;
    anyhow::ensure!(
        built.status.success(),
        "building the example: {}{}",
        String::from_utf8_lossy(&built.stderr),
        // The compiler's messages are on stdout, as JSON.
        String::from_utf8_lossy(&built.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|m| m["message"]["rendered"].as_str().map(str::to_owned))
            .collect::<String>()
    );
    // The executable, as cargo reports it.
    let executable = String::from_utf8(built.stdout)?
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .ok_or_else(|| anyhow::anyhow!("cargo did not name the example's executable"))?;
    let out = Command::new(executable)
        .env("KAFKA_BROKERS", &h.kafka.brokers)
        .env("STOCKLEDGER_TOPIC", &h.ns.topic)
        .env("STOCKLEDGER_OUTCOMES_TOPIC", &h.ns.outcomes_topic)
        .output()?;
    let printed = String::from_utf8(out.stdout)?;
    anyhow::ensure!(
        out.status.success(),
        "the Rust checkout failed ({}):\n{printed}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(printed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_checkout_example_gets_every_decision_from_the_outcomes_topic(
) -> anyhow::Result<()> {
    let h = Harness::new("interop-rust", PARTITIONS).await?;
    let applier = h.start_applier();
    let printed = tokio::task::block_in_place(|| run_rust_checkout(&h))?;
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines.len(), 9, "{printed}");
    assert!(lines.iter().all(|l| l.starts_with("ok ")), "{printed}");
    for expected in ["CONFIRMED", "REJECTED_LIMIT", "REJECTED_INSUFFICIENT"] {
        assert!(printed.contains(expected), "{expected}: {printed}");
    }
    assert!(
        h.read(&h.ns.dlq_topic).await?.is_empty(),
        "nothing dead-lettered"
    );
    h.assert_projection_matches_log().await?;
    applier.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_ledger_built_with_its_checks_refuses_before_sending() -> anyhow::Result<()> {
    use stockledger_client::{
        AdjustmentId, Ledger, OrderId, ProducerError, Quantity, RestockMode, ResultCode, Sku,
    };

    let h = Harness::new("ledger-checks", 2).await?;
    let applier = h.start_applier();
    let ledger = Ledger::builder()
        .kafka(h.kafka.clone())
        .topic(h.ns.topic.clone())
        .outcomes_topic(h.ns.outcomes_topic.clone())
        .decision_timeout(CATCH_UP)
        .order_checks(h.redis_url.clone(), h.ns.prefix.clone())
        .sold_out_guard(h.redis_url.clone(), h.ns.prefix.clone())
        .build()
        .await?;
    let sku = Sku::new("LC-1")?;
    let one = Quantity::new(1)?;
    let stocked = ledger
        .restock(&sku, &AdjustmentId::new("a")?, RestockMode::Set, 1)
        .await?;
    assert_eq!(ledger.decision(&stocked).await?.result, ResultCode::Applied);
    let bought = ledger
        .deduct(&sku, &OrderId::new("o-1")?, one, None)
        .await?;
    assert_eq!(ledger.decision(&bought).await?.result, ResultCode::Applied);
    let before = h.read(&h.ns.topic).await?.len();

    // Sold out: refused here, not logged.
    let refused = ledger.deduct(&sku, &OrderId::new("o-2")?, one, None).await;
    assert!(
        matches!(refused, Err(ProducerError::SoldOut(_))),
        "{refused:?}"
    );
    // A confirm of an order the ledger never held: refused naming the field.
    let refused = ledger.confirm(&sku, &OrderId::new("nobody")?).await;
    assert!(
        matches!(&refused, Err(ProducerError::Invalid(e)) if e.field == "order_id"),
        "{refused:?}"
    );
    assert_eq!(h.read(&h.ns.topic).await?.len(), before, "nothing sent");
    applier.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_ledger_told_to_read_decisions_from_redis_needs_no_outcomes_topic(
) -> anyhow::Result<()> {
    use stockledger_client::{
        AdjustmentId, BuildError, Ledger, OrderId, Quantity, RestockMode, ResultCode, Sku,
    };

    let h = Harness::new("ledger-redis-decisions", 2).await?;
    let applier = h.start_applier();
    // An outcomes topic that does not exist: a ledger reading it would not
    // build (`decisions cannot be read`), so every decision below comes
    // from Redis.
    let ledger = Ledger::builder()
        .kafka(h.kafka.clone())
        .topic(h.ns.topic.clone())
        .outcomes_topic(format!("{}.nowhere", h.ns.topic))
        .decision_timeout(CATCH_UP)
        .decisions_from_redis(h.redis_url.clone(), h.ns.prefix.clone())
        .build()
        .await?;
    let sku = Sku::new("LR-1")?;
    let stocked = ledger
        .restock(&sku, &AdjustmentId::new("a")?, RestockMode::Set, 1)
        .await?;
    assert_eq!(ledger.decision(&stocked).await?.result, ResultCode::Applied);
    let one = Quantity::new(1)?;
    let bought = ledger
        .deduct(&sku, &OrderId::new("o-1")?, one, None)
        .await?;
    let decision = ledger.decision(&bought).await?;
    assert_eq!(
        (decision.result, decision.available),
        (ResultCode::Applied, 0)
    );
    let late = ledger
        .deduct(&sku, &OrderId::new("o-2")?, one, None)
        .await?;
    assert_eq!(
        ledger.decision(&late).await?.result,
        ResultCode::RejectedInsufficient
    );
    applier.stop().await?;

    // A Redis URL that is none: refused at build, saying what was asked.
    let refused = Ledger::builder()
        .kafka(h.kafka.clone())
        .decisions_from_redis("http://127.0.0.1:6379", h.ns.prefix.clone())
        .build()
        .await;
    match refused {
        Err(e @ BuildError::DecisionsFromRedis(_)) => {
            assert!(e.to_string().contains("Redis"), "{e}");
        }
        other => panic!("expected DecisionsFromRedis, got {other:?}"),
    }
    Ok(())
}
