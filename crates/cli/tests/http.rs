//! `stockledger serve` (the HTTP gateway) and the `--metrics-addr`
//! endpoints of `apply` and `archive`, as processes, against real services.

mod common;
#[path = "common/monitoring.rs"]
mod monitoring;

use std::time::Duration;

use common::{free_port, promtool_check, sample, serve, Running};
use serde_json::{json, Value};
use stockledger_client::KafkaConfig;
use stockledger_testkit::fault::{address_of, via_port, Proxy};
use stockledger_testkit::harness::CATCH_UP;
use stockledger_testkit::services::{signal_broker, start_own_broker};
use stockledger_testkit::{wait_until, Harness};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn client() -> reqwest::Client {
    // Building fails only without a TLS backend or resolver, neither used here.
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap_or_default()
}

/// Status, content type and JSON body of a response.
async fn answer(response: reqwest::Response) -> anyhow::Result<(u16, String, Value)> {
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let text = response.text().await?;
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Ok((status, content_type, body))
}

/// Deducts one unit at `url`: status, `Retry-After` and body.
async fn deduct_one(
    url: String,
) -> anyhow::Result<(u16, Option<reqwest::header::HeaderValue>, Value)> {
    let response = client()
        .post(url)
        .json(&json!({"quantity": 1}))
        .send()
        .await?;
    let retry_after = response.headers().get("retry-after").cloned();
    let (status, _, body) = answer(response).await?;
    Ok((status, retry_after, body))
}

async fn post(url: &str, body: Value) -> anyhow::Result<(u16, String, Value)> {
    answer(client().post(url).json(&body).send().await?).await
}

async fn get(url: &str) -> anyhow::Result<(u16, String, Value)> {
    answer(client().get(url).send().await?).await
}

async fn text(url: &str) -> anyhow::Result<String> {
    Ok(client().get(url).send().await?.text().await?)
}

/// Waits until `url` (a `/readyz`) answers 200.
async fn until_ready(url: &str) -> anyhow::Result<()> {
    wait_until(&format!("{url} ready"), CATCH_UP, || async {
        Ok(match client().get(url).send().await {
            Ok(r) if r.status().as_u16() == 200 => Some(()),
            _ => None,
        })
    })
    .await
}

