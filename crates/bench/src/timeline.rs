//! Latency as a caller sees it: commands offered open loop at a fixed rate,
//! each timed from when it was due to be sent (so a sender that falls
//! behind is charged for it: coordinated omission corrected), and the
//! run drawn over time.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use hdrhistogram::Histogram;
use plotters::prelude::*;
// Tokio's clock, which a test can pause and advance.
use tokio::time::Instant;

/// One offered command: when it was due (seconds from the run's start),
/// how long until its answer and, where the caller sees one, until the
/// broker held it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    pub(crate) due_s: f64,
    pub(crate) total_us: u64,
    pub(crate) ack_us: Option<u64>,
    /// When it was due, acknowledged (if seen) and answered.
    pub(crate) due: Instant,
    pub(crate) acked: Option<Instant>,
    pub(crate) answered: Instant,
    /// Where the command lies in the log, if the caller learnt it.
    pub(crate) position: Option<(i32, i64)>,
}

/// What an offered command's caller saw: when the broker acknowledged it
/// and where it put it, where the caller sees that.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Answer {
    pub(crate) acked: Option<Instant>,
    pub(crate) position: Option<(i32, i64)>,
}

/// A run of [`open_loop`].
pub(crate) struct Run {
    /// From the first command's due time until the last answer.
    pub(crate) seconds: f64,
    pub(crate) samples: Vec<Sample>,
}

impl Run {
    /// Answer times, in microseconds.
    pub(crate) fn totals(&self) -> anyhow::Result<Histogram<u64>> {
        histogram(self.samples.iter().map(|s| s.total_us))
    }

    /// Broker acknowledgement times, where the caller saw them.
    pub(crate) fn acks(&self) -> anyhow::Result<Histogram<u64>> {
        histogram(self.samples.iter().filter_map(|s| s.ack_us))
    }
}

fn histogram(values: impl Iterator<Item = u64>) -> anyhow::Result<Histogram<u64>> {
    // Microseconds, 3 significant figures: far finer than the spread.
    let mut h = Histogram::<u64>::new(3)?;
    for v in values {
        h.record(v)?;
    }
    Ok(h)
}

/// Offers `count` commands at `rate` a second, the `i`-th (from `first`)
/// started by `offer(i)` at its due time on a task of its own, so a slow
/// answer never delays the next send. `offer` resolves once the caller has
/// its answer, with what it saw of the broker's ([`Answer`]).
pub(crate) async fn open_loop<F, Fut>(
    rate: u64,
    first: u64,
    count: u64,
    offer: F,
) -> anyhow::Result<Run>
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = anyhow::Result<Answer>> + Send + 'static,
{
    let interval = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..count {
        let due = start + interval.mul_f64(n as f64);
        tokio::time::sleep_until(due).await;
        let answered = offer(first + n);
        tasks.spawn(async move {
            let answer = answered.await?;
            let now = Instant::now();
            anyhow::Ok(Sample {
                due_s: (due - start).as_secs_f64(),
                total_us: (now - due).as_micros() as u64,
                ack_us: (answer.acked)
                    .map(|at| at.saturating_duration_since(due).as_micros() as u64),
                due,
                acked: answer.acked,
                answered: now,
                position: answer.position,
            })
        });
    }
    let mut samples = Vec::with_capacity(count as usize);
    while let Some(sample) = tasks.join_next().await {
        samples.push(sample.context("an offered command's task")??);
    }
    samples.sort_by(|a, b| a.due_s.total_cmp(&b.due_s));
    Ok(Run {
        seconds: start.elapsed().as_secs_f64(),
        samples,
    })
}

/// Per window of `window_s` seconds: its start, and p50, p99 and the
/// largest answer time (milliseconds) of the commands due in it.
fn windows(samples: &[Sample], window_s: f64) -> Vec<(f64, [f64; 3])> {
    let mut out = Vec::new();
    let mut rest = samples;
    while let Some(first) = rest.first() {
        let index = (first.due_s / window_s).floor();
        let end = rest
            .iter()
            .position(|s| (s.due_s / window_s).floor() > index)
            .unwrap_or(rest.len());
        let mut ms: Vec<f64> = rest[..end]
            .iter()
            .map(|s| s.total_us as f64 / 1000.0)
            .collect();
        ms.sort_by(f64::total_cmp);
        let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
        out.push((index * window_s, [at(0.50), at(0.99), at(1.0)]));
        rest = &rest[end..];
    }
    out
}

/// Draws p50, p99 and the largest answer time of each 100 ms window of
/// `run` (log scale) into an SVG at `path`.
pub(crate) fn plot(path: &Path, title: &str, run: &Run) -> anyhow::Result<()> {
    let points = windows(&run.samples, 0.1);
    let longest = points.iter().map(|(_, [.., max])| *max).fold(1.0, f64::max);
    let end = points.last().map_or(1.0, |(t, _)| t + 0.1);
    let root = SVGBackend::new(path, (900, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..end, (0.1f64..longest * 1.5).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("seconds into the run (due time)")
        .y_desc("ms, due to answered")
        .draw()?;
    let lines = [
        ("p50 of each 100 ms", RGBColor(42, 111, 219)),
        ("p99", RGBColor(230, 120, 20)),
        ("largest", RGBColor(160, 160, 160)),
    ];
    for (i, (label, colour)) in lines.into_iter().enumerate() {
        chart
            .draw_series(LineSeries::new(
                points.iter().map(|(t, q)| (*t, q[i].max(0.1))),
                colour.stroke_width(2),
            ))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(due_s: f64, ms: u64) -> Sample {
        let due = Instant::now();
        Sample {
            due_s,
            total_us: ms * 1000,
            ack_us: None,
            due,
            acked: None,
            answered: due + Duration::from_millis(ms),
            position: None,
        }
    }

    #[test]
    fn windows_take_quantiles_of_the_commands_due_in_each() {
        let samples: Vec<Sample> = (0..100)
            .map(|i| sample(i as f64 / 1000.0, i + 1))
            .chain([sample(0.15, 7), sample(0.31, 9)])
            .collect();
        let w = windows(&samples, 0.1);
        assert_eq!(w.len(), 3, "{w:?}");
        assert_eq!(w[0], (0.0, [51.0, 99.0, 100.0]));
        assert_eq!(w[1], (0.1, [7.0, 7.0, 7.0]));
        assert_eq!(w[2].1, [9.0, 9.0, 9.0]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_answer_is_timed_from_its_due_time_and_delays_no_send() {
        // Every command but the first answers at once; the first takes 1 s.
        let run = open_loop(100, 0, 10, |i| async move {
            if i == 0 {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Ok(Answer::default())
        })
        .await
        .unwrap();
        let due: Vec<f64> = run.samples.iter().map(|s| s.due_s).collect();
        assert!((due[9] - 0.09).abs() < 1e-6, "{due:?}");
        assert_eq!(run.samples[0].total_us, 1_000_000);
        assert!(
            run.samples[1..].iter().all(|s| s.total_us == 0),
            "{:?}",
            run.samples
        );
    }
}
