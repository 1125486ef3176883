//! `stockledger export`: archived rows of a time range to a CSV or Parquet file.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args as ClapArgs;
use stockledger_analysts::export::{self, Format};

use super::{check_range, parse_time};
use crate::{connect_analyst, Global};

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Start of the range (inclusive): RFC 3339, `now`, or a time ago (-7d).
    #[arg(long, value_parser = parse_time, allow_hyphen_values = true)]
    pub since: i64,
    /// End of the range (exclusive), in the same forms.
    #[arg(long, value_parser = parse_time, allow_hyphen_values = true, default_value = "now")]
    pub until: i64,
    /// csv (with a header line) or parquet.
    #[arg(long, value_parser = str::parse::<Format>)]
    pub format: Format,
    /// The file to write; it must not exist (the export refuses it before
    /// reading anything).
    #[arg(long)]
    pub out: PathBuf,
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    check_range(Some(args.since), Some(args.until))?;
    let pool = connect_analyst(g, 1).await?;
    let rows = export::export(
        &pool,
        &g.topic,
        args.since,
        args.until,
        args.format,
        &args.out,
    )
    .await?;
    println!("{rows} rows written to {}", args.out.display());
    Ok(ExitCode::SUCCESS)
}
