//! The `stockledger` binary against real services.

mod common;

use std::process::Output;

use stockledger_testkit::Harness;

fn stockledger(h: &Harness, args: &[&str]) -> std::io::Result<Output> {
    common::stockledger(h).args(args).output()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_cli_input_names_the_field_and_publishes_nothing() -> anyhow::Result<()> {
    let h = Harness::new("cli-invalid", 1).await?;
    let long = "o".repeat(10 * 1024);
    let cases: [(&[&str], &str); 19] = [
        (&["deduct", "}x", "o1", "1"], "sku: must not contain '}'"),
        (
            &["rollback", "SKU", "order{1}"],
            "order_id: must not contain '{'",
        ),
        (
            &["--prefix", "shop{a}", "stock", "SKU"],
            "for '--prefix <PREFIX>': must not contain '{'",
        ),
        (
            &["deduct", "SKU", "o1", "0"],
            "quantity: must be at least 1",
        ),
        (&["deduct", "SKU", "", "1"], "order_id: must not be empty"),
        (
            &["deduct", "SKU\n2", "o1", "1"],
            "sku: must not contain control characters",
        ),
        (
            &["deduct", "SKU", &long, "1"],
            "order_id: is 10240 bytes long",
        ),
        (
            &["restock", "SKU", "--add", "0"],
            "quantity: ADD needs a non-zero amount",
        ),
        (
            &["deduct", "SKU", "o1", "1", "--hold", "0s"],
            "must be longer than zero",
        ),
        (
            &["deduct", "SKU", "o1", "1", "--hold", "8d"],
            "expires_at: ",
        ),
        (
            &["deduct", "SKU", "o1", "1", "--user", " u"],
            "user_id: must not start or end with whitespace",
        ),
        (
            &["limit", "SKU", "--per-user", "0"],
            "per_user: must be at least 1",
        ),
        (
            &["refund", "SKU", "o1", "--total", "-1"],
            "quantity: must be at least 1",
        ),
        (&["confirm", "SKU", "{o}"], "order_id: must not contain '{'"),
        (
            &["archive", "--writers", "0"],
            "for '--writers <WRITERS>': 0 is not in 1..=64",
        ),
        (
            &["apply", "--instance-id", "a", "--dynamic-membership"],
            "'--instance-id <INSTANCE_ID>' cannot be used with '--dynamic-membership'",
        ),
        (
            &["archive", "--instance-id", "a b"],
            "for '--instance-id <INSTANCE_ID>'",
        ),
        (
            &["confirm", "SKU", "nobody"],
            "order_id: the ledger has no reservation of SKU for order nobody",
        ),
        (
            &["refund", "SKU", "nobody"],
            "order_id: the ledger has no sale of SKU for order nobody",
        ),
    ];
    for (args, expected) in cases {
        let out = stockledger(&h, args)?;
        assert!(!out.status.success(), "{args:?} must fail");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    assert!(
        h.read(&h.ns.topic).await?.is_empty(),
        "nothing may be published"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_sends_commands_waits_for_decisions_and_reads_state() -> anyhow::Result<()> {
    let h = Harness::new("cli-flow", 2).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();

    let out = stockledger(
        &h,
        &[
            "restock",
            "SKU-C",
            "--set",
            "5",
            "--adjustment-id",
            "a1",
            "--wait",
            "30",
        ],
    )?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("APPLIED: delta 5, available 5, total 5"),
        "{}",
        text(&out.stdout)
    );

    let out = stockledger(&h, &["deduct", "SKU-C", "o1", "2", "--wait", "30"])?;
    assert!(
        text(&out.stdout).contains("APPLIED: delta -2, available 3"),
        "{}",
        text(&out.stdout)
    );
    let out = stockledger(
        &h,
        &[
            "rollback",
            "SKU-C",
            "o1",
            "--reason",
            "changed mind",
            "--wait",
            "30",
        ],
    )?;
    assert!(
        text(&out.stdout).contains("APPLIED: delta 2, available 5"),
        "{}",
        text(&out.stdout)
    );

    let out = stockledger(&h, &["stock", "SKU-C"])?;
    assert_eq!(
        text(&out.stdout).trim(),
        "SKU-C: available 5, total 5, held 0 (reserved 0, sold 0), last offset 2"
    );
    let out = stockledger(&h, &["order", "SKU-C", "o1"])?;
    assert!(
        text(&out.stdout).contains("ROLLED_BACK, quantity 2"),
        "{}",
        text(&out.stdout)
    );
    let out = stockledger(&h, &["stock", "NEVER"])?;
    assert_eq!(out.status.code(), Some(1));

    h.wait_for_archive(3).await?;
    let out = stockledger(&h, &["history", "--order", "o1", "--json"])?;
    let lines: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let results: Vec<_> = lines
        .iter()
        .map(|l| (l["command"].as_str(), l["result"].as_str()))
        .collect();
    assert_eq!(
        results,
        [
            (Some("DEDUCT"), Some("APPLIED")),
            (Some("ROLLBACK"), Some("APPLIED"))
        ]
    );

    applier.stop().await?;
    archiver.stop().await?;
    Ok(())
}

/// A command line, what it sets in the environment, and the causes its
/// failure must name, outermost first.
type Failure<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a [&'a str]);

/// The causes of the one `error:` line, outermost first.
fn causes(stderr: &str) -> Vec<String> {
    let line = stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("error: "))
        .unwrap_or_default();
    line.split(": ").map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_says_each_cause_once_outermost_first() -> anyhow::Result<()> {
    let h = Harness::new("cli-causes", 1).await?;
    let missing = format!("{}.missing", h.ns.topic);
    let cases: [Failure; 3] = [
        // A chain of our own errors: the applier's start, then the log's.
        (
            &["apply"],
            &[("STOCKLEDGER_TOPIC", &missing)],
            &[
                &format!("reading the partitions of {missing}"),
                &format!("topic {missing} does not exist"),
            ],
        ),
        // Ours over a library's: the projection, then the Redis client's.
        (
            &["stock", "SKU"],
            &[("REDIS_URL", "redis://127.0.0.1:1")],
            &[
                "a Redis command failed",
                "Connection refused (os error 111)",
            ],
        ),
        (
            &["replay", "--into", "elsewhere"],
            &[("STOCKLEDGER_TOPIC", &missing)],
            &[&format!("topic {missing} does not exist")],
        ),
    ];
    for (args, env, expected) in cases {
        let out = common::stockledger(&h)
            .args(args)
            .envs(env.iter().copied())
            .output()?;
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{args:?} failed: {stderr}");
        assert_eq!(causes(&stderr), *expected, "{args:?}: {stderr}");
    }
    Ok(())
}

/// `stockledger status --format json`: the exit code and the report.
fn status(h: &Harness, extra: &[&str]) -> anyhow::Result<(Option<i32>, serde_json::Value)> {
    let out = common::stockledger(h)
        .args(["status", "--format", "json"])
        .args(extra)
        .output()?;
    let report = serde_json::from_slice(&out.stdout)
        .map_err(|e| anyhow::anyhow!("{e}: {}{}", text(&out.stdout), text(&out.stderr)))?;
    Ok((out.status.code(), report))
}

/// The sum of `field` over the report's command partitions.
fn total(report: &serde_json::Value, field: &str) -> i64 {
    report["commands"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c[field].as_i64())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_says_how_far_each_service_is_behind_and_which_does_not_answer() -> anyhow::Result<()>
{
    use std::time::Duration;
    use stockledger_core::RestockMode;

    let h = Harness::new("status", 2).await?;
    h.producer
        .restock("ST-1", "a-1", RestockMode::Set, 10)
        .await?;
    for i in 0..4 {
        h.producer.deduct("ST-1", &format!("o-{i}"), 1).await?;
    }
    let in_ten_minutes = stockledger_analysts::query::now_ms() + 600_000;
    h.producer
        .reserve("ST-1", "held", 1, None, in_ten_minutes)
        .await?;

    // Nothing applies yet: the applier's lag is the whole log.
    let (code, report) = status(&h, &["--max-lag", "0"])?;
    assert_eq!(code, Some(3), "{report:#}");
    assert_eq!(report["state"], "lagging");
    assert_eq!(total(&report, "applier_lag"), 6, "{report:#}");
    assert_eq!(total(&report, "log_end"), 6);
    for service in ["kafka", "redis", "postgres"] {
        assert_eq!(report[service]["reachable"], true, "{report:#}");
    }

    let applier = h.start_applier();
    let archiver = h.start_archiver();
    let report = stockledger_testkit::wait_until(
        "status to say healthy",
        Duration::from_secs(60),
        || async {
            let (code, report) = status(&h, &["--max-lag", "0"])?;
            Ok((code == Some(0)).then_some(report))
        },
    )
    .await?;
    assert_eq!(report["state"], "healthy");
    let home = report["commands"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["log_end"] == 6)
        .expect("the partition of ST-1");
    assert_eq!(home["applier_committed"], 6);
    assert_eq!(home["projection_applied"], 5, "{report:#}");
    assert_eq!(home["holds"], 1, "{report:#}");
    assert!(home["hold_overdue_ms"].is_null(), "{report:#}");
    assert_eq!(report["dead_letters"], 0);
    let archived: i64 = report["outcomes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["archiver_committed"].as_i64())
        .sum();
    assert_eq!(archived, 6, "{report:#}");
    applier.stop().await?;
    archiver.stop().await?;

    // Redis away: the report still has Kafka's figures, names what failed,
    // and exits unavailable.
    let out = common::stockledger(&h)
        .env("REDIS_URL", "redis://127.0.0.1:1")
        .args(["status", "--format", "json"])
        .output()?;
    assert_eq!(out.status.code(), Some(69), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(report["state"], "unreachable");
    assert_eq!(report["redis"]["reachable"], false);
    assert!(
        report["redis"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("refused")),
        "{report:#}"
    );
    assert_eq!(total(&report, "log_end"), 6);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_lists_dead_letters_with_why_and_shows_one_decoded_as_far_as_it_goes(
) -> anyhow::Result<()> {
    use std::time::Duration;

    let h = Harness::new("dlq", 2).await?;
    let (partition, offset) = h.send_raw("DL-1", b"not avro at all").await?;
    let applier = h.start_applier();
    stockledger_testkit::wait_until("a dead letter", Duration::from_secs(60), || async {
        Ok((!h.read(&h.ns.dlq_topic).await?.is_empty()).then_some(()))
    })
    .await?;
    applier.stop().await?;

    let out = stockledger(&h, &["dlq", "list", "--format", "json"])?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(lines.len(), 1, "{}", text(&out.stdout));
    let listed = &lines[0];
    assert_eq!(listed["key"], "DL-1");
    assert_eq!(
        listed["source"],
        format!("{}/{partition}@{offset}", h.ns.topic)
    );
    assert!(
        listed["reason"]
            .as_str()
            .is_some_and(|r| r.contains("not Avro single-object encoding")),
        "{listed}"
    );

    let (p, o) = (
        listed["partition"].to_string(),
        listed["offset"].to_string(),
    );
    let out = stockledger(&h, &["dlq", "show", &p, &o, "--format", "json"])?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(shown["payload_bytes"], 15);
    assert_eq!(shown["payload_hex"], "6e6f74206176726f20617420616c6c");
    assert!(
        shown["decoded"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("not Avro single-object encoding")),
        "{shown}"
    );

    // An offset that holds nothing is an error naming where it looked.
    let out = stockledger(&h, &["dlq", "show", &p, "999"])?;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(&format!("no dead letter at partition {p} offset 999")),
        "{}",
        text(&out.stderr)
    );
    Ok(())
}
