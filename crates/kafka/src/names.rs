//! Names the ledger's services share on the brokers: the consumer groups
//! they join unless told otherwise, and the headers of the dead-letter
//! topic. The services that write them and the tools that read them (the
//! gateway, `status`, the dead-letter commands) take them from here.

/// The appliers' consumer group unless told otherwise.
pub const APPLIER_GROUP: &str = "stockledger-applier";
/// The archivers' consumer group unless told otherwise.
pub const ARCHIVER_GROUP: &str = "stockledger-archiver";

/// Header of a dead-lettered record: why it was refused.
pub const DLQ_REASON_HEADER: &str = "stockledger.reason";
/// Header of a dead-lettered record: where it came from (`topic/partition@offset`).
pub const DLQ_SOURCE_HEADER: &str = "stockledger.source";
/// Header of a dead letter that holds a digest instead of the value: the
/// value's SHA-256, in lower-case hex. Its absence means the dead letter
/// carries the record's own key, value and headers.
pub const DLQ_VALUE_SHA256_HEADER: &str = "stockledger.value-sha256";
/// Header of a digest dead letter: the value's length in bytes, in decimal.
pub const DLQ_VALUE_LENGTH_HEADER: &str = "stockledger.value-length";
