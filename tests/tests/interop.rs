//! An order service in another language: `examples/python` (confluent-kafka
//! and fastavro, from PyPI) publishes commands and reads decisions knowing
//! only the schemas and the README. Its commands must be decided exactly as
//! the same commands sent through the Rust library: same partition per SKU,
//! same decisions.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;
use stockledger_client::OutcomeReader;
use stockledger_core::RestockMode;
use stockledger_testkit::harness::CATCH_UP;
use stockledger_testkit::Harness;

const PARTITIONS: i32 = 6;

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/python/run.sh")
}

/// Runs the Python order service against `h`'s topics; its decided commands.
async fn run_python(h: &Harness) -> anyhow::Result<Vec<Value>> {
    let mut command = Command::new(example());
    command.args([
        "--brokers",
        &h.kafka.brokers,
        "--topic",
        &h.ns.topic,
        "--outcomes-topic",
        &h.ns.outcomes_topic,
        "--sku-prefix",
        "INTEROP",
        "--skus",
        "6",
        "--json",
    ]);
    let output = tokio::task::spawn_blocking(move || command.output()).await??;
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(
        output.status.success(),
        "the Python order service failed ({}):\n{stderr}",
        output.status
    );
    eprintln!("python: {}", stderr.trim_end());
    String::from_utf8(output.stdout)?
        .lines()
        .map(|line| Ok(serde_json::from_str(line)?))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_order_service_is_decided_exactly_as_the_rust_library() -> anyhow::Result<()> {
    let python = Harness::new("interop-python", PARTITIONS).await?;
    let applier = python.start_applier();
    let decided = run_python(&python).await?;
    assert_eq!(decided.len(), 60, "ten commands for each of six SKUs");
    assert!(python.read(&python.ns.dlq_topic).await?.is_empty());
    python.assert_projection_matches_log().await?;
    applier.stop().await?;

    // The same commands, in the same order, through the Rust library.
    let rust = Harness::new("interop-rust", PARTITIONS).await?;
    let applier = rust.start_applier();
    let reader = OutcomeReader::connect(&rust.redis_url, &rust.ns.prefix).await?;
    let mut partitions = std::collections::BTreeSet::new();
    for entry in &decided {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let (sku, body) = (text(&entry["sku"]), &entry["body"]);
        let receipt = match entry["kind"].as_str() {
            Some("DEDUCT") => {
                let quantity = body["quantity"].as_i64().unwrap_or_default();
                rust.producer
                    .deduct(&sku, &text(&body["order_id"]), quantity)
                    .await?
            }
            Some("ROLLBACK") => {
                let reason = body["reason"].as_str().map(str::to_owned);
                rust.producer
                    .rollback(&sku, &text(&body["order_id"]), reason.as_deref())
                    .await?
            }
            Some("RESTOCK") => {
                assert_eq!(body["mode"], "SET");
                let quantity = body["quantity"].as_i64().unwrap_or_default();
                let id = text(&body["adjustment_id"]);
                rust.producer
                    .restock(&sku, &id, RestockMode::Set, quantity)
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
