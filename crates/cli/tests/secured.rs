//! Every hop secured, through the `stockledger` binary: Kafka over SASL
//! (PLAIN and SCRAM-SHA-512, the local Apache Kafka's SASL listener), Redis
//! as an ACL user with a password and over TLS (`rediss://`), PostgreSQL with
//! a password and `sslmode=verify-full`. Passwords come from the
//! environment or from `…_FILE`; none of them shows in any output or log,
//! and a wrong one is refused in words that do not repeat it.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{log_path, stockledger, Running};
use stockledger_testkit::Harness;

/// A random password: 24 hex digits.
fn password() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..24].to_owned()
}

/// A directory of the test's own, for secret files and certificates.
fn scratch(h: &Harness) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("{}-secrets", h.ns.id));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn secret_file(dir: &Path, name: &str, secret: &str) -> anyhow::Result<String> {
    let path = dir.join(name);
    std::fs::write(&path, format!("{secret}\n"))?;
    Ok(path.to_string_lossy().into_owned())
}

/// What a run printed, stdout and stderr together.
fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The local Apache Kafka's SASL listener and the file with its password
/// (`deploy/local/stack.sh env` exports both).
fn sasl_listener() -> anyhow::Result<(String, String)> {
    let var = |name: &str| {
        std::env::var(name).map_err(|_| {
            anyhow::anyhow!(
                "{name} is not set: this test needs the local Apache Kafka's SASL listener \
                 (run it through deploy/local/test.sh, or eval \"$(deploy/local/stack.sh env)\")"
            )
        })
    };
    Ok((
        var("STOCKLEDGER_SASL_BROKERS")?,
        var("STOCKLEDGER_SASL_PASSWORD_FILE")?,
    ))
}

/// Sets `cmd` to reach Kafka over SASL with `mechanism`.
fn over_sasl<'c>(
    cmd: &'c mut Command,
    brokers: &str,
    mechanism: &str,
    password_file: &str,
) -> &'c mut Command {
    cmd.env("KAFKA_BROKERS", brokers)
        .env(
            "KAFKA_PROPERTIES",
            format!(
                "security.protocol=SASL_PLAINTEXT;sasl.mechanisms={mechanism};\
                 sasl.username=stockledger"
            ),
        )
        .env("KAFKA_SASL_PASSWORD_FILE", password_file)
}

/// The test's Redis URL with `user` in it (no password).
fn redis_as(url: &str, user: &str) -> String {
    url.replacen("redis://", &format!("redis://{user}@"), 1)
}

/// The database URL without its password, on `localhost` (the name the
/// server's certificate carries), with `params` added.
fn database_at_localhost(url: &str, user: &str, params: &str) -> anyhow::Result<String> {
    let rest = url
        .split_once("://")
        .map(|(_, r)| r)
        .ok_or_else(|| anyhow::anyhow!("DATABASE_URL is not a URL"))?;
    let after_at = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let (_, path) = after_at
        .split_once('/')
        .ok_or_else(|| anyhow::anyhow!("DATABASE_URL names no database"))?;
    let database = path.split('?').next().unwrap_or(path);
    Ok(format!(
        "postgres://{user}@localhost:5432/{database}?{params}"
    ))
}

