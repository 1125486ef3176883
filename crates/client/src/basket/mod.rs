//! Baskets: several SKUs held together, all or none.
//!
//! A basket's lines live on different partitions, so no single script can
//! take them together. Each line is an ordinary hold: the order named by
//! the basket id on its SKU, carrying the basket id. The protocol is run
//! by whoever asks (the library, the gateway, the CLI), over the log:
//!
//! - **hold**: every line's hold is sent at once and its decision awaited.
//!   If every line is granted, the basket is held. Otherwise every line
//!   not refused is rolled back, and those rollbacks are decided, before
//!   the refusal is answered: once a caller reads `refused`, none of the
//!   basket's units is held. A line whose hold was not decided in time is
//!   rolled back too (a rollback that reaches the log first leaves a
//!   tombstone that refuses the late hold). A caller that dies half-way
//!   leaves holds that expire by themselves at the basket's deadline.
//! - **confirm**: every line's confirm is sent; a confirm not decided in
//!   time is awaited again and then sent again (a repeat is decided
//!   `DUPLICATE`). If a line cannot be confirmed (its hold expired or was
//!   rolled back), the lines already confirmed are refunded before the
//!   answer, which names the line and why: a confirm answers `confirmed`
//!   (every line sold) or `failed` (none sold). A caller that dies
//!   half-way leaves a basket the applier settles past its deadline
//!   (`stockledger_applier::baskets`): the lines sold are refunded.
//! - **release**: every line is rolled back.
//!
//! Every step is idempotent, so a caller that lost an answer asks again
//! with the same basket id.

use stockledger_core::basket::{self, BasketStanding, LineStanding};
use stockledger_core::ids::MAX_QUANTITY;
use stockledger_core::{
    BasketId, CommandBody, Confirm, Decision, Deduct, OrderEntry, OrderId, OrderStatus, Quantity,
    Reason, Refund, ResultCode, Rollback, Sku, UserId,
};

use stockledger_projection::{Projection, ProjectionError};

mod settle;

use settle::settle_all;
pub use settle::{Decide, Unsettled, ATTEMPTS};

/// Most lines one basket may have.
pub const MAX_LINES: usize = 50;

/// The least time a basket's holds must have left for a confirm to be
/// started by [`check_confirmable`]: a confirm sent closer to the deadline
/// could lose the race with the expirer on some lines.
pub const CONFIRM_MARGIN_MS: i64 = 2_000;

/// A refused input: the field (a JSON path such as `lines[1].quantity`)
/// and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct InputError {
    pub field: String,
    pub problem: String,
}

impl InputError {
    pub fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

/// One line of a basket: units of one SKU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub sku: Sku,
    pub quantity: Quantity,
}

impl Line {
    /// Line `index` of a request, checked; a refusal names `lines[index]`'s
    /// field.
    ///
    /// ```
    /// use stockledger_client::basket::Line;
    ///
    /// assert!(Line::parse(0, "SKU-1", 2).is_ok());
    /// assert_eq!(Line::parse(1, "SKU-1", 0).unwrap_err().field, "lines[1].quantity");
    /// assert_eq!(Line::parse(2, "", 1).unwrap_err().field, "lines[2].sku");
    /// ```
    pub fn parse(index: usize, sku: &str, quantity: i64) -> Result<Self, InputError> {
        let at = |field: &str| format!("lines[{index}].{field}");
        let sku = Sku::new(sku).map_err(|e| InputError::new(at("sku"), e.problem))?;
        let quantity = Quantity::new(quantity).map_err(|_| {
            InputError::new(
                at("quantity"),
                format!("must be between 1 and {MAX_QUANTITY}, got {quantity}"),
            )
        })?;
        Ok(Self { sku, quantity })
    }
}

/// A basket hold as asked, checked: 1 to [`MAX_LINES`] lines, each SKU
/// once, one deadline for all.
///
/// ```
/// use stockledger_client::basket::{BasketHold, Line};
/// use stockledger_client::{BasketId, Quantity, Sku};
///
/// let line = |sku: &str, n| Line { sku: Sku::new(sku).unwrap(), quantity: Quantity::new(n).unwrap() };
/// let basket = BasketId::new("cart-9")?;
/// let deadline = 1_700_000_060_000;
/// assert!(BasketHold::new(basket.clone(), None, deadline, vec![line("A", 2), line("B", 1)]).is_ok());
/// let twice = BasketHold::new(basket.clone(), None, deadline, vec![line("A", 2), line("A", 1)]);
/// assert_eq!(twice.unwrap_err().field, "lines[1].sku");
/// assert_eq!(BasketHold::new(basket, None, deadline, vec![]).unwrap_err().field, "lines");
/// # Ok::<(), stockledger_client::ValidationError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BasketHold {
    basket_id: BasketId,
    user_id: Option<UserId>,
    expires_at: i64,
    lines: Vec<Line>,
}

