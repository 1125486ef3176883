//! What a run writes: results.json, results.md and results.svg.

use std::path::Path;

use anyhow::Context;
use plotters::prelude::*;

use crate::Measurement;

pub(crate) fn write_results(
    dir: &std::path::Path,
    run_id: &str,
    quick: bool,
    results: &[Measurement],
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let rate_of = |name: &str| {
        results
            .iter()
            .find(|m| m.scenario == name)
            .map(Measurement::rate)
    };
    let (lua, row) = (rate_of("redis-lua-direct"), rate_of("pg-row"));
    let kstreams = rate_of(crate::kstreams::PEER);
    let ratio = |rate: f64, base: Option<f64>| base.map(|b| rate / b.max(1e-9));
    let json = serde_json::json!({
        "run": run_id,
        "mode": if quick { "quick" } else { "full" },
        "machine": machine(),
        "broker": broker(),
        "results": results.iter().map(|m| serde_json::json!({
            "scenario": m.scenario,
            "records": m.records,
            "seconds": m.seconds,
            "per_second": m.rate(),
            "vs_redis_lua_direct": ratio(m.rate(), lua),
            "vs_pg_row": ratio(m.rate(), row),
            "vs_kstreams": ratio(m.rate(), kstreams),
            "machine_cpu_us_per_record": m.machine_cpu_us(),
            "latency_ms": m.latency_ms.map(|[p50, p99, p999]| serde_json::json!({"p50": p50, "p99": p99, "p999": p999})),
            "peak_rss_mib": m.peak_rss_mib.map(|[applier, archiver]| serde_json::json!({"applier": applier, "archiver": archiver})),
            "hops_ms": m.hops.as_ref().map(crate::hops::Hops::json),
            "steal_percent": m.hops.as_ref().and_then(|h| h.steal_percent),
            "instructions": m.instructions.as_ref().map(|stages| stages.iter().map(|(stage, per)| ((*stage).to_owned(), serde_json::json!(per))).collect::<serde_json::Map<_, _>>()),
            "setup": m.setup,
            "failed": m.failed,
        })).collect::<Vec<_>>(),
    });
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    let mut md = format!(
        "Run `{run_id}` ({} mode) on {}, broker {}.\n\n| scenario | records | seconds | records/s | × redis-lua-direct | × pg-row | × kstreams | machine CPU µs a record | setup |\n|---|---:|---:|---:|---:|---:|---:|---:|---|\n",
        if quick { "quick" } else { "full" },
        machine(),
        broker()
    );
    let show = |r: Option<f64>| r.map_or("–".to_owned(), |r| format!("{r:.2}"));
    for m in results {
        if let Some(failure) = &m.failed {
            md.push_str(&format!(
                "| {} | {} | | FAIL | | | | | contract check: {failure} |\n",
                m.scenario, m.records
            ));
            continue;
        }
        md.push_str(&format!(
            "| {} | {} | {:.2} | {:.0} | {} | {} | {} | {} | {} |\n",
            m.scenario,
            m.records,
            m.seconds,
            m.rate(),
            show(ratio(m.rate(), lua)),
            show(ratio(m.rate(), row)),
            show(ratio(m.rate(), kstreams)),
            m.machine_cpu_us()
                .map_or("–".to_owned(), |us| format!("{us:.1}")),
            m.setup
        ));
    }
    md.push_str(&memory_growth(results));
    md.push_str(&hop_table(results));
    std::fs::write(dir.join("results.md"), md)?;
    chart(&dir.join("results.svg"), run_id, results)?;
    Ok(())
}

