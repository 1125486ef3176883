//! Passwords for the three services: read from the environment, or from a
//! file named by the same variable with `_FILE` appended (as container
//! secrets are mounted), and never from the command line, where `ps`, shell
//! history and process listings of every user on the machine show them.
//!
//! | secret | variables | goes into |
//! |---|---|---|
//! | Kafka SASL password | `KAFKA_SASL_PASSWORD`, `…_FILE` | librdkafka's `sasl.password` |
//! | Kafka TLS key password | `KAFKA_SSL_KEY_PASSWORD`, `…_FILE` | `ssl.key.password` |
//! | Redis password (ACL user's or `requirepass`) | `REDIS_PASSWORD`, `…_FILE` | every Redis URL |
//! | PostgreSQL password | `DATABASE_PASSWORD`, `…_FILE` | the database URL |
//!
//! A secret given on the command line (`-X sasl.password=…`, a URL with a
//! password after `--redis-url` or `--database-url`) is refused before
//! anything connects, without repeating it.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context};
use clap::parser::ValueSource;
use clap::ArgMatches;
use url::Url;

use crate::Global;

/// The variables a password is read from, each with its `_FILE` twin.
pub const PASSWORD_VARIABLES: [&str; 4] = [
    "KAFKA_SASL_PASSWORD",
    "KAFKA_SSL_KEY_PASSWORD",
    "REDIS_PASSWORD",
    "DATABASE_PASSWORD",
];

/// librdkafka properties whose values are secrets, with the variable that
/// carries each one (if it has its own).
const SECRET_PROPERTIES: [(&str, Option<&str>); 6] = [
    ("sasl.password", Some("KAFKA_SASL_PASSWORD")),
    ("ssl.key.password", Some("KAFKA_SSL_KEY_PASSWORD")),
    ("ssl.keystore.password", None),
    ("ssl.key.pem", None),
    ("sasl.oauthbearer.client.secret", None),
    ("sasl.oauthbearer.config", None),
];

/// Adds the secrets found in the environment to `g`, once
/// [`refuse_command_line`] has passed.
pub fn apply(g: &mut Global) -> anyhow::Result<()> {
    apply_from(g, &|name| std::env::var_os(name))
}

fn from_command_line(matches: &ArgMatches, id: &str) -> bool {
    matches.value_source(id) == Some(ValueSource::CommandLine)
}

/// Refuses a secret given on the command line: a secret property after
/// -X (`g` holding only the command line's properties yet), a URL with a
/// password after `--redis-url` or `--database-url`.
pub fn refuse_command_line(g: &Global, matches: &ArgMatches) -> anyhow::Result<()> {
    if from_command_line(matches, "kafka_properties") {
        for (key, _) in &g.kafka_properties {
            if let Some((_, var)) = SECRET_PROPERTIES.iter().find(|(p, _)| p == key) {
                let instead = match var {
                    Some(var) => format!("set {var} or {var}_FILE"),
                    None => "put it in KAFKA_PROPERTIES (key=value;…)".to_owned(),
                };
                bail!(
                    "-X {key}: a secret is not taken from the command line, where other \
                     users and shell history see it; {instead} instead"
                );
            }
        }
    }
    for (id, flag, var, url) in [
        ("redis_url", "--redis-url", "REDIS", &g.redis_url),
        (
            "database_url",
            "--database-url",
            "DATABASE",
            &g.database_url,
        ),
    ] {
        if from_command_line(matches, id) && has_password(url) {
            bail!(
                "{flag}: a URL with a password is not taken from the command line, where \
                 other users and shell history see it; give the URL without it and set \
                 {var}_PASSWORD or {var}_PASSWORD_FILE (or give the whole URL in {var}_URL)"
            );
        }
    }
    Ok(())
}

fn has_password(urls: &str) -> bool {
    stockledger_redis::seed_urls(urls)
        .iter()
        .any(|u| Url::parse(u).is_ok_and(|u| u.password().is_some()))
}