impl BasketHold {
    /// The hold of `lines` for `basket_id` until `expires_at` (ms since the
    /// Unix epoch), counted against `user_id`'s per-user limits if given.
    pub fn new(
        basket_id: BasketId,
        user_id: Option<UserId>,
        expires_at: i64,
        lines: Vec<Line>,
    ) -> Result<Self, InputError> {
        if lines.is_empty() {
            return Err(InputError::new("lines", "a basket needs at least one line"));
        }
        if lines.len() > MAX_LINES {
            return Err(InputError::new(
                "lines",
                format!("at most {MAX_LINES} lines, got {}", lines.len()),
            ));
        }
        for (i, line) in lines.iter().enumerate() {
            if let Some(first) = lines[..i].iter().position(|l| l.sku == line.sku) {
                return Err(InputError::new(
                    format!("lines[{i}].sku"),
                    format!(
                        "{} is already line {first}: give each SKU once, with its whole quantity",
                        line.sku
                    ),
                ));
            }
        }
        stockledger_core::command::check_expires_at(expires_at)
            .map_err(|e| InputError::new(e.field, e.problem))?;
        Ok(Self {
            basket_id,
            user_id,
            expires_at,
            lines,
        })
    }

    pub fn basket_id(&self) -> &BasketId {
        &self.basket_id
    }

    pub fn lines(&self) -> &[Line] {
        &self.lines
    }

    pub fn expires_at(&self) -> i64 {
        self.expires_at
    }

    fn deduct(&self, line: &Line) -> CommandBody {
        CommandBody::Deduct(Deduct {
            user_id: self.user_id.clone(),
            expires_at: Some(self.expires_at),
            basket_id: Some(self.basket_id.clone()),
            ..Deduct::new(order_of(&self.basket_id), line.quantity)
        })
    }
}

/// The order each line of `basket` is on its SKU: the basket's id.
pub fn order_of(basket: &BasketId) -> OrderId {
    // The same identifier rules: a basket id is always an order id.
    match OrderId::new(basket.as_str()) {
        Ok(order) => order,
        Err(_) => unreachable!("basket and order ids share their rules"),
    }
}

/// Where a basket stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BasketStatus {
    /// Every line is held.
    Held,
    /// A line was refused; no line is held.
    Refused,
    /// Every line is sold: the basket sold whole (a line refunded since
    /// by an operator's hand does not undo that).
    Confirmed,
    /// A line could not be confirmed; no line is sold (those confirmed
    /// were refunded).
    Failed,
    /// No line is held or sold: rolled back, expired or refunded.
    Released,
    /// A line is in the log but not decided yet.
    Pending,
    /// Some lines held or sold and others not: a caller stopped half-way
    /// (confirm or release again to settle it).
    Partial,
}

impl BasketStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Held => "held",
            Self::Refused => "refused",
            Self::Confirmed => "confirmed",
            Self::Failed => "failed",
            Self::Released => "released",
            Self::Pending => "pending",
            Self::Partial => "partial",
        }
    }
}

impl std::fmt::Display for BasketStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where one line stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineState {
    Held,
    Confirmed,
    /// Confirmed, then every unit refunded.
    Refunded,
    /// Its hold was refused.
    Refused,
    /// Rolled back (or a rollback came first and refuses the hold).
    Released,
    Expired,
    /// In the log, not decided yet (or not seen in time).
    Pending,
    /// Taken by a plain deduct of the same order id, not by a hold.
    Deducted,
}

