//! URLs fit for logs: passwords masked.

/// `url` with any password replaced by `***`, for logs and `Debug`
/// (`redis://:secret@host` and `postgres://user:secret@host/db`), in each
/// URL of a comma-separated list (the seed nodes of a Redis Cluster).
pub fn redact_url(url: &str) -> String {
    url.split(',')
        .map(redact_one_url)
        .collect::<Vec<_>>()
        .join(",")
}

fn redact_one_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            let masked = if userinfo.contains(':') {
                format!("{user}:***")
            } else {
                user.to_owned()
            };
            format!("{scheme}://{masked}@{host}{path}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_in_urls_are_masked() {
        assert_eq!(
            redact_url("redis://:s3cret@127.0.0.1:6379/0"),
            "redis://:***@127.0.0.1:6379/0"
        );
        assert_eq!(
            redact_url("postgres://app:pa@ss@db.local/ledger"),
            "postgres://app:***@db.local/ledger"
        );
        assert_eq!(
            redact_url("postgres://root@localhost/test"),
            "postgres://root@localhost/test"
        );
        assert_eq!(redact_url("redis://127.0.0.1"), "redis://127.0.0.1");
        assert_eq!(
            redact_url("redis://:a@10.0.0.1:7000,redis://u:b@10.0.0.2:7000"),
            "redis://:***@10.0.0.1:7000,redis://u:***@10.0.0.2:7000"
        );
    }
}
