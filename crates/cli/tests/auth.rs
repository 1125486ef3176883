//! `stockledger keys new` and `serve --api-keys`: who may do what, as a
//! caller over HTTP sees it, against real services.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::{certificate, log_path, new_key, sample, serve, stockledger};
use serde_json::{json, Value};
use stockledger_core::codec::decode_command;
use stockledger_testkit::harness::CATCH_UP;
use stockledger_testkit::{wait_until, Harness};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Call {
    status: u16,
    header: Option<String>,
    body: Value,
}

/// Sends `method url` with `body` as `token` (none if empty); the named
/// response header comes back too.
async fn call(
    method: &str,
    url: &str,
    token: &str,
    body: Option<Value>,
    header: &str,
) -> anyhow::Result<Call> {
    let client = reqwest::Client::new();
    let mut request = client.request(method.parse()?, url);
    if !token.is_empty() {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.timeout(Duration::from_secs(30)).send().await?;
    let status = response.status().as_u16();
    let header = response
        .headers()
        .get(header)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let text = response.text().await?;
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Ok(Call {
        status,
        header,
        body,
    })
}

/// The status `method url` gets as `token`, with `body`, without reading
/// the body (an event stream's never ends).
async fn status_of(
    method: &str,
    url: &str,
    token: &str,
    body: Option<Value>,
) -> anyhow::Result<u16> {
    let mut request = reqwest::Client::new().request(method.parse()?, url);
    request = request.bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.timeout(Duration::from_secs(30)).send().await?;
    Ok(response.status().as_u16())
}

const ROLES: [&str; 3] = ["producer", "operator", "analyst"];

/// docs/security.md's route table: `(method, route)` to the roles it says
/// may use it.
fn documented_doors() -> anyhow::Result<BTreeMap<(String, String), Vec<String>>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/security.md");
    let text = std::fs::read_to_string(&path)?;
    let mut doors = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let Some((method, route)) = cells[1].trim_matches('`').split_once(' ') else {
            continue;
        };
        if cells.len() < 6 || !matches!(method, "GET" | "POST" | "PUT") {
            continue;
        }
        let allowed = ROLES
            .iter()
            .zip(&cells[2..5])
            .filter(|(_, cell)| **cell == "yes")
            .map(|(role, _)| (*role).to_owned())
            .collect();
        doors.insert((method.to_owned(), route.to_owned()), allowed);
    }
    anyhow::ensure!(doors.len() > 10, "no route table in {}", path.display());
    Ok(doors)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_door_policy_in_the_docs_is_the_one_the_gateway_keeps() -> anyhow::Result<()> {
    let h = Harness::new("http-doors", 2).await?;
    let mut tokens = Vec::new();
    let mut stanzas = Vec::new();
    for role in ROLES {
        let made = new_key(&h, &format!("key-{role}"), role)?;
        tokens.push((role, made.token));
        stanzas.push(made.stanza);
    }
    let file = std::env::temp_dir().join(format!("{}-keys.toml", h.ns.id));
    write(
        &file,
        &stanzas.iter().map(String::as_str).collect::<Vec<_>>(),
    )?;
    let (gateway, base) = serve(&h, &["--api-keys", &file.to_string_lossy()])?;
    let doors = documented_doors()?;

    // The API document states the table's roles for every operation, and
    // has no operation the table leaves out.
    let document = call("GET", &format!("{base}/openapi.json"), "", None, "x").await?;
    let mut stated = BTreeMap::new();
    for (route, item) in document.body["paths"].as_object().into_iter().flatten() {
        for method in ["get", "post", "put"] {
            let Some(security) = item.get(method).map(|o| &o["security"]) else {
                continue;
            };
            let roles = &security[0]["api_key"];
            if security[0].as_object().is_some_and(|o| o.is_empty()) {
                continue; // open: the probes
            }
            let roles: Vec<String> = roles
                .as_array()
                .ok_or_else(|| anyhow::anyhow!("{method} {route}: no roles in {security}"))?
                .iter()
                .filter_map(|r| r.as_str().map(str::to_owned))
                .collect();
            stated.insert((method.to_uppercase(), route.clone()), roles);
        }
    }
    let documented: BTreeMap<_, _> = doors
        .iter()
        .filter(|((_, route), _)| route != "/metrics")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(stated, documented, "the API document and docs/security.md");

    // The gateway refuses exactly the roles the table refuses, on every
    // route; a body of `{}` is refused by the handler past the door.
    for ((method, route), allowed) in &doors {
        let url = format!(
            "{base}{}",
            route
                .replace("{sku}", "SKU-DOOR")
                .replace("{order_id}", "o-door")
                .replace("{basket_id}", "b-door")
                .replace("{adjustment_id}", "a-door")
                .replace("{transfer_id}", "t-door")
                .replace("{change_id}", "c-door")
        );
        for (role, token) in &tokens {
            let body = (method != "GET").then(|| json!({}));
            let status = status_of(method, &url, token, body).await?;
            let may = allowed.iter().any(|r| r == role);
            assert_eq!(
                status == 403,
                !may,
                "{role} {method} {route}: {status}, the table says {}",
                if may { "yes" } else { "no" }
            );
        }
    }

    // Two Authorization headers: which would count is a guess, so neither.
    let twice = reqwest::Client::new()
        .get(format!("{base}/v1/skus/SKU-DOOR"))
        .header("authorization", format!("Bearer {}", tokens[1].1))
        .header("authorization", format!("Bearer {}", tokens[0].1))
        .timeout(Duration::from_secs(30))
        .send()
        .await?;
    assert_eq!(twice.status().as_u16(), 400);
    let problem: Value = twice.json().await?;
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("more than one Authorization header")),
        "{problem}"
    );
    drop(gateway);
    Ok(())
}