impl LineState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Held => "held",
            Self::Confirmed => "confirmed",
            Self::Refunded => "refunded",
            Self::Refused => "refused",
            Self::Released => "released",
            Self::Expired => "expired",
            Self::Pending => "pending",
            Self::Deducted => "deducted",
        }
    }

    /// The line whose order is `entry`, as the core's judge of baskets
    /// sees it (a plain deduct's sale told apart from a confirmed hold's).
    fn of(entry: &OrderEntry) -> Self {
        match LineStanding::of(Some(entry), false) {
            LineStanding::Sold if entry.status == OrderStatus::Deducted => Self::Deducted,
            LineStanding::Sold => Self::Confirmed,
            LineStanding::Held => Self::Held,
            LineStanding::Refunded => Self::Refunded,
            LineStanding::Refused => Self::Refused,
            LineStanding::Released => Self::Released,
            LineStanding::Expired => Self::Expired,
            LineStanding::Undecided => Self::Pending,
        }
    }

    /// The line as the core's judge of baskets takes it.
    fn standing(self) -> LineStanding {
        match self {
            Self::Held => LineStanding::Held,
            Self::Confirmed | Self::Deducted => LineStanding::Sold,
            Self::Refunded => LineStanding::Refunded,
            Self::Refused => LineStanding::Refused,
            Self::Released => LineStanding::Released,
            Self::Expired => LineStanding::Expired,
            Self::Pending => LineStanding::Undecided,
        }
    }
}

impl std::fmt::Display for LineState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One line of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineAnswer {
    pub sku: Sku,
    pub order_id: OrderId,
    /// Units the line takes, when known.
    pub quantity: Option<i64>,
    pub state: LineState,
    /// The decision of this call's command that settled the line, if any.
    pub result: Option<ResultCode>,
    /// Why, for a refused or failed line.
    pub reason: Option<String>,
}

/// What a basket call answers: where the basket stands and each line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BasketAnswer {
    pub basket_id: BasketId,
    pub status: BasketStatus,
    /// The basket's deadline, when known.
    pub expires_at: Option<i64>,
    pub lines: Vec<LineAnswer>,
}

impl BasketAnswer {
    /// The basket as the projection holds it: `lines` are its SKUs with
    /// the basket's order on each (`None`: not decided yet).
    ///
    /// ```
    /// use stockledger_client::basket::{BasketAnswer, BasketStatus};
    /// use stockledger_client::{BasketId, Sku};
    ///
    /// let pending = BasketAnswer::of(BasketId::new("cart-9")?, vec![(Sku::new("A")?, None)]);
    /// assert_eq!(pending.status, BasketStatus::Pending);
    /// # Ok::<(), stockledger_client::ValidationError>(())
    /// ```
    pub fn of(basket_id: BasketId, lines: Vec<(Sku, Option<OrderEntry>)>) -> Self {
        let order_id = order_of(&basket_id);
        let expires_at = lines.iter().find_map(|(_, e)| e.as_ref()?.expires_at);
        let lines: Vec<LineAnswer> = lines
            .into_iter()
            .map(|(sku, entry)| LineAnswer {
                sku,
                order_id: order_id.clone(),
                quantity: entry.as_ref().map(|e| e.quantity).filter(|&q| q > 0),
                state: entry.as_ref().map_or(LineState::Pending, LineState::of),
                result: None,
                reason: None,
            })
            .collect();
        let status = status_of(&lines);
        Self {
            basket_id,
            status,
            expires_at,
            lines,
        }
    }

    /// This answer with each line's quantity and the deadline taken from
    /// `known` (the basket as it stood before) where the answer has none.
    pub fn filled_from(mut self, known: &BasketAnswer) -> Self {
        for line in &mut self.lines {
            if line.quantity.is_none() {
                line.quantity = known
                    .lines
                    .iter()
                    .find(|k| k.sku == line.sku)
                    .and_then(|k| k.quantity);
            }
        }
        self.expires_at = self.expires_at.or(known.expires_at);
        self
    }
}

/// A basket's status from its lines' states, as the core's judge of
/// baskets ([`stockledger_core::basket::standing`]) says it stands.
fn status_of(lines: &[LineAnswer]) -> BasketStatus {
    let lines: Vec<LineStanding> = lines.iter().map(|l| l.state.standing()).collect();
    match basket::standing(&lines) {
        BasketStanding::Pending => BasketStatus::Pending,
        BasketStanding::Held => BasketStatus::Held,
        BasketStanding::Sold => BasketStatus::Confirmed,
        BasketStanding::Refused => BasketStatus::Refused,
        BasketStanding::Released => BasketStatus::Released,
        BasketStanding::Partial => BasketStatus::Partial,
    }
}

