//! The console (`/console`, and the `/v1/status` and `/v1/sale` it polls)
//! under a sale, against real services: who may open it, what it shows in
//! headless Chromium compared with the ledger's own figures, and outages
//! (Redis cut off, no decision while commands wait) shown as such.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{new_key, screenshots_dir, serve};
use serde_json::{json, Value};
use stockledger_core::{ChangeId, RestockMode};
use stockledger_testkit::fault::{address_of, via_port, Proxy};
use stockledger_testkit::harness::CATCH_UP;
use stockledger_testkit::ids::{adjustment, location, order, qty, sku, unit};
use stockledger_testkit::{poison, wait_until, Harness};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

/// The sale the console is shown: a counted SKU sold out, given back one
/// unit and sold out again by a hold; a SKU kept in two places, paused; a SKU of
/// named seats, one sold and one held; two records that are no command.
/// Returns the records sent.
async fn sale(h: &Harness) -> anyhow::Result<i64> {
    let l = &h.ledger;
    let hold = Duration::from_secs(600);
    let a = sku("CON-A");
    l.restock(&a, &adjustment("a1"), RestockMode::Set, 10)
        .await?;
    for n in 1..=12 {
        l.deduct(&a, &order(format!("o{n}")), qty(1), None).await?;
    }
    l.rollback(&a, &order("o3"), Some("changed mind")).await?;
    l.reserve(&a, &order("o20"), qty(1), hold, None).await?;
    let places = sku("CON-L");
    l.restock_at(
        &places,
        &adjustment("n1"),
        &location("north"),
        RestockMode::Set,
        5,
    )
    .await?;
    l.restock_at(
        &places,
        &adjustment("s1"),
        &location("south"),
        RestockMode::Set,
        3,
    )
    .await?;
    l.deduct_from(&places, &location("north"), &order("o1"), qty(2), None)
        .await?;
    l.pause(&places, &ChangeId::new("stop")?).await?;
    let seats = sku("CON-S");
    let units: Vec<_> = ["A1", "A2", "A3", "A4"].into_iter().map(unit).collect();
    l.add_units(&seats, &adjustment("u1"), &units).await?;
    l.take_units(&seats, &order("o1"), &[unit("A2")], None, None)
        .await?;
    l.take_units(&seats, &order("o2"), &[unit("A3")], Some(hold), None)
        .await?;
    for n in 0..2 {
        h.send_raw("CON-X", &poison::deduct_with("", &format!("bad{n}"), 1)?)
            .await?;
    }
    Ok(15 + 4 + 3 + 2)
}

/// Waits until `group` has committed every record of `topic`.
async fn committed_to_end(h: &Harness, group: &str, topic: &str) -> anyhow::Result<()> {
    use stockledger_kafka::topic::{committed_offsets, watermarks_of};
    wait_until(
        &format!("{group} at the end of {topic}"),
        CATCH_UP,
        || async {
            let ends = watermarks_of(&h.kafka, topic).await?;
            let committed = committed_offsets(&h.kafka, group, topic).await?;
            Ok(ends
                .iter()
                .all(|(p, (first, end))| end == first || committed.get(p) == Some(end))
                .then_some(()))
        },
    )
    .await
}

