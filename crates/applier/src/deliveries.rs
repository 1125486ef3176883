//! The applier's producer, its delivery reports collected a batch at a
//! time: each record a batch publishes carries its number as the report's
//! opaque, librdkafka's thread counts the reports into the batch they
//! belong to, and the applier awaits one answer a batch (every record
//! delivered, or the first of them that was not), where a future a record
//! cost an allocation, a channel and a wake-up each.
//!
//! Records no batch waits for (an expire, a basket's refund) go as
//! [`UNTRACKED`]: their reports are dropped, and what they were for is
//! retried on its own schedule.

use std::collections::VecDeque;
use std::sync::Mutex;

use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use tokio::sync::oneshot;

/// The report opaque of a record no batch waits for.
pub const UNTRACKED: usize = 0;

/// What a batch's deliveries came to: `Err((i, error))` for the first
/// record, in the order they were handed over, the brokers did not take.
pub type Delivered = Result<(), (usize, KafkaError)>;

/// The applier's producer context: rdkafka's own logging (but for one
/// notice, `is_gapless_notice`), and the batches awaiting reports.
#[derive(Default)]
pub struct Reports {
    batches: Mutex<Batches>,
}

/// The batches whose reports are still coming, oldest first; records are
/// numbered from 1 on, batch after batch, so each batch is a range.
#[derive(Default)]
struct Batches {
    next: usize,
    open: VecDeque<Batch>,
}

struct Batch {
    first: usize,
    /// Known once the batch is handed over whole ([`Reports::seal`]).
    count: Option<usize>,
    reported: usize,
    failed: Option<(usize, KafkaError)>,
    done: Option<oneshot::Sender<Delivered>>,
}

impl Batch {
    /// Answers the batch's waiter once every report is in; `true` then.
    fn answer_if_complete(&mut self) -> bool {
        if self.count != Some(self.reported) {
            return false;
        }
        if let Some(done) = self.done.take() {
            let _ = done.send(match self.failed.take() {
                Some(failed) => Err(failed),
                None => Ok(()),
            });
        }
        true
    }
}

/// A batch being handed to the producer: the number of its next record.
#[derive(Debug)]
pub struct Numbering {
    first: usize,
    next: usize,
}

impl Numbering {
    /// The opaque of the batch's next record.
    pub fn number(&mut self) -> usize {
        let n = self.next;
        self.next += 1;
        n
    }
}

impl std::fmt::Debug for Reports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let batches = self.lock();
        f.debug_struct("Reports")
            .field("next", &batches.next)
            .field("open", &batches.open.len())
            .finish()
    }
}

impl Reports {
    fn lock(&self) -> std::sync::MutexGuard<'_, Batches> {
        self.batches.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens a batch: its records are numbered from what it returns, and
    /// their reports are counted into it from now on. One batch is handed
    /// over at a time.
    pub fn begin(&self) -> Numbering {
        let mut batches = self.lock();
        let first = batches.next.max(1);
        batches.open.push_back(Batch {
            first,
            count: None,
            reported: 0,
            failed: None,
            done: None,
        });
        Numbering { first, next: first }
    }

    /// Closes the batch `numbering` numbered: its waiter hears once every
    /// record it handed over is reported (at once for none).
    pub fn seal(&self, numbering: Numbering) -> oneshot::Receiver<Delivered> {
        let (tx, rx) = oneshot::channel();
        let mut batches = self.lock();
        batches.next = numbering.next;
        if let Some(at) = batches.open.iter().position(|b| b.first == numbering.first) {
            let batch = &mut batches.open[at];
            batch.count = Some(numbering.next - numbering.first);
            batch.done = Some(tx);
            if batch.answer_if_complete() {
                batches.open.remove(at);
            }
        }
        rx
    }