/// Why a confirm is not started: the line and what stands in the way
/// (nothing was sent).
///
/// ```
/// use stockledger_client::basket::{check_confirmable, BasketAnswer};
/// use stockledger_client::{BasketId, Sku};
///
/// let unknown = BasketAnswer::of(BasketId::new("cart-9")?, vec![(Sku::new("A")?, None)]);
/// assert!(check_confirmable(&unknown, 1_700_000_000_000).is_err());
/// # Ok::<(), stockledger_client::ValidationError>(())
/// ```
pub fn check_confirmable(basket: &BasketAnswer, now: i64) -> Result<(), String> {
    for line in &basket.lines {
        match line.state {
            LineState::Held | LineState::Confirmed => {}
            other => {
                return Err(format!(
                    "line {} is {other}, not held: the basket cannot be confirmed",
                    line.sku
                ))
            }
        }
    }
    if basket.status == BasketStatus::Held {
        if let Some(deadline) = basket.expires_at {
            if deadline - now < CONFIRM_MARGIN_MS {
                return Err(format!(
                    "the holds end at {deadline}, less than {CONFIRM_MARGIN_MS} ms from now \
                     ({now}): too close to confirm every line in time"
                ));
            }
        }
    }
    Ok(())
}

fn line(
    basket_id: &BasketId,
    sku: Sku,
    state: LineState,
    decision: Option<&Decision>,
) -> LineAnswer {
    LineAnswer {
        sku,
        order_id: order_of(basket_id),
        quantity: None,
        state,
        result: decision.map(|d| d.result),
        reason: decision.and_then(|d| d.reason.clone()),
    }
}

/// Holds every line of `basket`, or none (see the module's protocol). A
/// line decided `DUPLICATE` counts as held: its order took the units
/// before (a repeated hold), so a hold repeated after the basket was
/// confirmed answers `held` too; [`read`] says where a basket stands.
pub async fn hold<D: Decide + Sync>(
    ledger: &D,
    basket: &BasketHold,
) -> Result<BasketAnswer, Unsettled> {
    let id = &basket.basket_id;
    // A hold whose decision was not seen is sent once: its twin would be
    // decided DUPLICATE anyway, and the rollback below covers it.
    let decided: Vec<(Sku, Option<Decision>)> =
        futures::future::join_all(basket.lines.iter().map(|l| async move {
            let decision = match ledger.send(&l.sku, basket.deduct(l)).await {
                Ok(sent) => ledger.wait(&sent).await.ok(),
                Err(_) => None,
            };
            (l.sku.clone(), decision)
        }))
        .await;
    let took = |d: &Decision| matches!(d.result, ResultCode::Applied | ResultCode::Duplicate);
    let quantity = |sku: &Sku| {
        basket
            .lines
            .iter()
            .find(|l| &l.sku == sku)
            .map(|l| l.quantity.get())
    };
    if decided.iter().all(|(_, d)| d.as_ref().is_some_and(took)) {
        let lines = decided
            .into_iter()
            .map(|(sku, d)| LineAnswer {
                quantity: quantity(&sku),
                ..line(id, sku, LineState::Held, d.as_ref())
            })
            .collect();
        return Ok(BasketAnswer {
            basket_id: id.clone(),
            status: BasketStatus::Held,
            expires_at: Some(basket.expires_at),
            lines,
        });
    }
    // Refused: give back every line not known to be refused, before
    // answering.
    let refused = decided
        .iter()
        .find_map(|(sku, d)| d.as_ref().filter(|d| !took(d)).map(|d| (sku, d)));
    let why = match refused {
        Some((sku, d)) => format!("basket {id} refused: line {sku} was {}", d.result),
        None => format!("basket {id}: a line was not decided in time"),
    };
    let reason = Reason::new(why.clone())
        .unwrap_or_else(|_| unreachable!("ids and a result code are short text without controls"));
    let to_release: Vec<(Sku, CommandBody)> = decided
        .iter()
        .filter(|(_, d)| d.as_ref().is_none_or(took))
        .map(|(sku, _)| (sku.clone(), rollback(id, &reason)))
        .collect();
    let released = settle_all(ledger, id, to_release).await;
    let mut lines = Vec::with_capacity(decided.len());
    for (sku, d) in decided {
        let answer = match released.iter().find(|(s, _)| s == &sku) {
            None => line(id, sku, LineState::Refused, d.as_ref()),
            Some((_, Err(e))) => return Err(clone_unsettled(e)),
            Some((_, Ok(r))) => {
                let state = released_state(r);
                LineAnswer {
                    reason: Some(why.clone()),
                    ..line(id, sku, state, d.as_ref())
                }
            }
        };
        lines.push(LineAnswer {
            quantity: quantity(&answer.sku),
            ..answer
        });
    }
    Ok(BasketAnswer {
        basket_id: id.clone(),
        status: BasketStatus::Refused,
        expires_at: Some(basket.expires_at),
        lines,
    })
}