/// An archiver process for `h`, writing pages 10 ms apart, and the
/// address of its metrics and probes.
fn archiver(h: &Harness) -> anyhow::Result<(Running, String)> {
    let metrics = format!("127.0.0.1:{}", free_port()?);
    let args = [
        "archive",
        "--metrics-addr",
        &metrics,
        "--page-wait-ms",
        "10",
        "--stats-interval-s",
        "1",
    ];
    Ok((Running(common::spawn(h, &args)?), metrics))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_takes_commands_answers_decisions_orders_and_history_and_metrics_count_them(
) -> anyhow::Result<()> {
    let h = Harness::new("http-flow", 2).await?;
    let apply_metrics = format!("127.0.0.1:{}", free_port()?);
    let _applier = Running(common::spawn(
        &h,
        &[
            "apply",
            "--metrics-addr",
            &apply_metrics,
            "--stats-interval-s",
            "1",
        ],
    )?);
    let (_archiver, archive_metrics) = archiver(&h)?;
    let serve_metrics = format!("127.0.0.1:{}", free_port()?);
    let (_gateway, base) = serve(&h, &["--metrics-addr", &serve_metrics])?;
    until_ready(&format!("http://{apply_metrics}/readyz")).await?;
    until_ready(&format!("http://{archive_metrics}/readyz")).await?;
    until_ready(&format!("{base}/readyz")).await?;

    let (status, _, body) = post(
        &format!("{base}/v1/skus/SKU-H/restocks/r1?wait_ms=30000"),
        json!({"mode": "SET", "quantity": 10}),
    )
    .await?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["decision"]["result"], "APPLIED", "{body}");
    assert_eq!(body["decision"]["total"], 10);
    // The same adjustment again: a repeat; with another body: 409.
    let restock = format!("{base}/v1/skus/SKU-H/restocks/r1");
    let same = json!({"mode": "SET", "quantity": 10});
    let (status, _, body) = post(&restock, same).await?;
    assert_eq!((status, &body["status"]), (200, &json!("repeat")), "{body}");
    for (other, field) in [
        (json!({"mode": "SET", "quantity": 11}), "quantity"),
        (json!({"mode": "ADD", "quantity": 10}), "mode"),
    ] {
        let (status, _, body) = post(&restock, other).await?;
        assert_eq!((status, &body["field"]), (409, &json!(field)), "{body}");
    }

    let deduct = format!("{base}/v1/skus/SKU-H/orders/o1/deduct");
    let (status, _, body) =
        post(&format!("{deduct}?wait_ms=30000"), json!({"quantity": 2})).await?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "decided");
    assert_eq!(body["decision"]["result"], "APPLIED");
    assert_eq!(body["decision"]["available"], 8);
    assert_eq!(body["repeat"], false);
    assert!(body["position"]["offset"].is_i64(), "{body}");

    // The same request again: the ledger holds it; nothing is published.
    let (status, _, body) =
        post(&format!("{deduct}?wait_ms=30000"), json!({"quantity": 2})).await?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "repeat");
    assert_eq!(body["repeat"], true);
    assert_eq!(body["order"]["status"], "DEDUCTED");
    assert!(
        body.get("position").is_none(),
        "a repeat is not published: {body}"
    );
    // The same order id with another body is not a repeat: 409 naming
    // what differs, and nothing published.
    let (status, content_type, body) = post(&deduct, json!({"quantity": 3})).await?;
    assert_eq!(status, 409, "{body}");
    assert_eq!(content_type, "application/problem+json");
    assert_eq!(body["field"], "quantity");
    let other_buyer = json!({"quantity": 2, "user_id": "u-other"});
    let (status, _, body) = post(&deduct, other_buyer).await?;
    assert_eq!((status, &body["field"]), (409, &json!("user_id")), "{body}");
    let as_a_hold = json!({"quantity": 2, "hold_ms": 60000});
    let (status, _, body) = post(&deduct, as_a_hold).await?;
    assert_eq!((status, &body["field"]), (409, &json!("hold_ms")), "{body}");

    // Without a wait: 202 and the position; the order shows up once applied.
    let (status, _, body) = post(
        &format!("{base}/v1/skus/SKU-H/orders/o2/deduct"),
        json!({"quantity": 1}),
    )
    .await?;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["status"], "accepted");
    let order = format!("{base}/v1/skus/SKU-H/orders/o2");
    let seen = wait_until("order o2 applied", CATCH_UP, || async {
        let (status, _, body) = get(&order).await?;
        Ok((status == 200).then_some(body))
    })
    .await?;
    assert_eq!(seen["status"], "DEDUCTED");
    assert_eq!(seen["quantity"], 1);

    // A rollback before its deduct leaves a tombstone; a rollback after gives back.
    let (status, _, body) = post(
        &format!("{base}/v1/skus/SKU-H/orders/o1/rollback?wait_ms=30000"),
        json!({"reason": "payment failed"}),
    )
    .await?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["decision"]["result"], "APPLIED");
    assert_eq!(body["decision"]["delta"], 2);
    // The caller's trace context rides along to the archived row.
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let response = client()
        .post(format!(
            "{base}/v1/skus/SKU-H/orders/o3/rollback?wait_ms=30000"
        ))
        .header("traceparent", traceparent)
        .send()
        .await?;
    let (status, _, body) = answer(response).await?;
    assert_eq!(status, 200, "a rollback needs no body: {body}");
    assert_eq!(body["decision"]["result"], "IGNORED_NO_DEDUCTION");

    let (status, _, stock) = get(&format!("{base}/v1/skus/SKU-H")).await?;
    assert_eq!(status, 200, "{stock}");
    assert_eq!(
        (stock["available"].as_i64(), stock["total"].as_i64()),
        (Some(9), Some(10))
    );
    assert_eq!(stock["held"], 1);
    let (status, _, missing) = get(&format!("{base}/v1/skus/NO-SUCH-SKU")).await?;
    assert_eq!(status, 404, "{missing}");

    // HTTP/2 without TLS (prior knowledge), as a gRPC-era client speaks it.
    let h2 = reqwest::Client::builder().http2_prior_knowledge().build()?;
    let response = h2.get(format!("{base}/v1/skus/SKU-H")).send().await?;
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    assert_eq!(response.status().as_u16(), 200);

    // History, two entries a page, followed to the end: five records decided.
    h.wait_for_archive(5).await?;
    let mut entries = Vec::new();
    let mut url = format!("{base}/v1/history?sku=SKU-H&limit=2");
    loop {
        let (status, _, page) = get(&url).await?;
        assert_eq!(status, 200, "{page}");
        let page_entries = page["entries"].as_array().cloned().unwrap_or_default();
        assert!(page_entries.len() <= 2);
        entries.extend(page_entries);
        match page["next"].as_str() {
            Some(next) => {
                url = format!(
                    "{base}/v1/history?sku=SKU-H&limit=2&after={}",
                    urlencode(next)
                )
            }
            None => break,
        }
    }
    let results: Vec<&str> = entries
        .iter()
        .filter_map(|e| e["result"].as_str())
        .collect();
    assert_eq!(
        results,
        [
            "APPLIED",
            "APPLIED",
            "APPLIED",
            "APPLIED",
            "IGNORED_NO_DEDUCTION"
        ],
        "{entries:?}"
    );
    assert_eq!(entries[3]["command"], "ROLLBACK");
    assert_eq!(entries[3]["order_id"], "o1");
    let traced: Vec<&serde_json::Value> = entries
        .iter()
        .filter(|e| e["traceparent"] == traceparent)
        .collect();
    assert_eq!(traced.len(), 1, "{entries:?}");
    assert_eq!(traced[0]["order_id"], "o3");

    // The served OpenAPI document is the checked-in one.
    let served = text(&format!("{base}/openapi.json")).await?;
    let checked_in = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/openapi.json"
    ))?;
    assert!(
        served == checked_in,
        "/openapi.json differs from docs/openapi.json"
    );

    // Metrics count what was sent.
    let gateway = text(&format!("{base}/metrics")).await?;
    let route = r#"route="/v1/skus/{sku}/orders/{order_id}/deduct""#;
    assert_eq!(
        sample(
            &gateway,
            "stockledger_http_requests_total",
            &[route, r#"status="200""#]
        ),
        2.0,
        "{gateway}"
    );
    assert_eq!(
        sample(
            &gateway,
            "stockledger_http_requests_total",
            &[route, r#"status="202""#]
        ),
        1.0
    );
    assert_eq!(
        sample(
            &gateway,
            "stockledger_http_requests_total",
            &[route, r#"status="409""#]
        ),
        3.0
    );
    assert_eq!(
        sample(
            &gateway,
            "stockledger_gateway_published_total",
            &[r#"command="DEDUCT""#]
        ),
        2.0
    );
    assert!(
        sample(
            &gateway,
            "stockledger_http_request_duration_seconds_count",
            &[route]
        ) >= 4.0
    );
    // The gateway's --metrics-addr renders the same registry.
    let elsewhere = text(&format!("http://{serve_metrics}/metrics")).await?;
    assert_eq!(
        sample(
            &elsewhere,
            "stockledger_gateway_published_total",
            &[r#"command="DEDUCT""#]
        ),
        2.0
    );
    // Lag comes with librdkafka's statistics (every second here).
    let applier = wait_until("the applier's lag exported", CATCH_UP, || async {
        let text = text(&format!("http://{apply_metrics}/metrics")).await?;
        Ok(text.contains("stockledger_consumer_lag{").then_some(text))
    })
    .await?;
    assert_eq!(
        sample(
            &applier,
            "stockledger_applier_records_total",
            &[r#"result="APPLIED""#]
        ),
        4.0,
        "{applier}"
    );
    assert_eq!(
        sample(
            &applier,
            "stockledger_applier_records_total",
            &[r#"result="IGNORED_NO_DEDUCTION""#]
        ),
        1.0
    );
    assert!(
        sample(
            &applier,
            "stockledger_applier_redis_apply_seconds_count",
            &[]
        ) >= 1.0
    );
    assert!(sample(&applier, "stockledger_applier_batch_records_sum", &[]) >= 5.0);
    assert!(
        applier.contains("stockledger_partitions_assigned"),
        "{applier}"
    );
    let archiver = wait_until("the archiver's rows counted", CATCH_UP, || async {
        let text = text(&format!("http://{archive_metrics}/metrics")).await?;
        Ok((sample(&text, "stockledger_archiver_rows_total", &[]) >= 5.0).then_some(text))
    })
    .await?;
    assert!(sample(&archiver, "stockledger_archiver_page_seconds_count", &[]) >= 1.0);
    // Every metric has its help, and Prometheus' own checker agrees; the
    // counters of events that have not happened are there at 0.
    for (who, text) in [
        ("gateway", &gateway),
        ("applier", &applier),
        ("archiver", &archiver),
    ] {
        promtool_check(text).map_err(|e| e.context(format!("the {who}'s metrics")))?;
    }
    // Every metric the alerts and the dashboard query is one a service
    // exports (`up` is Prometheus' own).
    let exported: std::collections::BTreeSet<String> = [&gateway, &applier, &archiver]
        .into_iter()
        .flat_map(|text| monitoring::exported(text))
        .collect();
    for (place, query) in monitoring::queries()? {
        for name in monitoring::selected(&query)? {
            assert!(
                name == "up" || exported.contains(&name),
                "{place} queries {name}, which no service exports: {query}"
            );
        }
    }
    assert!(
        applier.contains("stockledger_applier_dead_letters_total 0"),
        "{applier}"
    );
    assert!(
        archiver.contains("stockledger_archiver_undecodable_total 0"),
        "{archiver}"
    );
    let queue_full = [r#"command="RESTOCK""#, r#"reason="queue_full""#];
    assert!(gateway.contains("# HELP stockledger_gateway_publish_failures_total"));
    assert_eq!(
        sample(
            &gateway,
            "stockledger_gateway_publish_failures_total",
            &queue_full
        ),
        0.0
    );
    // A method nobody knows is counted as `other`: the label set stays bounded.
    for method in ["FOO", "BAR", "BAZ"] {
        let response = client()
            .request(method.parse()?, format!("{base}/v1/skus/SKU-H"))
            .send()
            .await?;
        assert_eq!(response.status().as_u16(), 405);
    }
    let after = text(&format!("{base}/metrics")).await?;
    assert!(!after.contains("method=\"FOO\""), "{after}");
    assert_eq!(
        sample(
            &after,
            "stockledger_http_requests_total",
            &[r#"method="other""#]
        ),
        3.0
    );
    let (status, _, ready) = get(&format!("http://{apply_metrics}/readyz")).await?;
    assert_eq!(status, 200);
    let names: Vec<&str> = ready["checks"]
        .as_array()
        .map(|c| c.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, ["kafka", "redis", "partitions"], "{ready}");
    Ok(())
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A bad request: what it is, path and query, content type, body (None: a
/// GET), the status expected and the field it names.
type Case<'a> = (
    &'a str,
    &'a str,
    &'a str,
    Option<String>,
    u16,
    Option<&'a str>,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_checks_out_reservations_and_refuses_a_sold_out_sku_without_logging(
) -> anyhow::Result<()> {
    let h = Harness::new("http-checkout", 1).await?;
    let _applier = Running(common::spawn(&h, &["apply"])?);
    let (_gateway, base) = serve(&h, &["--sold-out-fast-path"])?;
    until_ready(&format!("{base}/readyz")).await?;
    let wait = "?wait_ms=30000";
    let sku = format!("{base}/v1/skus/SKU-Q");
    let (status, _, body) = post(
        &format!("{sku}/restocks/r1{wait}"),
        json!({"mode": "SET", "quantity": 1}),
    )
    .await?;
    assert_eq!(
        (status, &body["decision"]["result"]),
        (200, &json!("APPLIED")),
        "{body}"
    );
    let response = client()
        .put(format!("{sku}/limit{wait}"))
        .json(&json!({"per_user": 1}))
        .send()
        .await?;
    let (status, _, body) = answer(response).await?;
    assert_eq!(
        (status, &body["decision"]["result"]),
        (200, &json!("APPLIED")),
        "{body}"
    );

    let (status, _, body) = post(
        &format!("{sku}/orders/o1/deduct{wait}"),
        json!({"quantity": 1, "user_id": "u1", "hold_ms": 60000}),
    )
    .await?;
    assert_eq!(
        (status, &body["decision"]["result"]),
        (200, &json!("APPLIED")),
        "{body}"
    );
    let (_, _, stock) = get(&sku).await?;
    assert_eq!(
        (&stock["reserved"], &stock["limit_per_user"]),
        (&json!(1), &json!(1)),
        "{stock}"
    );
    assert_eq!(stock["sold_out"], json!(true), "{stock}");
    // Sold out but held, so not for good: a deduct is still logged (and
    // refused by the ledger), since the hold may come back.
    let (status, _, body) = post(
        &format!("{sku}/orders/o2/deduct{wait}"),
        json!({"quantity": 1, "user_id": "u2"}),
    )
    .await?;
    assert_eq!(
        (status, &body["decision"]["result"]),
        (200, &json!("REJECTED_INSUFFICIENT")),
        "{body}"
    );

    let (status, _, body) = post(&format!("{sku}/orders/o1/confirm{wait}"), json!({})).await?;
    assert_eq!(
        (status, &body["decision"]["result"]),
        (200, &json!("CONFIRMED")),
        "{body}"
    );
    let (_, _, order) = get(&format!("{sku}/orders/o1")).await?;
    assert_eq!(
        (&order["status"], &order["user_id"]),
        (&json!("CONFIRMED"), &json!("u1")),
        "{order}"
    );
    let (status, _, body) = post(&format!("{sku}/orders/o1/confirm{wait}"), json!({})).await?;
    assert_eq!((status, &body["status"]), (200, &json!("repeat")), "{body}");

    // Sold out, nothing held: refused by the gateway, not logged.
    let logged = h.read(&h.ns.topic).await?.len();
    let (status, _, body) = post(
        &format!("{sku}/orders/o3/deduct{wait}"),
        json!({"quantity": 1, "user_id": "u3"}),
    )
    .await?;
    assert_eq!(
        (status, &body["field"]),
        (409, &json!("sold_out")),
        "{body}"
    );
    assert!(
        body["detail"]
            .as_str()
            .is_some_and(|d| d.contains("not logged")),
        "{body}"
    );
    assert_eq!(h.read(&h.ns.topic).await?.len(), logged);

    let (status, _, body) = post(
        &format!("{sku}/orders/o1/refund{wait}"),
        json!({"total": 1}),
    )
    .await?;
    assert_eq!(
        (status, &body["decision"]["result"]),
        (200, &json!("REFUNDED")),
        "{body}"
    );
    let (status, _, body) = post(
        &format!("{sku}/orders/o4/deduct{wait}"),
        json!({"quantity": 1, "user_id": "u4"}),
    )
    .await?;
    assert_eq!(
        (status, &body["decision"]["result"]),
        (200, &json!("APPLIED")),
        "{body}"
    );
    Ok(())
}

/// Two deducts of one order id with different bodies, raced: whichever
/// is decided second is a 409 naming the quantity, never `repeat`, and
/// the order the ledger holds is the one answered 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_different_requests_raced_on_one_order_are_a_decision_and_a_409_never_a_repeat(
) -> anyhow::Result<()> {
    let h = Harness::new("http-race", 1).await?;
    let _applier = Running(common::spawn(&h, &["apply"])?);
    let (_gateway, base) = serve(&h, &[])?;
    until_ready(&format!("{base}/readyz")).await?;
    let sku = format!("{base}/v1/skus/SKU-R");
    // A 503 published nothing: asked again once the gateway is ready, as a
    // client told Retry-After would.
    let readyz = format!("{base}/readyz");
    let send = |url: String, body: Value| {
        let readyz = readyz.clone();
        async move {
            for _ in 0..10 {
                let answer = post(&url, body.clone()).await?;
                if answer.0 != 503 {
                    return Ok(answer);
                }
                until_ready(&readyz).await?;
            }
            anyhow::bail!("{url}: 503 ten times")
        }
    };
    let (status, _, body) = send(
        format!("{sku}/restocks/r1?wait_ms=30000"),
        json!({"mode": "SET", "quantity": 1_000_000}),
    )
    .await?;
    assert_eq!(status, 200, "{body}");
    for i in 0..100 {
        let url = format!("{sku}/orders/race-{i}/deduct?wait_ms=30000");
        let (one, seven) = tokio::join!(
            send(url.clone(), json!({"quantity": 1})),
            send(url.clone(), json!({"quantity": 7}))
        );
        let answers = [(1, one?), (7, seven?)];
        let mut statuses: Vec<u16> = answers.iter().map(|(_, (s, _, _))| *s).collect();
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 409], "race {i}: {answers:?}");
        let (won, (_, _, decided)) = answers.iter().find(|(_, (s, _, _))| *s == 200).unwrap();
        let (_, (_, _, refused)) = answers.iter().find(|(_, (s, _, _))| *s == 409).unwrap();
        assert_eq!(decided["repeat"], false, "race {i}: {decided}");
        assert_eq!(
            decided["decision"]["result"], "APPLIED",
            "race {i}: {decided}"
        );
        assert_eq!(refused["field"], "quantity", "race {i}: {refused}");
        let (status, _, order) = get(&format!("{sku}/orders/race-{i}")).await?;
        assert_eq!(
            (status, &order["quantity"]),
            (200, &json!(won)),
            "race {i}: {order}"
        );
    }
    // The race was run, not only the check before publishing: some losers
    // reached the log and were decided DUPLICATE first.
    let logged = h.read(&h.ns.topic).await?.len() - 1;
    eprintln!("{} of 100 losers reached the log", logged - 100);
    assert!(logged > 100, "no request raced its twin into the log");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_http_input_gets_a_problem_naming_the_field_and_publishes_nothing() -> anyhow::Result<()>
{
    let h = Harness::new("http-invalid", 1).await?;
    let (_gateway, base) = serve(&h, &[])?;
    until_ready(&format!("{base}/readyz")).await?;
    const DEDUCT: &str = "/v1/skus/SKU/orders/o1/deduct";
    const RESTOCK: &str = "/v1/skus/SKU/restocks/a1";
    const JSON: &str = "application/json";
    let one = r#"{"quantity": 1}"#.to_owned();
    let long_order = format!("/v1/skus/SKU/orders/{}/deduct", "o".repeat(200));
    let padded = format!(r#"{{"quantity": 1, "pad": "{}"}}"#, "x".repeat(20_000));
    let long_reason = format!(r#"{{"reason": "{}"}}"#, "r".repeat(2000));
    const HOLD: &str = "/v1/baskets/b1/hold";
    let many_lines = format!(
        r#"{{"hold_ms": 60000, "lines": [{}]}}"#,
        (0..51)
            .map(|i| format!(r#"{{"sku": "S{i}", "quantity": 1}}"#))
            .collect::<Vec<_>>()
            .join(",")
    );
    #[rustfmt::skip]
    let many_units = format!(
        r#"{{"units": [{}]}}"#,
        (0..51)
            .map(|i| format!(r#""A{i}""#))
            .collect::<Vec<_>>()
            .join(",")
    );
    let long_unit = format!(r#"{{"units": ["{}"]}}"#, "u".repeat(129));
    let cases: [Case; 60] = [
        ("malformed JSON", DEDUCT, JSON, Some(r#"{"quantity": "#.into()), 400, None),
        ("a wrong type", DEDUCT, JSON, Some(r#"{"quantity": "two"}"#.into()), 422, Some("quantity")),
        ("an unknown field", DEDUCT, JSON, Some(r#"{"quantity": 1, "colour": "red"}"#.into()), 422, Some("colour")),
        ("a missing field", DEDUCT, JSON, Some("{}".into()), 422, Some("quantity")),
        ("a null body", DEDUCT, JSON, Some("null".into()), 422, Some("body")),
        ("a body of only whitespace", DEDUCT, JSON, Some("  \n ".into()), 400, None),
        ("a string for a body", RESTOCK, JSON, Some(r#""ADD 5""#.into()), 422, Some("body")),
        ("a quantity of zero", DEDUCT, JSON, Some(r#"{"quantity": 0}"#.into()), 422, Some("quantity")),
        ("a quantity above the maximum", DEDUCT, JSON, Some(r#"{"quantity": 1000000001}"#.into()), 422, Some("quantity")),
        ("a quantity beyond i64", DEDUCT, JSON, Some(r#"{"quantity": 99999999999999999999}"#.into()), 422, Some("quantity")),
        ("not JSON", DEDUCT, "text/plain", Some("quantity=1".into()), 415, None),
        ("a body over the limit", DEDUCT, JSON, Some(padded), 413, None),
        ("a SKU with a brace", "/v1/skus/S%7BKU/orders/o1/deduct", JSON, Some(one.clone()), 422, Some("sku")),
        ("an order id too long", &long_order, JSON, Some(one.clone()), 422, Some("order_id")),
        ("a control character", "/v1/skus/SKU/orders/o%0A1/deduct", JSON, Some(one.clone()), 422, Some("order_id")),
        ("a wait too long", "/v1/skus/SKU/orders/o1/deduct?wait_ms=3600000", JSON, Some(one.clone()), 422, Some("wait_ms")),
        ("an unknown query parameter", "/v1/skus/SKU/orders/o1/deduct?wiat_ms=10", JSON, Some(one), 422, Some("wiat_ms")),
        ("a restock mode", RESTOCK, JSON, Some(r#"{"mode": "MULTIPLY", "quantity": 1}"#.into()), 422, Some("mode")),
        ("a restock of zero", RESTOCK, JSON, Some(r#"{"mode": "ADD", "quantity": 0}"#.into()), 422, Some("quantity")),
        ("a rollback reason too long", "/v1/skus/SKU/orders/o1/rollback", JSON, Some(long_reason), 422, Some("reason")),
        ("a NUL in a rollback reason", "/v1/skus/SKU/orders/o1/rollback", JSON, Some(r#"{"reason": "a\u0000b"}"#.into()), 422, Some("reason")),
        ("an escape in a release reason", "/v1/baskets/nobody/release", JSON, Some(r#"{"reason": "\u001b[2J"}"#.into()), 422, Some("reason")),
        ("an array for a body", "/v1/baskets/b1/hold", JSON, Some(r#"[2, null, "alice", 600000, null, null]"#.into()), 422, Some("body")),
        ("an array for a rollback", "/v1/skus/SKU/orders/o1/rollback", JSON, Some("[null]".into()), 422, Some("body")),
        ("a number for a body", DEDUCT, JSON, Some("1".into()), 422, Some("body")),
        ("a key twice", DEDUCT, JSON, Some(r#"{"quantity": 1, "quantity": 2}"#.into()), 422, Some("quantity")),
        ("a wait on a basket, which takes none", "/v1/baskets/b1/hold?wait_ms=99999999", JSON, Some(r#"{"hold_ms": 60000, "lines": [{"sku": "A", "quantity": 1}]}"#.into()), 422, Some("wait_ms")),
        ("a query parameter twice", "/v1/skus/SKU/orders/o1/deduct?wait_ms=10&wait_ms=20", JSON, Some(r#"{"quantity": 1}"#.into()), 422, Some("wait_ms")),
        ("a query parameter on a stock read", "/v1/skus/SKU?full=1", "", None, 422, Some("full")),
        ("a query parameter on an order read", "/v1/skus/SKU/orders/o1?x=1", "", None, 422, Some("x")),
        ("a history parameter twice", "/v1/history?sku=A&sku=B", "", None, 422, Some("sku")),
        ("a hold of zero", DEDUCT, JSON, Some(r#"{"quantity": 1, "hold_ms": 0}"#.into()), 422, Some("hold_ms")),
        ("a hold over 7 days", DEDUCT, JSON, Some(r#"{"quantity": 1, "hold_ms": 604800001}"#.into()), 422, Some("hold_ms")),
        ("a hold and a deadline", DEDUCT, JSON, Some(r#"{"quantity": 1, "hold_ms": 5, "expires_at": 9}"#.into()), 422, Some("hold_ms")),
        ("a deadline in the past", DEDUCT, JSON, Some(r#"{"quantity": 1, "expires_at": 1}"#.into()), 422, Some("expires_at")),
        ("a user id with spaces around", DEDUCT, JSON, Some(r#"{"quantity": 1, "user_id": " u"}"#.into()), 422, Some("user_id")),
        ("a refund total of zero", "/v1/skus/SKU/orders/o1/refund", JSON, Some(r#"{"total": 0}"#.into()), 422, Some("total")),
        ("a history limit", "/v1/history?sku=SKU&limit=5000", "", None, 422, Some("limit")),
        ("a history cursor", "/v1/history?sku=SKU&after=nope", "", None, 422, Some("after")),
        ("a history of nothing", "/v1/history", "", None, 422, Some("sku")),
        ("an unknown route", "/v2/nothing", "", None, 404, None),
        ("an empty basket", HOLD, JSON, Some(r#"{"hold_ms": 60000, "lines": []}"#.into()), 422, Some("lines")),
        ("a basket line of zero", HOLD, JSON, Some(r#"{"hold_ms": 60000, "lines": [{"sku": "A", "quantity": 1}, {"sku": "B", "quantity": 0}]}"#.into()), 422, Some("lines[1].quantity")),
        ("a SKU twice in a basket", HOLD, JSON, Some(r#"{"hold_ms": 60000, "lines": [{"sku": "A", "quantity": 1}, {"sku": "A", "quantity": 2}]}"#.into()), 422, Some("lines[1].sku")),
        ("a basket line without a SKU", HOLD, JSON, Some(r#"{"hold_ms": 60000, "lines": [{"sku": "", "quantity": 1}]}"#.into()), 422, Some("lines[0].sku")),
        ("too many basket lines", HOLD, JSON, Some(many_lines), 422, Some("lines")),
        ("a basket without a hold", HOLD, JSON, Some(r#"{"lines": [{"sku": "A", "quantity": 1}]}"#.into()), 422, Some("hold_ms")),
        ("a basket id with a brace", "/v1/baskets/b%7B1/hold", JSON, Some(r#"{"hold_ms": 60000, "lines": [{"sku": "A", "quantity": 1}]}"#.into()), 422, Some("basket_id")),
        ("a confirm of an unknown basket", "/v1/baskets/nobody/confirm", JSON, Some("{}".into()), 404, Some("basket_id")),
        ("a release reason too long", "/v1/baskets/nobody/release", JSON, Some(format!(r#"{{"reason": "{}"}}"#, "r".repeat(2000))), 422, Some("reason")),
        ("an unknown basket", "/v1/baskets/nobody", "", None, 404, Some("basket_id")),
        ("an empty unit name", DEDUCT, JSON, Some(r#"{"units": ["A1", ""]}"#.into()), 422, Some("units")),
        ("a unit named twice", DEDUCT, JSON, Some(r#"{"units": ["A1", "A1"]}"#.into()), 422, Some("units")),
        ("a unit name too long", DEDUCT, JSON, Some(long_unit), 422, Some("units")),
        ("too many units", DEDUCT, JSON, Some(many_units), 422, Some("units")),
        ("no units", DEDUCT, JSON, Some(r#"{"units": []}"#.into()), 422, Some("units")),
        ("units and another quantity", DEDUCT, JSON, Some(r#"{"units": ["A1"], "quantity": 2}"#.into()), 422, Some("quantity")),
        ("units set rather than added", RESTOCK, JSON, Some(r#"{"units": ["A1"], "mode": "SET"}"#.into()), 422, Some("mode")),
        ("a restock unit named twice", RESTOCK, JSON, Some(r#"{"units": ["A1", "A1"]}"#.into()), 422, Some("units")),
        ("a unit's history without its SKU", "/v1/history?unit=A1", "", None, 422, Some("unit")),
    ];
    for (what, path, content_type, body, expected, field) in cases {
        let url = format!("{base}{path}");
        let request = match body {
            Some(body) => client()
                .post(url)
                .header("content-type", content_type)
                .body(body),
            None => client().get(url),
        };
        let (status, content_type, body) = answer(request.send().await?).await?;
        assert_eq!(status, expected, "{what}: {body}");
        assert_eq!(content_type, "application/problem+json", "{what}");
        assert_eq!(body["status"], expected, "{what}: {body}");
        assert!(
            body["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{what}: {body}"
        );
        if let Some(field) = field {
            assert_eq!(body["field"], field, "{what}: {body}");
        }
    }
    // A limit is lifted only by an explicit null, never by a field left out.
    for (limit, field) in [
        (r#"{"per_user": 0}"#, "per_user"),
        (r#"{"per_user": "two"}"#, "per_user"),
        ("{}", "per_user"),
    ] {
        let response = client()
            .put(format!("{base}/v1/skus/SKU/limit"))
            .header("content-type", JSON)
            .body(limit)
            .send()
            .await?;
        let (status, _, body) = answer(response).await?;
        assert_eq!((status, &body["field"]), (422, &json!(field)), "{body}");
    }
    assert!(
        h.read(&h.ns.topic).await?.is_empty(),
        "nothing may be published"
    );

    // The door's smaller rules: a repeated parameter, a `null` body where
    // none or `{}` is taken, a body on a confirm that is not JSON, a query
    // that is not UTF-8, and a write from another site's page.
    let (status, _, body) = get(&format!(
        "{base}/v1/skus/SKU/events?levels=true&levels=false"
    ))
    .await?;
    assert_eq!((status, &body["field"]), (422, &json!("levels")), "{body}");
    for route in ["/v1/skus/SKU/pauses/p1", "/v1/skus/SKU/orders/o1/rollback"] {
        let response = client()
            .post(format!("{base}{route}"))
            .header("content-type", JSON)
            .body("null")
            .send()
            .await?;
        let (status, _, body) = answer(response).await?;
        assert_eq!(
            (status, &body["field"]),
            (422, &json!("body")),
            "{route}: {body}"
        );
    }
    for route in ["/v1/skus/SKU/orders/o1/confirm", "/v1/baskets/b1/confirm"] {
        let response = client()
            .post(format!("{base}{route}"))
            .header("content-type", "text/plain")
            .body("{}")
            .send()
            .await?;
        assert_eq!(response.status().as_u16(), 415, "{route}");
    }
    let (status, _, body) = get(&format!("{base}/v1/history?sku=%FF")).await?;
    assert_eq!(status, 400, "{body}");
    let response = client()
        .post(format!("{base}/v1/skus/SKU/pauses/p2"))
        .header("origin", "https://elsewhere.example")
        .header("content-type", "text/plain")
        .send()
        .await?;
    let (status, content_type, body) = answer(response).await?;
    assert_eq!(
        (status, content_type.as_str()),
        (403, "application/problem+json"),
        "{body}"
    );
    let response = client().get(format!("{base}/v1/skus/SKU")).send().await?;
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    assert_eq!(header("cache-control").as_deref(), Some("no-store"));
    assert_eq!(header("x-content-type-options").as_deref(), Some("nosniff"));
    assert!(
        h.read(&h.ns.topic).await?.is_empty(),
        "nothing may be published"
    );

    // Slow clients are cut off, not waited for: a connection that says nothing...
    let address = base.trim_start_matches("http://").to_owned();
    let mut silent = TcpStream::connect(&address).await?;
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), silent.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "a client that sends nothing is disconnected");
    // ...headers never finished...
    let mut slow = TcpStream::connect(&address).await?;
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await?;
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), slow.read_to_end(&mut rest)).await;
    assert!(
        read.is_ok(),
        "a client that never finishes its headers is disconnected"
    );
    // ...and a body never finished.
    let mut slow = TcpStream::connect(&address).await?;
    slow.write_all(
        b"POST /v1/skus/SKU/orders/o9/deduct HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"quan",
    )
    .await?;
    let mut reply = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), slow.read_to_end(&mut reply)).await;
    assert!(
        read.is_ok(),
        "a client that never finishes its body is answered and disconnected"
    );
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    // A body trickled a byte a second: each byte comes well within the
    // wait between two, but the whole never within --read-timeout-ms.
    let mut trickle = TcpStream::connect(&address).await?;
    trickle.write_all(
        b"POST /v1/skus/SKU/orders/o8/deduct HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n",
    )
    .await?;
    let (mut reading, mut writing) = trickle.into_split();
    let dripping = tokio::spawn(async move {
        for _ in 0..60 {
            if writing.write_all(b" ").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    let mut reply = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(40), reading.read_to_end(&mut reply)).await;
    dripping.abort();
    assert!(read.is_ok(), "a trickled body is answered and disconnected");
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    assert!(
        h.read(&h.ns.topic).await?.is_empty(),
        "nothing may be published"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_connections_at_once_are_served_or_kept_waiting_and_the_gateway_lives(
) -> anyhow::Result<()> {
    const CONNECTIONS: usize = 10_000;
    let h = Harness::new("http-flood", 1).await?;
    let (mut gateway, base) = serve(&h, &[])?;
    until_ready(&format!("{base}/readyz")).await?;
    let address = base.trim_start_matches("http://").to_owned();
    let flood: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let address = address.clone();
            tokio::spawn(async move {
                let exchange = async {
                    let mut stream = TcpStream::connect(&address).await?;
                    stream
                        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                        .await?;
                    let mut reply = Vec::new();
                    stream.read_to_end(&mut reply).await?;
                    anyhow::Ok(reply.starts_with(b"HTTP/1.1 200"))
                };
                tokio::time::timeout(Duration::from_secs(120), exchange).await
            })
        })
        .collect();
    let mut answered = 0;
    for connection in flood {
        match connection.await? {
            Ok(Ok(true)) => answered += 1,
            Ok(Ok(false)) => anyhow::bail!("a connection got an answer other than 200"),
            // Refused or reset by the kernel under the flood: the client sees it at once.
            Ok(Err(_)) => {}
            Err(_) => anyhow::bail!("a connection waited more than 120 s"),
        }
    }
    assert!(
        answered >= CONNECTIONS * 9 / 10,
        "only {answered} of {CONNECTIONS} answered"
    );
    assert!(
        gateway.0.try_wait()?.is_none(),
        "the gateway must still run"
    );
    let (status, _, _) = get(&format!("{base}/healthz")).await?;
    assert_eq!(status, 200);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_producer_queue_answers_429_with_retry_after_and_loses_nothing_it_accepted(
) -> anyhow::Result<()> {
    let h = Harness::new("http-queue", 1).await?;
    // A queue of one record: concurrent commands find it full.
    let (_gateway, base) = serve(&h, &["-X", "queue.buffering.max.messages=1"])?;
    until_ready(&format!("{base}/readyz")).await?;
    let requests: Vec<_> = (0..200)
        .map(|i| {
            let url = format!("{base}/v1/skus/SKU-Q/orders/q{i}/deduct");
            tokio::spawn(deduct_one(url))
        })
        .collect();
    let (mut accepted, mut refused) = (0, 0);
    for request in requests {
        let (status, retry_after, body) = request.await??;
        match status {
            202 => accepted += 1,
            429 => {
                refused += 1;
                assert_eq!(
                    retry_after.as_ref().and_then(|v| v.to_str().ok()),
                    Some("1")
                );
                assert_eq!(body["retry_after_s"], 1);
            }
            other => anyhow::bail!("unexpected {other}: {body}"),
        }
    }
    assert!(
        refused > 0,
        "200 concurrent commands must overflow a one-record queue"
    );
    assert!(accepted > 0);
    assert_eq!(
        h.read(&h.ns.topic).await?.len(),
        accepted,
        "every accepted command, and only those, in the log"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_brokers_stopped_commands_get_503_with_retry_after_and_readyz_says_why(
) -> anyhow::Result<()> {
    let port = start_own_broker().await?;
    let h = Harness::with_kafka(
        "http-broker-down",
        1,
        KafkaConfig::new(format!("127.0.0.1:{port}")),
    )
    .await?;
    let (_gateway, base) = serve(&h, &[])?;
    until_ready(&format!("{base}/readyz")).await?;
    let deduct = |order: &'static str| {
        let url = format!("{base}/v1/skus/SKU-D/orders/{order}/deduct");
        deduct_one(url)
    };
    let (status, _, body) = deduct("before").await?;
    assert_eq!(status, 202, "{body}");

    signal_broker(port, "STOP")?;
    let outage = async {
        let (status, retry_after, body) = deduct("during").await?;
        assert_eq!(status, 503, "{body}");
        assert!(retry_after.is_some(), "503 carries Retry-After");
        let readyz = wait_until("/readyz to see the brokers gone", CATCH_UP, || async {
            let (status, _, body) = get(&format!("{base}/readyz")).await?;
            Ok((status == 503).then_some(body))
        })
        .await?;
        let kafka = readyz["checks"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["name"] == "kafka").cloned())
            .unwrap_or_default();
        assert_eq!(kafka["ok"], false, "{readyz}");
        // Once the gateway knows, it refuses at once, publishing nothing.
        let (status, retry_after, body) = deduct("during-known").await?;
        assert_eq!(status, 503, "{body}");
        assert_eq!(
            retry_after.as_ref().and_then(|v| v.to_str().ok()),
            Some("5")
        );
        anyhow::Ok(())
    }
    .await;
    signal_broker(port, "CONT")?;
    outage?;

    until_ready(&format!("{base}/readyz")).await?;
    let (status, _, body) = deduct("after").await?;
    assert_eq!(status, 202, "{body}");
    let orders: Vec<String> = h
        .read(&h.ns.topic)
        .await?
        .iter()
        .filter_map(|r| stockledger_core::codec::decode_command(r.payload.as_deref()?).ok())
        .filter_map(|c| c.body.order_id().map(|o| o.to_string()))
        .collect();
    assert!(orders.contains(&"before".to_owned()) && orders.contains(&"after".to_owned()));
    assert!(
        !orders.contains(&"during-known".to_owned()),
        "a command refused with 503 once the outage is known is not in the log: {orders:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_away_at_start_the_gateway_waits_for_it_then_serves() -> anyhow::Result<()> {
    let h = Harness::new("http-redis-late", 1).await?;
    let proxy = Proxy::start(address_of(&h.redis_url)?).await?;
    proxy.pause();
    let redis = via_port(&h.redis_url, proxy.port());
    let (mut gateway, base) = serve(&h, &["--redis-url", &redis])?;
    // It tries Redis again and again, and does not exit meanwhile.
    let first = wait_until("the gateway to try Redis", CATCH_UP, || async {
        Ok((proxy.refused() > 0).then(|| proxy.refused()))
    })
    .await?;
    wait_until("the gateway to try Redis again", CATCH_UP, || async {
        Ok((proxy.refused() > first).then_some(()))
    })
    .await?;
    assert!(
        gateway.0.try_wait()?.is_none(),
        "serve exited with Redis away"
    );
    proxy.resume();
    until_ready(&format!("{base}/readyz")).await?;
    let (status, _, body) = deduct_one(format!("{base}/v1/skus/SKU-R/orders/o1/deduct")).await?;
    assert_eq!(status, 202, "{body}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_holds_confirms_and_releases_baskets_whole() -> anyhow::Result<()> {
    let h = Harness::new("http-baskets", 4).await?;
    let _applier = Running(common::spawn(&h, &["apply"])?);
    let (_gateway, base) = serve(&h, &[])?;
    until_ready(&format!("{base}/readyz")).await?;
    for (sku, stock) in [("BA", 2), ("BB", 1), ("BC", 1)] {
        let (status, _, body) = post(
            &format!("{base}/v1/skus/{sku}/restocks/r1?wait_ms=30000"),
            json!({"mode": "SET", "quantity": stock}),
        )
        .await?;
        assert_eq!(status, 200, "{body}");
    }
    let hold = json!({"user_id": "u1", "hold_ms": 60000,
        "lines": [{"sku": "BA", "quantity": 2}, {"sku": "BB", "quantity": 1}]});
    let (status, _, body) = post(&format!("{base}/v1/baskets/b1/hold"), hold.clone()).await?;
    assert_eq!((status, &body["status"]), (200, &json!("held")), "{body}");
    assert_eq!(body["lines"][0]["order_id"], "b1", "{body}");
    assert_eq!(body["lines"][1]["state"], "held", "{body}");
    assert_eq!(body["repeat"], false);
    // A repeat is answered from the projection; other lines are a conflict.
    let (status, _, body) = post(&format!("{base}/v1/baskets/b1/hold"), hold).await?;
    assert_eq!((status, &body["repeat"]), (200, &json!(true)), "{body}");
    let other = json!({"hold_ms": 60000, "lines": [{"sku": "BA", "quantity": 1}, {"sku": "BB", "quantity": 1}]});
    let (status, _, body) = post(&format!("{base}/v1/baskets/b1/hold"), other).await?;
    assert_eq!(
        (status, &body["field"]),
        (409, &json!("lines[0].quantity")),
        "{body}"
    );

    // BA is all held by b1: b2 is refused, and its BC line given back.
    let b2 = json!({"hold_ms": 60000, "lines": [{"sku": "BC", "quantity": 1}, {"sku": "BA", "quantity": 1}]});
    let (status, _, body) = post(&format!("{base}/v1/baskets/b2/hold"), b2).await?;
    assert_eq!(
        (status, &body["status"]),
        (200, &json!("refused")),
        "{body}"
    );
    assert_eq!(
        body["lines"][1]["result"], "REJECTED_INSUFFICIENT",
        "{body}"
    );
    assert_eq!(body["lines"][0]["state"], "released", "{body}");
    let (_, _, stock) = get(&format!("{base}/v1/skus/BC")).await?;
    assert_eq!(stock["available"], 1, "{stock}");
    let (status, _, body) = get(&format!("{base}/v1/baskets/b2")).await?;
    assert_eq!(
        (status, &body["status"]),
        (200, &json!("refused")),
        "{body}"
    );
    // Lines read back are by SKU: BA, the refused one, says why.
    assert_eq!(
        body["lines"][0]["reason"], "requested 1, available 0",
        "{body}"
    );

    let (status, _, body) = post(&format!("{base}/v1/baskets/b1/confirm"), json!({})).await?;
    assert_eq!(
        (status, &body["status"]),
        (200, &json!("confirmed")),
        "{body}"
    );
    let (status, _, body) = post(&format!("{base}/v1/baskets/b1/confirm"), json!({})).await?;
    assert_eq!((status, &body["repeat"]), (200, &json!(true)), "{body}");
    let release = client()
        .post(format!("{base}/v1/baskets/b1/release"))
        .send();
    let (status, _, body) = answer(release.await?).await?;
    assert_eq!(
        status, 409,
        "a sold basket is refunded, not released: {body}"
    );
    let (status, _, body) = get(&format!("{base}/v1/baskets/b1")).await?;
    assert_eq!(
        (status, &body["status"]),
        (200, &json!("confirmed")),
        "{body}"
    );

    let b3 = json!({"hold_ms": 60000, "lines": [{"sku": "BC", "quantity": 1}]});
    let (status, _, body) = post(&format!("{base}/v1/baskets/b3/hold"), b3).await?;
    assert_eq!((status, &body["status"]), (200, &json!("held")), "{body}");
    let (status, _, body) = post(
        &format!("{base}/v1/baskets/b3/release"),
        json!({"reason": "payment failed"}),
    )
    .await?;
    assert_eq!(
        (status, &body["status"]),
        (200, &json!("released")),
        "{body}"
    );
    let (_, _, body) = get(&format!("{base}/v1/baskets/b3")).await?;
    assert_eq!(body["lines"][0]["state"], "released", "{body}");
    // A released basket cannot be confirmed: refused before anything is sent.
    let logged = h.read(&h.ns.topic).await?.len();
    let (status, _, body) = post(&format!("{base}/v1/baskets/b3/confirm"), json!({})).await?;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap_or("")
            .contains("BC is released"),
        "{body}"
    );
    assert_eq!(
        h.read(&h.ns.topic).await?.len(),
        logged,
        "nothing was published"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_sells_named_seats_all_or_none_and_shows_the_seat_map() -> anyhow::Result<()> {
    let h = Harness::new("http-seats", 2).await?;
    let _applier = Running(common::spawn(&h, &["apply"])?);
    let _archiver = archiver(&h)?;
    let (_gateway, base) = serve(&h, &[])?;
    until_ready(&format!("{base}/readyz")).await?;
    let waited = |path: &str| format!("{base}{path}?wait_ms=30000");
    let (status, _, body) = post(
        &waited("/v1/skus/SHOW/restocks/seats"),
        json!({"units": ["A1", "A2", "A3", "A4"]}),
    )
    .await?;
    assert_eq!(
        (
            status,
            &body["decision"]["result"],
            &body["decision"]["total"]
        ),
        (200, &json!("APPLIED"), &json!(4)),
        "{body}"
    );
    // A unit already there refuses the whole restock, naming it.
    let (_, _, body) = post(
        &waited("/v1/skus/SHOW/restocks/more"),
        json!({"units": ["A5", "A1"]}),
    )
    .await?;
    assert_eq!(body["decision"]["result"], "REJECTED_RESTOCK", "{body}");
    assert_eq!(
        body["decision"]["reason"], "units already there: A1",
        "{body}"
    );

    let hold = json!({"units": ["A1", "A2"], "hold_ms": 60000, "user_id": "u1"});
    let (_, _, body) = post(&waited("/v1/skus/SHOW/orders/o1/deduct"), hold.clone()).await?;
    assert_eq!(body["decision"]["result"], "APPLIED", "{body}");
    assert_eq!(body["decision"]["delta"], -2, "{body}");
    // Overlapping seats: all or none, and the refusal names the seat.
    let (_, _, body) = post(
        &waited("/v1/skus/SHOW/orders/o2/deduct"),
        json!({"units": ["A3", "A2"], "hold_ms": 60000}),
    )
    .await?;
    assert_eq!(
        body["decision"]["result"], "REJECTED_INSUFFICIENT",
        "{body}"
    );
    assert_eq!(
        body["decision"]["reason"], "units not free: A2 (held)",
        "{body}"
    );
    let (status, _, map) = get(&format!("{base}/v1/skus/SHOW/units")).await?;
    assert_eq!(status, 200, "{map}");
    assert_eq!(
        map,
        json!({"A1": "held", "A2": "held", "A3": "available", "A4": "available"})
    );
    // The repeat is answered from the projection; other seats conflict.
    let (status, _, body) = post(&format!("{base}/v1/skus/SHOW/orders/o1/deduct"), hold).await?;
    assert_eq!((status, &body["status"]), (200, &json!("repeat")), "{body}");
    let (status, _, body) = post(
        &format!("{base}/v1/skus/SHOW/orders/o1/deduct"),
        json!({"units": ["A1", "A3"], "hold_ms": 60000, "user_id": "u1"}),
    )
    .await?;
    assert_eq!((status, &body["field"]), (409, &json!("units")), "{body}");

    let (_, _, body) = post(&waited("/v1/skus/SHOW/orders/o1/confirm"), json!({})).await?;
    assert_eq!(body["decision"]["result"], "CONFIRMED", "{body}");
    let (_, _, body) = post(
        &waited("/v1/skus/SHOW/orders/o3/deduct"),
        json!({"units": ["A3"]}),
    )
    .await?;
    assert_eq!(body["decision"]["result"], "APPLIED", "{body}");
    let (_, _, map) = get(&format!("{base}/v1/skus/SHOW/units")).await?;
    assert_eq!(
        map,
        json!({"A1": "sold", "A2": "sold", "A3": "sold", "A4": "available"})
    );
    // A named order is refunded whole, and its seats are free again.
    let (_, _, body) = post(
        &waited("/v1/skus/SHOW/orders/o1/refund"),
        json!({"total": 1}),
    )
    .await?;
    assert_eq!(body["decision"]["result"], "REJECTED_REFUND", "{body}");
    let (_, _, body) = post(&waited("/v1/skus/SHOW/orders/o1/refund"), json!({})).await?;
    assert_eq!(body["decision"]["result"], "REFUNDED", "{body}");
    let (_, _, map) = get(&format!("{base}/v1/skus/SHOW/units")).await?;
    assert_eq!(map["A1"], "available", "{map}");
    assert_eq!(map["A3"], "sold", "{map}");

    // Counted stock and named units never mix.
    let (_, _, body) = post(
        &waited("/v1/skus/SHOW/orders/o4/deduct"),
        json!({"quantity": 1}),
    )
    .await?;
    assert_eq!(
        body["decision"]["reason"], "the sku sells named units; name the units to take",
        "{body}"
    );
    post(
        &waited("/v1/skus/PLAIN/restocks/r1"),
        json!({"mode": "SET", "quantity": 5}),
    )
    .await?;
    let (_, _, body) = post(
        &waited("/v1/skus/PLAIN/restocks/r2"),
        json!({"units": ["B1"]}),
    )
    .await?;
    assert_eq!(body["decision"]["result"], "REJECTED_RESTOCK", "{body}");
    let (status, _, body) = get(&format!("{base}/v1/skus/PLAIN/units")).await?;
    assert_eq!(status, 404, "{body}");

    // A2's history: the restock that added it, o1's hold, o2's refused
    // hold naming it, and what befell o1 after (confirm, two refunds).
    h.wait_for_archive(11).await?;
    let (status, _, page) = get(&format!("{base}/v1/history?sku=SHOW&unit=A2")).await?;
    assert_eq!(status, 200, "{page}");
    let seen: Vec<(String, String)> = page["entries"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|e| {
            let who = e["order_id"].as_str().or(e["adjustment_id"].as_str());
            (
                who.unwrap_or("").to_owned(),
                e["result"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let expected = [
        ("seats", "APPLIED"),
        ("o1", "APPLIED"),
        ("o2", "REJECTED_INSUFFICIENT"),
        ("o1", "CONFIRMED"),
        ("o1", "REJECTED_REFUND"),
        ("o1", "REFUNDED"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect();
    assert_eq!(seen, expected, "{page}");
    assert_eq!(page["entries"][1]["units"], json!(["A1", "A2"]), "{page}");
    Ok(())
}

#[tokio::test]
async fn the_gateway_keeps_stock_by_location_and_moves_it_between_them() -> anyhow::Result<()> {
    let h = Harness::new("http-locations", 2).await?;
    let _applier = Running(common::spawn(&h, &["apply"])?);
    let _archiver = archiver(&h)?;
    let (_gateway, base) = serve(&h, &[])?;
    until_ready(&format!("{base}/readyz")).await?;
    let waited = |path: &str| format!("{base}{path}?wait_ms=30000");
    let decided = |body: &Value| {
        let d = &body["decision"];
        (
            d["result"].as_str().unwrap_or("").to_owned(),
            d["location"].as_str().unwrap_or("").to_owned(),
        )
    };
    let said = |result: &str, location: &str| (result.to_owned(), location.to_owned());
    let levels = || async {
        let (status, _, body) = get(&format!("{base}/v1/skus/MUG")).await?;
        anyhow::ensure!(status == 200, "{body}");
        let each: Vec<(String, i64, i64)> = body["locations"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|l| {
                (
                    l["location"].as_str().unwrap_or("").to_owned(),
                    l["available"].as_i64().unwrap_or(-1),
                    l["total"].as_i64().unwrap_or(-1),
                )
            })
            .collect();
        Ok::<_, anyhow::Error>((body["available"].as_i64().unwrap_or(-1), each))
    };
    let at = |name: &str, available, total| (name.to_owned(), available, total);

    for (id, location, quantity) in [("in-b", "berlin", 5), ("in-p", "paris", 3)] {
        let (_, _, body) = post(
            &waited(&format!("/v1/skus/MUG/restocks/{id}")),
            json!({"mode": "ADD", "quantity": quantity, "location": location}),
        )
        .await?;
        assert_eq!(decided(&body), said("APPLIED", location), "{body}");
    }
    assert_eq!(
        levels().await?,
        (8, vec![at("berlin", 5, 5), at("paris", 3, 3)])
    );
    // Naming no location: the first stocked that has it all.
    let (_, _, body) = post(
        &waited("/v1/skus/MUG/orders/o1/deduct"),
        json!({"quantity": 4}),
    )
    .await?;
    assert_eq!(decided(&body), said("APPLIED", "berlin"), "{body}");
    let (_, _, body) = post(
        &waited("/v1/skus/MUG/orders/o2/deduct"),
        json!({"quantity": 2, "location": "paris"}),
    )
    .await?;
    assert_eq!(decided(&body), said("APPLIED", "paris"), "{body}");
    let (_, _, body) = post(
        &waited("/v1/skus/MUG/orders/o3/deduct"),
        json!({"quantity": 2}),
    )
    .await?;
    assert_eq!(
        body["decision"]["reason"],
        "requested 2, available 2 but no one location has that many (berlin 1, paris 1)",
        "{body}"
    );

    // A transfer moves what is free, all or nothing, once.
    let moved = json!({"from": "berlin", "to": "paris", "quantity": 1});
    let (_, _, body) = post(&waited("/v1/skus/MUG/transfers/t1"), moved.clone()).await?;
    assert_eq!(decided(&body), said("APPLIED", "berlin"), "{body}");
    assert_eq!(body["decision"]["delta"], 0, "{body}");
    assert_eq!(
        levels().await?,
        (2, vec![at("berlin", 0, 4), at("paris", 2, 4)])
    );
    let (_, _, body) = post(&waited("/v1/skus/MUG/transfers/t2"), moved.clone()).await?;
    assert_eq!(
        (decided(&body), &body["decision"]["reason"]),
        (
            said("REJECTED_INSUFFICIENT", "berlin"),
            &json!("requested 1, available at berlin 0")
        ),
        "{body}"
    );
    let (status, _, body) = post(&format!("{base}/v1/skus/MUG/transfers/t1"), moved).await?;
    assert_eq!((status, &body["status"]), (200, &json!("repeat")), "{body}");
    let (status, _, body) = post(
        &format!("{base}/v1/skus/MUG/transfers/t1"),
        json!({"from": "berlin", "to": "paris", "quantity": 2}),
    )
    .await?;
    assert_eq!(
        (status, &body["field"]),
        (409, &json!("quantity")),
        "{body}"
    );
    let (status, _, body) = post(
        &format!("{base}/v1/skus/MUG/restocks/t1"),
        json!({"mode": "ADD", "quantity": 1, "location": "paris"}),
    )
    .await?;
    assert_eq!(
        (status, &body["field"]),
        (409, &json!("adjustment_id")),
        "{body}"
    );

    // Bad input is refused before the log, naming the field.
    for (path, request, field) in [
        (
            "/v1/skus/MUG/transfers/t3",
            json!({"from": "paris", "to": "paris", "quantity": 1}),
            "to",
        ),
        (
            "/v1/skus/MUG/transfers/t3",
            json!({"from": "Zürich", "to": "paris", "quantity": 1}),
            "from",
        ),
        (
            "/v1/skus/MUG/transfers/t3",
            json!({"from": "berlin", "to": "paris", "quantity": 0}),
            "quantity",
        ),
        (
            "/v1/skus/MUG/orders/o9/deduct",
            json!({"quantity": 1, "location": "two words"}),
            "location",
        ),
        (
            "/v1/skus/MUG/orders/o9/deduct",
            json!({"units": ["A1"], "location": "paris"}),
            "location",
        ),
    ] {
        let (status, _, body) = post(&format!("{base}{path}"), request.clone()).await?;
        assert_eq!(
            (status, &body["field"]),
            (422, &json!(field)),
            "{request}: {body}"
        );
    }
    // A SKU kept by location refuses a restock naming none.
    let (_, _, body) = post(
        &waited("/v1/skus/MUG/restocks/plain"),
        json!({"mode": "ADD", "quantity": 1}),
    )
    .await?;
    assert_eq!(
        body["decision"]["reason"], "the sku keeps stock by location; name the location",
        "{body}"
    );
    // What an order gives back goes back where it came from.
    let (_, _, body) = post(&waited("/v1/skus/MUG/orders/o1/rollback"), json!({})).await?;
    assert_eq!(decided(&body), said("APPLIED", "berlin"), "{body}");
    assert_eq!(
        levels().await?,
        (6, vec![at("berlin", 4, 4), at("paris", 2, 4)])
    );
    let (_, _, order) = get(&format!("{base}/v1/skus/MUG/orders/o2")).await?;
    assert_eq!(order["location"], "paris", "{order}");

    // The archive has the locations, and the report sums them.
    h.wait_for_archive(9).await?;
    let (_, _, page) = get(&format!("{base}/v1/history?sku=MUG")).await?;
    let transfer = page["entries"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["command"] == "TRANSFER").cloned())
        .unwrap_or_default();
    assert_eq!(
        (
            &transfer["adjustment_id"],
            &transfer["location"],
            &transfer["to_location"]
        ),
        (&json!("t1"), &json!("berlin"), &json!("paris")),
        "{page}"
    );
    let (status, _, report) = get(&format!(
        "{base}/v1/report/locations?sku=MUG&every=1d&since=-1d"
    ))
    .await?;
    assert_eq!(status, 200, "{report}");
    let row = |location: &str| {
        report["rows"]
            .as_array()
            .and_then(|rows| rows.iter().find(|r| r["location"] == location).cloned())
            .unwrap_or_default()
    };
    let (berlin, paris) = (row("berlin"), row("paris"));
    assert_eq!(
        (
            &berlin["units_taken"],
            &berlin["units_returned"],
            &berlin["transferred_out"],
            &berlin["rejected_insufficient"]
        ),
        (&json!(4), &json!(4), &json!(1), &json!(1)),
        "{report}"
    );
    assert_eq!(
        (
            &paris["units_taken"],
            &paris["transferred_in"],
            &paris["restock_delta"]
        ),
        (&json!(2), &json!(1), &json!(3)),
        "{report}"
    );
    Ok(())
}

#[tokio::test]
async fn decisions_say_which_stock_events_they_caused_and_thresholds_are_set_over_http(
) -> anyhow::Result<()> {
    let h = Harness::new("http-events", 2).await?;
    let _applier = Running(common::spawn(&h, &["apply"])?);
    let _archiver = archiver(&h)?;
    let (_gateway, base) = serve(&h, &[])?;
    until_ready(&format!("{base}/readyz")).await?;
    let waited = |path: &str| format!("{base}{path}?wait_ms=30000");
    let events = |body: &Value| -> Vec<String> {
        body["decision"]["events"]
            .as_array()
            .map(|e| {
                e.iter()
                    .filter_map(|k| k.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let put = |path: String, body: Value| async move {
        let response = reqwest::Client::new().put(path).json(&body).send().await?;
        let status = response.status().as_u16();
        Ok::<_, anyhow::Error>((status, response.json::<Value>().await?))
    };
    let (_, _, body) = post(
        &waited("/v1/skus/EVT/restocks/r1"),
        json!({"mode": "SET", "quantity": 5}),
    )
    .await?;
    assert_eq!(events(&body), ["BACK_IN_STOCK"], "{body}");
    let (status, body) = put(waited("/v1/skus/EVT/alerts"), json!({"low_stock_below": 3})).await?;
    assert_eq!(
        (status, &body["decision"]["result"]),
        (200, &json!("APPLIED")),
        "{body}"
    );
    let mut seen = Vec::new();
    for (order, quantity) in [("o1", 2), ("o2", 1), ("o3", 2)] {
        let (_, _, body) = post(
            &waited(&format!("/v1/skus/EVT/orders/{order}/deduct")),
            json!({ "quantity": quantity }),
        )
        .await?;
        seen.push(events(&body));
    }
    // 5 -> 3 is not below 3; 3 -> 2 crosses it; 2 -> 0 sells out.
    assert_eq!(
        seen,
        [
            vec![],
            vec!["LOW_STOCK".to_owned()],
            vec!["SOLD_OUT".to_owned()]
        ]
    );
    let (_, _, body) = post(&waited("/v1/skus/EVT/orders/o3/rollback"), json!({})).await?;
    assert_eq!(events(&body), ["BACK_IN_STOCK"], "{body}");
    for refused in [json!({}), json!({"low_stock_below": 0})] {
        let (status, body) = put(format!("{base}/v1/skus/EVT/alerts"), refused.clone()).await?;
        assert_eq!(
            (status, &body["field"]),
            (422, &json!("low_stock_below")),
            "{refused}: {body}"
        );
    }
    let (status, _) = put(
        waited("/v1/skus/EVT/alerts"),
        json!({"low_stock_below": null}),
    )
    .await?;
    assert_eq!(status, 200);
    // The archive keeps each record's events with it (seven records: the
    // refused requests published nothing).
    h.wait_for_archive(7).await?;
    let (_, _, page) = get(&format!("{base}/v1/history?sku=EVT")).await?;
    let archived: Vec<(String, Value)> = page["entries"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|e| !e["events"].is_null())
        .map(|e| {
            (
                e["command"].as_str().unwrap_or("").to_owned(),
                e["events"].clone(),
            )
        })
        .collect();
    assert_eq!(
        archived,
        [
            ("RESTOCK".to_owned(), json!(["BACK_IN_STOCK"])),
            ("DEDUCT".to_owned(), json!(["LOW_STOCK"])),
            ("DEDUCT".to_owned(), json!(["SOLD_OUT"])),
            ("ROLLBACK".to_owned(), json!(["BACK_IN_STOCK"])),
        ],
        "{page}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_opens_a_sale_on_its_window_and_pauses_it() -> anyhow::Result<()> {
    let h = Harness::new("http-sale", 2).await?;
    let _applier = Running(common::spawn(&h, &["apply"])?);
    let (_gateway, base) = serve(&h, &[])?;
    until_ready(&format!("{base}/readyz")).await?;
    let waited = |path: &str| format!("{base}{path}?wait_ms=30000");
    let result = |body: &Value| body["decision"]["result"].clone();
    let buy = |order: &str| {
        let url = waited(&format!("/v1/skus/SALE/orders/{order}/deduct"));
        async move { post(&url, json!({"quantity": 1})).await }
    };
    post(
        &waited("/v1/skus/SALE/restocks/r1"),
        json!({"mode": "SET", "quantity": 5}),
    )
    .await?;
    // Opens in an hour: a deduct now is refused, and names why.
    let opens =
        stockledger_runtime::clock::rfc3339_ms(stockledger_runtime::clock::now_ms() + 3_600_000);
    let (status, _, body) = post(
        &waited("/v1/skus/SALE/windows/w1"),
        json!({"opens_at": opens}),
    )
    .await?;
    assert_eq!((status, result(&body)), (200, json!("APPLIED")), "{body}");
    assert_eq!(body["decision"]["events"], json!(["CLOSED"]), "{body}");
    let (_, _, body) = buy("o1").await?;
    assert_eq!(result(&body), json!("REJECTED_NOT_OPEN"), "{body}");
    // The same window again is a repeat; another under its id a 409.
    let (status, _, body) = post(
        &waited("/v1/skus/SALE/windows/w1"),
        json!({"opens_at": opens}),
    )
    .await?;
    assert_eq!((status, &body["repeat"]), (200, &json!(true)), "{body}");
    let (status, _, body) = post(&waited("/v1/skus/SALE/windows/w1"), json!({})).await?;
    assert_eq!(
        (status, &body["field"]),
        (409, &json!("opens_at")),
        "{body}"
    );
    // Opened already, closing in an hour: it sells.
    let (_, _, body) = post(
        &waited("/v1/skus/SALE/windows/w2"),
        json!({"opens_at": "2020-01-01T00:00:00Z", "closes_at": opens}),
    )
    .await?;
    assert_eq!(body["decision"]["events"], json!(["OPENED"]), "{body}");
    let (_, _, body) = buy("o1").await?;
    assert_eq!(result(&body), json!("APPLIED"), "{body}");
    let (status, _, body) = post(&waited("/v1/skus/SALE/pauses/p1"), json!({})).await?;
    assert_eq!(
        (status, &body["decision"]["events"]),
        (200, &json!(["PAUSED"])),
        "{body}"
    );
    let (_, _, body) = buy("o2").await?;
    assert_eq!(result(&body), json!("REJECTED_PAUSED"), "{body}");
    // The stock read shows the window and the pause.
    let (_, _, stock) = get(&format!("{base}/v1/skus/SALE")).await?;
    assert_eq!(
        (
            &stock["sale"]["opens_at"],
            &stock["sale"]["closes_at"],
            &stock["sale"]["paused"]
        ),
        (
            &json!("2020-01-01T00:00:00.000Z"),
            &json!(opens),
            &json!(true)
        ),
        "{stock}"
    );
    let (_, _, body) = post(&waited("/v1/skus/SALE/resumes/g1"), json!({})).await?;
    assert_eq!(body["decision"]["events"], json!(["RESUMED"]), "{body}");
    let (_, _, body) = buy("o2").await?;
    assert_eq!(result(&body), json!("APPLIED"), "{body}");
    // Refused before publishing, naming the field.
    let refused = [
        (json!({"opens_at": "tomorrow"}), "opens_at"),
        (json!({"opens_at": opens, "closes_at": opens}), "closes_at"),
        (json!({"closes_at": "2999-01-01T00:00:00Z"}), "closes_at"),
        (json!({"opens_at": opens, "extra": 1}), "extra"),
    ];
    for (request, field) in refused {
        let (status, _, body) = post(&waited("/v1/skus/SALE/windows/w9"), request.clone()).await?;
        assert!(
            (status == 422 || status == 400) && body.to_string().contains(field),
            "{request}: {status} {body}"
        );
    }
    let (status, _, body) = post(&waited("/v1/skus/SALE/pauses/p9"), json!({"x": 1})).await?;
    assert_eq!((status, &body["field"]), (422, &json!("x")), "{body}");
    Ok(())
}

/// A stream of `path`'s Server-Sent Events, parsed by `eventsource-stream`
/// (not ours), sending `last_event_id` when given.
async fn sse(
    url: &str,
    last_event_id: Option<&str>,
) -> anyhow::Result<
    impl futures::Stream<
            Item = Result<
                eventsource_stream::Event,
                eventsource_stream::EventStreamError<reqwest::Error>,
            >,
        > + Unpin,
> {
    use eventsource_stream::Eventsource;
    // No total timeout: the body never ends.
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()?;
    let mut request = client.get(url).header("accept", "text/event-stream");
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id);
    }
    let response = request.send().await?;
    anyhow::ensure!(
        response.status() == 200,
        "{url}: {} {}",
        response.status(),
        response.text().await?
    );
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    anyhow::ensure!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    Ok(response.bytes_stream().eventsource())
}

/// The next `n` events of `stream` as (event, sku, data), each within
/// [`CATCH_UP`]; and the last one's id.
async fn next_events(
    stream: &mut (impl futures::Stream<
        Item = Result<
            eventsource_stream::Event,
            eventsource_stream::EventStreamError<reqwest::Error>,
        >,
    > + Unpin),
    n: usize,
) -> anyhow::Result<(Vec<(String, String, Value)>, String)> {
    use futures::StreamExt;
    let mut events = Vec::new();
    let mut id = String::new();
    while events.len() < n {
        let event = tokio::time::timeout(CATCH_UP, stream.next())
            .await
            .map_err(|_| anyhow::anyhow!("no event within {CATCH_UP:?}; got {events:?}"))?
            .ok_or_else(|| anyhow::anyhow!("the stream ended; got {events:?}"))??;
        let data: Value = serde_json::from_str(&event.data)?;
        id = event.id.clone();
        let sku = data["sku"].as_str().unwrap_or_default().to_owned();
        events.push((event.event, sku, data));
    }
    Ok((events, id))
}

#[tokio::test(flavor = "multi_thread")]
async fn stock_events_stream_to_sse_clients_and_resume_from_last_event_id_across_a_restart(
) -> anyhow::Result<()> {
    let h = Harness::new("http-sse", 2).await?;
    let _applier = Running(common::spawn(&h, &["apply"])?);
    let (gateway, base) = serve(&h, &[])?;
    until_ready(&format!("{base}/readyz")).await?;
    let command = |base: &str, path: &str, body: Value| {
        let url = format!("{base}{path}?wait_ms=30000");
        async move {
            let (status, _, body) = post(&url, body).await?;
            anyhow::ensure!(status == 200, "{url}: {status} {body}");
            Ok::<_, anyhow::Error>(body)
        }
    };
    command(
        &base,
        "/v1/skus/SSE-A/restocks/r1",
        json!({"mode": "SET", "quantity": 3}),
    )
    .await?;
    command(
        &base,
        "/v1/skus/SSE-B/restocks/r1",
        json!({"mode": "SET", "quantity": 1}),
    )
    .await?;
    let put = reqwest::Client::new()
        .put(format!("{base}/v1/skus/SSE-A/alerts?wait_ms=30000"))
        .json(&json!({"low_stock_below": 2}))
        .send()
        .await?;
    assert_eq!(put.status(), 200);

    // A fresh stream opens with each SKU's stock, then its events.
    let following = format!("{base}/v1/events?sku=SSE-A&sku=SSE-B");
    let mut stream = sse(&following, None).await?;
    let (opening, opening_id) = next_events(&mut stream, 2).await?;
    // Without an id: reconnecting after them alone opens afresh.
    assert_eq!(opening_id, "");
    let levels: Vec<_> = opening
        .iter()
        .map(|(event, sku, data)| (event.as_str(), sku.as_str(), data["available"].clone()))
        .collect();
    assert_eq!(
        levels,
        [("stock", "SSE-A", json!(3)), ("stock", "SSE-B", json!(1))]
    );
    command(
        &base,
        "/v1/skus/SSE-A/orders/o1/deduct",
        json!({"quantity": 2}),
    )
    .await?;
    command(
        &base,
        "/v1/skus/SSE-B/orders/o1/deduct",
        json!({"quantity": 1}),
    )
    .await?;
    command(
        &base,
        "/v1/skus/SSE-C/restocks/r1",
        json!({"mode": "SET", "quantity": 1}),
    )
    .await?;
    let (live, last_id) = next_events(&mut stream, 2).await?;
    let mut seen: Vec<_> = live
        .iter()
        .map(|(event, sku, data)| (event.clone(), sku.clone(), data["available"].clone()))
        .collect();
    seen.sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(
        seen,
        [
            ("low_stock".to_owned(), "SSE-A".to_owned(), json!(1)),
            ("sold_out".to_owned(), "SSE-B".to_owned(), json!(0)),
        ]
    );
    let body = &live[0].2;
    assert!(
        body["position"]["offset"].is_i64() && body["occurred_at"].is_string(),
        "{body}"
    );
    let metrics = text(&format!("{base}/metrics")).await?;
    assert_eq!(
        sample(&metrics, "stockledger_sse_streams", &[]),
        1.0,
        "{metrics}"
    );
    promtool_check(&metrics)?;
    drop(stream);

    // The client is away and the gateway restarts; events happen while no
    // gateway runs and after the new one started.
    drop(gateway);
    let published = common::stockledger(&h)
        .args(["deduct", "SSE-A", "o2", "1"])
        .status()?;
    assert!(published.success());
    let (mut gateway, base) = serve(&h, &[])?;
    until_ready(&format!("{base}/readyz")).await?;
    command(&base, "/v1/skus/SSE-B/orders/o1/rollback", json!({})).await?;
    command(
        &base,
        "/v1/skus/SSE-C/orders/o1/deduct",
        json!({"quantity": 1}),
    )
    .await?;
    let following = format!("{base}/v1/events?sku=SSE-A&sku=SSE-B");
    let mut stream = sse(&following, Some(&last_id)).await?;
    // Exactly what happened in between, no snapshot, nothing twice; then
    // live again.
    let (missed, _) = next_events(&mut stream, 2).await?;
    let mut seen: Vec<_> = missed
        .iter()
        .map(|(event, sku, _)| (event.as_str(), sku.as_str()))
        .collect();
    seen.sort_by(|a, b| a.1.cmp(b.1));
    assert_eq!(seen, [("sold_out", "SSE-A"), ("back_in_stock", "SSE-B")]);
    command(&base, "/v1/skus/SSE-A/orders/o2/rollback", json!({})).await?;
    let (live, _) = next_events(&mut stream, 1).await?;
    assert_eq!(
        (
            live[0].0.as_str(),
            live[0].1.as_str(),
            &live[0].2["available"]
        ),
        ("back_in_stock", "SSE-A", &json!(1))
    );

    // One SKU's stream; and what is refused, naming the field.
    let mut one = sse(&format!("{base}/v1/skus/SSE-B/events"), None).await?;
    let (opening, _) = next_events(&mut one, 1).await?;
    assert_eq!(
        (opening[0].0.as_str(), &opening[0].2["available"]),
        ("stock", &json!(1))
    );
    // With levels, every change of stock, not only the events.
    command(
        &base,
        "/v1/skus/SSE-L/restocks/r1",
        json!({"mode": "SET", "quantity": 5}),
    )
    .await?;
    let mut levels = sse(&format!("{base}/v1/skus/SSE-L/events?levels=true"), None).await?;
    let (opening, _) = next_events(&mut levels, 1).await?;
    assert_eq!(
        (opening[0].0.as_str(), &opening[0].2["available"]),
        ("stock", &json!(5))
    );
    command(
        &base,
        "/v1/skus/SSE-L/orders/o1/deduct",
        json!({"quantity": 1}),
    )
    .await?;
    let (level, _) = next_events(&mut levels, 1).await?;
    assert_eq!(
        (
            level[0].0.as_str(),
            &level[0].2["available"],
            &level[0].2["total"]
        ),
        ("level", &json!(4), &json!(5))
    );
    drop(levels);
    for (path, last_event_id, field) in [
        ("/v1/skus/SSE-L/events?levels=maybe", None, "levels"),
        ("/v1/skus/SSE-L/events?colour=red", None, "colour"),
        ("/v1/events?sku=A&levels=1", None, "levels"),
        ("/v1/events", None, "sku"),
        ("/v1/events?sku=A&colour=red", None, "colour"),
        ("/v1/events?sku=", None, "sku"),
        ("/v1/skus/SSE-A/events", Some("0:12,one:2"), "Last-Event-ID"),
        ("/v1/skus/SSE-A/events", Some("0:-1"), "Last-Event-ID"),
    ] {
        let mut request = client().get(format!("{base}{path}"));
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let (status, content_type, body) = answer(request.send().await?).await?;
        assert_eq!(
            (status, content_type.as_str(), &body["field"]),
            (422, "application/problem+json", &json!(field)),
            "{path} {last_event_id:?}: {body}"
        );
    }
    let many: Vec<String> = (0..101).map(|i| format!("sku=S{i}")).collect();
    let (status, _, body) = get(&format!("{base}/v1/events?{}", many.join("&"))).await?;
    assert_eq!((status, &body["field"]), (422, &json!("sku")), "{body}");

    // A stopping gateway ends its streams rather than holding its
    // shutdown open until the grace runs out.
    common::terminate(&gateway.0)?;
    let end = tokio::time::timeout(CATCH_UP, futures::StreamExt::next(&mut one)).await?;
    assert!(end.is_none(), "{end:?}");
    let exited = gateway.0.wait()?;
    assert!(exited.success(), "{exited:?}");
    let log = std::fs::read_to_string(common::log_path(&h, &["serve"]))?;
    assert!(
        !log.contains("still open at the end of the shutdown grace"),
        "{log}"
    );
    Ok(())
}

/// Width and height of the PNG image `bytes`, if it is one.
fn png_size(bytes: &[u8]) -> Option<(u32, u32)> {
    let header = bytes.get(..24)?;
    if &header[..8] != b"\x89PNG\r\n\x1a\n" || &header[12..16] != b"IHDR" {
        return None;
    }
    let number = |at: usize| {
        u32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    Some((number(16), number(20)))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_live_stock_page_shows_each_change_in_headless_chromium() -> anyhow::Result<()> {
    let chromium = std::env::var("STOCKLEDGER_CHROMIUM").map_err(|_| {
        anyhow::anyhow!(
            "STOCKLEDGER_CHROMIUM is not set: deploy/local/test.sh sets it (deploy/local/browser.sh installs Chromium)"
        )
    })?;
    let h = Harness::new("http-page", 1).await?;
    let _applier = Running(common::spawn(&h, &["apply"])?);
    let port = free_port()?;
    let origin = format!("http://127.0.0.1:{port}");
    let (_gateway, base) = serve(&h, &["--cors-origin", &origin])?;
    until_ready(&format!("{base}/readyz")).await?;
    let shots = common::screenshots_dir(&h)?;
    let check = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/browser/run.sh");
    let run = tokio::process::Command::new(check)
        .args([
            "--gateway",
            &base,
            "--sku",
            "PAGE-1",
            "--port",
            &port.to_string(),
        ])
        .arg("--out")
        .arg(&shots)
        .env("STOCKLEDGER_CHROMIUM", &chromium)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    // The first run installs the driver from npm.
    let output = tokio::time::timeout(Duration::from_secs(300), run).await??;
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(
        output.status.success(),
        "the page check failed ({}): {stderr}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout)
    );
    let report: Value = serde_json::from_slice(&output.stdout)?;
    let steps = report["steps"].as_array().cloned().unwrap_or_default();
    let shown: Vec<(String, String, String)> = steps
        .iter()
        .map(|s| {
            let text = |k: &str| s[k].as_str().unwrap_or_default().to_owned();
            (text("step"), text("counter"), text("status"))
        })
        .collect();
    let expected = [
        ("opened", "5", "in stock"),
        ("sold-one", "4", "in stock"),
        ("sold-three", "2", "in stock"),
        ("low", "1", "low stock"),
        ("sold-out", "0", "sold out"),
        ("back", "1", "in stock"),
        ("paused", "1", "in stock"),
        ("resumed", "1", "in stock"),
        ("opens-later", "1", "in stock"),
    ]
    .map(|(a, b, c)| (a.to_owned(), b.to_owned(), c.to_owned()));
    assert_eq!(shown, expected, "{report}");
    assert_eq!(
        steps.last().map(|s| s["events"].clone()),
        Some(json!([
            "low_stock",
            "sold_out",
            "back_in_stock",
            "paused",
            "resumed",
            "closed"
        ])),
        "{report}"
    );
    let sale: Vec<&str> = (steps.iter().skip(6))
        .map(|s| s["sale"].as_str().unwrap_or_default())
        .collect();
    // Resumed with no window, the SKU always sells again: nothing to say.
    assert_eq!(sale[..2], ["paused", ""], "{report}");
    assert!(
        sale[2].starts_with("opens in 0:59:") || sale[2] == "opens in 1:00:00",
        "{report}"
    );
    let mut images = Vec::new();
    for step in &steps {
        let path = step["screenshot"].as_str().unwrap_or_default();
        let bytes = std::fs::read(path)?;
        assert_eq!(
            png_size(&bytes),
            Some((480, 420)),
            "{path} is not the page's screenshot"
        );
        images.push(bytes);
    }
    assert_ne!(
        images[1], images[2],
        "the page looked the same before and after a sale"
    );
    assert_ne!(
        images[3], images[4],
        "the page looked the same low and sold out"
    );
    Ok(())
}