/// The browser check, running: its lines out, its stdin in.
struct Browser {
    child: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl Browser {
    fn open(url: &str, key: &str, out: &std::path::Path) -> anyhow::Result<Self> {
        let chromium = std::env::var("STOCKLEDGER_CHROMIUM").map_err(|_| {
            anyhow::anyhow!(
                "STOCKLEDGER_CHROMIUM is not set: deploy/local/test.sh sets it (deploy/local/browser.sh installs Chromium)"
            )
        })?;
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/console/run.sh");
        let mut child = tokio::process::Command::new(script)
            .args(["--url", url, "--user", "watcher", "--key", key])
            .arg("--out")
            .arg(out)
            .env("STOCKLEDGER_CHROMIUM", chromium)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
        Ok(Self {
            child,
            lines: tokio::io::BufReader::new(stdout).lines(),
        })
    }

    /// What the page showed at its next step.
    async fn next(&mut self) -> anyhow::Result<Value> {
        // The first run installs the driver from npm.
        let line = tokio::time::timeout(Duration::from_secs(300), self.lines.next_line()).await??;
        let line = line.ok_or_else(|| anyhow::anyhow!("the browser check ended early"))?;
        Ok(serde_json::from_str(&line)?)
    }

    async fn tell(&mut self, what: &str) -> anyhow::Result<()> {
        let stdin = self
            .child
            .stdin
            .as_mut()
            .ok_or_else(|| anyhow::anyhow!("no stdin"))?;
        stdin.write_all(format!("{what}\n").as_bytes()).await?;
        Ok(stdin.flush().await?)
    }

    /// Ends the check as it ends by itself: its input closed, it closes
    /// Chromium and exits. Killed instead (`kill_on_drop`), the driver
    /// would leave Chromium running.
    async fn close(mut self) -> anyhow::Result<()> {
        drop(self.child.stdin.take());
        let status = tokio::time::timeout(Duration::from_secs(60), self.child.wait()).await??;
        anyhow::ensure!(status.success(), "the browser check ended with {status}");
        Ok(())
    }
}

/// The figures of `sku` the page should show, read from Redis by the
/// projection's own reader: (available, on hold, sold).
async fn ledger_figures(h: &Harness, name: &str) -> anyhow::Result<(i64, i64, i64)> {
    let (stock, _) = h
        .projection
        .stock_by_location(name)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no stock for {name}"))?;
    let held = stock.total - stock.available;
    Ok((stock.available, stock.reserved, held - stock.reserved))
}

async fn status_of(url: &str, auth: Option<&str>) -> anyhow::Result<(u16, String)> {
    let mut request = reqwest::Client::new().get(url);
    if let Some(token) = auth {
        request = request.bearer_auth(token);
    }
    let response = request.send().await?;
    let challenge = response
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    Ok((response.status().as_u16(), challenge))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_shows_the_ledgers_figures_and_outages_in_headless_chromium(
) -> anyhow::Result<()> {
    let h = Harness::new("console", 2).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    let records = sale(&h).await?;
    h.wait_for_archive(records).await?;
    committed_to_end(&h, &h.ns.applier_group, &h.ns.topic).await?;
    committed_to_end(&h, &h.ns.archiver_group, &h.ns.outcomes_topic).await?;

    let watcher = new_key(&h, "watcher", "analyst")?;
    let checkout = new_key(&h, "checkout", "producer")?;
    let keys = screenshots_dir(&h)?.join("keys.toml");
    std::fs::write(&keys, format!("{}\n{}", watcher.stanza, checkout.stanza))?;
    let (watcher, checkout) = (watcher.token, checkout.token);
    // The gateway reaches Redis through a proxy the test can cut.
    let redis = Proxy::start(address_of(&h.redis_url)?).await?;
    let redis_url = via_port(&h.redis_url, redis.port());
    let keys = keys.to_string_lossy().into_owned();
    let (_gateway, base) = serve(&h, &["--api-keys", &keys, "--redis-url", &redis_url])?;

    // The door: no key is asked for one as a browser understands it; a
    // producer's key is refused; an analyst's opens the page.
    let console = format!("{base}/console?sku=CON-A&sku=CON-L&sku=CON-S");
    let (status, challenge) = status_of(&console, None).await?;
    assert_eq!(status, 401);
    assert!(challenge.starts_with("Basic "), "{challenge}");
    assert_eq!(status_of(&console, Some(&checkout)).await?.0, 403);
    assert_eq!(status_of(&console, Some(&watcher)).await?.0, 200);
    assert_eq!(
        status_of(&format!("{base}/v1/status"), Some(&checkout))
            .await?
            .0,
        403
    );

    let shots = screenshots_dir(&h)?;
    let mut browser = Browser::open(&console, &watcher, &shots)?;
    let page = browser.next().await?;

    // The sale, as the projection holds it and as the commands made it.
    let expected = [
        ("CON-A", (0, 1, 9), 11),
        ("CON-L", (6, 0, 2), 2),
        ("CON-S", (2, 1, 1), 2),
    ];
    for (name, figures, taken) in expected {
        assert_eq!(ledger_figures(&h, name).await?, figures, "{name}");
        let shown = &page["skus"][name];
        let number = |label: &str| {
            shown["figures"][label]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(
            (number("available"), number("on hold"), number("sold")),
            (
                figures.0.to_string(),
                figures.1.to_string(),
                figures.2.to_string()
            ),
            "{name}: {page}"
        );
        assert_eq!(
            shown["taken"],
            Value::from(taken.to_string()),
            "{name}: {page}"
        );
    }
    let now = |name: &str| page["skus"][name]["figures"]["now"].clone();
    assert_eq!(
        (now("CON-A"), now("CON-L"), now("CON-S")),
        (json!("sold out"), json!("paused"), json!("selling")),
        "{page}"
    );
    assert_eq!(
        page["skus"]["CON-A"]["moments"],
        // The first restock brings it in stock too.
        serde_json::json!(["back_in_stock", "sold_out", "back_in_stock", "sold_out"]),
        "{page}"
    );
    let (_, places) = h
        .projection
        .stock_by_location("CON-L")
        .await?
        .ok_or_else(|| anyhow::anyhow!("no CON-L"))?;
    let places: BTreeMap<String, Value> = places
        .iter()
        .map(|l| (l.name.clone(), Value::from(l.available.to_string())))
        .collect();
    assert_eq!(
        page["skus"]["CON-L"]["locations"],
        serde_json::json!(places)
    );
    let seats: BTreeMap<String, Value> = h
        .projection
        .seat_map("CON-S")
        .await?
        .into_iter()
        .map(|(name, state)| (name, Value::from(format!("{state:?}").to_lowercase())))
        .collect();
    assert_eq!(
        page["skus"]["CON-S"]["seats"],
        serde_json::json!({"A1": "available", "A2": "sold", "A3": "held", "A4": "available"})
    );
    assert_eq!(page["skus"]["CON-S"]["seats"], serde_json::json!(seats));

    // The pipeline: every service answers, nothing lags (each partition
    // listed), the two dead letters with their reasons, the last minute's
    // decisions as the archive counts them.
    assert_eq!(
        page["services"],
        serde_json::json!({"kafka": true, "redis": true, "postgresql": true})
    );
    for table in ["applier", "archiver"] {
        let rows = page[table].as_array().cloned().unwrap_or_default();
        let lags: Vec<(String, String)> = rows
            .iter()
            .map(|r| {
                (
                    r["partition"].as_str().unwrap_or_default().to_owned(),
                    r["lag"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        assert_eq!(
            lags,
            [
                ("0".to_owned(), "0".to_owned()),
                ("1".to_owned(), "0".to_owned())
            ],
            "{table}: {page}"
        );
    }
    assert_eq!(page["dead_letters"], "2", "{page}");
    let newest = page["newest_dead_letters"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(newest.len(), 2, "{page}");
    assert!(
        newest
            .iter()
            .all(|d| d.as_str().unwrap_or_default().contains(&h.ns.topic)),
        "each names the record it was: {page}"
    );
    let checked_at = page["checked_at"].as_str().unwrap_or_default().to_owned();
    let archived: Vec<(String, i64)> = sqlx::query_as(
        "SELECT result, count(*) FROM ledger_entries WHERE topic = $1
           AND occurred_at >= $2::timestamptz - interval '60 seconds' GROUP BY result",
    )
    .bind(&h.ns.topic)
    .bind(&checked_at)
    .fetch_all(&h.pool)
    .await?;
    let archived: BTreeMap<String, Value> = archived
        .into_iter()
        .map(|(result, n)| (result, Value::from(n.to_string())))
        .collect();
    assert_eq!(page["decisions"], serde_json::json!(archived), "{page}");
    assert!(
        !archived.is_empty(),
        "the sale was decided within the minute"
    );
    assert_eq!(page["state"], "healthy", "{page}");

    // Redis cut off from the gateway: the page says so, and shows no stock
    // rather than zeros.
    redis.pause();
    browser.tell("redis").await?;
    let down = browser.next().await?;
    assert_eq!(down["services"]["redis"], false, "{down}");
    assert_eq!(down["state"], "unreachable", "{down}");
    assert!(
        down["outage"][1]
            .as_str()
            .unwrap_or_default()
            .contains("Redis does not answer"),
        "{down}"
    );
    for (name, _, _) in expected {
        let shown = &down["skus"][name];
        assert_eq!(shown["figures"], serde_json::json!({}), "{name}: {down}");
        assert!(
            shown["text"]
                .as_str()
                .unwrap_or_default()
                .contains("stock unknown"),
            "{name}: {down}"
        );
    }
    redis.resume();

    // The applier gone while a command waits: the page says for how long
    // no decision came, on which partition.
    applier.stop().await?;
    h.ledger
        .deduct(&sku("CON-A"), &order("late"), qty(1), None)
        .await?;
    browser.tell("stall").await?;
    let stalled = browser.next().await?;
    let outage = stalled["outage"][0].as_str().unwrap_or_default();
    assert!(
        outage.contains("no decision for") && outage.contains("while 1 command waits"),
        "{stalled}"
    );
    assert_eq!(stalled["services"]["redis"], true, "{stalled}");
    browser.close().await?;

    for step in [&page, &down, &stalled] {
        let path = step["screenshot"].as_str().unwrap_or_default();
        let bytes = std::fs::read(path)?;
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{path} is no PNG");
    }
    // The picture in docs/operators.md is this test's.
    if std::env::var_os("STOCKLEDGER_WRITE_SCREENSHOTS").is_some() {
        let docs = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/images");
        std::fs::create_dir_all(docs)?;
        std::fs::copy(
            page["screenshot"].as_str().unwrap_or_default(),
            format!("{docs}/console.png"),
        )?;
    }
    archiver.stop().await?;
    Ok(())
}