fn clone_unsettled(e: &Unsettled) -> Unsettled {
    Unsettled {
        basket_id: e.basket_id.clone(),
        sku: e.sku.clone(),
        cause: e.cause.clone(),
    }
}

fn rollback(basket_id: &BasketId, why: &Reason) -> CommandBody {
    CommandBody::Rollback(Rollback {
        order_id: order_of(basket_id),
        reason: Some(why.as_str().to_owned()),
    })
}

/// A line's state after a rollback decided `r`.
fn released_state(r: &Decision) -> LineState {
    match r.result {
        // Confirmed meanwhile: a rollback does not undo a sale.
        ResultCode::RejectedNotReserved => LineState::Confirmed,
        _ => LineState::Released,
    }
}

/// Confirms every line of basket `basket_id` (on `skus`), or none: a line
/// that cannot be confirmed makes the lines confirmed refunded, and the
/// answer `failed` names it.
pub async fn confirm<D: Decide + Sync>(
    ledger: &D,
    basket_id: &BasketId,
    skus: &[Sku],
) -> Result<BasketAnswer, Unsettled> {
    let order_id = order_of(basket_id);
    let bodies = skus
        .iter()
        .map(|sku| {
            let body = CommandBody::Confirm(Confirm {
                order_id: order_id.clone(),
            });
            (sku.clone(), body)
        })
        .collect();
    let mut decided = Vec::with_capacity(skus.len());
    for (sku, d) in settle_all(ledger, basket_id, bodies).await {
        decided.push((sku, d?));
    }
    let sold = |d: &Decision| matches!(d.result, ResultCode::Confirmed | ResultCode::Duplicate);
    if decided.iter().all(|(_, d)| sold(d)) {
        let lines = decided
            .into_iter()
            .map(|(sku, d)| line(basket_id, sku, LineState::Confirmed, Some(&d)))
            .collect();
        return Ok(BasketAnswer {
            basket_id: basket_id.clone(),
            status: BasketStatus::Confirmed,
            expires_at: None,
            lines,
        });
    }
    let (failed_sku, failed) = decided
        .iter()
        .find(|(_, d)| !sold(d))
        .map(|(sku, d)| (sku.clone(), d.clone()))
        .unwrap_or_else(|| unreachable!("a line is not sold"));
    let refunds = decided
        .iter()
        .filter(|(_, d)| sold(d))
        .map(|(sku, _)| {
            let body = CommandBody::Refund(Refund {
                order_id: order_id.clone(),
                quantity: None,
            });
            (sku.clone(), body)
        })
        .collect();
    let refunded = settle_all(ledger, basket_id, refunds).await;
    let why = format!(
        "line {failed_sku} could not be confirmed ({}{}); the lines confirmed were refunded",
        failed.result,
        failed
            .reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    );
    let mut lines = Vec::with_capacity(decided.len());
    for (sku, d) in decided {
        let answer = match refunded.iter().find(|(s, _)| s == &sku) {
            None => {
                let state = match d.result {
                    ResultCode::RejectedExpired => LineState::Expired,
                    _ => LineState::Released,
                };
                line(basket_id, sku, state, Some(&d))
            }
            Some((_, Err(e))) => return Err(clone_unsettled(e)),
            Some((_, Ok(r))) => LineAnswer {
                reason: Some(why.clone()),
                ..line(basket_id, sku, LineState::Refunded, Some(r))
            },
        };
        lines.push(answer);
    }
    Ok(BasketAnswer {
        basket_id: basket_id.clone(),
        status: BasketStatus::Failed,
        expires_at: None,
        lines,
    })
}

/// Rolls back every line of basket `basket_id` (on `skus`). A line
/// already confirmed stays sold (refund it): the answer is then
/// `partial` or `confirmed`, not `released`.
pub async fn release<D: Decide + Sync>(
    ledger: &D,
    basket_id: &BasketId,
    skus: &[Sku],
    reason: Option<&Reason>,
) -> Result<BasketAnswer, Unsettled> {
    let why = match reason {
        Some(reason) => reason.clone(),
        None => Reason::new(format!("basket {basket_id} released"))
            .unwrap_or_else(|_| unreachable!("a basket id is short text without controls")),
    };
    let bodies = skus
        .iter()
        .map(|sku| (sku.clone(), rollback(basket_id, &why)))
        .collect();
    let mut lines = Vec::with_capacity(skus.len());
    for (sku, d) in settle_all(ledger, basket_id, bodies).await {
        let d = d?;
        lines.push(line(basket_id, sku, released_state(&d), Some(&d)));
    }
    let status = status_of(&lines);
    Ok(BasketAnswer {
        basket_id: basket_id.clone(),
        status,
        expires_at: None,
        lines,
    })
}

