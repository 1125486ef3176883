//! The baselines every run measures next to the ledger, on the same
//! machine: the designs of the seed articles, each doing its own
//! per-request work straight against Redis or PostgreSQL; and the floor
//! under the applier's Redis figure, its writes alone (`redis-floor`).

use std::collections::BTreeMap;
use std::time::Instant;

use stockledger_cli::Global;
use stockledger_redis::RedisConn;

use crate::cpu::{CpuTimes, MachineCpu};
use crate::{print_measurement, Counts, Measurement};

/// The seed-001 script used by the `redis-lua-direct` baseline.
const SEED_DEDUCT_LUA: &str = include_str!("../lua/seed_deduct.lua");

/// Seed 001: every request one script call straight to Redis.
pub(crate) async fn redis_lua_direct(
    g: &Global,
    run_id: &str,
    counts: &Counts,
    clients: usize,
) -> anyhow::Result<Measurement> {
    let client = redis::Client::open(g.redis_url.as_str())?;
    let script = redis::Script::new(SEED_DEDUCT_LUA);
    let key = |sku: u64| format!("{run_id}:{{SKU-{sku:05}}}");
    let mut setup = client.get_multiplexed_async_connection().await?;
    let per_sku = counts.records / counts.skus as u64 + 1;
    for chunk in (0..counts.skus as u64).collect::<Vec<_>>().chunks(1000) {
        let mut pipe = redis::pipe();
        for &sku in chunk {
            pipe.set(format!("{}:stock", key(sku)), per_sku).ignore();
        }
        let _: () = pipe.query_async(&mut setup).await?;
    }
    let started = Instant::now();
    let machine = MachineCpu::now();
    let tasks = (0..clients.max(1)).map(|c| {
        let client = client.clone();
        let script = script.clone();
        let (n, skus) = (counts.records, counts.skus as u64);
        async move {
            let mut conn = client.get_multiplexed_async_connection().await?;
            for i in (c as u64..n).step_by(clients.max(1)) {
                let k = key(i % skus);
                let _: i64 = script
                    .key(format!("{k}:stock"))
                    .key(format!("{k}:history"))
                    .arg(format!("order-{i}"))
                    .arg(1)
                    .invoke_async(&mut conn)
                    .await?;
            }
            anyhow::Ok(())
        }
    });
    futures::future::try_join_all(tasks).await?;
    let (seconds, machine_cpu) = (started.elapsed().as_secs_f64(), machine.since());
    Ok(Measurement {
        scenario: "redis-lua-direct",
        records: counts.records,
        seconds,
        setup: format!(
            "{} SKUs, {clients} clients, one connection each",
            counts.skus
        ),
        latency_ms: None,
        peak_rss_mib: None,
        failed: None,
        instructions: None,
        machine_cpu,
        hops: None,
    })
}

/// Seeds 000/002/004: stock rows in PostgreSQL, a flow record and an
/// optimistic `UPDATE … WHERE available >= $1` per request, over `buckets`
/// rows of one item (a request tries its own bucket, then the others).
pub(crate) async fn pg_rows(
    pool: &sqlx::PgPool,
    run_id: &str,
    name: &'static str,
    buckets: i32,
    records: u64,
    clients: usize,
) -> anyhow::Result<Measurement> {
    let stock_table = format!("bench_stock_{}", run_id.replace('-', "_"));
    let flow_table = format!("bench_flow_{}", run_id.replace('-', "_"));
    sqlx::query(&format!(
        "CREATE TABLE IF NOT EXISTS {stock_table} (bucket int PRIMARY KEY, available bigint NOT NULL)"
    ))
    .execute(pool)
    .await?;
    sqlx::query(&format!(
        "CREATE TABLE IF NOT EXISTS {flow_table} (id bigserial PRIMARY KEY, bucket int, order_id text, quantity bigint)"
    ))
    .execute(pool)
    .await?;
    sqlx::query(&format!("TRUNCATE {stock_table}, {flow_table}"))
        .execute(pool)
        .await?;
    let per_bucket = records as i64 / buckets as i64 + 1;
    sqlx::query(&format!(
        "INSERT INTO {stock_table} SELECT b, $1 FROM generate_series(0, $2 - 1) AS b"
    ))
    .bind(per_bucket)
    .bind(buckets)
    .execute(pool)
    .await?;
    let insert =
        format!("INSERT INTO {flow_table} (bucket, order_id, quantity) VALUES ($1, $2, 1)");
    let update = format!(
        "UPDATE {stock_table} SET available = available - 1 WHERE bucket = $1 AND available >= 1"
    );
    let started = Instant::now();
    let machine = MachineCpu::now();
    let tasks = (0..clients.max(1)).map(|c| {
        let (insert, update) = (&insert, &update);
        async move {
            for i in (c as u64..records).step_by(clients.max(1)) {
                let home = (i % buckets as u64) as i32;
                for attempt in 0..buckets {
                    let bucket = (home + attempt) % buckets;
                    let mut tx = pool.begin().await?;
                    sqlx::query(insert)
                        .bind(bucket)
                        .bind(format!("order-{i}"))
                        .execute(&mut *tx)
                        .await?;
                    let updated = sqlx::query(update)
                        .bind(bucket)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                    if updated == 1 {
                        tx.commit().await?;
                        break;
                    }
                    tx.rollback().await?;
                }
            }
            anyhow::Ok(())
        }
    });
    futures::future::try_join_all(tasks).await?;
    let (seconds, machine_cpu) = (started.elapsed().as_secs_f64(), machine.since());
    sqlx::query(&format!("DROP TABLE {stock_table}, {flow_table}"))
        .execute(pool)
        .await?;
    Ok(Measurement {
        scenario: name,
        records,
        seconds,
        setup: format!("{buckets} row(s), {clients} clients"),
        latency_ms: None,
        peak_rss_mib: None,
        failed: None,
        instructions: None,
        machine_cpu,
        hops: None,
    })
}

