#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test
//! Sale windows and pauses, decided by the records' times in the log.

use stockledger_core::{
    AdjustmentId, ChangeId, CommandBody, Confirm, Decision, Deduct, OrderId, Pause, Placement,
    Quantity, Restock, RestockMode, ResultCode, Resume, SalePhase, SaleWindow, SkuState,
    StockEventKind, Window,
};

const OPENS: i64 = 1_700_000_000_000;
const CLOSES: i64 = OPENS + 60_000;

struct Sku {
    state: SkuState,
    offset: i64,
}

impl Sku {
    /// A SKU of 10 units with a window from OPENS to CLOSES, set an hour
    /// before it opens.
    fn on_sale() -> Self {
        let mut sku = Self {
            state: SkuState::default(),
            offset: 0,
        };
        let restock = Restock::new(AdjustmentId::new("a-1").unwrap(), RestockMode::Set, 10);
        sku.apply(OPENS - 3_600_000, CommandBody::Restock(restock.unwrap()));
        let set = sku.apply(OPENS - 3_600_000, window("w-1", Some(OPENS), Some(CLOSES)));
        assert_eq!(set.result, ResultCode::Applied);
        assert_eq!(kinds(&set), [StockEventKind::Closed]);
        sku
    }

    fn apply(&mut self, time: i64, body: CommandBody) -> Decision {
        let decision = self
            .state
            .apply(Placement::home(0), self.offset, time, &body);
        self.offset += 1;
        decision
    }
}

fn window(id: &str, opens: Option<i64>, closes: Option<i64>) -> CommandBody {
    CommandBody::Window(Window {
        change_id: ChangeId::new(id).unwrap(),
        window: SaleWindow::new(opens, closes).unwrap(),
    })
}

fn pause(id: &str) -> CommandBody {
    CommandBody::Pause(Pause {
        change_id: ChangeId::new(id).unwrap(),
    })
}

fn resume(id: &str) -> CommandBody {
    CommandBody::Resume(Resume {
        change_id: ChangeId::new(id).unwrap(),
    })
}

fn buy(order: &str) -> CommandBody {
    CommandBody::Deduct(Deduct::new(
        OrderId::new(order).unwrap(),
        Quantity::new(1).unwrap(),
    ))
}

fn hold(order: &str, until: i64) -> CommandBody {
    CommandBody::Deduct(Deduct {
        expires_at: Some(until),
        ..Deduct::new(OrderId::new(order).unwrap(), Quantity::new(1).unwrap())
    })
}

fn kinds(decision: &Decision) -> Vec<StockEventKind> {
    decision.events.kinds().collect()
}

#[test]
fn nothing_sells_before_the_opening_or_from_the_closing_by_the_records_time() {
    let mut sku = Sku::on_sale();
    let early = sku.apply(OPENS - 1, buy("o-1"));
    assert_eq!(early.result, ResultCode::RejectedNotOpen);
    assert!(early
        .reason
        .as_deref()
        .unwrap()
        .contains(&OPENS.to_string()));
    assert!(kinds(&early).is_empty());
    // The refusal leaves no trace: the same order buys once it opens.
    let first = sku.apply(OPENS, buy("o-1"));
    assert_eq!((first.result, first.available), (ResultCode::Applied, 9));
    assert_eq!(kinds(&first), [StockEventKind::Opened]);
    assert_eq!(sku.apply(OPENS + 1, buy("o-2")).events.kinds().count(), 0);
    // A record stamped before the opening, after it opened, is still
    // refused, and announces nothing again.
    let late_clock = sku.apply(OPENS - 5, buy("o-3"));
    assert_eq!(late_clock.result, ResultCode::RejectedNotOpen);
    assert!(kinds(&late_clock).is_empty());
    let closed = sku.apply(CLOSES, hold("o-4", CLOSES + 60_000));
    assert_eq!(closed.result, ResultCode::RejectedClosed);
    assert_eq!(kinds(&closed), [StockEventKind::Closed]);
    assert_eq!(sku.state.phase, SalePhase::Closed);
    assert_eq!(sku.state.available, 8);
}

#[test]
fn a_closed_sale_still_settles_its_holds() {
    let mut sku = Sku::on_sale();
    let held = sku.apply(OPENS + 10, hold("o-1", CLOSES + 30_000));
    assert_eq!(held.result, ResultCode::Applied);
    let paused = sku.apply(CLOSES - 1, pause("stop"));
    assert_eq!(kinds(&paused), [StockEventKind::Paused]);
    let confirm = CommandBody::Confirm(Confirm {
        order_id: OrderId::new("o-1").unwrap(),
    });
    let settled = sku.apply(CLOSES + 10, confirm);
    assert_eq!(settled.result, ResultCode::Confirmed);
    // The record past the closing announced it, though it was a confirm.
    assert_eq!(kinds(&settled), [StockEventKind::Closed]);
}

#[test]
fn pause_and_resume_switch_the_sale_once_each_and_repeat_by_their_id() {
    let mut sku = Sku::on_sale();
    let paused = sku.apply(OPENS + 1, pause("stop-1"));
    assert_eq!(
        kinds(&paused),
        [StockEventKind::Opened, StockEventKind::Paused]
    );
    let refused = sku.apply(OPENS + 2, buy("o-1"));
    assert_eq!(refused.result, ResultCode::RejectedPaused);
    // A second pause changes nothing and says so; the first, sent again,
    // is a duplicate.
    let again = sku.apply(OPENS + 3, pause("stop-2"));
    assert_eq!(
        (again.result, again.reason.as_deref()),
        (ResultCode::Applied, Some("already paused"))
    );
    assert!(kinds(&again).is_empty());
    assert_eq!(
        sku.apply(OPENS + 4, pause("stop-1")).result,
        ResultCode::Duplicate
    );
    let resumed = sku.apply(OPENS + 5, resume("go-1"));
    assert_eq!(kinds(&resumed), [StockEventKind::Resumed]);
    assert_eq!(sku.apply(OPENS + 6, buy("o-1")).result, ResultCode::Applied);
    assert_eq!(
        sku.apply(OPENS + 7, resume("go-1")).result,
        ResultCode::Duplicate
    );
}

#[test]
fn a_new_window_says_what_the_window_was_and_announces_the_change() {
    let mut sku = Sku::on_sale();
    let lifted = sku.apply(OPENS - 10, window("w-2", None, None));
    assert_eq!(lifted.result, ResultCode::Applied);
    assert_eq!(
        lifted.reason.as_deref(),
        Some(format!("the window was opens_at {OPENS}, closes_at {CLOSES}").as_str())
    );
    assert_eq!(kinds(&lifted), [StockEventKind::Opened]);
    assert_eq!(sku.apply(OPENS - 9, buy("o-1")).result, ResultCode::Applied);
    let far = SaleWindow::new(Some(OPENS + 400 * 24 * 3_600_000), None).unwrap();
    let refused = sku.apply(
        OPENS,
        CommandBody::Window(Window {
            change_id: ChangeId::new("w-3").unwrap(),
            window: far,
        }),
    );
    assert_eq!(refused.result, ResultCode::RejectedDeadline);
    assert!(refused.reason.unwrap().starts_with("opens_at"));
    assert_eq!(sku.state.window, SaleWindow::ALWAYS);
}