/// [`apply`] with the environment read through `env`.
fn apply_from(g: &mut Global, env: &dyn Fn(&str) -> Option<OsString>) -> anyhow::Result<()> {
    for (property, var) in SECRET_PROPERTIES {
        let Some(var) = var else { continue };
        if let Some(secret) = read(var, env)? {
            if g.kafka_properties.iter().any(|(k, _)| k == property) {
                bail!("{property} is given twice, in KAFKA_PROPERTIES and by {var}; keep one");
            }
            g.kafka_properties.push((property.to_owned(), secret));
        }
    }
    if let Some(password) = read("REDIS_PASSWORD", env)? {
        g.redis_url = stockledger_redis::seed_urls(&g.redis_url)
            .into_iter()
            .map(|u| with_password(u, &password, "the Redis URL", "REDIS_PASSWORD"))
            .collect::<anyhow::Result<Vec<_>>>()?
            .join(",");
    }
    if let Some(password) = read("DATABASE_PASSWORD", env)? {
        g.database_url = with_password(
            &g.database_url,
            &password,
            "the database URL",
            "DATABASE_PASSWORD",
        )?;
    }
    Ok(())
}

/// The secret in `var`, or in the file `var_FILE` names (one trailing line
/// end dropped). An empty variable counts as unset.
fn read(var: &str, env: &dyn Fn(&str) -> Option<OsString>) -> anyhow::Result<Option<String>> {
    let file_var = format!("{var}_FILE");
    let set = |name: &str| env(name).filter(|v| !v.is_empty());
    match (set(var), set(&file_var)) {
        (Some(_), Some(_)) => bail!("both {var} and {file_var} are set; keep one"),
        (Some(value), None) => value
            .into_string()
            .map(Some)
            .map_err(|_| anyhow!("{var} is not valid UTF-8")),
        (None, Some(path)) => {
            let path = PathBuf::from(path);
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("{file_var}: cannot read {}", path.display()))?;
            let secret = text
                .strip_suffix('\n')
                .map(|t| t.strip_suffix('\r').unwrap_or(t))
                .unwrap_or(&text);
            if secret.is_empty() {
                bail!("{file_var}: {} is empty", path.display());
            }
            Ok(Some(secret.to_owned()))
        }
        (None, None) => Ok(None),
    }
}

