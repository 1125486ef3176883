//! Commands that say when a SKU sells: a sale window, a pause and a
//! resume. Like every rule of the ledger they are decided by the record's
//! time in the log, so every gateway and every replay agrees on them.

use std::fmt;

use crate::ids::{ChangeId, ValidationError};

/// How far past the time it is sent a window may open or close: a year
/// (366 days), in milliseconds. Further is a mistake (seconds sent as
/// milliseconds, a wrong year), refused before it reaches the log.
///
/// ```
/// assert_eq!(stockledger_core::command::MAX_WINDOW_AHEAD_MS, 31_622_400_000);
/// ```
pub const MAX_WINDOW_AHEAD_MS: i64 = 366 * 24 * 60 * 60 * 1000;

/// When a SKU sells: from `opens_at` (inclusive) until `closes_at`
/// (exclusive), in milliseconds since the Unix epoch. Either may be
/// absent: a window without an opening is open until it closes, one
/// without a closing stays open once opened, and one with neither is
/// [`SaleWindow::ALWAYS`], what a SKU has until a window is set.
///
/// ```
/// use stockledger_core::{SalePhase, SaleWindow};
///
/// let noon = 1_700_000_000_000;
/// let window = SaleWindow::new(Some(noon), Some(noon + 3_600_000))?;
/// assert_eq!(window.phase(noon - 1), SalePhase::NotOpen);
/// assert_eq!(window.phase(noon), SalePhase::Open);
/// assert_eq!(window.phase(noon + 3_600_000), SalePhase::Closed);
/// assert_eq!(SaleWindow::new(Some(noon), Some(noon)).unwrap_err().field, "closes_at");
/// # Ok::<(), stockledger_core::ValidationError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SaleWindow {
    opens_at: Option<i64>,
    closes_at: Option<i64>,
}

impl SaleWindow {
    /// No opening and no closing: always on sale.
    pub const ALWAYS: Self = Self {
        opens_at: None,
        closes_at: None,
    };

    /// The window, if each instant is between the epoch and the end of
    /// year 9999 and `closes_at` is after `opens_at`; else the refusal,
    /// naming the field.
    pub fn new(opens_at: Option<i64>, closes_at: Option<i64>) -> Result<Self, ValidationError> {
        for (field, at) in [("opens_at", opens_at), ("closes_at", closes_at)] {
            if let Some(at) = at {
                super::check_instant(field, at)?;
            }
        }
        if let (Some(opens), Some(closes)) = (opens_at, closes_at) {
            if closes <= opens {
                return Err(ValidationError::new(
                    "closes_at",
                    format!("{closes} is not after opens_at ({opens})"),
                ));
            }
        }
        Ok(Self {
            opens_at,
            closes_at,
        })
    }

    /// The first millisecond on sale, if the window has an opening.
    pub fn opens_at(&self) -> Option<i64> {
        self.opens_at
    }

    /// The first millisecond no longer on sale, if the window closes.
    pub fn closes_at(&self) -> Option<i64> {
        self.closes_at
    }

    /// Where a record stamped `time` falls.
    pub fn phase(&self, time: i64) -> SalePhase {
        if self.opens_at.is_some_and(|opens| time < opens) {
            SalePhase::NotOpen
        } else if self.closes_at.is_some_and(|closes| time >= closes) {
            SalePhase::Closed
        } else {
            SalePhase::Open
        }
    }

