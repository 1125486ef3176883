//! What every long-running part of stockledger shares, whatever service it
//! talks to.
//!
//! - [`retry`]: retrying with exponential backoff while a service is away.
//! - [`stop`]: the stop flag every long-running loop watches.
//! - [`redact`]: URLs with their passwords masked, for logs and `Debug`.
//! - [`clock`]: the wall clock in milliseconds, and RFC 3339.

pub mod clock;
pub mod redact;
pub mod retry;
pub mod stop;

pub use redact::redact_url;
