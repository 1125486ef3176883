//! Progress of a long command on a terminal: what it does, how far, how
//! fast and how long it has left. Drawn on standard error only when that is
//! a terminal; in a pipe, a log or CI nothing is drawn (`RUST_LOG=info`
//! logs a line every ten seconds instead).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use stockledger_projection::Projection;

/// How often progress is logged when standard error is not a terminal.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// One long command's progress display.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
    what: String,
    unit: &'static str,
    /// Whether standard error was a terminal when it started.
    drawn: bool,
    last_logged: Instant,
}

impl Progress {
    /// `what` the command does (`"snapshot of shop"`), counting `unit`s
    /// (`"SKUs"`), of `total` if known: with a total, a bar with the rate
    /// and the time left; without, a count with the rate.
    pub fn new(what: impl Into<String>, unit: &'static str, total: Option<u64>) -> Self {
        let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::hidden());
        let template = if total.is_some() {
            "{msg} [{bar:30}] {human_pos}/{human_len} {prefix}, {per_sec}, {eta} left"
        } else {
            "{spinner} {msg}: {human_pos} {prefix}, {per_sec} ({elapsed})"
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        let what = what.into();
        bar.set_message(what.clone());
        bar.set_prefix(unit);
        let drawn = Self::drawn();
        if drawn {
            bar.set_draw_target(ProgressDrawTarget::stderr());
            bar.enable_steady_tick(Duration::from_millis(250));
        }
        Self {
            bar,
            what,
            unit,
            drawn,
            last_logged: Instant::now(),
        }
    }

    /// A display over the SKUs under `projection`'s prefix; they are
    /// counted first (a whole `SCAN`) only when the display is drawn.
    pub async fn over_skus(
        projection: &Projection,
        what: String,
        page_size: usize,
    ) -> anyhow::Result<Self> {
        let total = if Self::drawn() {
            Some(projection.count_skus(page_size).await?)
        } else {
            None
        };
        Ok(Self::new(what, "SKUs", total))
    }

    /// Whether progress is drawn: standard error is a terminal.
    pub fn drawn() -> bool {
        std::io::stderr().is_terminal()
    }

    /// `done` units are done so far.
    pub fn set(&mut self, done: u64) {
        self.bar.set_position(done);
        if !self.drawn && self.last_logged.elapsed() >= LOG_EVERY {
            self.last_logged = Instant::now();
            tracing::info!(
                done,
                total = self.bar.length(),
                unit = self.unit,
                "{}",
                self.what
            );
        }
    }

    /// The total became known (or changed), e.g. a log's end moved.
    pub fn set_total(&self, total: u64) {
        self.bar.set_length(total);
    }

    /// Shows `note` after the figures (e.g. "caught up").
    pub fn note(&self, note: &str) {
        self.bar.set_message(format!("{} ({note})", self.what));
    }

    /// Clears the display; what the command prints after stays on its own.
    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}
