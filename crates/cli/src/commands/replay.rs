//! `stockledger replay`: rebuild the projection from the log (and swap it in).

use std::process::ExitCode;

use clap::Args as ClapArgs;
use serde_json::json;
use stockledger_projection::Projection;

use super::table::Style;
use crate::exit::Exit;
use crate::progress::Progress;
use crate::{connect_archive, shutdown_signal, Global};

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// The prefix to rebuild into; it must be empty [default: <prefix>:rebuild].
    #[arg(long, value_name = "PREFIX")]
    pub into: Option<String>,
    /// Keep applying new records after reaching the end of the log.
    #[arg(long, conflicts_with = "swap")]
    pub follow: bool,
    /// Once caught up, swap the rebuilt state in for the live prefix, SKU by
    /// SKU and atomically; SKUs the live applier has moved past are caught
    /// up first.
    #[arg(long)]
    pub swap: bool,
    /// With --swap: where the replaced live keys are kept [default: <prefix>:replaced].
    #[arg(
        long,
        value_name = "PREFIX",
        requires = "swap",
        conflicts_with = "drop_old"
    )]
    pub old_prefix: Option<String>,
    /// With --swap: delete the replaced live keys instead of keeping them.
    #[arg(long, requires = "swap")]
    pub drop_old: bool,
    /// Start from the newest snapshot (see `stockledger snapshot`) and
    /// replay only the records after it.
    #[arg(long)]
    pub from_snapshot: bool,
    /// Replay even though the command topic has a finite retention.ms or
    /// retention.bytes (the broker will delete records; snapshots must cover
    /// them). Refused by default.
    #[arg(long, env = "STOCKLEDGER_ALLOW_FINITE_RETENTION")]
    pub allow_finite_retention: bool,
    /// Records read and applied together (as script calls of at most
    /// 1,000 records); wider batches hold more records per SKU, which
    /// Redis applies for less.
    #[arg(long, env = "STOCKLEDGER_REPLAY_BATCH_SIZE", default_value_t = 50_000)]
    pub batch_size: usize,
    /// Sentences for people, or one JSON object for scripts.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Style,
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    use stockledger_maintenance::replay::{ReplayConfig, SwapConfig};

    let target = args.into.unwrap_or_else(|| format!("{}:rebuild", g.prefix));
    let mut config = ReplayConfig::new(
        g.kafka(),
        g.redis_url.clone(),
        g.topic.clone(),
        target.clone(),
    );
    config.follow = args.follow;
    config.allow_finite_retention = args.allow_finite_retention;
    config.batch_size = args.batch_size.max(1);
    if args.swap {
        config.swap = Some(SwapConfig {
            live_prefix: g.prefix.clone(),
            old_prefix: (!args.drop_old).then(|| {
                args.old_prefix
                    .unwrap_or_else(|| format!("{}:replaced", g.prefix))
            }),
        });
    }
    if args.from_snapshot {
        config.start = restore_snapshot(g, &target).await?;
        config.require_empty_target = false;
    }
    let mut progress = Progress::new(format!("replay into {target}"), "records", None);
    let report = stockledger_maintenance::replay::replay(config, shutdown_signal(), |p| {
        progress.set_total(p.records + p.lag.max(0) as u64);
        progress.set(p.records);
        if p.caught_up {
            progress.note("caught up");
        }
    })
    .await?;
    progress.finish();
    if args.format == Style::Json {
        println!(
            "{}",
            json!({
                "into": target, "records": report.records, "skus": report.skus,
                "swapped": report.swapped, "live_only": report.live_only,
                "interrupted": report.interrupted,
            })
        );
        return Ok(if report.interrupted {
            Exit::Interrupted
        } else {
            Exit::Ok
        }
        .into());
    }
    println!(
        "replayed {} records into {target}: {} SKUs{}",
        report.records,
        report.skus,
        if args.swap {
            format!(", {} swapped into {}", report.swapped, g.prefix)
        } else {
            String::new()
        }
    );
    if !report.live_only.is_empty() {
        println!(
            "{} live SKUs have no record in the log and were left as they are: {}",
            report.live_only.len(),
            report.live_only.join(", ")
        );
    }
    if report.interrupted {
        println!("interrupted before the end; {target} is incomplete");
        return Ok(Exit::Interrupted.into());
    }
    Ok(ExitCode::SUCCESS)
}

/// Restores the latest complete snapshot into the empty prefix `target`;
/// where the replay goes on from, per partition.
async fn restore_snapshot(
    g: &Global,
    target: &str,
) -> anyhow::Result<std::collections::HashMap<i32, i64>> {
    use stockledger_maintenance::snapshot;
    let target_projection = Projection::connect(&g.redis_url, target).await?;
    let existing = target_projection.skus().await?.len();
    anyhow::ensure!(
        existing == 0,
        "prefix {target} already holds {existing} SKUs; replay into an empty prefix"
    );
    let pool = connect_archive(g, 2).await?;
    let Some(snap) = snapshot::latest(&pool, &g.topic).await? else {
        anyhow::bail!(
            "no complete snapshot of {}; take one with `stockledger snapshot`",
            g.topic
        );
    };
    let restored =
        snapshot::restore(&pool, &snap, &target_projection.connection(), target, 1000).await?;
    eprintln!(
        "restored snapshot {} ({restored} SKUs) into {target}",
        snap.id
    );
    Ok(snap.start)
}
