//! The sold-out fast path: refusing a deduct before it reaches the log.
//!
//! In a flash sale most buyers arrive after the last unit is gone; each of
//! their deducts would be appended, applied and archived only to be
//! refused `REJECTED_INSUFFICIENT`. A [`SoldOutGuard`] given to the
//! producer ([`crate::LedgerProducer::with_sold_out_guard`]) reads the
//! SKU's stock in Redis first and refuses at once, without writing to the
//! log, when nothing is available and nothing is held by a reservation
//! (held units may come back when their holds expire or are released).
//! Opt-in, because the refusal is decided outside the log: it is reported
//! as [`crate::ProducerError::SoldOut`], never as an outcome, it is not in
//! the archive, and units that come back by a restock, a rollback of a
//! plain deduction or a refund are seen on the next read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use stockledger_projection::{Projection, ProjectionError};

/// Counter: deducts refused by the sold-out fast path (never logged).
///
/// ```
/// use stockledger_client::soldout::SOLD_OUT_METRIC;
///
/// assert!(SOLD_OUT_METRIC.ends_with("_total"));
/// ```
pub const SOLD_OUT_METRIC: &str = "stockledger_client_sold_out_refusals_total";

/// What the fast path saw when it refused a deduct.
///
/// ```
/// use stockledger_client::{ProducerError, SoldOut};
///
/// let refused = ProducerError::SoldOut(SoldOut { sku: "SKU-1".into(), offset: 981 });
/// assert!(refused.to_string().starts_with("sku SKU-1 is sold out"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoldOut {
    pub sku: String,
    /// The offset of the last record applied to the SKU when it was read.
    pub offset: i64,
}

/// Reads a SKU's stock before a deduct is sent (see the module docs).
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use stockledger_client::SoldOutGuard;
///
/// let guard = SoldOutGuard::connect("redis://127.0.0.1:6379", "stockledger").await?;
/// if let Some(sold_out) = guard.check("SKU-1").await? {
///     println!("{} sold out as of offset {}", sold_out.sku, sold_out.offset);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SoldOutGuard {
    projection: Projection,
    refused: Arc<AtomicU64>,
}

impl SoldOutGuard {
    /// A guard reading the projection under `prefix` at `redis_url`.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), stockledger_projection::ProjectionError> {
    /// let guard = stockledger_client::SoldOutGuard::connect("redis://127.0.0.1:6379", "stockledger").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(redis_url: &str, prefix: &str) -> Result<Self, ProjectionError> {
        Ok(Self::new(Projection::connect(redis_url, prefix).await?))
    }

    /// A guard reading `projection`, sharing its connection.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), stockledger_projection::ProjectionError> {
    /// use stockledger_client::SoldOutGuard;
    /// use stockledger_projection::Projection;
    ///
    /// let projection = Projection::connect("redis://127.0.0.1:6379", "stockledger").await?;
    /// let guard = SoldOutGuard::new(projection.clone());
    /// assert_eq!(guard.refused(), 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(projection: Projection) -> Self {
        Self {
            projection,
            refused: Arc::new(AtomicU64::new(0)),
        }
    }

    /// `Some` when `sku` is sold out for good
    /// ([`stockledger_core::sold_out_for_good`]: nothing available and
    /// nothing held by reservations); a SKU with no state yet is not sold
    /// out (its first restock may be on its way).
    ///
    /// ```no_run
    /// # async fn example(guard: stockledger_client::SoldOutGuard) -> Result<(), stockledger_projection::ProjectionError> {
    /// let before = guard.refused();
    /// if guard.check("SKU-1").await?.is_some() {
    ///     assert_eq!(guard.refused(), before + 1);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn check(&self, sku: &str) -> Result<Option<SoldOut>, ProjectionError> {
        let stock = self.projection.stock(&[sku]).await?;
        let Some(Some(s)) = stock.into_iter().next() else {
            return Ok(None);
        };
        if !stockledger_core::sold_out_for_good(s.available, s.reserved) {
            return Ok(None);
        }
        self.refused.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(SOLD_OUT_METRIC).increment(1);
        Ok(Some(SoldOut {
            sku: sku.to_owned(),
            offset: s.offset,
        }))
    }

    /// Deducts refused so far by this guard and its clones.
    ///
    /// ```no_run
    /// # fn example(guard: stockledger_client::SoldOutGuard) {
    /// println!("{} deducts refused without reaching the log", guard.refused());
    /// # }
    /// ```
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}
