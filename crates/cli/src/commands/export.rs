//! `stockledger export`: archived rows of a time range to a CSV or Parquet file.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args as ClapArgs;
use stockledger_analysts::export::{self, Format};
use stockledger_analysts::query;

use super::table::Style;
use super::{check_range, parse_time};
use crate::progress::Progress;
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
    /// What is printed once written: a sentence, or one JSON object.
    #[arg(long, value_enum, default_value = "text")]
    pub print: Style,
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    check_range(Some(args.since), Some(args.until))?;
    let pool = connect_analyst(g, 1).await?;
    let total = if Progress::drawn() {
        let n = query::count_between(&pool, &g.topic, args.since, args.until).await?;
        Some(n.max(0) as u64)
    } else {
        None
    };
    let mut progress = Progress::new(format!("export to {}", args.out.display()), "rows", total);
    let rows = export::export(
        &pool,
        &g.topic,
        args.since,
        args.until,
        args.format,
        &args.out,
        |done| progress.set(done),
    )
    .await?;
    progress.finish();
    match args.print {
        Style::Text => println!("{rows} rows written to {}", args.out.display()),
        Style::Json => println!(
            "{}",
            serde_json::json!({ "rows": rows, "out": args.out, "format": format!("{:?}", args.format).to_lowercase() })
        ),
    }
    Ok(ExitCode::SUCCESS)
}
