//! What stockledger serves over HTTP.
//!
//! - [`server`]: the one accept loop every listener here runs: HTTP/1.1 and
//!   HTTP/2 (cleartext, or over TLS from [`tls`]), header and body read
//!   deadlines, a cap on open connections, graceful shutdown.
//! - [`observe`]: Prometheus metrics (`/metrics`), liveness (`/healthz`) and
//!   readiness (`/readyz`) for `apply`, `archive` and `serve`.
//! - [`gateway`]: the JSON API order services call instead of linking the
//!   Rust library: commands with an optional wait for the decision, stock,
//!   one order, archived history; the console (`/console`, `/v1/status`,
//!   `/v1/sale`); its OpenAPI document at `/openapi.json`.

pub mod gateway;
pub mod observe;
pub mod server;
pub mod tls;

pub use gateway::{GatewayConfig, GatewayError};
pub use observe::{Probes, Recorder};
pub use server::Limits;
pub use tls::{Tls, TlsError};