/// The basket as `projection` holds it: each SKU of its index with the
/// basket's order there (`None` if no line of it was ever folded).
pub async fn read(
    projection: &Projection,
    basket_id: &BasketId,
) -> Result<Option<BasketAnswer>, ProjectionError> {
    let stored = projection.basket(basket_id.as_str()).await?;
    if stored.is_empty() {
        return Ok(None);
    }
    let mut lines = Vec::with_capacity(stored.len());
    let mut refusals = Vec::with_capacity(stored.len());
    for line in stored {
        let sku = Sku::new(line.sku.as_str()).map_err(|_| ProjectionError::Corrupt {
            key: stockledger_projection::keys::basket_key(projection.prefix(), basket_id.as_str()),
            value: line.sku,
        })?;
        lines.push((sku, line.order));
        refusals.push(line.refusal);
    }
    let mut answer = BasketAnswer::of(basket_id.clone(), lines);
    for (line, refusal) in answer.lines.iter_mut().zip(refusals) {
        if let Some(d) = refusal {
            line.state = LineState::Refused;
            line.result = Some(d.result);
            line.reason = d.reason;
        }
    }
    answer.status = status_of(&answer.lines);
    Ok(Some(answer))
}

/// Checks a basket id given as text, naming the field `basket_id`.
///
/// ```
/// use stockledger_client::basket::basket_id;
///
/// assert!(basket_id("cart-9").is_ok());
/// assert_eq!(basket_id("").unwrap_err().field, "basket_id");
/// ```
pub fn basket_id(value: &str) -> Result<BasketId, InputError> {
    BasketId::new(value).map_err(|e| InputError::new(e.field, e.problem))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(status: OrderStatus, quantity: i64, refunded: i64) -> OrderEntry {
        OrderEntry {
            status,
            quantity,
            offset: 0,
            user: None,
            expires_at: None,
            refunded,
            units: Vec::new(),
            location: None,
        }
    }

    fn basket(states: &[Option<OrderEntry>]) -> BasketAnswer {
        let lines = states
            .iter()
            .enumerate()
            .map(|(i, e)| (Sku::new(format!("S{i}")).unwrap(), e.clone()))
            .collect();
        BasketAnswer::of(BasketId::new("b").unwrap(), lines)
    }

    #[test]
    fn a_baskets_status_follows_its_lines() {
        use OrderStatus::*;
        let held = Some(entry(Reserved, 1, 0));
        let sold = Some(entry(Confirmed, 1, 0));
        let refunded = Some(entry(Confirmed, 1, 1));
        let back = Some(entry(RolledBack, 1, 0));
        let expired = Some(entry(Expired, 1, 0));
        assert_eq!(
            basket(&[held.clone(), held.clone()]).status,
            BasketStatus::Held
        );
        assert_eq!(
            basket(&[sold.clone(), sold.clone()]).status,
            BasketStatus::Confirmed
        );
        // Sold whole, then one line refunded by hand: still sold whole, as
        // the applier's settler judges it too (it undoes nothing).
        assert_eq!(
            basket(&[sold.clone(), refunded.clone()]).status,
            BasketStatus::Confirmed
        );
        assert_eq!(
            basket(&[back.clone(), expired, refunded]).status,
            BasketStatus::Released
        );
        assert_eq!(basket(&[held.clone(), None]).status, BasketStatus::Pending);
        assert_eq!(basket(&[sold, back.clone()]).status, BasketStatus::Partial);
        assert_eq!(basket(&[held, back]).status, BasketStatus::Partial);
    }

    #[test]
    fn a_confirm_is_not_started_on_a_line_not_held_or_near_the_deadline() {
        let mut held = entry(OrderStatus::Reserved, 1, 0);
        held.expires_at = Some(10_000);
        let b = basket(&[Some(held.clone()), Some(held)]);
        assert!(check_confirmable(&b, 1_000).is_ok());
        assert!(check_confirmable(&b, 10_000 - CONFIRM_MARGIN_MS + 1).is_err());
        let gone = basket(&[Some(entry(OrderStatus::Expired, 1, 0))]);
        let refused = check_confirmable(&gone, 0).unwrap_err();
        assert!(refused.contains("S0 is expired"), "{refused}");
    }
}