/// The password in the test's DATABASE_URL, if it has one.
fn database_password(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let userinfo = rest.rsplit_once('@')?.0;
    userinfo.split_once(':').map(|(_, p)| p.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_hop_secured_carries_the_ledger_and_no_secret_is_shown() -> anyhow::Result<()> {
    let (sasl_brokers, kafka_password_file) = sasl_listener()?;
    let kafka_password = std::fs::read_to_string(&kafka_password_file)?
        .trim_end()
        .to_owned();
    let h = Harness::new("secured", 2).await?;
    let dir = scratch(&h)?;

    // PostgreSQL must offer TLS; its certificate (self-signed on Debian's
    // cluster, for localhost) is the root to verify it with.
    let ssl: String = sqlx::query_scalar("SHOW ssl").fetch_one(&h.pool).await?;
    anyhow::ensure!(
        ssl == "on",
        "PostgreSQL has ssl off; this test needs it on (Debian's cluster has it)"
    );
    let server_cert: String = sqlx::query_scalar("SHOW ssl_cert_file")
        .fetch_one(&h.pool)
        .await?;

    // A Redis ACL user that may touch this test's keys only.
    let redis_user = format!("stockledger-{}", h.ns.id);
    let redis_password = password();
    let admin = redis::Client::open(h.redis_url.as_str())?;
    let mut admin = admin.get_multiplexed_async_connection().await?;
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg(&redis_user)
        .arg("reset")
        .arg("on")
        .arg(format!(">{redis_password}"))
        .arg(format!("~{}:*", h.ns.prefix))
        .arg("&*")
        .arg("+@all")
        .exec_async(&mut admin)
        .await?;

    // A PostgreSQL login that is only an analyst, with a password of its own.
    let pg_login = format!("sec_{}", h.ns.id.replace('-', "_"));
    let pg_password = password();
    sqlx::query(&format!(
        "CREATE ROLE {pg_login} LOGIN PASSWORD '{pg_password}' IN ROLE stockledger_analyst"
    ))
    .execute(&h.pool)
    .await?;

    let checked = async {
        let redis_url = redis_as(&h.redis_url, &redis_user);
        let redis_password_file = secret_file(&dir, "redis", &redis_password)?;
        let tls = format!("sslmode=verify-full&sslrootcert={server_cert}");
        let app = format!("{}-archiver", h.ns.id);
        let archive_url = database_at_localhost(
            &h.services.database_url,
            "postgres",
            &format!("{tls}&application_name={app}"),
        )?;
        let mut shown = String::new();

        // The applier over SCRAM-SHA-512, writing Redis as the ACL user.
        let mut apply = stockledger(&h);
        over_sasl(
            &mut apply,
            &sasl_brokers,
            "SCRAM-SHA-512",
            &kafka_password_file,
        )
        .env("REDIS_URL", &redis_url)
        .env("REDIS_PASSWORD_FILE", &redis_password_file);
        let _applier = spawn_logged(apply, "apply", &log_path(&h, &["secured-apply"]))?;
        // The archiver over PLAIN, into PostgreSQL over verified TLS.
        let mut archive = stockledger(&h);
        over_sasl(&mut archive, &sasl_brokers, "PLAIN", &kafka_password_file)
            .env("DATABASE_URL", &archive_url);
        match database_password(&h.services.database_url) {
            Some(p) => archive.env("DATABASE_PASSWORD", p),
            None => &mut archive,
        };
        let _archiver = spawn_logged(archive, "archive", &log_path(&h, &["secured-archive"]))?;

        // Commands over SASL wait for their decisions in Redis as the user.
        for (mechanism, args) in [
            ("PLAIN", &["restock", "S1", "--add", "5"][..]),
            ("SCRAM-SHA-512", &["deduct", "S1", "o1", "2"]),
        ] {
            let out = over_sasl(
                &mut stockledger(&h),
                &sasl_brokers,
                mechanism,
                &kafka_password_file,
            )
            .env("REDIS_URL", &redis_url)
            .env("REDIS_PASSWORD_FILE", &redis_password_file)
            .args(args)
            .args(["--wait", "60"])
            .output()?;
            let text = said(&out);
            anyhow::ensure!(out.status.success(), "{args:?} over {mechanism}: {text}");
            anyhow::ensure!(text.contains("APPLIED"), "{args:?}: {text}");
            shown.push_str(&text);
        }

        // The analyst login reads the archive over verified TLS, its
        // password from a file, until the deduction is there.
        let analyst_url = database_at_localhost(&h.services.database_url, &pg_login, &tls)?;
        let pg_password_file = secret_file(&dir, "pg", &pg_password)?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = stockledger(&h)
                .env("DATABASE_URL", &analyst_url)
                .env("DATABASE_PASSWORD_FILE", &pg_password_file)
                .args(["history", "--sku", "S1"])
                .output()?;
            let text = said(&out);
            anyhow::ensure!(out.status.success(), "history as {pg_login}: {text}");
            shown.push_str(&text);
            if text.contains("deduct") || text.contains("DEDUCT") {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the deduction was not archived in 60 s: {text}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // Every connection the archiver holds is encrypted.
        let (sessions, all_tls): (i64, Option<bool>) = sqlx::query_as(
            "SELECT count(*), bool_and(s.ssl) FROM pg_stat_activity a \
             JOIN pg_stat_ssl s USING (pid) WHERE a.application_name = $1",
        )
        .bind(&app)
        .fetch_one(&h.pool)
        .await?;
        anyhow::ensure!(sessions > 0, "no session of the archiver ({app}) found");
        anyhow::ensure!(all_tls == Some(true), "an archiver session without TLS");

        // A wrong password is refused at each hop, in words without it.
        let wrong = password();
        let wrong_file = secret_file(&dir, "wrong", &wrong)?;
        let out = stockledger(&h)
            .env("REDIS_URL", &redis_url)
            .env("REDIS_PASSWORD", &wrong)
            .args(["stock", "S1"])
            .output()?;
        let text = said(&out);
        // 77: denied, as every command says it (`stockledger --help`).
        anyhow::ensure!(
            out.status.code() == Some(77),
            "a wrong Redis password passed, or was not said to be denied: {text}"
        );
        anyhow::ensure!(text.contains("Password authentication failed"), "{text}");
        anyhow::ensure!(!text.contains(&wrong), "the Redis password shown: {text}");
        let out = stockledger(&h)
            .env("DATABASE_URL", &analyst_url)
            .env("DATABASE_PASSWORD_FILE", &wrong_file)
            .args(["history", "--sku", "S1"])
            .output()?;
        let text = said(&out);
        // 77: denied, as every command says it (`stockledger --help`).
        anyhow::ensure!(
            out.status.code() == Some(77),
            "a wrong database password passed, or was not said to be denied: {text}"
        );
        anyhow::ensure!(text.contains("password authentication failed"), "{text}");
        anyhow::ensure!(
            !text.contains(&wrong),
            "the database password shown: {text}"
        );
        let out = over_sasl(
            &mut stockledger(&h),
            &sasl_brokers,
            "SCRAM-SHA-512",
            &wrong_file,
        )
        // The error itself says why (no log lines: RUST_LOG=off). The
        // record waits out a shorter timeout than the default 30 s, given
        // by -X on top of the SASL settings in KAFKA_PROPERTIES.
        .args([
            "-X",
            "message.timeout.ms=5000",
            "restock",
            "S1",
            "--add",
            "1",
        ])
        .env("RUST_LOG", "off")
        .output()?;
        let text = said(&out);
        // 77: denied, as every command says it (`stockledger --help`).
        anyhow::ensure!(
            out.status.code() == Some(77),
            "a wrong Kafka password passed, or was not said to be denied: {text}"
        );
        anyhow::ensure!(
            text.contains("the brokers refused this client's login")
                && text.contains("Authentication failed"),
            "{text}"
        );
        anyhow::ensure!(!text.contains(&wrong), "the Kafka password shown: {text}");
        shown.push_str(&text);

        // No output and no log line carries a secret.
        for name in ["secured-apply", "secured-archive"] {
            shown.push_str(&std::fs::read_to_string(log_path(&h, &[name]))?);
        }
        for (what, secret) in [
            ("Kafka", &kafka_password),
            ("Redis", &redis_password),
            ("PostgreSQL", &pg_password),
        ] {
            anyhow::ensure!(
                !shown.contains(secret.as_str()),
                "the {what} password appears in the output or logs"
            );
        }
        anyhow::Ok(())
    }
    .await;

    redis::cmd("ACL")
        .arg("DELUSER")
        .arg(&redis_user)
        .exec_async(&mut admin)
        .await?;
    sqlx::query(&format!("DROP ROLE {pg_login}"))
        .execute(&h.pool)
        .await?;
    std::fs::remove_dir_all(&dir)?;
    checked
}

/// Starts `cmd` with the long-running subcommand `sub` in the background,
/// logging at debug level into `log`.
fn spawn_logged(mut cmd: Command, sub: &str, log: &Path) -> anyhow::Result<Running> {
    let file = std::fs::File::create(log)?;
    let child = cmd
        .arg(sub)
        .env("RUST_LOG", "debug,h2=info,hyper=info,sqlx=info")
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()?;
    Ok(Running(child))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_over_tls_is_verified_against_the_given_roots() -> anyhow::Result<()> {
    let h = Harness::new("rediss", 1).await?;
    let dir = scratch(&h)?;
    let (cert, key) = common::certificate(&dir)?;
    let port = common::free_port()?;
    let redis_password = password();
    let conf = dir.join("redis.conf");
    // The password in a config file, not on redis-server's command line.
    std::fs::write(
        &conf,
        format!(
            "port 0\ntls-port {port}\nbind 127.0.0.1\ntls-cert-file {cert}\n\
             tls-key-file {key}\ntls-ca-cert-file {cert}\ntls-auth-clients no\n\
             requirepass {redis_password}\nsave \"\"\nappendonly no\n"
        ),
    )?;
    let _server = Running(
        Command::new("redis-server")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "redis-server with TLS did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let url = format!("rediss://localhost:{port}/0");

    // Verified against the test's certificate as the root, the password
    // taken from the environment: the projection answers
    let out = stockledger(&h)
        .env("REDIS_URL", &url)
        .env("REDIS_PASSWORD", &redis_password)
        .env("SSL_CERT_FILE", &cert)
        .args(["stock", "S1"])
        .output()?;
    // (An empty projection: the answer is that the SKU has no state.)
    let text = said(&out);
    anyhow::ensure!(
        out.status.code() == Some(4) && text.starts_with("S1: no state under prefix"),
        "stock over rediss://: {text}"
    );
    anyhow::ensure!(!text.contains(&redis_password), "{text}");

    // Without that root, the certificate is refused and nothing is read.
    let out = stockledger(&h)
        .env("REDIS_URL", &url)
        .env("REDIS_PASSWORD", &redis_password)
        .env("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt")
        .args(["stock", "S1"])
        .output()?;
    let text = said(&out);
    anyhow::ensure!(!out.status.success(), "an unverified server passed: {text}");
    anyhow::ensure!(text.to_lowercase().contains("certificate"), "{text}");
    anyhow::ensure!(!text.contains(&redis_password), "{text}");
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_on_the_command_line_is_refused_before_anything_connects() -> anyhow::Result<()> {
    let h = Harness::new("secret-argv", 1).await?;
    for args in [
        &["-X", "sasl.password=hunter2", "stock", "S1"][..],
        &[
            "--redis-url",
            "redis://:hunter2@127.0.0.1:6379",
            "stock",
            "S1",
        ],
        &[
            "--database-url",
            "postgres://postgres:hunter2@127.0.0.1/stockledger",
            "history",
            "--sku",
            "S1",
        ],
    ] {
        let out = stockledger(&h).args(args).output()?;
        let text = said(&out);
        anyhow::ensure!(out.status.code() == Some(2), "{args:?}: {text}");
        anyhow::ensure!(text.contains(args[0]), "{args:?} names the flag: {text}");
        anyhow::ensure!(
            text.contains("_PASSWORD"),
            "{args:?} says where instead: {text}"
        );
        anyhow::ensure!(!text.contains("hunter2"), "{args:?}: {text}");
        anyhow::ensure!(text.lines().count() == 1, "{args:?}: {text}");
    }
    Ok(())
}
