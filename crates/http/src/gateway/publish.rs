//! From a validated command to the log and back: publishing it, waiting
//! for its decision when asked to, and the checks of a repeat against what
//! the ledger holds.

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use stockledger_client::outcome::OutcomeError;
use stockledger_client::{ProducerError, Receipt};
use stockledger_core::codec;
use stockledger_core::report::Chain;
use stockledger_core::{CommandBody, OrderEntry, OrderId, ResultCode, Sku};
use stockledger_kafka::topic::read_at;
use tracing::warn;

use super::bodies::{CommandResponse, CommandStatus, OrderBody, Position, WaitParams};
use super::problem::{redis_problem, Problem};
use super::{Answer, Gateway};

/// Compares a request with the order the ledger holds under its id.
pub(super) type SameOrder = Box<dyn FnOnce(&OrderEntry) -> Result<(), Problem> + Send>;

/// How long a repeated restock waits to read its first record back. A
/// fresh reader takes about 0.1 s on a local Apache Kafka, but the API
/// fuzzer once got a 503 here (cause not kept) from a broker busy with
/// thousands of partitions just after the test suite, where the wait was
/// 3 s. Repeats with another body are rare, so a longer wait costs the
/// common path nothing.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(8);

impl Gateway {
    /// The wait a request asks for, bounded by the gateway's maximum.
    pub(super) fn wait(&self, params: &WaitParams) -> Result<Option<Duration>, Problem> {
        match params.wait_ms {
            None => Ok(None),
            Some(ms) if Duration::from_millis(ms) <= self.max_wait => {
                Ok(Some(Duration::from_millis(ms)))
            }
            Some(ms) => Err(Problem::invalid(
                "wait_ms",
                format!(
                    "wait_ms must be at most {}, got {ms}",
                    self.max_wait.as_millis()
                ),
            )),
        }
    }

    pub(super) async fn known_order(
        &self,
        sku: &Sku,
        order_id: &OrderId,
    ) -> Result<Option<OrderEntry>, Problem> {
        self.projection
            .order(sku.as_str(), order_id.as_str())
            .await
            .map_err(|e| redis_problem(&e))
    }

    /// The order as Redis holds it, for the repeat check before publishing.
    /// With Redis away the command is published unchecked: the applier
    /// decides a repeat `DUPLICATE` all the same, and the log takes
    /// commands while the projection is down.
    pub(super) async fn held_order(&self, sku: &Sku, order_id: &OrderId) -> Option<OrderEntry> {
        self.projection
            .order(sku.as_str(), order_id.as_str())
            .await
            .unwrap_or_else(|e| {
                warn!(error = %Chain(&e), "cannot check Redis for a repeated order; publishing");
                None
            })
    }

