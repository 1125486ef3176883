//! Identifiers for tests, made from literals: each panics, naming the
//! field, on a value the rules refuse, so a test reads as the command it
//! sends. A test of the refusal itself calls the type's `new`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use stockledger_core::ids::{
    AdjustmentId, LocationId, OrderId, Quantity, Sku, TransferId, UnitId, UserId,
};

#[track_caller]
pub fn sku(value: impl AsRef<str>) -> Sku {
    Sku::new(value.as_ref()).unwrap_or_else(|e| panic!("{e}"))
}

#[track_caller]
pub fn order(value: impl AsRef<str>) -> OrderId {
    OrderId::new(value.as_ref()).unwrap_or_else(|e| panic!("{e}"))
}

#[track_caller]
pub fn user(value: impl AsRef<str>) -> UserId {
    UserId::new(value.as_ref()).unwrap_or_else(|e| panic!("{e}"))
}

#[track_caller]
pub fn adjustment(value: impl AsRef<str>) -> AdjustmentId {
    AdjustmentId::new(value.as_ref()).unwrap_or_else(|e| panic!("{e}"))
}

#[track_caller]
pub fn location(value: impl AsRef<str>) -> LocationId {
    LocationId::new(value.as_ref()).unwrap_or_else(|e| panic!("{e}"))
}

#[track_caller]
pub fn transfer(value: impl AsRef<str>) -> TransferId {
    TransferId::new(value.as_ref()).unwrap_or_else(|e| panic!("{e}"))
}

#[track_caller]
pub fn unit(value: impl AsRef<str>) -> UnitId {
    UnitId::new(value.as_ref()).unwrap_or_else(|e| panic!("{e}"))
}

#[track_caller]
pub fn qty(units: i64) -> Quantity {
    Quantity::new(units).unwrap_or_else(|e| panic!("{e}"))
}

/// The instant `ms` milliseconds after the Unix epoch (a hold's deadline
/// as the log keeps it).
pub fn at_ms(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}
