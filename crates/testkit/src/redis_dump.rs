//! Byte-level views of a Redis key prefix.

use std::collections::BTreeMap;

use redis::aio::ConnectionManager;
use stockledger_consumer::projection::scan_keys;

/// Every key under `prefix:` with its `DUMP` serialization, keyed by the key
/// name without the prefix, so two prefixes can be compared byte for byte.
pub async fn dump_prefix(
    conn: &mut ConnectionManager,
    prefix: &str,
) -> anyhow::Result<BTreeMap<String, Vec<u8>>> {
    let mut dumps = BTreeMap::new();
    for key in keys(conn, prefix).await? {
        let dump: Vec<u8> = redis::cmd("DUMP").arg(&key).query_async(conn).await?;
        let name = key.strip_prefix(prefix).unwrap_or(&key).to_owned();
        dumps.insert(name, dump);
    }
    Ok(dumps)
}

/// Deletes every key under `prefix:`.
pub async fn delete_prefix(conn: &mut ConnectionManager, prefix: &str) -> anyhow::Result<()> {
    for chunk in keys(conn, prefix).await?.chunks(500) {
        let _: () = redis::cmd("DEL").arg(chunk).query_async(conn).await?;
    }
    Ok(())
}

async fn keys(conn: &mut ConnectionManager, prefix: &str) -> anyhow::Result<Vec<String>> {
    Ok(scan_keys(conn, &format!("{prefix}:*")).await?)
}