    /// Why the window is refused when sent at `now`, if it is: it opens or
    /// closes more than [`MAX_WINDOW_AHEAD_MS`] after `now`.
    ///
    /// ```
    /// use stockledger_core::command::MAX_WINDOW_AHEAD_MS;
    /// use stockledger_core::SaleWindow;
    ///
    /// let now = 1_700_000_000_000;
    /// assert!(SaleWindow::new(Some(now - 5), Some(now + MAX_WINDOW_AHEAD_MS))?.check_ahead(now).is_ok());
    /// let far = SaleWindow::new(None, Some(now + MAX_WINDOW_AHEAD_MS + 1))?;
    /// assert_eq!(far.check_ahead(now).unwrap_err().field, "closes_at");
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn check_ahead(&self, now: i64) -> Result<(), ValidationError> {
        for (field, at) in [("opens_at", self.opens_at), ("closes_at", self.closes_at)] {
            if let Some(at) = at.filter(|at| at.saturating_sub(now) > MAX_WINDOW_AHEAD_MS) {
                return Err(ValidationError::new(
                    field,
                    format!(
                        "{at} is more than {MAX_WINDOW_AHEAD_MS} ms (a year) after the time of the request ({now})"
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl fmt::Display for SaleWindow {
    /// `opens_at <ms>, closes_at <ms>`, `none` for an absent end.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = |t: Option<i64>| t.map_or_else(|| "none".to_owned(), |t| t.to_string());
        write!(
            f,
            "opens_at {}, closes_at {}",
            at(self.opens_at),
            at(self.closes_at)
        )
    }
}

/// Where a moment falls in a SKU's [`SaleWindow`]. Ordered as time
/// passes: not open, open, closed.
///
/// ```
/// use stockledger_core::SalePhase;
///
/// assert!(SalePhase::NotOpen < SalePhase::Open && SalePhase::Open < SalePhase::Closed);
/// assert_eq!(SalePhase::parse("not_open"), Some(SalePhase::NotOpen));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SalePhase {
    /// Before the opening: deducts are refused `REJECTED_NOT_OPEN`.
    NotOpen,
    /// On sale.
    #[default]
    Open,
    /// At or after the closing: deducts are refused `REJECTED_CLOSED`.
    Closed,
}

impl SalePhase {
    /// `not_open`, `open` or `closed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotOpen => "not_open",
            Self::Open => "open",
            Self::Closed => "closed",
        }
    }

    /// The phase [`SalePhase::as_str`] spells, if it is one.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::NotOpen, Self::Open, Self::Closed]
            .into_iter()
            .find(|p| p.as_str() == s)
    }
}

/// Whether a SKU with this `window`, `phase` and pause sells whenever it
/// has stock, as one no window or pause was ever set for: the stock hash
/// then stores no sale, and the CLI and HTTP show none.
///
/// ```
/// use stockledger_core::{sells_always, SalePhase, SaleWindow};
///
/// assert!(sells_always(&SaleWindow::ALWAYS, SalePhase::Open, false));
/// assert!(!sells_always(&SaleWindow::ALWAYS, SalePhase::Open, true));
/// ```
pub fn sells_always(window: &SaleWindow, phase: SalePhase, paused: bool) -> bool {
    *window == SaleWindow::ALWAYS && phase == SalePhase::Open && !paused
}

/// Set the SKU's sale window (or, with [`SaleWindow::ALWAYS`], lift it).
/// A deduct, hold or basket line stamped before the opening is refused
/// `REJECTED_NOT_OPEN`, one at or after the closing `REJECTED_CLOSED`;
/// settling commands are never refused by it. `change_id` makes it
/// idempotent.
///
/// ```
/// use stockledger_core::{ChangeId, CommandBody, CommandKind, SaleWindow, Window};
///
/// let window = Window { change_id: ChangeId::new("sale-1")?, window: SaleWindow::new(Some(1_700_000_000_000), None)? };
/// assert_eq!(CommandBody::Window(window).kind(), CommandKind::Window);
/// # Ok::<(), stockledger_core::ValidationError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub change_id: ChangeId,
    pub window: SaleWindow,
}

/// Stop selling the SKU at once: deducts, holds and basket lines are
/// refused `REJECTED_PAUSED` until a [`Resume`]; every settling command
/// is still taken. `change_id` makes it idempotent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pause {
    pub change_id: ChangeId,
}

/// End a [`Pause`]. `change_id` makes it idempotent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resume {
    pub change_id: ChangeId,
}
