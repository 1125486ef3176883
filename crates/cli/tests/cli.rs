//! The `stockledger` binary against real services.

mod common;

use std::process::Output;

use stockledger_testkit::harness::CATCH_UP;
use stockledger_testkit::ids;
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
    let cases: [(&[&str], &str); 43] = [
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
        (
            &["deduct", "SKU", "o1", "1", "--traceparent", "00-abc"],
            "is not a W3C traceparent",
        ),
        (
            &[
                "basket", "hold", "b1", "--line", "A=1", "--line", "B=0", "--hold", "1m",
            ],
            "lines[1].quantity: must be between 1",
        ),
        (
            &[
                "basket", "hold", "b1", "--line", "A=1", "--line", "A=2", "--hold", "1m",
            ],
            "lines[1].sku: A is already line 0",
        ),
        (
            &["basket", "hold", "b1", "--line", "A", "--hold", "1m"],
            "lines[0]: --line \"A\": give SKU=QUANTITY",
        ),
        (
            &["basket", "hold", "b{1}", "--line", "A=1", "--hold", "1m"],
            "basket_id: must not contain '{'",
        ),
        (&["basket", "release", "b1", "--reason", &long], "reason: "),
        (
            &["deduct", "SHOW", "o1", "--units", "A1,A1"],
            "units: units[1] \"A1\" appears twice",
        ),
        (
            &["deduct", "SHOW", "o1", "--units", "A1,"],
            "units: units[1] \"\": must not be empty",
        ),
        (
            &["deduct", "SHOW", "o1", "3", "--units", "A1,A2"],
            "quantity: 3 is not the number of units named (2)",
        ),
        (&["deduct", "SHOW", "o1"], "<QUANTITY>"),
        (&["restock", "SHOW", "--units", &long], "units: units[0] "),
        (&["history", "--unit", "A1"], "unit: \"A1\" is not SKU/UNIT"),
        (
            &["alerts", "MUG", "--low-stock-below", "0"],
            "low_stock_below: must be at least 1",
        ),
        (&["alerts", "MUG"], "--low-stock-below <UNITS>"),
        (
            &["transfer", "MUG", "1", "--from", "paris", "--to", "paris"],
            "to: is the location the stock comes from (paris)",
        ),
        (
            &["transfer", "MUG", "0", "--from", "berlin", "--to", "paris"],
            "quantity: must be at least 1",
        ),
        (
            &["transfer", "MUG", "1", "--from", "Zürich", "--to", "paris"],
            "from: must be ASCII letters, digits",
        ),
        (
            &["restock", "MUG", "--add", "1", "--location", "a b"],
            "location: must be ASCII letters, digits",
        ),
        (
            &["deduct", "MUG", "o1", "1", "--location", &long],
            "location: is 10240 bytes long",
        ),
        (
            &[
                "window",
                "MUG",
                "w1",
                "--opens-at",
                "2026-12-01T10:00:00Z",
                "--closes-at",
                "2026-12-01T10:00:00Z",
            ],
            "closes_at: 1796119200000 is not after opens_at (1796119200000)",
        ),
        (
            &["window", "MUG", "w1", "--opens-at", "+400d"],
            "opens_at: ",
        ),
        (
            &["window", "MUG", "w1", "--closes-at", "tomorrow"],
            "\"tomorrow\" is not a time",
        ),
        (&["pause", "MUG", "{p}"], "change_id: must not contain '{'"),
        (&["resume", "MUG"], "<CHANGE_ID>"),
    ];
    for (args, expected) in cases {
        let out = stockledger(&h, args)?;
        // 2: usage, whether clap or the ledger's rules refused it.
        assert_eq!(out.status.code(), Some(2), "{args:?} must fail");
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
    assert_eq!(out.status.code(), Some(4));

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
    h.ledger
        .restock(
            &ids::sku("ST-1"),
            &ids::adjustment("a-1"),
            RestockMode::Set,
            10,
        )
        .await?;
    for i in 0..4 {
        h.ledger
            .deduct(
                &ids::sku("ST-1"),
                &ids::order(format!("o-{i}")),
                ids::qty(1),
                None,
            )
            .await?;
    }
    let in_ten_minutes = stockledger_runtime::clock::now_ms() + 600_000;
    h.ledger
        .reserve_until(
            &ids::sku("ST-1"),
            &ids::order("held"),
            ids::qty(1),
            ids::at_ms(in_ten_minutes),
            None,
        )
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
    // A lag within bounds that does not shrink: the applier is stalled,
    // and the report says which partition and for how long.
    let (code, report) = status(&h, &["--max-wait-ms", "0"])?;
    assert_eq!(code, Some(3), "{report:#}");
    assert_eq!(report["state"], "stalled");
    let problems = report["problems"].as_array().expect("problems").clone();
    assert!(
        problems.iter().any(|p| p
            .as_str()
            .is_some_and(|p| p.starts_with("applier stalled: partition "))),
        "{report:#}"
    );
    assert!(total(&report, "applier_waiting_ms") > 0, "{report:#}");

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
    assert_eq!(report["problems"], serde_json::json!([]));
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
    // The last minute's decisions, as the archive counts them up to the
    // moment the report was asked for: asked again, now that everything is
    // archived (each service is asked at once, so the report above may
    // have counted the archive before the archiver's last page).
    let (_, report) = status(&h, &[])?;
    let counted: Vec<(String, i64)> = sqlx::query_as(
        "SELECT result, count(*) FROM ledger_entries WHERE topic = $1
           AND occurred_at >= $2::timestamptz - interval '60 seconds'
         GROUP BY result ORDER BY count(*) DESC, result",
    )
    .bind(&h.ns.topic)
    .bind(report["checked_at"].as_str().unwrap_or_default())
    .fetch_all(&h.pool)
    .await?;
    let counted: Vec<serde_json::Value> = counted
        .into_iter()
        .map(|(result, count)| serde_json::json!({"result": result, "count": count}))
        .collect();
    assert_eq!(
        report["decisions_last_minute"],
        serde_json::json!(counted),
        "{report:#}"
    );
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

    // `status` lists the newest dead letters as `dlq list` does.
    let (_, report) = status(&h, &[])?;
    assert_eq!(report["dead_letters"], 1, "{report:#}");
    let newest = &report["newest_dead_letters"];
    assert_eq!(
        (
            &newest[0]["partition"],
            &newest[0]["offset"],
            &newest[0]["source"],
            &newest[0]["reason"],
            &newest[0]["time"]
        ),
        (
            &listed["partition"],
            &listed["offset"],
            &listed["source"],
            &listed["reason"],
            &listed["time"]
        ),
        "{report:#}"
    );
    assert_eq!(newest.as_array().map(Vec::len), Some(1), "{report:#}");

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
    assert_eq!(out.status.code(), Some(4));
    assert!(
        text(&out.stderr).contains(&format!("no dead letter at partition {p} offset 999")),
        "{}",
        text(&out.stderr)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_redrive_sends_back_what_is_now_a_command_once_and_leaves_what_is_not(
) -> anyhow::Result<()> {
    use std::time::Duration;

    use stockledger_core::ids::{CommandId, OrderId, Quantity, Sku};
    use stockledger_core::partition::home_partition;
    use stockledger_core::{codec, Command, CommandBody, Deduct, RestockMode};

    let h = Harness::new("redrive", 2).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    h.ledger
        .restock(&ids::sku("R-1"), &ids::adjustment("a"), RestockMode::Set, 5)
        .await?;
    // A valid deduct on the partition R-1 does not live on (a producer with
    // another partitioner): misrouted, dead-lettered; and bytes that are no
    // command at all.
    let away = 1 - home_partition(b"R-1", 2);
    let deduct = Command {
        command_id: CommandId::new("c-r1")?,
        sku: Sku::new("R-1")?,
        occurred_at: stockledger_runtime::clock::now_ms(),
        body: CommandBody::Deduct(Deduct::new(OrderId::new("o-1")?, Quantity::new(2)?)),
    };
    let traceparent: &[u8] = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    h.send_raw_with(
        Some(away),
        "R-1",
        &codec::encode_command(&deduct)?,
        &[("traceparent", traceparent)],
    )
    .await?;
    h.send_raw("R-1", b"not avro at all").await?;
    stockledger_testkit::wait_until("two dead letters", Duration::from_secs(60), || async {
        Ok((h.read(&h.ns.dlq_topic).await?.len() == 2).then_some(()))
    })
    .await?;
    let log_end = || async { anyhow::Ok(h.read(&h.ns.topic).await?.len()) };
    let before = log_end().await?;

    // A dry run judges both and sends nothing.
    let json_rows = |out: &Output| -> anyhow::Result<Vec<serde_json::Value>> {
        Ok(text(&out.stdout)
            .lines()
            .map(serde_json::from_str)
            .collect::<Result<_, _>>()?)
    };
    let out = stockledger(
        &h,
        &["dlq", "redrive", "--all", "--dry-run", "--format", "json"],
    )?;
    assert_eq!(out.status.code(), Some(65), "{}", text(&out.stderr));
    let mut verdicts: Vec<String> = json_rows(&out)?
        .iter()
        .map(|r| r["verdict"].as_str().unwrap_or_default().to_owned())
        .collect();
    verdicts.sort();
    assert_eq!(verdicts, ["still invalid", "would re-drive"]);
    assert_eq!(log_end().await?, before);

    // For real: the deduct goes back to R-1's home partition with its
    // traceparent, and is decided there; the garbage stays, saying why.
    let out = stockledger(&h, &["dlq", "redrive", "--all", "--format", "json"])?;
    assert_eq!(out.status.code(), Some(65), "{}", text(&out.stderr));
    let mut rows = json_rows(&out)?;
    rows.sort_by_key(|r| r["verdict"].to_string());
    assert_eq!(rows[0]["verdict"], "re-driven", "{rows:?}");
    assert_eq!(rows[1]["verdict"], "still invalid", "{rows:?}");
    assert!(
        rows[1]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("not Avro single-object encoding")),
        "{rows:?}"
    );
    let log = h.read(&h.ns.topic).await?;
    assert_eq!(log.len(), before + 1);
    let copy = log
        .iter()
        .find(|r| {
            r.headers
                .iter()
                .any(|(k, _)| k == "stockledger.redriven-from")
        })
        .ok_or_else(|| anyhow::anyhow!("no re-driven record in the log"))?;
    assert_eq!(copy.partition, 1 - away);
    assert_eq!(copy.key.as_deref(), Some(&b"R-1"[..]));
    let header = |name: &str| {
        copy.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(header("traceparent").as_deref(), Some(traceparent));
    assert!(header("stockledger.reason").is_none());
    assert_eq!(
        header("stockledger.redriven-from"),
        rows[0]["partition"].as_i64().map(|p| format!(
            "{}/{p}@{}",
            h.ns.dlq_topic, rows[0]["offset"]
        )
        .into_bytes())
    );
    stockledger_testkit::wait_until(
        "the re-driven deduct decided",
        Duration::from_secs(60),
        || async {
            let state = h.projection.read_sku("R-1").await?;
            Ok(state.filter(|s| s.available == 3).map(|_| ()))
        },
    )
    .await?;

    // Again: nothing is sent twice.
    let out = stockledger(&h, &["dlq", "redrive", "--all", "--format", "json"])?;
    let again: Vec<serde_json::Value> = json_rows(&out)?;
    assert!(
        again.iter().any(|r| r["verdict"] == "already re-driven"),
        "{again:?}"
    );
    assert_eq!(h.read(&h.ns.topic).await?.len(), before + 1);

    // A selection that matches nothing says so.
    let out = stockledger(
        &h,
        &["dlq", "redrive", "--reason-contains", "no such reason"],
    )?;
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    h.assert_contract().await?;
    applier.stop().await?;
    archiver.stop().await?;
    Ok(())
}

/// Runs `args` and returns the exit code with what was said on both streams.
fn exit_of(cmd: &mut std::process::Command, args: &[&str]) -> anyhow::Result<(i32, String)> {
    let out = cmd.args(args).output()?;
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    Ok((out.status.code().unwrap_or(-1), said))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_exit_code_says_what_happened() -> anyhow::Result<()> {
    use stockledger_projection::keys::SkuKeys;

    let h = Harness::new("exit-codes", 1).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    let run = |args: &[&str]| exit_of(&mut common::stockledger(&h), args);

    // 0 and 3: a command the ledger takes, then one it refuses.
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let (code, said) = run(&[
        "restock",
        "X-1",
        "--set",
        "1",
        "--wait",
        "30",
        "--traceparent",
        traceparent,
    ])?;
    assert_eq!(code, 0, "{said}");
    let (code, said) = run(&[
        "deduct", "X-1", "o-1", "5", "--wait", "30", "--format", "json",
    ])?;
    assert_eq!(code, 3, "{said}");
    let sent: serde_json::Value = serde_json::from_str(said.lines().next().unwrap_or_default())?;
    assert_eq!(
        sent["decision"]["result"], "REJECTED_INSUFFICIENT",
        "{said}"
    );
    // 2: a wrong argument; 4: nothing there.
    let (code, said) = run(&["deduct", "X-1", "o-2", "0"])?;
    assert_eq!(code, 2, "{said}");
    let (code, said) = run(&["order", "X-1", "o-404", "--format", "json"])?;
    assert_eq!(code, 4, "{said}");
    assert!(said.contains(r#""order":null"#), "{said}");

    // 3: reconcile agrees, then finds the difference planted in Redis.
    h.assert_contract().await?;
    let (code, said) = run(&["reconcile"])?;
    assert_eq!(code, 0, "{said}");
    // The restock's trace context reached its archived row.
    let (_, said) = run(&["history", "--sku", "X-1", "--format", "json"])?;
    let first: serde_json::Value = serde_json::from_str(said.lines().next().unwrap_or("{}"))?;
    assert_eq!(first["traceparent"], traceparent, "{said}");
    let mut redis = h.projection.connection();
    let () = redis::cmd("HSET")
        .arg(SkuKeys::new(&h.ns.prefix, "X-1").stock)
        .arg("available")
        .arg(7)
        .query_async(&mut redis)
        .await?;
    let (code, said) = run(&["reconcile", "--format", "json"])?;
    assert_eq!(code, 3, "{said}");
    assert!(said.contains(r#""field":"available""#), "{said}");

    // 75: nobody decides within --wait (the applier is stopped); the
    // command is still in the log.
    applier.stop().await?;
    archiver.stop().await?;
    let (code, said) = run(&["deduct", "X-1", "o-3", "1", "--wait", "1"])?;
    assert_eq!(code, 75, "{said}");
    assert!(said.contains("will still be decided"), "{said}");

    // 69: each service away in turn, named in the error.
    let closed = [
        ("REDIS_URL", "redis://127.0.0.1:1", vec!["stock", "X-1"]),
        (
            "DATABASE_URL",
            "postgres://postgres@127.0.0.1:1/stockledger",
            vec!["history", "--sku", "X-1"],
        ),
        ("KAFKA_BROKERS", "127.0.0.1:1", vec!["dlq", "list"]),
    ];
    for (variable, url, args) in closed {
        let (code, said) = exit_of(common::stockledger(&h).env(variable, url), &args)?;
        assert_eq!(code, 69, "{variable} closed, {args:?}: {said}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_properties_from_the_environment_and_minus_x_add_up() -> anyhow::Result<()> {
    let h = Harness::new("kafka-properties", 1).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    let restock = |properties: &str, extra: &[&str]| {
        let mut args = extra.to_vec();
        args.extend(["restock", "P-1", "--add", "1", "--wait", "30"]);
        exit_of(
            common::stockledger(&h).env("KAFKA_PROPERTIES", properties),
            &args,
        )
    };
    // Blank, or with a ';' too many, as env files and shell defaults write
    // it: no property there.
    for properties in ["", " ", "linger.ms=2;", ";linger.ms=2;;"] {
        let (code, said) = restock(properties, &["-X", "message.timeout.ms=20000"])?;
        assert_eq!(code, 0, "KAFKA_PROPERTIES={properties:?}: {said}");
    }
    // A secret in KAFKA_PROPERTIES is where it belongs, -X beside it or
    // not (a plaintext broker leaves it unused).
    let (code, said) = restock("sasl.password=hunter2", &["-X", "linger.ms=2"])?;
    assert_eq!(code, 0, "{said}");
    assert!(!said.contains("hunter2"), "{said}");
    // One that is not key=value is named where it came from.
    let (code, said) = restock("linger.ms", &[])?;
    assert_eq!(code, 2, "{said}");
    assert!(
        said.contains("KAFKA_PROPERTIES") && said.contains("linger.ms"),
        "{said}"
    );
    let (code, said) = restock("", &["-X", "linger.ms"])?;
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("-X"), "{said}");
    // Still a secret after -X is refused, whatever the environment holds.
    let (code, said) = restock("linger.ms=2", &["-X", "sasl.password=hunter2"])?;
    assert_eq!(code, 2, "{said}");
    assert!(
        said.contains("-X sasl.password") && !said.contains("hunter2"),
        "{said}"
    );
    h.assert_contract().await?;
    applier.stop().await?;
    archiver.stop().await?;
    // And they take effect: an applier joins its group under the client
    // id the environment gives, or -X's over it. Each joins a group of its
    // own: a static member that takes another's place keeps the client id
    // that place was first joined with.
    for (extra, expected) in [
        (vec![], "from-environment"),
        (vec!["-X", "client.id=from-x"], "from-x"),
    ] {
        let args = [&extra[..], &["apply"]].concat();
        let group = format!("{}-{expected}", h.ns.applier_group);
        let log = std::fs::File::create(common::log_path(&h, &args))?;
        let _applier = common::Running(
            common::stockledger(&h)
                .env("KAFKA_PROPERTIES", "client.id=from-environment")
                .env("STOCKLEDGER_APPLIER_GROUP", &group)
                .args(&args)
                .stdout(std::process::Stdio::null())
                .stderr(log)
                .spawn()?,
        );
        let seen = format!("a member of {group} with client id {expected}");
        stockledger_testkit::wait_until(&seen, CATCH_UP, || async {
            let ids = client_ids(&h, &group)?;
            Ok(ids.contains(&expected.to_owned()).then_some(()))
        })
        .await?;
    }
    Ok(())
}

/// The client ids of `group`'s members, as the group coordinator has them.
fn client_ids(h: &Harness, group: &str) -> anyhow::Result<Vec<String>> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = h.kafka.client_config(&[]).create()?;
    let groups = consumer.fetch_group_list(Some(group), std::time::Duration::from_secs(10))?;
    Ok(groups
        .groups()
        .iter()
        .flat_map(|g| g.members())
        .map(|m| m.client_id().to_owned())
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_is_drawn_on_a_terminal_and_nothing_is_said_in_a_pipe() -> anyhow::Result<()> {
    let h = Harness::new("progress", 1).await?;
    for i in 0..3 {
        h.ledger
            .restock(
                &ids::sku(format!("P-{i}")),
                &ids::adjustment("a"),
                stockledger_core::RestockMode::Set,
                1,
            )
            .await?;
    }
    let applier = h.start_applier();
    stockledger_testkit::wait_until(
        "three SKUs applied",
        std::time::Duration::from_secs(60),
        || async { Ok((h.projection.count_skus(100).await? == 3).then_some(())) },
    )
    .await?;
    applier.stop().await?;

    // In a pipe: the result on stdout, not a byte on stderr.
    let out = stockledger(&h, &["snapshot"])?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(": 3 SKUs"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(text(&out.stderr), "");

    // On a terminal (a pseudo-terminal from script(1)): a bar with the
    // count, the rate and the time left.
    let line = format!("{} snapshot", env!("CARGO_BIN_EXE_stockledger"));
    let mut script = std::process::Command::new("script");
    script.args(["-qec", &line, "/dev/null"]);
    for (k, v) in common::stockledger(&h).get_envs() {
        script.env(k, v.unwrap_or_default());
    }
    // A terminal says what it is: without TERM (a CI runner started with
    // an empty environment) the bar library draws nothing.
    script.env("TERM", "xterm-256color");
    let out = script.stdin(std::process::Stdio::null()).output()?;
    let drawn = text(&out.stdout);
    assert!(out.status.success(), "{drawn}");
    assert!(
        drawn.contains("/3 SKUs") && drawn.contains("/s") && drawn.contains("left"),
        "{drawn:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_says_its_run_and_checks_as_one_json_object() -> anyhow::Result<()> {
    let h = Harness::new("demo-json", 1).await?;
    let out = stockledger(
        &h,
        &[
            "demo",
            "--orders",
            "200",
            "--buyers",
            "20",
            "--stock",
            "40",
            "--baskets",
            "60",
            "--seats",
            "60",
            "--partitions",
            "2",
            "--format",
            "json",
        ],
    )?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(shown["pass"], true, "{shown:#}");
    let checks = shown["checks"].as_array().map(Vec::len);
    assert_eq!(checks, Some(8), "{shown:#}");
    assert!(shown["refused_not_open"].as_u64() > Some(0), "{shown:#}");
    assert!(shown["baskets"]["held"].as_u64() > Some(0), "{shown:#}");
    assert!(shown["seats"]["held"].as_u64() > Some(0), "{shown:#}");
    assert!(shown["records_sent"].as_u64() >= Some(200), "{shown:#}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_puts_seats_on_sale_holds_them_by_name_and_shows_the_seat_map() -> anyhow::Result<()> {
    let h = Harness::new("cli-seats", 1).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    let seats = "R1-1,R1-2,R1-10";
    let out = stockledger(
        &h,
        &[
            "restock",
            "SHOW",
            "--units",
            seats,
            "--adjustment-id",
            "hall",
            "--wait",
            "30",
        ],
    )?;
    assert!(
        text(&out.stdout).contains("APPLIED: delta 3, available 3, total 3"),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let hold = [
        "deduct",
        "SHOW",
        "o1",
        "--units",
        "R1-2,R1-10",
        "--hold",
        "10m",
    ];
    let out = stockledger(&h, &[&hold[..], &["--wait", "30"]].concat())?;
    assert!(
        text(&out.stdout).contains("APPLIED: delta -2, available 1"),
        "{}",
        text(&out.stdout)
    );
    let out = stockledger(
        &h,
        &[
            "deduct",
            "SHOW",
            "o2",
            "--units",
            "R1-1,R1-2",
            "--wait",
            "30",
        ],
    )?;
    assert!(
        text(&out.stdout).contains("units not free: R1-2 (held)"),
        "{}",
        text(&out.stdout)
    );
    // The seat map keeps the hall's order, R1-10 last.
    let out = stockledger(&h, &["stock", "SHOW", "--units", "--format", "json"])?;
    assert_eq!(
        text(&out.stdout).trim(),
        r#"{"R1-1":"available","R1-2":"held","R1-10":"held"}"#
    );
    let out = stockledger(&h, &["stock", "SHOW", "--units"])?;
    assert!(
        text(&out.stdout).contains("R1-2\theld\to1"),
        "{}",
        text(&out.stdout)
    );
    h.wait_for_archive(3).await?;
    let out = stockledger(&h, &["history", "--unit", "SHOW/R1-2", "--format", "json"])?;
    let orders: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let seen: Vec<(&str, &str)> = orders
        .iter()
        .map(|e| {
            let who = e["order_id"].as_str().or(e["adjustment_id"].as_str());
            (who.unwrap_or(""), e["result"].as_str().unwrap_or(""))
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("hall", "APPLIED"),
            ("o1", "APPLIED"),
            ("o2", "REJECTED_INSUFFICIENT")
        ],
        "{}",
        text(&out.stdout)
    );
    applier.stop().await?;
    archiver.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_keeps_stock_by_location_and_transfers_it() -> anyhow::Result<()> {
    let h = Harness::new("cli-locations", 1).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    let run = |args: &[&str]| -> anyhow::Result<String> {
        let out = stockledger(&h, &[args, &["--wait", "30"]].concat())?;
        Ok(format!("{}{}", text(&out.stdout), text(&out.stderr)))
    };
    let out = run(&["restock", "MUG", "--add", "5", "--location", "berlin"])?;
    assert!(
        out.contains("APPLIED: delta 5, available 5, total 5, at berlin"),
        "{out}"
    );
    run(&["restock", "MUG", "--add", "3", "--location", "paris"])?;
    let out = run(&["deduct", "MUG", "o1", "4"])?;
    assert!(
        out.contains("APPLIED: delta -4, available 4, total 8, at berlin"),
        "{out}"
    );
    let out = run(&["deduct", "MUG", "o2", "2", "--location", "rome"])?;
    assert!(
        out.contains("REJECTED_INSUFFICIENT") && out.contains("unknown location: rome"),
        "{out}"
    );
    let out = run(&[
        "transfer",
        "MUG",
        "2",
        "--from",
        "paris",
        "--to",
        "lyon",
        "--transfer-id",
        "t1",
    ])?;
    assert!(
        out.contains("APPLIED: delta 0, available 4, total 8, at paris"),
        "{out}"
    );
    // A refused transfer exits 3 and changes nothing.
    let out = stockledger(
        &h,
        &[
            "transfer", "MUG", "5", "--from", "berlin", "--to", "lyon", "--wait", "30",
        ],
    )?;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("requested 5, available at berlin 1"),
        "{}",
        text(&out.stdout)
    );
    let out = stockledger(&h, &["stock", "MUG"])?;
    let shown = text(&out.stdout);
    assert!(
        shown.contains("  at berlin: available 1, total 5, held 4\n")
            && shown.contains("  at paris: available 1, total 1, held 0\n")
            && shown.contains("  at lyon: available 2, total 2, held 0\n"),
        "{shown}"
    );
    let out = stockledger(&h, &["stock", "MUG", "--format", "json"])?;
    let stock: serde_json::Value = serde_json::from_str(text(&out.stdout).trim())?;
    let names: Vec<&str> = stock["locations"]
        .as_array()
        .map(|l| l.iter().filter_map(|l| l["location"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, ["berlin", "paris", "lyon"], "{stock}");

    h.wait_for_archive(6).await?;
    let out = stockledger(
        &h,
        &[
            "report", "--by", "location", "--sku", "MUG", "--every", "1d", "--format", "json",
        ],
    )?;
    let rows: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let row = |name: &str| {
        rows.iter()
            .find(|r| r["location"] == name)
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(
        (
            &row("berlin")["units_taken"],
            &row("berlin")["rejected_insufficient"]
        ),
        (&serde_json::json!(4), &serde_json::json!(1)),
        "{rows:?}"
    );
    assert_eq!(row("lyon")["transferred_in"], 2, "{rows:?}");
    assert_eq!(row("rome")["rejected_insufficient"], 1, "{rows:?}");
    let out = stockledger(&h, &["history", "--sku", "MUG"])?;
    assert!(
        text(&out.stdout).contains("paris->lyon"),
        "{}",
        text(&out.stdout)
    );
    applier.stop().await?;
    archiver.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_opens_a_sale_on_time_and_pauses_it() -> anyhow::Result<()> {
    let h = Harness::new("cli-sale", 1).await?;
    let applier = h.start_applier();
    let run = |args: &[&str]| -> anyhow::Result<(Option<i32>, String)> {
        let out = stockledger(&h, &[args, &["--wait", "30"]].concat())?;
        let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
        Ok((out.status.code(), said))
    };
    run(&["restock", "MUG", "--add", "5"])?;
    // Opens an hour from now: a deduct now is refused, and exits 3.
    let (_, out) = run(&["window", "MUG", "sale-1", "--opens-at", "+1h"])?;
    assert!(
        out.contains("APPLIED") && out.contains("the window was opens_at none"),
        "{out}"
    );
    let (code, out) = run(&["deduct", "MUG", "o1", "1"])?;
    assert_eq!(code, Some(3), "{out}");
    assert!(
        out.contains("REJECTED_NOT_OPEN") && out.contains("the sale opens at"),
        "{out}"
    );
    // Opened a minute ago, closing in an hour: it sells.
    let (_, out) = run(&[
        "window",
        "MUG",
        "sale-2",
        "--opens-at",
        "2020-01-01T00:00:00Z",
        "--closes-at",
        "+1h",
    ])?;
    assert!(out.contains("APPLIED"), "{out}");
    let (code, out) = run(&["deduct", "MUG", "o1", "1"])?;
    assert_eq!(code, Some(0), "{out}");
    let (_, out) = run(&["pause", "MUG", "stop-1"])?;
    assert!(out.contains("APPLIED"), "{out}");
    let (code, out) = run(&["deduct", "MUG", "o2", "1"])?;
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains("REJECTED_PAUSED"), "{out}");
    let shown = text(&stockledger(&h, &["stock", "MUG"])?.stdout);
    assert!(
        shown.contains("  sale: opens 2020-01-01T00:00:00.000Z, closes 20")
            && shown.contains(", open, paused\n"),
        "{shown}"
    );
    // A rollback settles while paused.
    let (code, out) = run(&["rollback", "MUG", "o1"])?;
    assert_eq!(code, Some(0), "{out}");
    run(&["resume", "MUG", "go-1"])?;
    let (code, out) = run(&["deduct", "MUG", "o2", "1"])?;
    assert_eq!(code, Some(0), "{out}");
    // The same change id again is a duplicate, and changes nothing.
    let (_, out) = run(&["pause", "MUG", "stop-1"])?;
    assert!(out.contains("DUPLICATE"), "{out}");
    let (code, _) = run(&["deduct", "MUG", "o3", "1"])?;
    assert_eq!(code, Some(0));
    applier.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applier_that_stops_on_the_same_record_twice_is_named_by_status() -> anyhow::Result<()> {
    use std::time::Duration;
    use stockledger_core::RestockMode;
    use stockledger_projection::keys::SkuKeys;

    let h = Harness::new("crash-loop", 2).await?;
    let mut config = h.applier_config();
    config.stats_interval = Duration::from_secs(1);
    let sku = ids::sku("LOOP-1");
    h.ledger
        .restock(&sku, &ids::adjustment("r1"), RestockMode::Set, 10)
        .await?;
    let applier = h.start_applier_with(config.clone());
    stockledger_testkit::wait_until("the restock applied", CATCH_UP, || async {
        Ok((h.applied(&["LOOP-1"]).await? == 1).then_some(()))
    })
    .await?;
    applier.stop().await?;
    // The SKU's stock hash made a string: every batch of it fails in
    // Redis, whatever the applier does, as a corrupt state would.
    let stock = SkuKeys::new(&h.ns.prefix, "LOOP-1").stock;
    let mut redis = h.projection.connection();
    let () = redis::cmd("SET")
        .arg(&stock)
        .arg("corrupt")
        .query_async(&mut redis)
        .await?;
    let deduct = h
        .ledger
        .deduct(&sku, &ids::order("o1"), ids::qty(1), None)
        .await?;
    let record = deduct.position.to_string();
    for times in 1..=2 {
        let applier = h.start_applier_with(config.clone());
        stockledger_testkit::wait_until("the applier to stop on the record", CATCH_UP, || async {
            Ok(applier.is_finished().then_some(()))
        })
        .await?;
        assert!(applier.stop().await.is_err(), "it stopped on an error");
        let note = h.projection.stop_of("applier").await?.expect("a note");
        assert_eq!((note.record.as_str(), note.times), (record.as_str(), times));
    }
    let (code, report) = status(&h, &[])?;
    assert_eq!(code, Some(3), "{report}");
    let problems = report["problems"].to_string();
    assert!(
        problems.contains(&format!(
            "applier in a crash loop: it stopped 2 times in a row on the record {record}"
        )),
        "{report}"
    );
    assert_eq!(report["stops"][0]["service"], "applier", "{report}");
    // Put right, the applier goes past the record and its note goes.
    let () = redis::cmd("DEL")
        .arg(&stock)
        .query_async(&mut redis)
        .await?;
    let applier = h.start_applier_with(config);
    stockledger_testkit::wait_until("the note to go", CATCH_UP, || async {
        Ok(h.projection
            .stop_of("applier")
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;
    applier.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archiver_that_stops_on_the_same_page_twice_is_named_by_status() -> anyhow::Result<()> {
    use stockledger_core::{codec, LogPosition, Outcome};

    let h = Harness::new("archive-loop", 1).await?;
    // A constraint of the archive that this test's one SKU breaks: every
    // page holding its outcome is refused for good, as a schema changed
    // by hand could refuse one.
    let sku = format!("{}-refused", h.ns.id);
    let constraint = format!("refuse_{}", h.ns.id.replace('-', "_"));
    sqlx::query(&format!(
        "ALTER TABLE ledger_entries ADD CONSTRAINT {constraint} CHECK (sku <> '{sku}')"
    ))
    .execute(&h.pool)
    .await?;
    let position = LogPosition {
        topic: h.ns.topic.clone(),
        partition: 0,
        offset: 0,
    };
    let outcome = Outcome::invalid(position, &sku, "written by hand".into(), 1_700_000_000_000);
    h.send_raw_outcome(&sku, &codec::encode_outcome(&outcome)?)
        .await?;
    let record = format!("{}/0@0", h.ns.outcomes_topic);
    let noted = || async {
        let note: Option<(String, i32)> = sqlx::query_as(
            "SELECT record, times FROM service_stops WHERE consumer_group = $1 AND service = 'archiver'",
        )
        .bind(&h.ns.archiver_group)
        .fetch_optional(&h.pool)
        .await?;
        anyhow::Ok(note)
    };
    let outcome = async {
        for times in 1..=2 {
            let archiver = h.start_archiver();
            stockledger_testkit::wait_until(
                "the archiver to stop on the page",
                CATCH_UP,
                || async { Ok(archiver.is_finished().then_some(())) },
            )
            .await?;
            assert!(archiver.stop().await.is_err(), "it stopped on an error");
            assert_eq!(noted().await?, Some((record.clone(), times)));
        }
        let (code, report) = status(&h, &[])?;
        assert_eq!(code, Some(3), "{report}");
        assert!(
            report["problems"].to_string().contains(&format!(
                "archiver in a crash loop: it stopped 2 times in a row on the record {record}"
            )),
            "{report}"
        );
        anyhow::Ok(())
    }
    .await;
    sqlx::query(&format!(
        "ALTER TABLE ledger_entries DROP CONSTRAINT {constraint}"
    ))
    .execute(&h.pool)
    .await?;
    outcome?;
    // Put right, the archiver writes the page and its note goes.
    let archiver = h.start_archiver();
    stockledger_testkit::wait_until("the note to go", CATCH_UP, || async {
        Ok(noted().await?.is_none().then_some(()))
    })
    .await?;
    archiver.stop().await?;
    Ok(())
}