/// Each latency scenario's hops, p50 / p99 / p999 in milliseconds, as a
/// Markdown table (empty without one).
pub(crate) fn hop_table(results: &[Measurement]) -> String {
    let timed: Vec<(&Measurement, &crate::hops::Hops)> = results
        .iter()
        .filter_map(|m| Some((m, m.hops.as_ref()?)))
        .collect();
    if timed.is_empty() {
        return String::new();
    }
    let mut md = format!(
        "\nWhere each decision's time went (ms, p50 / p99 / p999):\n\n| scenario | {} | CPU stolen |\n|---|{}---:|\n",
        crate::hops::HOPS.join(" | "),
        "---:|".repeat(crate::hops::HOPS.len())
    );
    for (m, hops) in timed {
        let cells: Vec<String> = (crate::hops::HOPS.iter())
            .map(|hop| match hops.ms.iter().find(|(name, _)| name == hop) {
                Some((_, [p50, p99, p999])) => format!("{p50:.1} / {p99:.1} / {p999:.1}"),
                None => "–".to_owned(),
            })
            .collect();
        let steal = hops
            .steal_percent
            .map_or("–".to_owned(), |s| format!("{s:.1} %"));
        md.push_str(&format!(
            "| {} | {} | {steal} |\n",
            m.scenario,
            cells.join(" | ")
        ));
    }
    md
}

/// How the applier's and archiver's peak RSS grew from the smallest to the
/// largest memory run, as a Markdown paragraph (empty without two runs).
pub(crate) fn memory_growth(results: &[Measurement]) -> String {
    let runs: Vec<(u64, [f64; 2])> = results
        .iter()
        .filter_map(|m| Some((m.records, m.peak_rss_mib?)))
        .collect();
    let (Some(small), Some(large)) = (
        runs.iter().min_by_key(|r| r.0),
        runs.iter().max_by_key(|r| r.0),
    ) else {
        return String::new();
    };
    if small.0 == large.0 {
        return String::new();
    }
    format!(
        "\nPeak RSS from {} to {} records ({:.0}×): applier {:.1} → {:.1} MiB (×{:.2}), archiver {:.1} → {:.1} MiB (×{:.2}).\n",
        small.0,
        large.0,
        large.0 as f64 / small.0.max(1) as f64,
        small.1[0],
        large.1[0],
        large.1[0] / small.1[0].max(1e-9),
        small.1[1],
        large.1[1],
        large.1[1] / small.1[1].max(1e-9),
    )
}

/// A horizontal bar chart of records/s per scenario (log scale, as the
/// baselines span three orders of magnitude), baselines in grey, with
/// latency percentiles written beside the latency scenarios.
fn chart(path: &Path, run_id: &str, results: &[Measurement]) -> anyhow::Result<()> {
    let rows = results.len().max(1);
    let height = 80 + rows as u32 * 32;
    let root = SVGBackend::new(path, (900, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let top = results
        .iter()
        .map(Measurement::rate)
        .fold(10.0, f64::max)
        .log10()
        .ceil();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("stockledger bench {run_id}: records/s (log scale)"),
            ("sans-serif", 16),
        )
        .margin(10)
        .margin_right(260)
        .x_label_area_size(30)
        .y_label_area_size(150)
        .build_cartesian_2d(
            (1f64..10f64.powf(top)).log_scale(),
            (0..rows).into_segmented(),
        )?;
    // The first scenario on top.
    let names: Vec<&str> = results.iter().rev().map(|m| m.scenario).collect();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_label_formatter(&|y| match y {
            SegmentValue::CenterOf(i) => names.get(*i).copied().unwrap_or("").to_owned(),
            _ => String::new(),
        })
        .x_label_formatter(&|x| format!("{x:.0e}"))
        .draw()?;
    for (i, m) in results.iter().rev().enumerate() {
        let baseline = crate::baselines::is_baseline(m.scenario);
        let colour = if baseline {
            RGBColor(153, 153, 153)
        } else {
            RGBColor(42, 111, 219)
        };
        if m.failed.is_some() {
            chart.draw_series(std::iter::once(Text::new(
                "FAIL (contract check)".to_owned(),
                (1.15, SegmentValue::CenterOf(i)),
                ("sans-serif", 12),
            )))?;
            continue;
        }
        let rate = m.rate().max(1.0);
        chart.draw_series(std::iter::once(Rectangle::new(
            [
                (1.0, SegmentValue::Exact(i)),
                (rate, SegmentValue::Exact(i + 1)),
            ],
            colour.filled(),
        )))?;
        let mut label = format!("{rate:.0}/s");
        if let Some([p50, p99, p999]) = m.latency_ms {
            label.push_str(&format!("  p50 {p50:.0} p99 {p99:.0} p999 {p999:.0} ms"));
        }
        chart.draw_series(std::iter::once(Text::new(
            label,
            (rate * 1.15, SegmentValue::CenterOf(i)),
            ("sans-serif", 12),
        )))?;
    }
    root.present()?;
    Ok(())
}

/// Which broker the run measured, as `deploy/local/bench.sh` names it
/// (`STOCKLEDGER_BENCH_BROKER`, e.g. "kafka 4.3.1"), else its address.
fn broker() -> String {
    std::env::var("STOCKLEDGER_BENCH_BROKER")
        .ok()
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| {
            let brokers = std::env::var("KAFKA_BROKERS").unwrap_or_default();
            format!("at {brokers} (kind not named)")
        })
}

