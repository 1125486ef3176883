//! How many event streams may be open at once: in all, and for one API
//! key. A stream holds its connection for as long as its client wants, so
//! without a cap one key could take every connection the gateway has and
//! leave none for an operator.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;

use super::super::problem::Problem;

/// Counter: event streams refused because a cap was reached, by `cap`
/// (`key` or `all`).
pub const REFUSED_METRIC: &str = "stockledger_sse_streams_refused_total";

/// What a client is told to wait before it tries again.
const RETRY_AFTER_S: u64 = 5;

/// The caps and the streams open now.
#[derive(Debug)]
pub(crate) struct StreamSlots {
    max: usize,
    per_key: usize,
    open: Mutex<Open>,
}

#[derive(Debug, Default)]
struct Open {
    all: usize,
    by_key: HashMap<Arc<str>, usize>,
}

/// A stream's place among the open ones, given back when it is dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    slots: Arc<StreamSlots>,
    key: Option<Arc<str>>,
}

impl StreamSlots {
    /// At most `max` streams in all and `per_key` for one API key (both at
    /// least 1). Callers without a key (a gateway without `--api-keys`)
    /// count against `max` alone.
    pub(crate) fn new(max: usize, per_key: usize) -> Arc<Self> {
        Arc::new(Self {
            max: max.max(1),
            per_key: per_key.max(1),
            open: Mutex::new(Open::default()),
        })
    }

    /// A slot for a stream of `key`, or the 429 that says which cap is
    /// reached.
    pub(crate) fn take(self: &Arc<Self>, key: Option<Arc<str>>) -> Result<Slot, Problem> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.all >= self.max {
            metrics::counter!(REFUSED_METRIC, "cap" => "all").increment(1);
            return Err(Problem::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "the gateway has {} event streams open, its most (--max-streams); try again later",
                    self.max
                ),
            )
            .retry_after(RETRY_AFTER_S));
        }
        if let Some(key) = &key {
            let held = open.by_key.get(key).copied().unwrap_or(0);
            if held >= self.per_key {
                metrics::counter!(REFUSED_METRIC, "cap" => "key").increment(1);
                return Err(Problem::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    format!(
                        "the key {key} has {held} event streams open, its most \
                         (--max-streams-per-key); close one, or follow several SKUs on one \
                         stream (/v1/events?sku=A&sku=B)"
                    ),
                )
                .retry_after(RETRY_AFTER_S));
            }
            *open.by_key.entry(key.clone()).or_default() += 1;
        }
        open.all += 1;
        Ok(Slot {
            slots: self.clone(),
            key,
        })
    }

    /// Streams open now: in all, and of `key`.
    #[cfg(test)]
    fn held(&self, key: &str) -> (usize, usize) {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        (open.all, open.by_key.get(key).copied().unwrap_or(0))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().unwrap_or_else(|e| e.into_inner());
        open.all = open.all.saturating_sub(1);
        if let Some(key) = &self.key {
            if let Some(held) = open.by_key.get_mut(key) {
                *held -= 1;
                if *held == 0 {
                    open.by_key.remove(key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_at_its_cap_is_refused_while_others_and_keyless_callers_open() {
        let slots = StreamSlots::new(4, 2);
        let producer: Arc<str> = "shop".into();
        let first = slots.take(Some(producer.clone())).unwrap();
        let _second = slots.take(Some(producer.clone())).unwrap();
        let refused = slots.take(Some(producer.clone())).unwrap_err();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(
            refused.detail.contains("the key shop"),
            "{}",
            refused.detail
        );
        let _operator = slots.take(Some("ops".into())).unwrap();
        let _anonymous = slots.take(None).unwrap();
        assert_eq!(slots.held("shop"), (4, 2));
        let all = slots.take(Some("ops".into())).unwrap_err();
        assert!(all.detail.contains("--max-streams"), "{}", all.detail);
        drop(first);
        assert_eq!(slots.held("shop"), (3, 1));
        assert!(slots.take(Some(producer)).is_ok());
    }
}
