//! Which partition a SKU's commands belong on.
//!
//! Producers key every command by its SKU and choose the partition the way
//! Java's Kafka clients do for a keyed record: the positive part of the
//! key's murmur2 hash modulo the partition count (librdkafka's
//! `murmur2_random`). A SKU's first record decides nothing by itself: the
//! applier refuses, as `MISROUTED`, a record of a SKU on any partition but
//! the one its state was built on, or, for a SKU with no state yet, this
//! home partition. So the owner of a SKU never depends on the order in
//! which partitions happen to be read, and a replay decides exactly as the
//! live applier did.

/// The partition the Java clients' default partitioner (and librdkafka's
/// `murmur2_random`) sends a record keyed `key` to, among `partitions`.
///
/// ```
/// use stockledger_core::partition::home_partition;
///
/// // As kafka-clients 4.3.1 places them:
/// // Utils.toPositive(Utils.murmur2(key)) % partitions.
/// assert_eq!(home_partition(b"SKU-1", 8), 4);
/// assert_eq!(home_partition(b"SKU-1", 12), 8);
/// assert_eq!(home_partition(b"DEMO-HOT", 12), 9);
/// ```
pub fn home_partition(key: &[u8], partitions: i32) -> i32 {
    let hash = murmur2::murmur2(key, murmur2::KAFKA_SEED) & 0x7fff_ffff;
    // A topic has at least one partition; 0 or less is taken as one.
    (hash % partitions.max(1) as u32) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka's own murmur2 test vectors (as signed ints, the way Java prints
    /// them), also what kafka-python's independent implementation gives.
    #[test]
    fn the_hash_is_kafkas_murmur2() {
        let vectors: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (key, expected) in vectors {
            assert_eq!(
                murmur2::murmur2(key, murmur2::KAFKA_SEED) as i32,
                expected,
                "{}",
                String::from_utf8_lossy(key)
            );
        }
    }

    #[test]
    fn the_partition_is_the_positive_hash_modulo_the_count() {
        // murmur2("SKU-1") = -905834556; & 0x7fffffff = 1241649092.
        assert_eq!(home_partition(b"SKU-1", 12), 1_241_649_092 % 12);
        assert_eq!(home_partition(b"abc", 7), 479_470_107 % 7);
        for n in 1..50 {
            assert!((0..n).contains(&home_partition(b"DEMO-HOT", n)));
        }
        assert_eq!(home_partition(b"x", 0), 0);
    }
}