    /// Counts the report of record `number` into its batch.
    fn report(&self, number: usize, error: Option<&KafkaError>) {
        if number == UNTRACKED {
            return;
        }
        let mut batches = self.lock();
        let Some(at) = batches.open.iter().rposition(|b| b.first <= number) else {
            return;
        };
        let batch = &mut batches.open[at];
        batch.reported += 1;
        if let Some(error) = error {
            let index = number - batch.first;
            if batch.failed.as_ref().is_none_or(|(i, _)| index < *i) {
                batch.failed = Some((index, error.clone()));
            }
        }
        if batch.answer_if_complete() {
            batches.open.remove(at);
        }
    }
}

impl ClientContext for Reports {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        if is_gapless_notice(facility, message) {
            tracing::debug!(target: "librdkafka", "librdkafka: {facility} {message}");
        } else {
            DefaultClientContext.log(level, facility, message);
        }
    }
}

impl ProducerContext for Reports {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, number: usize) {
        self.report(number, result.as_ref().err().map(|(error, _)| error));
    }
}

/// Whether librdkafka's log line is its notice, given at every start, that
/// `enable.gapless.guarantee` (which the applier sets on purpose) is
/// experimental: logged at debug, so that a warning at start still means
/// something.
pub(crate) fn is_gapless_notice(facility: &str, message: &str) -> bool {
    facility == "CONFWARN" && message.contains("enable.gapless.guarantee is experimental")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::types::RDKafkaErrorCode;

    fn answer(mut rx: oneshot::Receiver<Delivered>) -> Option<Delivered> {
        rx.try_recv().ok()
    }

    #[test]
    fn a_batch_is_answered_once_every_record_is_reported_early_or_late() {
        let reports = Reports::default();
        let mut first = reports.begin();
        let (a, b) = (first.number(), first.number());
        // One report before the batch is handed over whole.
        reports.report(a, None);
        let first_done = reports.seal(first);
        let mut second = reports.begin();
        let c = second.number();
        let second_done = reports.seal(second);
        reports.report(c, None);
        assert_eq!(answer(second_done).map(|d| d.is_ok()), Some(true));
        let mut first_done = first_done;
        assert!(first_done.try_recv().is_err(), "b is not reported yet");
        reports.report(b, None);
        assert_eq!(first_done.try_recv().map(|d| d.is_ok()), Ok(true));
        assert!(reports.lock().open.is_empty());
    }

    #[test]
    fn the_first_record_not_taken_is_named_by_its_place_in_the_batch() {
        let reports = Reports::default();
        let mut batch = reports.begin();
        let numbers: Vec<usize> = (0..4).map(|_| batch.number()).collect();
        let done = reports.seal(batch);
        let refused = KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge);
        reports.report(numbers[3], Some(&refused));
        reports.report(numbers[0], None);
        reports.report(numbers[2], Some(&refused));
        reports.report(numbers[1], None);
        assert_eq!(answer(done), Some(Err((2, refused))));
    }

    #[test]
    fn an_empty_batch_is_answered_at_once_and_untracked_records_are_ignored() {
        let reports = Reports::default();
        reports.report(UNTRACKED, None);
        let batch = reports.begin();
        assert_eq!(answer(reports.seal(batch)), Some(Ok(())));
        reports.report(UNTRACKED, None);
        assert!(reports.lock().open.is_empty());
    }

    #[test]
    fn only_the_notice_of_the_gapless_setting_is_quietened() {
        // As librdkafka 2.x words it when the producer is created.
        let notice = "[thrd:app]: Configuration property enable.gapless.guarantee is \
                      experimental: When set to `true`, any error that could result in a gap \
                      in the produced message series when a batch of messages fails, will \
                      raise a fatal error (ERR__GAPLESS_GUARANTEE) and stop the producer.";
        assert!(is_gapless_notice("CONFWARN", notice));
        assert!(!is_gapless_notice(
            "CONFWARN",
            "[thrd:app]: Configuration property queue.buffering.max.ms is deprecated"
        ));
        assert!(!is_gapless_notice(
            "FAIL",
            "enable.gapless.guarantee is experimental"
        ));
    }
}