/// `url` with `password` in it. Refuses a URL that has one already, so
/// which one counts is never a guess.
fn with_password(url: &str, password: &str, what: &str, var: &str) -> anyhow::Result<String> {
    // The parser's message never repeats the URL, so it cannot leak one.
    let mut parsed = Url::parse(url).map_err(|e| anyhow!("{what} is not a URL: {e}"))?;
    if parsed.password().is_some() {
        bail!("{what} holds a password and {var} is set too; give the password once");
    }
    let scheme = parsed.scheme().to_owned();
    parsed
        .set_password(Some(password))
        .map_err(|()| anyhow!("{what}: a {scheme} URL has no place for the password in {var}"))?;
    Ok(parsed.into())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use clap::Parser;

    use super::*;
    use crate::Cli;

    fn global(args: &[&str]) -> (Global, ArgMatches) {
        use clap::{CommandFactory, FromArgMatches};
        let mut argv = vec!["stockledger"];
        argv.extend_from_slice(args);
        argv.extend(["stock", "A"]);
        let matches = Cli::command().try_get_matches_from(&argv).unwrap();
        let cli = Cli::from_arg_matches(&matches).unwrap();
        (cli.global, matches)
    }

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let map: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), OsString::from(v)))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn secrets_on_the_command_line_are_refused_without_repeating_them() {
        for args in [
            &["-X", "sasl.password=hunter2"][..],
            &["-X", "ssl.key.pem=hunter2"],
            &["--redis-url", "redis://ledger:hunter2@127.0.0.1:6379"],
            &[
                "--redis-url",
                "redis://127.0.0.1:7000,redis://:hunter2@127.0.0.1:7001",
            ],
            &["--database-url", "postgres://u:hunter2@127.0.0.1/db"],
        ] {
            let (g, matches) = global(args);
            let e = refuse_command_line(&g, &matches).unwrap_err().to_string();
            assert!(!e.contains("hunter2"), "{args:?}: {e}");
            assert!(e.contains(args[0]), "{args:?} names the flag: {e}");
        }
        let (g, matches) = global(&["-X", "sasl.password=hunter2"]);
        let e = refuse_command_line(&g, &matches).unwrap_err().to_string();
        assert!(e.contains("KAFKA_SASL_PASSWORD_FILE"), "{e}");
        // Settings that are not secrets, and URLs without one, pass.
        let (g, matches) = global(&[
            "-X",
            "ssl.key.location=/k.pem",
            "--redis-url",
            "redis://ledger@127.0.0.1:6379",
        ]);
        refuse_command_line(&g, &matches).unwrap();
    }

    #[test]
    fn secrets_come_from_the_environment_or_a_file() {
        let dir = std::env::temp_dir().join(format!("stockledger-secrets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pg");
        std::fs::write(&file, "p@ss word\n").unwrap();
        let (mut g, _) = global(&[
            "--redis-url",
            "redis://ledger@127.0.0.1:7000,redis://ledger@127.0.0.1:7001",
            "--database-url",
            "postgres://app@127.0.0.1:5432/db?sslmode=require",
        ]);
        apply_from(
            &mut g,
            &env(&[
                ("KAFKA_SASL_PASSWORD", "k1"),
                ("REDIS_PASSWORD", "r1"),
                ("DATABASE_PASSWORD_FILE", file.to_str().unwrap()),
            ]),
        )
        .unwrap();
        assert!(g
            .kafka_properties
            .contains(&("sasl.password".into(), "k1".into())));
        assert_eq!(
            g.redis_url,
            "redis://ledger:r1@127.0.0.1:7000,redis://ledger:r1@127.0.0.1:7001"
        );
        assert_eq!(
            g.database_url,
            "postgres://app:p%40ss%20word@127.0.0.1:5432/db?sslmode=require"
        );
        // Debug output carries none of them.
        let shown = format!("{g:?}");
        for secret in ["k1", "r1", "p%40ss"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_secret_given_twice_or_unreadable_is_refused_naming_the_variable() {
        let cases: [(&[(&str, &str)], &str); 4] = [
            (
                &[("REDIS_PASSWORD", "a"), ("REDIS_PASSWORD_FILE", "/x")],
                "both REDIS_PASSWORD and REDIS_PASSWORD_FILE",
            ),
            (
                &[("KAFKA_SASL_PASSWORD_FILE", "/nonexistent/stockledger")],
                "KAFKA_SASL_PASSWORD_FILE: cannot read /nonexistent/stockledger",
            ),
            (&[("DATABASE_PASSWORD", "b")], "holds a password"),
            (
                &[("KAFKA_SASL_PASSWORD", "c")],
                "sasl.password is given twice",
            ),
        ];
        for (vars, expected) in cases {
            let mut g = Cli::parse_from(["stockledger", "stock", "A"]).global;
            g.database_url = "postgres://u:s3cret@127.0.0.1/db".into();
            g.kafka_properties = vec![("sasl.password".into(), "s3cret".into())];
            if vars[0].0 != "KAFKA_SASL_PASSWORD" {
                g.kafka_properties.clear();
            }
            let e = apply_from(&mut g, &env(vars)).unwrap_err();
            let e = format!("{e:#}");
            assert!(e.contains(expected), "{vars:?}: {e}");
            assert!(!e.contains("s3cret"), "{e}");
        }
    }

    #[test]
    fn one_trailing_line_end_is_dropped_from_a_file() {
        let dir = std::env::temp_dir().join(format!("stockledger-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (text, expected) in [("s\r\n", Some("s")), ("s\n\n", Some("s\n")), ("\n", None)] {
            let file = dir.join("s");
            std::fs::write(&file, text).unwrap();
            let got = read("X", &env(&[("X_FILE", file.to_str().unwrap())]));
            match expected {
                Some(s) => assert_eq!(got.unwrap().as_deref(), Some(s)),
                None => assert!(got.unwrap_err().to_string().contains("is empty")),
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
