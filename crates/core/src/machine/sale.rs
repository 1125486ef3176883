//! When a SKU sells: its sale window and its pause, and the stock events
//! their changes raise.

use super::SkuState;
use crate::command::{Pause, Resume, SalePhase, Window};
use crate::outcome::{Decision, ResultCode, StockEventKind, StockEvents};

impl SkuState {
    /// The refusal a deduct stamped `time` gets from the sale, if any: a
    /// pause first, then the window.
    pub(super) fn refuse_sale(&self, time: i64) -> Option<Decision> {
        if self.paused {
            return Some(self.refuse(ResultCode::RejectedPaused, "the sku is paused"));
        }
        match self.window.phase(time) {
            SalePhase::Open => None,
            SalePhase::NotOpen => Some(self.refuse(
                ResultCode::RejectedNotOpen,
                format!(
                    "the sale opens at {} (record time {time})",
                    self.window.opens_at().unwrap_or_default()
                ),
            )),
            SalePhase::Closed => Some(self.refuse(
                ResultCode::RejectedClosed,
                format!(
                    "the sale closed at {} (record time {time})",
                    self.window.closes_at().unwrap_or_default()
                ),
            )),
        }
    }

    /// Moves [`SkuState::phase`] forward to where a record stamped `time`
    /// falls, and the events that announce it: `OPENED` when it reaches
    /// the opening, `CLOSED` the closing (both when one record passes
    /// them). A record stamped earlier than one before it moves nothing.
    pub(super) fn reach(&mut self, time: i64) -> StockEvents {
        let now = self.window.phase(time);
        if now <= self.phase {
            return StockEvents::NONE;
        }
        let mut kinds = Vec::new();
        if self.phase == SalePhase::NotOpen {
            kinds.push(StockEventKind::Opened);
        }
        if now == SalePhase::Closed {
            kinds.push(StockEventKind::Closed);
        }
        self.phase = now;
        StockEvents::of(kinds)
    }

    /// Whether `id` named an adjustment or change applied before.
    fn changed_before(&self, id: &str) -> Option<Decision> {
        self.adjustments
            .contains_key(id)
            .then(|| self.refuse(ResultCode::Duplicate, "change already applied"))
    }

    pub(super) fn set_window(&mut self, offset: i64, time: i64, w: &Window) -> Decision {
        if let Some(duplicate) = self.changed_before(w.change_id.as_str()) {
            return duplicate;
        }
        if let Err(e) = w.window.check_ahead(time) {
            return self.refuse(ResultCode::RejectedDeadline, e.to_string());
        }
        let was = std::mem::replace(&mut self.window, w.window);
        self.adjustments.insert(w.change_id.to_string(), offset);
        let now = self.window.phase(time);
        let (open_before, open_now) = (self.phase == SalePhase::Open, now == SalePhase::Open);
        self.phase = now;
        let events = match (open_before, open_now) {
            (false, true) => StockEvents::of([StockEventKind::Opened]),
            (true, false) => StockEvents::of([StockEventKind::Closed]),
            _ => StockEvents::NONE,
        };
        Decision {
            events,
            ..self.decide(
                ResultCode::Applied,
                0,
                Some(format!("the window was {was}")),
            )
        }
    }

    pub(super) fn pause(&mut self, offset: i64, p: &Pause) -> Decision {
        self.switch(offset, p.change_id.as_str(), true)
    }

    pub(super) fn resume(&mut self, offset: i64, r: &Resume) -> Decision {
        self.switch(offset, r.change_id.as_str(), false)
    }

    /// Sets [`SkuState::paused`] to `paused` by the change `id`: `PAUSED`
    /// or `RESUMED` when that changes it, nothing when it was so already.
    fn switch(&mut self, offset: i64, id: &str, paused: bool) -> Decision {
        if let Some(duplicate) = self.changed_before(id) {
            return duplicate;
        }
        self.adjustments.insert(id.to_owned(), offset);
        if self.paused == paused {
            let already = if paused {
                "already paused"
            } else {
                "not paused"
            };
            return self.decide(ResultCode::Applied, 0, Some(already.into()));
        }
        self.paused = paused;
        let kind = if paused {
            StockEventKind::Paused
        } else {
            StockEventKind::Resumed
        };
        Decision {
            events: StockEvents::of([kind]),
            ..self.decide(ResultCode::Applied, 0, None)
        }
    }
}