fn write(path: &Path, stanzas: &[&str]) -> anyhow::Result<()> {
    Ok(std::fs::write(path, stanzas.join("\n"))?)
}

fn signal(pid: u32, signal: nix::sys::signal::Signal) -> anyhow::Result<()> {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid)?);
    nix::sys::signal::kill(pid, signal).map_err(|e| anyhow::anyhow!("kill {signal} {pid}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_key_may_what_its_role_allows_and_nothing_refused_is_published() -> anyhow::Result<()>
{
    let h = Harness::new("http-keys", 2).await?;
    let producer = new_key(&h, "checkout", "producer")?;
    let operator = new_key(&h, "ops", "operator")?;
    let analyst = new_key(&h, "finance", "analyst")?;
    let slow = new_key(&h, "slow", "producer")?;
    let late = new_key(&h, "late", "analyst")?;
    let slow_stanza = format!("{}rate_per_second = 0.01\nburst = 2\n", slow.stanza);
    let file = std::env::temp_dir().join(format!("{}-keys.toml", h.ns.id));
    write(
        &file,
        &[
            &producer.stanza,
            &operator.stanza,
            &analyst.stanza,
            &slow_stanza,
        ],
    )?;
    let file_arg = file.to_string_lossy().into_owned();
    let shop = "https://shop.example.com";
    let (gateway, base) = serve(&h, &["--api-keys", &file_arg, "--cors-origin", shop])?;
    let deduct = |order: &str| format!("{base}/v1/skus/SKU-K/orders/{order}/deduct");
    let restock = format!("{base}/v1/skus/SKU-K/restocks/r1");
    let stock = format!("{base}/v1/skus/SKU-K");
    let one = Some(json!({"quantity": 1}));
    let ten = Some(json!({"mode": "SET", "quantity": 10}));

    // The probes and the document are open.
    for open in ["/healthz", "/openapi.json"] {
        let answer = call("GET", &format!("{base}{open}"), "", None, "x").await?;
        assert_eq!(answer.status, 200, "{open}");
    }
    // No key, or one nobody made: 401 with the challenge.
    let none = call("POST", &deduct("o0"), "", one.clone(), "www-authenticate").await?;
    assert_eq!(none.status, 401, "{}", none.body);
    assert_eq!(none.header.as_deref(), Some("Bearer realm=\"stockledger\""));
    assert_eq!(none.body["status"], 401);
    let wrong = "slk_0000000000000000000000000000000000000000000000000000000000000000";
    let unknown = call(
        "POST",
        &deduct("o0"),
        wrong,
        one.clone(),
        "www-authenticate",
    )
    .await?;
    assert_eq!(unknown.status, 401);
    assert_eq!(
        unknown.header.as_deref(),
        Some("Bearer realm=\"stockledger\", error=\"invalid_token\"")
    );
    // Basic credentials, even with a real key as the password, are not a
    // bearer token: 401 with the challenge that names the scheme.
    let basic = reqwest::Client::new()
        .get(&stock)
        .basic_auth("operator", Some(&operator.token))
        .timeout(Duration::from_secs(30))
        .send()
        .await?;
    assert_eq!(basic.status(), 401);
    assert_eq!(
        (basic.headers().get("www-authenticate")).and_then(|v| v.to_str().ok()),
        Some("Bearer realm=\"stockledger\"")
    );

    // Each role: what it may and what it may not (403). No applier runs, so
    // a read that gets past the door meets the handler's 404.
    let cases: [(&str, &str, &str, Option<Value>, u16); 9] = [
        ("POST", &deduct("o1"), &producer.token, one.clone(), 202),
        ("POST", &restock, &producer.token, ten.clone(), 403),
        ("GET", &stock, &producer.token, None, 404),
        ("POST", &deduct("o2"), &analyst.token, one.clone(), 403),
        ("GET", &stock, &analyst.token, None, 404),
        (
            "GET",
            &format!("{base}/metrics"),
            &producer.token,
            None,
            403,
        ),
        ("GET", &format!("{base}/metrics"), &analyst.token, None, 200),
        ("POST", &restock, &operator.token, ten.clone(), 202),
        ("GET", &stock, &operator.token, None, 404),
    ];
    for (method, url, token, body, expected) in cases {
        let answer = call(method, url, token, body, "content-type").await?;
        assert_eq!(answer.status, expected, "{method} {url}: {}", answer.body);
        if expected == 403 {
            assert_eq!(answer.header.as_deref(), Some("application/problem+json"));
            let detail = answer.body["detail"].as_str().unwrap_or("");
            assert!(detail.contains("may not"), "{detail}");
        }
    }
    // The order read is every role's; a missing order is the handler's 404.
    for token in [&producer.token, &operator.token, &analyst.token] {
        let order = call("GET", &format!("{stock}/orders/nope"), token, None, "x").await?;
        assert_eq!(order.status, 404, "{}", order.body);
    }

    // A browser's preflight needs no key; only the configured origin is let in.
    let preflight = |origin: &'static str| {
        reqwest::Client::new()
            .request(reqwest::Method::OPTIONS, deduct("o9"))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization,content-type",
            )
            .send()
    };
    let allowed = preflight(shop).await?;
    assert_eq!(allowed.status().as_u16(), 200);
    let header = |r: &reqwest::Response, name: &str| {
        r.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    assert_eq!(
        header(&allowed, "access-control-allow-origin").as_deref(),
        Some(shop)
    );
    let methods = header(&allowed, "access-control-allow-methods").unwrap_or_default();
    assert!(methods.contains("POST"), "{methods}");
    // A fetch-based event-stream client resuming sends Last-Event-ID.
    let headers = header(&allowed, "access-control-allow-headers").unwrap_or_default();
    assert!(headers.contains("last-event-id"), "{headers}");
    let elsewhere = preflight("https://evil.example.net").await?;
    assert_eq!(header(&elsewhere, "access-control-allow-origin"), None);

    // A key over its rate: its burst of 2 goes through, then 429.
    for order in ["s1", "s2"] {
        let answer = call("POST", &deduct(order), &slow.token, one.clone(), "x").await?;
        assert_eq!(answer.status, 202, "{}", answer.body);
    }
    let over = call(
        "POST",
        &deduct("s3"),
        &slow.token,
        one.clone(),
        "retry-after",
    )
    .await?;
    assert_eq!(over.status, 429, "{}", over.body);
    let retry_after: u64 = over.header.as_deref().unwrap_or("").parse()?;
    assert!(retry_after >= 1, "{retry_after}");

    // Only what was let through reached the log.
    let mut logged = Vec::new();
    for record in h.read(&h.ns.topic).await? {
        let command = decode_command(record.payload.as_deref().unwrap_or_default())?;
        let order = command.body.order_id().map(ToString::to_string);
        logged.push(order.unwrap_or_else(|| "restock".to_owned()));
    }
    logged.sort();
    assert_eq!(logged, ["o1", "restock", "s1", "s2"]);

    // The metrics name the key; the rate counter exists for every key.
    let metrics = call(
        "GET",
        &format!("{base}/metrics"),
        &operator.token,
        None,
        "x",
    )
    .await?;
    let metrics = metrics.body.as_str().unwrap_or("").to_owned();
    let requests = "stockledger_http_requests_total";
    assert!(sample(&metrics, requests, &["key=\"checkout\"", "status=\"202\""]) >= 1.0);
    assert!(sample(&metrics, requests, &["key=\"none\"", "status=\"401\""]) >= 2.0);
    let limited = "stockledger_gateway_rate_limited_total";
    assert_eq!(sample(&metrics, limited, &["key=\"slow\""]), 1.0);
    assert!(metrics.contains(&format!("{limited}{{key=\"checkout\"}} 0")));

    // SIGHUP takes up a new file; a broken one leaves the keys as they were.
    assert_eq!(
        call("GET", &stock, &late.token, None, "x").await?.status,
        401
    );
    write(&file, &[&operator.stanza, &late.stanza])?;
    signal(gateway.0.id(), nix::sys::signal::Signal::SIGHUP)?;
    wait_until("the new key accepted", CATCH_UP, || async {
        Ok((call("GET", &stock, &late.token, None, "x").await?.status == 404).then_some(()))
    })
    .await?;
    assert_eq!(
        call("GET", &stock, &analyst.token, None, "x").await?.status,
        401
    );
    std::fs::write(&file, "[[keys]]\nname = \"broken\"\n")?;
    signal(gateway.0.id(), nix::sys::signal::Signal::SIGHUP)?;
    let log = log_path(&h, &["serve"]);
    wait_until("the broken file reported", CATCH_UP, || async {
        let text = std::fs::read_to_string(&log)?;
        Ok(text
            .contains("the keys file was not taken up")
            .then_some(()))
    })
    .await?;
    assert_eq!(
        call("GET", &stock, &late.token, None, "x").await?.status,
        404
    );

    // The log knows keys by name and never holds a token.
    let text = std::fs::read_to_string(&log)?;
    assert!(text.contains("key=checkout") || text.contains("\"key\":\"checkout\""));
    for token in [
        &producer.token,
        &operator.token,
        &analyst.token,
        &slow.token,
    ] {
        assert!(!text.contains(token.as_str()), "a token is in the log");
    }
    assert!(!text.contains(wrong), "an unknown token is in the log");
    drop(gateway);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_keys_input_is_refused_in_one_line_naming_the_flag_or_field() -> anyhow::Result<()> {
    let h = Harness::new("http-keys-bad", 1).await?;
    let dir = std::env::temp_dir();
    let broken = dir.join(format!("{}-broken.toml", h.ns.id));
    std::fs::write(
        &broken,
        "[[keys]]\nname = \"a\"\nrole = \"producer\"\nsha256 = \"abc\"\n",
    )?;
    let missing = dir.join(format!("{}-missing.toml", h.ns.id));
    let (broken, missing) = (broken.to_string_lossy(), missing.to_string_lossy());
    let cases: [(&[&str], &str); 8] = [
        (
            &["keys", "new", "--name", "a b", "--role", "producer"],
            "--name",
        ),
        (
            &["keys", "new", "--name", "a", "--role", "admin"],
            "not a role",
        ),
        (&["keys", "new", "--role", "producer"], "--name"),
        (&["serve", "--listen", "0.0.0.0:0"], "--api-keys"),
        (
            &["serve", "--cors-origin", "shop.example.com"],
            "--cors-origin",
        ),
        (
            &["serve", "--cors-origin", "https://shop.example.com/app"],
            "no path",
        ),
        (
            &["serve", "--listen", "127.0.0.1:0", "--api-keys", &broken],
            "field sha256",
        ),
        (
            &["serve", "--listen", "127.0.0.1:0", "--api-keys", &missing],
            "missing.toml",
        ),
    ];
    // Listening beyond loopback without keys is a wrong flag: exit 2.
    let out = stockledger(&h)
        .args(["serve", "--listen", "0.0.0.0:0"])
        .output()?;
    assert_eq!(out.status.code(), Some(2));
    for (args, expected) in cases {
        let out = stockledger(&h).args(args).output()?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(stderr.trim().lines().count() <= 6, "{args:?}: {stderr}");
    }
    Ok(())
}

/// curl, a client that verifies certificates: its exit code and output.
fn curl(args: &[&str]) -> anyhow::Result<(i32, String)> {
    let out = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "10"])
        .args(args)
        .output()?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((out.status.code().unwrap_or(-1), said))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_certificate_the_gateway_speaks_https_to_a_client_that_verifies_it(
) -> anyhow::Result<()> {
    let h = Harness::new("http-tls", 1).await?;
    let dir = std::env::temp_dir().join(format!("{}-tls", h.ns.id));
    std::fs::create_dir_all(&dir)?;
    let (cert, key) = certificate(&dir)?;
    let (_gateway, base) = serve(&h, &["--tls-cert", &cert, "--tls-key", &key])?;
    assert!(base.starts_with("https://127.0.0.1:"), "{base}");
    let healthz = format!("{base}/healthz");

    // Verified against the certificate, over HTTP/2 and HTTP/1.1.
    let version = ["-o", "/dev/null", "-w", "%{http_version} %{http_code}"];
    let (code, said) =
        curl(&[&["--cacert", &cert, "--http2"], &version[..], &[&healthz]].concat())?;
    assert_eq!((code, said.as_str()), (0, "2 200"));
    let (code, said) =
        curl(&[&["--cacert", &cert, "--http1.1"], &version[..], &[&healthz]].concat())?;
    assert_eq!((code, said.as_str()), (0, "1.1 200"));
    // A client that does not trust it refuses it (curl: 60, peer
    // certificate cannot be authenticated); cleartext gets no HTTP answer.
    let (code, said) = curl(&[&healthz])?;
    assert_eq!(code, 60, "{said}");
    let cleartext = healthz.replacen("https://", "http://", 1);
    let (code, said) = curl(&["-o", "/dev/null", "-w", "%{http_code}", &cleartext])?;
    assert!(
        code != 0 && said.starts_with("000"),
        "cleartext was answered: {code} {said}"
    );
    // Byte for byte: what comes back to a cleartext request is no HTTP
    // response (a TLS alert at most), and the connection ends.
    let mut plain = tokio::net::TcpStream::connect(base.trim_start_matches("https://")).await?;
    plain
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await?;
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), plain.read_to_end(&mut reply)).await??;
    assert!(
        !reply.starts_with(b"HTTP/"),
        "cleartext got an HTTP answer: {}",
        String::from_utf8_lossy(&reply)
    );

    // Bad certificate input is refused at start, naming the flag and file.
    let not_pem = dir.join("not.pem");
    std::fs::write(&not_pem, "not a certificate")?;
    let not_pem = not_pem.to_string_lossy().into_owned();
    let cases: [(&[&str], &str); 3] = [
        (&["serve", "--tls-cert", &cert], "--tls-key"),
        (
            &["serve", "--tls-cert", &not_pem, "--tls-key", &key],
            "no PEM certificate",
        ),
        (
            &["serve", "--tls-cert", &cert, "--tls-key", &not_pem],
            "reading the key",
        ),
    ];
    for (args, expected) in cases {
        let out = stockledger(&h).args(args).output()?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!stderr.contains("PRIVATE KEY"), "{args:?}: {stderr}");
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_at_its_stream_cap_gets_429_and_an_operator_is_still_answered() -> anyhow::Result<()>
{
    let h = Harness::new("http-streams", 1).await?;
    let producer = new_key(&h, "shop", "producer")?;
    let operator = new_key(&h, "ops", "operator")?;
    let file = std::env::temp_dir().join(format!("{}-keys.toml", h.ns.id));
    write(&file, &[&producer.stanza, &operator.stanza])?;
    let file_arg = file.to_string_lossy().into_owned();
    // Twelve connections: six streams in all, a quarter of them (one) per
    // key unless told; three here.
    let (_gateway, base) = serve(
        &h,
        &[
            "--api-keys",
            &file_arg,
            "--max-connections",
            "12",
            "--max-streams-per-key",
            "3",
        ],
    )?;
    let events = format!("{base}/v1/skus/SKU-S/events");
    let open = |token: String| {
        let events = events.clone();
        async move {
            let response = reqwest::Client::new()
                .get(&events)
                .bearer_auth(token)
                .timeout(Duration::from_secs(600))
                .send()
                .await?;
            anyhow::Ok(response)
        }
    };
    let mut shop = Vec::new();
    for _ in 0..3 {
        let stream = open(producer.token.clone()).await?;
        assert_eq!(stream.status(), 200);
        shop.push(stream);
    }
    let over = open(producer.token.clone()).await?;
    assert_eq!(over.status(), 429);
    assert_eq!(
        over.headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("5")
    );
    let problem: Value = over.json().await?;
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("the key shop")),
        "{problem}"
    );
    // Another key still opens, up to the gateway's six.
    let mut ops = Vec::new();
    for _ in 0..3 {
        let stream = open(operator.token.clone()).await?;
        assert_eq!(stream.status(), 200);
        ops.push(stream);
    }
    let full = open(operator.token.clone()).await?;
    assert_eq!(full.status(), 429);
    let problem: Value = full.json().await?;
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("--max-streams")),
        "{problem}"
    );
    // With every stream open, the operator's other requests are answered.
    let status = call(
        "GET",
        &format!("{base}/v1/status"),
        &operator.token,
        None,
        "x",
    )
    .await?;
    assert_eq!(status.status, 200, "{}", status.body);
    // A stream the client closes gives its place back.
    drop(shop.pop());
    wait_until("the closed stream's place", CATCH_UP, || async {
        let again = open(producer.token.clone()).await?;
        Ok((again.status() == 200).then_some(again))
    })
    .await?;
    Ok(())
}
