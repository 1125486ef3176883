//! When each record of a batch passed the applier's steps, for a caller
//! that times decisions hop by hop (the bench's latency scenarios). Off
//! unless [`super::ApplierConfig::hops`] is set: the loop then reads no
//! clock a record.

use std::sync::mpsc::Sender;
use std::time::Instant;

/// One record's steps through the applier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHops {
    /// Partition and offset of the command record.
    pub partition: i32,
    pub offset: i64,
    /// When the applier's consumer handed it over.
    pub read: Instant,
    /// When its batch was decided (before anything of it was written).
    pub decided: Instant,
    /// When Redis answered its batch's write (the announcement to waiting
    /// callers is part of it).
    pub written: Instant,
    /// When the brokers had acknowledged every outcome of its batch.
    pub delivered: Instant,
}

/// Where an applier sends the steps of each batch it delivered, one
/// message a batch.
#[derive(Clone)]
pub struct HopSink(Sender<Vec<RecordHops>>);

impl HopSink {
    pub fn new(sender: Sender<Vec<RecordHops>>) -> Self {
        Self(sender)
    }

    /// Hands on a batch's steps; a receiver gone is no error.
    pub(super) fn send(&self, batch: Vec<RecordHops>) {
        let _ = self.0.send(batch);
    }
}

impl std::fmt::Debug for HopSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HopSink")
    }
}

/// A batch's steps until its outcomes are delivered: each record's
/// position and read time, and when the batch was decided and written.
pub(super) struct Pending {
    pub(super) records: Vec<(i32, i64, Instant)>,
    pub(super) decided: Instant,
    pub(super) written: Instant,
}

impl Pending {
    /// The batch's steps, delivered now.
    pub(super) fn delivered(self) -> Vec<RecordHops> {
        let delivered = Instant::now();
        self.records
            .into_iter()
            .map(|(partition, offset, read)| RecordHops {
                partition,
                offset,
                read,
                decided: self.decided,
                written: self.written,
                delivered,
            })
            .collect()
    }
}
