//! Byte-level views of a Redis key prefix.

use std::collections::BTreeMap;

use stockledger_redis::RedisConn;

/// Every key under `prefix:` with its bytes, keyed by the key name without
/// the prefix, so two prefixes can be compared byte for byte: a key in one
/// of Redis's compact encodings (a listpack, whose bytes follow the order
/// its fields were first written in) as `DUMP` gives it; a larger hash or
/// sorted set, which Redis keeps as a hash table whose bytes follow its
/// own rehashing (every read moves it on), as its contents in order.
pub async fn dump_prefix(
    conn: &RedisConn,
    prefix: &str,
) -> anyhow::Result<BTreeMap<String, Vec<u8>>> {
    let keys = keys(conn, prefix).await?;
    let encodings: Vec<String> = conn
        .query_each(
            keys.iter()
                .map(|key| redis::cmd("OBJECT").arg("ENCODING").arg(key).clone())
                .collect(),
        )
        .await?;
    let dumps: Vec<redis::Cmd> = keys
        .iter()
        .zip(&encodings)
        .map(|(key, encoding)| match encoding.as_str() {
            "hashtable" => redis::Cmd::hgetall(key),
            "skiplist" => redis::cmd("ZRANGE")
                .arg(key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .clone(),
            _ => redis::cmd("DUMP").arg(key).clone(),
        })
        .collect();
    let values: Vec<redis::Value> = conn.query_each(dumps).await?;
    let bytes = |encoding: &str, value: redis::Value| -> anyhow::Result<Vec<u8>> {
        Ok(match encoding {
            "hashtable" => {
                let fields: BTreeMap<Vec<u8>, Vec<u8>> = redis::from_redis_value(value)?;
                format!("hashtable {fields:?}").into_bytes()
            }
            "skiplist" => {
                let members: Vec<Vec<u8>> = redis::from_redis_value(value)?;
                format!("skiplist {members:?}").into_bytes()
            }
            _ => redis::from_redis_value(value)?,
        })
    };
    let mut out = BTreeMap::new();
    for ((key, encoding), value) in keys.iter().zip(&encodings).zip(values) {
        let name = key.strip_prefix(prefix).unwrap_or(key).to_owned();
        out.insert(name, bytes(encoding, value)?);
    }
    Ok(out)
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