/// A one-line description of this machine, from /proc where available.
fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    format!("{cores} cores, {cpu}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measurement(scenario: &'static str, records: u64, seconds: f64) -> Measurement {
        Measurement {
            scenario,
            records,
            seconds,
            setup: String::new(),
            latency_ms: (scenario == "latency-5k").then_some([12.0, 25.0, 31.5]),
            peak_rss_mib: None,
            failed: None,
            instructions: None,
            machine_cpu: None,
            hops: None,
        }
    }

    #[test]
    fn the_chart_names_every_scenario_with_its_rate() -> anyhow::Result<()> {
        let results = [
            measurement("redis-lua-direct", 200_000, 3.0),
            measurement("pg-row", 200_000, 150.0),
            measurement("e2e-uniform", 200_000, 5.0),
            measurement("latency-5k", 20_000, 4.0),
        ];
        let path = std::env::temp_dir().join(format!("chart-{}.svg", std::process::id()));
        chart(&path, "bench-test", &results)?;
        let svg = std::fs::read_to_string(&path)?;
        std::fs::remove_file(&path)?;
        for text in [
            "redis-lua-direct",
            "66667/s",
            "pg-row",
            "1333/s",
            "e2e-uniform",
            "40000/s",
            "p50 12 p99 25 p999 32 ms",
            "bench-test",
        ] {
            assert!(svg.contains(text), "{text} missing from the chart");
        }
        Ok(())
    }

    #[test]
    fn the_hop_table_has_a_row_per_timed_scenario_and_a_cell_per_hop() {
        let mut timed = measurement("latency-5k", 20_000, 4.0);
        timed.hops = Some(crate::hops::Hops {
            ms: (crate::hops::HOPS.iter())
                .map(|&h| (h, [1.0, 2.0, 3.0]))
                .collect(),
            timed: 20_000,
            steal_percent: Some(0.5),
        });
        let table = hop_table(&[measurement("e2e-uniform", 10, 1.0), timed]);
        let rows: Vec<&str> = table.lines().filter(|l| l.starts_with('|')).collect();
        assert_eq!(rows.len(), 3, "{table}");
        assert!(rows[0].contains("| send_to_ack |"), "{table}");
        assert_eq!(rows[2].matches("1.0 / 2.0 / 3.0").count(), 7, "{table}");
        assert!(rows[2].ends_with("| 0.5 % |"), "{table}");
        assert!(hop_table(&[measurement("e2e-uniform", 10, 1.0)]).is_empty());
    }

    #[test]
    fn memory_growth_compares_the_smallest_and_largest_runs() {
        let mut small = measurement("memory", 200, 1.0);
        small.peak_rss_mib = Some([10.0, 20.0]);
        let mut large = measurement("memory", 2000, 1.0);
        large.peak_rss_mib = Some([12.0, 20.0]);
        let text = memory_growth(&[small.clone(), large]);
        assert!(text.contains("applier 10.0 → 12.0 MiB (×1.20)"), "{text}");
        assert!(memory_growth(&[small]).is_empty());
    }
}