    /// Refuses (409, naming the field) a restock or a transfer repeated
    /// under an id the ledger holds at `offset` (restock adjustment ids and
    /// transfer ids share one namespace) unless it is an identical repeat:
    /// the first one is read back from the log, the only place its body is
    /// kept.
    pub(super) async fn same_adjustment(
        &self,
        sku: &Sku,
        offset: i64,
        asked: &CommandBody,
    ) -> Result<(), Problem> {
        let unreadable = |why: String| {
            warn!(%sku, offset, why, "cannot read a repeated adjustment's first record");
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the adjustment id is known, but its first record could not be read back to \
                 compare; nothing was published",
            )
            .retry_after(5)
        };
        let partition = match self.projection.stock(&[sku.as_str()]).await {
            Ok(stock) => stock.into_iter().next().flatten().and_then(|s| s.partition),
            Err(e) => return Err(unreadable(e.to_string())),
        };
        let Some(partition) = partition else {
            return Err(unreadable("the SKU's partition is not recorded".into()));
        };
        let record = read_at(&self.kafka, &self.topic, partition, offset, LOOKUP_TIMEOUT)
            .await
            .map_err(|e| unreadable(e.to_string()))?;
        let first = record
            .and_then(|r| r.payload)
            .and_then(|payload| codec::decode_command(&payload).ok());
        let Some(first) = first.map(|c| c.body) else {
            return Err(unreadable("the record there is not a command".into()));
        };
        let id = match &first {
            CommandBody::Restock(r) => r.adjustment_id.to_string(),
            CommandBody::Transfer(t) => t.transfer_id.to_string(),
            body => match body.change_id() {
                Some(id) => id.to_string(),
                None => return Err(unreadable("the record there is not an adjustment".into())),
            },
        };
        if first.kind() != asked.kind() {
            let field = match asked {
                CommandBody::Transfer(_) => "transfer_id",
                body if body.change_id().is_some() => "change_id",
                _ => "adjustment_id",
            };
            return Err(Problem {
                field: Some(field.into()),
                ..Problem::new(
                    StatusCode::CONFLICT,
                    format!(
                        "{id} of {sku} was already used by a {}: restocks, transfers and changes \
                         of the sale share one namespace of ids, and an id is used once",
                        first.kind().as_str().to_lowercase()
                    ),
                )
            });
        }
        let Some((field, was)) = first_difference(&first, asked) else {
            return Ok(());
        };
        Err(Problem {
            field: Some(field.into()),
            ..Problem::new(
                StatusCode::CONFLICT,
                format!(
                    "adjustment {id} of {sku} was already made with {field} {was}: an adjustment \
                     id (of a restock, a transfer or a change of the sale) is used once, and only \
                     an identical repeat is a repeat"
                ),
            )
        })
    }

    /// Publishes `body` and answers with its position, or with its decision
    /// when asked to wait.
    pub(super) async fn command(
        &self,
        sku: Sku,
        order_id: Option<OrderId>,
        body: CommandBody,
        wait: Option<Duration>,
        traceparent: Option<String>,
    ) -> Answer {
        self.command_checked(sku, order_id, body, wait, traceparent, None)
            .await
    }

    /// Publishes `body` (with the caller's trace, if any), counting it as
    /// published or why not; a problem when the brokers are away or do not
    /// confirm it.
    async fn send(
        &self,
        sku: &Sku,
        body: CommandBody,
        traceparent: Option<String>,
    ) -> Result<Receipt, Problem> {
        let kind = body.kind().as_str();
        if !self.broker_up.load(Ordering::Relaxed) {
            metrics::counter!(super::PUBLISH_FAILURES_METRIC, "command" => kind, "reason" => "brokers_down")
                .increment(1);
            return Err(Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the Kafka brokers do not answer; nothing was published",
            )
            .retry_after(5));
        }
        let sent = match &traceparent {
            Some(traceparent) => {
                self.ledger
                    .producer()
                    .send_traced(sku.clone(), body, traceparent, true)
                    .await
            }
            None => self.ledger.producer().try_send(sku.clone(), body).await,
        };
        let receipt = sent.map_err(|e| {
            let reason = match &e {
                // The caller's doing: a 4xx, not a failure to publish.
                ProducerError::Invalid(_) | ProducerError::SoldOut(_) => None,
                ProducerError::QueueFull { .. } => Some("queue_full"),
                _ => Some("unconfirmed"),
            };
            if let Some(reason) = reason {
                metrics::counter!(super::PUBLISH_FAILURES_METRIC, "command" => kind, "reason" => reason)
                    .increment(1);
            }
            publish_problem(e)
        })?;
        metrics::counter!(super::PUBLISHED_METRIC, "command" => kind).increment(1);
        Ok(receipt)
    }

    /// [`Self::command`], and when the applier decides it `DUPLICATE` (it
    /// raced another request for the same order into the log), `same`
    /// compares it with the order the ledger holds: only an identical
    /// request is answered as a repeat, another gets its 409.
    pub(super) async fn command_checked(
        &self,
        sku: Sku,
        order_id: Option<OrderId>,
        body: CommandBody,
        wait: Option<Duration>,
        traceparent: Option<String>,
        same: Option<SameOrder>,
    ) -> Answer {
        let receipt = self.send(&sku, body, traceparent).await?;
        let mut response = CommandResponse {
            status: CommandStatus::Accepted,
            sku: sku.to_string(),
            command_id: Some(receipt.command_id.to_string()),
            position: Some(position(&receipt)),
            decision: None,
            repeat: false,
            order: None,
        };
        let Some(wait) = wait else {
            return Ok((StatusCode::ACCEPTED, Json(response)).into_response());
        };
        match self.ledger.decision_within(&receipt, wait).await {
            Ok(decision) => {
                response.status = CommandStatus::Decided;
                if decision.result == ResultCode::Duplicate {
                    response.repeat = true;
                    if let Some(order_id) = &order_id {
                        let entry = self.known_order(&sku, order_id).await;
                        if let Some(same) = same {
                            let Ok(Some(held)) = &entry else {
                                return Err(Problem::new(
                                    StatusCode::SERVICE_UNAVAILABLE,
                                    "decided as a repeat of an order the ledger holds, but the \
                                     order could not be read to compare; asking again is safe",
                                )
                                .retry_after(1));
                            };
                            same(held)?;
                        }
                        if let Ok(Some(entry)) = entry {
                            response.order = Some(OrderBody::new(&sku, order_id, &entry));
                        }
                    }
                }
                response.decision = Some(decision.into());
                Ok(Json(response).into_response())
            }
            Err(OutcomeError::Timeout { .. }) => {
                response.status = CommandStatus::Pending;
                Ok((StatusCode::ACCEPTED, Json(response)).into_response())
            }
            Err(e) => {
                // In the log all the same: it will be decided.
                warn!(error = %Chain(&e), "waiting for a decision failed");
                response.status = CommandStatus::Pending;
                Ok((StatusCode::ACCEPTED, Json(response)).into_response())
            }
        }
    }
}

