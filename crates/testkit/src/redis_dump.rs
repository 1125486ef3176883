//! Byte-level views of a Redis key prefix.

use std::collections::BTreeMap;

use stockledger_redis::RedisConn;

/// Every key under `prefix:` with its `DUMP` serialization, keyed by the key
/// name without the prefix, so two prefixes can be compared byte for byte.
pub async fn dump_prefix(
    conn: &RedisConn,
    prefix: &str,
) -> anyhow::Result<BTreeMap<String, Vec<u8>>> {
    let keys = keys(conn, prefix).await?;
    let dumps: Vec<redis::Cmd> = keys
        .iter()
        .map(|key| redis::cmd("DUMP").arg(key).clone())
        .collect();
    let dumps: Vec<Vec<u8>> = conn.query_each(dumps).await?;
    Ok(keys
        .iter()
        .map(|key| key.strip_prefix(prefix).unwrap_or(key).to_owned())
        .zip(dumps)
        .collect())
}

/// Every hash under `prefix:` with its fields (and every sorted set, with
/// its members' scores), keyed by the key name without the prefix: the
/// contents, free of how each server chose to encode them (two servers may
/// lay out the same large hash differently in a `DUMP`).
pub async fn hashes_under(
    conn: &RedisConn,
    prefix: &str,
) -> anyhow::Result<BTreeMap<String, BTreeMap<String, String>>> {
    let keys = keys(conn, prefix).await?;
    let types: Vec<String> = conn
        .query_each(
            keys.iter()
                .map(|k| redis::cmd("TYPE").arg(k).clone())
                .collect(),
        )
        .await?;
    let reads: Vec<redis::Cmd> = keys
        .iter()
        .zip(&types)
        .map(|(key, kind)| match kind.as_str() {
            "zset" => redis::cmd("ZRANGE")
                .arg(key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .clone(),
            _ => redis::Cmd::hgetall(key),
        })
        .collect();
    let hashes: Vec<BTreeMap<String, String>> = conn.query_each(reads).await?;
    Ok(keys
        .iter()
        .map(|key| key.strip_prefix(prefix).unwrap_or(key).to_owned())
        .zip(hashes)
        .collect())
}

/// Deletes every key under `prefix:`.
pub async fn delete_prefix(conn: &RedisConn, prefix: &str) -> anyhow::Result<()> {
    let deletes: Vec<redis::Cmd> = keys(conn, prefix)
        .await?
        .iter()
        .map(redis::Cmd::del)
        .collect();
    let _: Vec<u64> = conn.query_each(deletes).await?;
    Ok(())
}

async fn keys(conn: &RedisConn, prefix: &str) -> anyhow::Result<Vec<String>> {
    Ok(conn.scan_all(&format!("{prefix}:*")).await?)
}
