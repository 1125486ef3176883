//! What analysts run against the archive: `history` pages and filters,
//! `stock --as-of`, `report` and `export`, through the binary and over HTTP,
//! with the pipeline running for real; the exports read back by pyarrow
//! (`examples/python/read_export.sh`), an implementation that is not ours.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;
use stockledger_core::RestockMode;
use stockledger_testkit::ids;
use stockledger_testkit::Harness;

fn stockledger(h: &Harness, args: &[&str]) -> std::io::Result<Output> {
    common::stockledger(h).args(args).output()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `args`, which must succeed; its standard output and error.
fn ok(h: &Harness, args: &[&str]) -> anyhow::Result<(String, String)> {
    let out = stockledger(h, args)?;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    anyhow::ensure!(out.status.success(), "{args:?} failed: {stderr}{stdout}");
    Ok((stdout, stderr))
}

fn json_lines(stdout: &str) -> anyhow::Result<Vec<Value>> {
    Ok(stdout
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?)
}

/// The SKU's ledger: restock 5 (offset 0), deduct o1 ×2, o2 ×3, refused o3
/// ×1, rollback o1 "payment failed" (offsets 1–4): sold out at offset 2.
async fn sell(h: &Harness) -> anyhow::Result<()> {
    let p = &h.ledger;
    p.restock(&ids::sku("A"), &ids::adjustment("r1"), RestockMode::Set, 5)
        .await?;
    p.deduct(&ids::sku("A"), &ids::order("o1"), ids::qty(2), None)
        .await?;
    p.deduct(&ids::sku("A"), &ids::order("o2"), ids::qty(3), None)
        .await?;
    p.deduct(&ids::sku("A"), &ids::order("o3"), ids::qty(1), None)
        .await?;
    p.rollback(&ids::sku("A"), &ids::order("o1"), Some("payment failed"))
        .await?;
    h.wait_for_archive(5).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn analysts_page_filter_ask_as_of_report_and_export_what_the_archive_holds(
) -> anyhow::Result<()> {
    let h = Harness::new("analysts", 1).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    sell(&h).await?;

    // Pages of two, CSV, followed by their cursor.
    let mut offsets = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..5 {
        let mut args = vec!["history", "--sku", "A", "--limit", "2", "--format", "csv"];
        if let Some(a) = &after {
            args.extend(["--after", a]);
        }
        let (stdout, stderr) = ok(&h, &args)?;
        let mut reader = csv::Reader::from_reader(stdout.as_bytes());
        for row in reader.records() {
            let position = row?[1].to_owned();
            offsets.push(position.split('@').nth(1).unwrap_or_default().to_owned());
        }
        after = stderr
            .lines()
            .find_map(|l| l.strip_prefix("more: --after "))
            .map(str::to_owned);
        if after.is_none() {
            break;
        }
    }
    assert_eq!(offsets, ["0", "1", "2", "3", "4"]);

    // Filters: a result, newest first, a time range.
    let (stdout, _) = ok(
        &h,
        &[
            "history",
            "--sku",
            "A",
            "--result",
            "applied",
            "--newest-first",
            "--format",
            "json",
        ],
    )?;
    let applied: Vec<i64> = json_lines(&stdout)?
        .iter()
        .map(|l| l["offset"].as_i64().unwrap_or(-1))
        .collect();
    assert_eq!(applied, [4, 2, 1, 0]);
    let rows = json_lines(&stdout)?;
    assert_eq!(rows[0]["rollback_reason"], "payment failed");
    assert_eq!(rows[3]["restock_mode"], "SET");
    let (stdout, _) = ok(
        &h,
        &[
            "history", "--sku", "A", "--since", "-1h", "--until", "now", "--format", "json",
        ],
    )?;
    assert_eq!(json_lines(&stdout)?.len(), 5);
    let (stdout, _) = ok(&h, &["history", "--sku", "A", "--until", "-1h"])?;
    assert!(stdout.contains("(no archived entries)"), "{stdout}");

    // As of an offset, of now, and beyond the archive.
    let (stdout, _) = ok(&h, &["stock", "A", "--as-of", "2"])?;
    assert!(
        stdout.starts_with("A as of offset 2: available 0, total 5, held 5"),
        "{stdout}"
    );
    let (stdout, _) = ok(&h, &["stock", "A", "--as-of", "now"])?;
    assert!(stdout.contains("available 2, total 5, held 3"), "{stdout}");
    let out = stockledger(&h, &["stock", "A", "--as-of", "5"])?;
    assert_eq!(out.status.code(), Some(4));
    assert!(
        text(&out.stdout)
            .contains("not archived yet: the archive holds partition 0 up to offset 4"),
        "{}",
        text(&out.stdout)
    );
    let out = stockledger(&h, &["stock", "A", "--as-of", "-1d"])?;
    assert_eq!(out.status.code(), Some(4));
    assert!(
        text(&out.stdout).contains("no record yet"),
        "{}",
        text(&out.stdout)
    );

    // One day, one interval: the totals of the ledger above.
    let (stdout, _) = ok(
        &h,
        &[
            "report", "--sku", "A", "--every", "1d", "--since", "-2d", "--format", "json",
        ],
    )?;
    let report = json_lines(&stdout)?;
    let totals: i64 = report
        .iter()
        .map(|r| r["records"].as_i64().unwrap_or(0))
        .sum();
    assert_eq!(totals, 5, "{stdout}");
    let sum = |field: &str| -> i64 { report.iter().map(|r| r[field].as_i64().unwrap_or(0)).sum() };
    assert_eq!(
        (
            sum("deducts_applied"),
            sum("units_taken"),
            sum("units_returned"),
            sum("net_taken")
        ),
        (2, 5, 2, 3)
    );
    assert_eq!(sum("rejected_insufficient"), 1);
    assert!(
        report.iter().any(|r| r["sold_out_at"].is_string()),
        "{stdout}"
    );

    // Exports, read back by pyarrow and Python's csv module.
    let dir = std::env::temp_dir().join(format!("{}-export", h.ns.id));
    std::fs::create_dir_all(&dir)?;
    let parquet = dir.join("a.parquet");
    let csv_file = dir.join("a.csv");
    for (format, path) in [("parquet", &parquet), ("csv", &csv_file)] {
        let (stdout, _) = ok(
            &h,
            &[
                "export",
                "--since",
                "-1h",
                "--format",
                format,
                "--out",
                &path.display().to_string(),
            ],
        )?;
        assert!(stdout.starts_with("5 rows written to"), "{stdout}");
    }
    let read = Command::new(example("read_export.sh"))
        .args(["--parquet", &parquet.display().to_string()])
        .args(["--csv", &csv_file.display().to_string()])
        .output()?;
    assert!(read.status.success(), "{}", text(&read.stderr));
    let seen: Value = serde_json::from_slice(&read.stdout)?;
    for format in ["parquet", "csv"] {
        let s = &seen[format];
        assert_eq!(s["rows"], 5, "{format}: {s}");
        // 5 restocked, 2 and 3 taken, 2 given back.
        assert_eq!(s["delta_sum"], 2, "{format}: {s}");
        assert_eq!(s["null_order_ids"], 1, "{format}: the restock has no order");
        assert_eq!(s["first"]["log_offset"].to_string().trim_matches('"'), "0");
        assert_eq!(s["last"]["rollback_reason"], "payment failed");
    }
    let types = &seen["parquet"]["types"];
    assert_eq!(types["occurred_at"], "timestamp[ms, tz=UTC]");
    assert_eq!(
        (types["log_offset"].as_str(), types["sku"].as_str()),
        (Some("int64"), Some("string"))
    );
    for column in ["basket_id", "location", "to_location", "events"] {
        assert_eq!(types[column], "string", "{column}: {types}");
    }
    // The restock took the SKU from 0: it raised BACK_IN_STOCK.
    assert_eq!(seen["parquet"]["first"]["events"], "BACK_IN_STOCK");
    assert_eq!(seen["csv"]["first"]["events"], "BACK_IN_STOCK");
    assert_eq!(
        seen["parquet"]["first"]["occurred_at"],
        seen["csv"]["first"]["occurred_at"]
    );
    let (stdout, _) = ok(
        &h,
        &["history", "--sku", "A", "--limit", "1", "--format", "json"],
    )?;
    assert_eq!(
        json_lines(&stdout)?[0]["occurred_at"],
        seen["csv"]["first"]["occurred_at"]
    );

    // An existing file is refused, and kept.
    let before = std::fs::read(&csv_file)?;
    let out = stockledger(
        &h,
        &[
            "export",
            "--since",
            "-1h",
            "--format",
            "csv",
            "--out",
            &csv_file.display().to_string(),
        ],
    )?;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--out: "),
        "{}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains("already exists"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read(&csv_file)?, before);
    std::fs::remove_dir_all(&dir)?;

    // The same answers over HTTP, and its refusals naming the parameter.
    let (_gateway, url) = common::serve(&h, &[])?;
    let get = |path: String| {
        let url = format!("{url}{path}");
        async move {
            let response = reqwest::get(&url).await?;
            let status = response.status().as_u16();
            let body: Value = response.json().await?;
            anyhow::Ok((status, body))
        }
    };
    let (status, body) = get("/v1/skus/A/as-of?at=2".into()).await?;
    assert_eq!(
        (status, &body["available"], &body["held"]),
        (200, &Value::from(0), &Value::from(5)),
        "{body}"
    );
    assert_eq!(body["archive_reach"]["offset"], 4);
    let (status, body) = get("/v1/skus/A/as-of?at=now".into()).await?;
    assert_eq!(
        (status, &body["available"]),
        (200, &Value::from(2)),
        "{body}"
    );
    // Offset 5 is past the end of the SKU's partition of the log: asking
    // again would not help, so no 503 with Retry-After.
    let (status, body) = get("/v1/skus/A/as-of?at=5".into()).await?;
    assert_eq!(
        (status, &body["field"]),
        (409, &Value::from("at")),
        "{body}"
    );
    assert!(
        body["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("past the end of the log: partition 0 holds offsets below 5"),
        "{body}"
    );
    let (status, body) = get("/v1/report?sku=A&every=1d&since=-2d".into()).await?;
    assert_eq!(status, 200, "{body}");
    let rows = body["rows"].as_array().cloned().unwrap_or_default();
    let net: i64 = rows
        .iter()
        .map(|r| r["net_taken"].as_i64().unwrap_or(0))
        .sum();
    assert_eq!(net, 3, "{body}");
    let (status, body) =
        get("/v1/history?sku=A&result=REJECTED_INSUFFICIENT&since=-1h&newest_first=true".into())
            .await?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["entries"].as_array().map(Vec::len), Some(1), "{body}");
    assert_eq!(body["entries"][0]["order_id"], "o3");
    for (path, field) in [
        ("/v1/skus/A/as-of?at=soon", "at"),
        ("/v1/report?every=0m", "every"),
        ("/v1/report?since=now&until=-1d", "since"),
        ("/v1/history?sku=A&after=another.topic:0:1:A", "after"),
        ("/v1/history?sku=A&result=SOLD", "result"),
        ("/v1/history?sku=A&since=yesterday", "since"),
    ] {
        let (status, body) = get(path.into()).await?;
        assert_eq!(
            (status, body["field"].as_str()),
            (422, Some(field)),
            "{path}: {body}"
        );
    }

    applier.stop().await?;
    archiver.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_analyst_input_names_the_flag() -> anyhow::Result<()> {
    let h = Harness::new("analysts-bad", 1).await?;
    let exists = std::env::temp_dir().join(format!("{}-exists.csv", h.ns.id));
    std::fs::write(&exists, "keep me")?;
    let exists = exists.display().to_string();
    let foreign = "another.topic:0:1:A".to_owned();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["history", "--sku", "A", "--since", "yesterday"],
            "--since",
        ),
        (
            vec!["history", "--sku", "A", "--since", "2026-11-23T10:00:00"],
            "not a time",
        ),
        (
            vec!["history", "--sku", "A", "--since", "now", "--until", "-1h"],
            "--since must be before --until",
        ),
        (
            vec!["history", "--sku", "A", "--result", "SOLD"],
            "is not a result",
        ),
        (
            vec!["history", "--sku", "A", "--after", &foreign],
            "--after: the cursor is a position in topic another.topic",
        ),
        (vec!["history", "--sku", "A", "--after", "0:1:A"], "--after"),
        (vec!["history", "--sku", "A", "--limit", "10001"], "--limit"),
        (vec!["history", "--sku", "A", "--format", "xml"], "--format"),
        (vec!["report", "--every", "0m"], "must be longer than zero"),
        (vec!["report", "--every", "1y"], "unknown unit"),
        (
            vec!["report", "--since", "now", "--until", "-1d"],
            "--since must be before --until",
        ),
        (vec!["stock", "A", "--as-of", "soon"], "--as-of"),
        (
            vec!["export", "--since", "-1h", "--format", "xlsx", "--out", "x"],
            "is not a format",
        ),
        (
            vec![
                "export", "--since", "-1h", "--format", "csv", "--out", &exists,
            ],
            "already exists",
        ),
    ];
    for (args, expected) in &cases {
        let out = stockledger(&h, args)?;
        assert!(!out.status.success(), "{args:?} must fail");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    assert_eq!(std::fs::read_to_string(&exists)?, "keep me");
    std::fs::remove_file(&exists)?;
    Ok(())
}

fn example(script: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/python")
        .join(script)
}

/// The SQLSTATE of a failed statement.
async fn refused(pool: &sqlx::PgPool, statement: &str) -> Option<String> {
    match sqlx::query(statement).execute(pool).await {
        Ok(_) => None,
        Err(sqlx::Error::Database(e)) => e.code().map(|c| c.into_owned()),
        Err(other) => Some(other.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_analysts_role_reads_the_archive_and_cannot_write_it() -> anyhow::Result<()> {
    const DENIED: &str = "42501"; // insufficient_privilege
    let h = Harness::new("analyst-role", 1).await?;
    let archiver = h.start_archiver();
    let applier = h.start_applier();
    h.ledger
        .restock(&ids::sku("R"), &ids::adjustment("r0"), RestockMode::Set, 3)
        .await?;
    h.wait_for_archive(1).await?;
    applier.stop().await?;
    archiver.stop().await?;

    // A login that is a member of stockledger_analyst and nothing else.
    let login = format!("analyst_{}", h.ns.id.replace('-', "_"));
    sqlx::query(&format!(
        "CREATE ROLE {login} LOGIN PASSWORD 'read-only' IN ROLE stockledger_analyst"
    ))
    .execute(&h.pool)
    .await?;
    let url = h.services.database_url.replacen(
        "postgres:stockledger@",
        &format!("{login}:read-only@"),
        1,
    );
    let checked = async {
        let analyst = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect(&url)
            .await?;
        sqlx::query("SET ROLE stockledger_analyst")
            .execute(&analyst)
            .await?;
        let (rows,): (i64,) =
            sqlx::query_as("SELECT count(*) FROM ledger_sku_timeline WHERE sku = 'R'")
                .fetch_one(&analyst)
                .await?;
        assert!(rows >= 1, "the analyst reads the archive");
        for statement in [
            "INSERT INTO ledger_hourly (topic, sku, hour) VALUES ('t', 's', now())",
            "DELETE FROM ledger_entries",
            "UPDATE ledger_entries SET quantity = 0",
            "TRUNCATE ledger_hourly",
            "SELECT * FROM archiver_progress",
            "SELECT ledger_entries_ensure_months(ARRAY[now()])",
            "CREATE TABLE analyst_scratch (x int)",
        ] {
            assert_eq!(
                refused(&analyst, statement).await.as_deref(),
                Some(DENIED),
                "{statement}"
            );
        }
        // The CLI's reads need nothing more: history with that login.
        let out = common::stockledger(&h)
            .env("DATABASE_URL", &url)
            .args(["history", "--sku", "R"])
            .output()?;
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(text(&out.stdout).contains("r0"), "{}", text(&out.stdout));
        // And whoever logs in, the CLI's and the gateway's reads act as the
        // analyst: a pool made so cannot write even with the owner's login.
        let reader = stockledger_archiver::connect_as(
            &h.services.database_url,
            1,
            std::time::Duration::from_secs(10),
            stockledger_archiver::DbRole::Analyst,
        )?;
        assert_eq!(
            refused(&reader, "DELETE FROM ledger_entries")
                .await
                .as_deref(),
            Some(DENIED)
        );
        anyhow::Ok(())
    }
    .await;
    sqlx::query(&format!("DROP ROLE {login}"))
        .execute(&h.pool)
        .await?;
    checked
}