fn position(receipt: &Receipt) -> Position {
    Position {
        topic: receipt.position.topic.clone(),
        partition: receipt.position.partition,
        offset: receipt.position.offset,
    }
}

fn publish_problem(e: ProducerError) -> Problem {
    match e {
        ProducerError::Invalid(v) => v.into(),
        ProducerError::SoldOut(sold_out) => Problem {
            field: Some("sold_out".into()),
            ..Problem::new(
                StatusCode::CONFLICT,
                format!(
                    "sku {} is sold out (nothing available, nothing held, as of offset {}); \
                     refused by the gateway and not logged",
                    sold_out.sku, sold_out.offset
                ),
            )
        },
        ProducerError::QueueFull { .. } => Problem::new(
            StatusCode::TOO_MANY_REQUESTS,
            "the gateway's queue to the brokers is full; nothing was published",
        )
        .retry_after(1),
        other => {
            warn!(error = %Chain(&other), "publishing a command failed");
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the brokers did not confirm the command ({}); it may or may not be \
                     in the log: repeating the request with the same id is safe",
                    Chain(&other)
                ),
            )
            .retry_after(5)
        }
    }
}

/// The first field in which `asked` differs from the adjustment `first`
/// of the same kind that took its id, and what `first` said there.
fn first_difference(first: &CommandBody, asked: &CommandBody) -> Option<(&'static str, String)> {
    let place =
        |l: Option<&stockledger_core::LocationId>| l.map_or("none".to_owned(), |l| l.to_string());
    match (first, asked) {
        (CommandBody::Restock(first), CommandBody::Restock(asked)) => {
            if first.mode() != asked.mode() {
                Some(("mode", first.mode().as_str().to_owned()))
            } else if first.quantity() != asked.quantity() {
                Some(("quantity", first.quantity().to_string()))
            } else if first.named() != asked.named() {
                let names: Vec<&str> = first.named().iter().map(|u| u.as_str()).collect();
                Some(("units", format!("{names:?}")))
            } else if first.location() != asked.location() {
                Some(("location", place(first.location())))
            } else {
                None
            }
        }
        (CommandBody::Window(first), CommandBody::Window(asked)) => {
            let at = |t: Option<i64>| {
                t.map_or("none".to_owned(), stockledger_runtime::clock::rfc3339_ms)
            };
            let (was, now) = (first.window, asked.window);
            if was.opens_at() != now.opens_at() {
                Some(("opens_at", at(was.opens_at())))
            } else if was.closes_at() != now.closes_at() {
                Some(("closes_at", at(was.closes_at())))
            } else {
                None
            }
        }
        (CommandBody::Transfer(first), CommandBody::Transfer(asked)) => {
            if first.from() != asked.from() {
                Some(("from", first.from().to_string()))
            } else if first.to() != asked.to() {
                Some(("to", first.to().to_string()))
            } else if first.quantity() != asked.quantity() {
                Some(("quantity", first.quantity().get().to_string()))
            } else {
                None
            }
        }
        _ => None,
    }
}