/// Whether `scenario` is one this module measures, shown apart from the
/// ledger's own figures.
pub(crate) fn is_baseline(scenario: &str) -> bool {
    matches!(scenario, "redis-lua-direct" | "pg-row" | "pg-buckets")
        || Floor::ALL.iter().any(|floor| floor.name() == scenario)
}

/// What a `redis-floor` step writes of each record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Floor {
    /// Its SKU's `available` and `offset` and its decision, in the stock hash.
    Stock,
    /// And the order's entry, in the orders hash: the layout the readers share.
    Orders,
    /// And the order's entry, in the stock hash: one hash a SKU.
    Merged,
}

impl Floor {
    const ALL: [Floor; 3] = [Self::Stock, Self::Orders, Self::Merged];

    fn name(self) -> &'static str {
        match self {
            Self::Stock => "redis-floor",
            Self::Orders => "redis-floor-orders",
            Self::Merged => "redis-floor-merged",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Self::Stock => "the stock hash alone",
            Self::Orders => "stock and orders hashes",
            Self::Merged => "the orders in the stock hash",
        }
    }

    /// Adds to `batch` what this step writes of one SKU's `offsets` (its
    /// records of a batch, in log order), `taken` units of its `total`
    /// taken before them; `key` names the SKU's hashes.
    fn write(
        self,
        batch: &mut Vec<redis::Cmd>,
        key: impl Fn(&str) -> String,
        offsets: &[u64],
        taken: u64,
        total: u64,
    ) {
        let Some(&last) = offsets.last() else { return };
        // The stock fields first, where the applier creates them, so a
        // hash's later writes find them at its start.
        let left = total - taken - offsets.len() as u64;
        let mut stock = vec![
            ("available".to_owned(), left.to_string()),
            ("offset".to_owned(), last.to_string()),
        ];
        let mut entries = Vec::with_capacity(offsets.len());
        for (n, &offset) in (1..).zip(offsets) {
            let available = total - taken - n;
            stock.push((
                offset.to_string(),
                format!("APPLIED|-1|{available}|{total}|"),
            ));
            entries.push((format!("order-{offset}"), format!("D|1|{offset}")));
        }
        match self {
            Self::Stock => {}
            Self::Orders => batch.push(redis::Cmd::hset_multiple(key("orders"), &entries)),
            // An order's field marked so no stock field or offset is one.
            Self::Merged => {
                stock.extend(entries.into_iter().map(|(f, v)| (format!("{{o}}{f}"), v)))
            }
        }
        batch.push(redis::Cmd::hset_multiple(key("stock"), &stock));
    }
}

/// What Redis's CPU a record comes down to when a batch writes nothing but
/// what the ledger keeps of each record, with none of the applier's other
/// work (see [`Floor`]): one `HSET` a hash a SKU a batch, the batch one
/// transaction, as the applier writes it. The e2e-uniform SKUs, records
/// and batches; no reads, no fence, no holds: a floor under the applier's
/// figure, not a design.
pub(crate) async fn redis_floor(
    g: &Global,
    run_id: &str,
    counts: &Counts,
    batch: usize,
) -> anyhow::Result<Vec<Measurement>> {
    let redis = RedisConn::connect(&g.redis_url).await?;
    let (records, skus, batch) = (counts.records, counts.skus as u64, batch.max(1) as u64);
    let total = records / skus + 1;
    let mut results = Vec::new();
    for floor in Floor::ALL {
        let scenario = floor.name();
        let mut taken = vec![0u64; skus as usize];
        let cpu = CpuTimes::now(&redis).await?;
        let started = Instant::now();
        let machine = MachineCpu::now();
        for first in (0..records).step_by(batch as usize) {
            // Each SKU's records of the batch, in log order.
            let mut runs: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
            for offset in first..(first + batch).min(records) {
                runs.entry(offset % skus).or_default().push(offset);
            }
            let mut writes = Vec::new();
            for (sku, offsets) in runs {
                let key = |hash: &str| format!("{run_id}:{scenario}:{{SKU-{sku:05}}}:{hash}");
                floor.write(&mut writes, key, &offsets, taken[sku as usize], total);
                taken[sku as usize] += offsets.len() as u64;
            }
            let _: Vec<redis::Value> = redis.transact_each(vec![writes]).await?;
        }
        let (seconds, machine_cpu) = (started.elapsed().as_secs_f64(), machine.since());
        let cpu = cpu.per_record(&redis, records).await?;
        let m = Measurement {
            scenario,
            records,
            seconds,
            setup: format!(
                "{skus} SKUs, batches of {batch} in one transaction, {}; {cpu}",
                floor.what()
            ),
            latency_ms: None,
            peak_rss_mib: None,
            failed: None,
            instructions: None,
            machine_cpu,
            hops: None,
        };
        print_measurement(&m);
        results.push(m);
    }
    Ok(results)
}
