//! `stockledger replay`: rebuild the projection from the log (and swap it in).

use std::process::ExitCode;
use std::time::Duration;

use clap::Args as ClapArgs;
use indicatif::{ProgressBar, ProgressStyle};
use stockledger_projection::Projection;

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
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    use std::io::IsTerminal;
    use stockledger_applier::replay::{ReplayConfig, SwapConfig};

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
    // On a terminal, one line redrawn in place; in a log, a line every 2 s.
    let terminal = std::io::stderr().is_terminal();
    let bar = if terminal {
        ProgressBar::new_spinner()
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(ProgressStyle::with_template("{spinner} {msg} ({elapsed})")?);
    let mut last_line = std::time::Instant::now();
    let report = stockledger_applier::replay::replay(config, shutdown_signal(), |p| {
        let line = format!(
            "replay {target}: {} records, {:.0}/s, lag {}{}",
            p.records,
            p.rate(),
            p.lag,
            if p.caught_up { " (caught up)" } else { "" }
        );
        if terminal {
            bar.set_message(line);
            bar.tick();
        } else if last_line.elapsed() >= Duration::from_secs(2) {
            eprintln!("{line}");
            last_line = std::time::Instant::now();
        }
    })
    .await?;
    if terminal {
        bar.finish();
        eprintln!();
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
        return Ok(ExitCode::from(1));
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
