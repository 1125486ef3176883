//! Connection settings shared by every Kafka client of stockledger.

use std::fmt;

use rdkafka::ClientConfig;

/// `fetch.queue.backoff.ms` for every consumer that reads a backlog: how
/// long librdkafka waits before fetching a partition again once its queue
/// of fetched messages is over `queued.min.messages`. Its default, one
/// second, idles a reader that drains its queue in less: on a broker that
/// answers a fetch with one partition's messages up to the request's limit
/// (tansu 0.6, 5 MiB), the archiver with a queue of 20,000 messages waited
/// up to a second after every partition's chunk (docs/BENCHMARKS.md,
/// "Fetch waits"). Ten milliseconds costs a consumer a timer, nothing the
/// brokers see.
pub const FETCH_QUEUE_BACKOFF_MS: (&str, &str) = ("fetch.queue.backoff.ms", "10");

/// `fetch.wait.max.ms` for a reader of a finished log (replay, the whole-log
/// reader): some brokers (tansu 0.6) hold every fetch for its whole wait,
/// even with records there. With librdkafka's 500 ms, replay ran at
/// 77-79k records/s, with 10 ms at 117-131k, and a 10M-record log could
/// not be read in a minute (docs/BENCHMARKS.md, "Fetch waits";
/// docs/benchmarks-history.md, "Scale").
pub const READ_TO_END_FETCH_WAIT_MS: (&str, &str) = ("fetch.wait.max.ms", "10");

/// Where the brokers are and any librdkafka settings to pass through
/// (`-X key=value` on the command line, as kcat does).
#[derive(Clone, Default)]
pub struct KafkaConfig {
    /// `bootstrap.servers`: comma-separated `host:port` list.
    pub brokers: String,
    /// Extra librdkafka properties, applied after stockledger's defaults.
    pub properties: Vec<(String, String)>,
}

/// Fragments of property names whose values are secret and never printed.
const SECRET_MARKERS: [&str; 6] = ["password", "secret", "token", "jaas", "pem", "key"];

fn is_secret(name: &str) -> bool {
    SECRET_MARKERS.iter().any(|m| name.contains(m))
}

impl fmt::Debug for KafkaConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let properties: Vec<String> = self
            .properties
            .iter()
            .map(|(k, v)| {
                if is_secret(k) {
                    format!("{k}=<redacted>")
                } else {
                    format!("{k}={v}")
                }
            })
            .collect();
        f.debug_struct("KafkaConfig")
            .field("brokers", &self.brokers)
            .field("properties", &properties)
            .finish()
    }
}

impl KafkaConfig {
    pub fn new(brokers: impl Into<String>) -> Self {
        Self {
            brokers: brokers.into(),
            properties: Vec::new(),
        }
    }

    /// A librdkafka configuration: `defaults` first, then the pass-through
    /// properties (which win over defaults).
    pub fn client_config(&self, defaults: &[(&str, &str)]) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.brokers);
        for (k, v) in defaults {
            config.set(*k, *v);
        }
        for (k, v) in &self.properties {
            config.set(k, v);
        }
        config
    }

    /// The pass-through value of `name`, if one was given.
    pub fn property(&self, name: &str) -> Option<&str> {
        self.properties
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses one `key=value` pass-through property.
pub fn parse_property(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.to_owned())),
        _ => Err(format!("expected key=value, got {s:?}")),
    }
}

/// Settings the contract depends on: retries never reorder or duplicate
/// (idempotent producer, all in-sync replicas), and every client, in any
/// language, routes a SKU to the same partition (Java's murmur2 partitioner).
pub const CONTRACT_SETTINGS: [(&str, &str); 3] = [
    ("enable.idempotence", "true"),
    ("acks", "all"),
    ("partitioner", "murmur2_random"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_hides_secret_properties() {
        let mut c = KafkaConfig::new("127.0.0.1:9092");
        c.properties
            .push(("sasl.password".into(), "hunter2".into()));
        c.properties.push(("linger.ms".into(), "7".into()));
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("sasl.password=<redacted>"), "{shown}");
        assert!(shown.contains("linger.ms=7"), "{shown}");
    }

    #[test]
    fn properties_parse_as_key_equals_value() {
        assert_eq!(
            parse_property("a.b=c=d").unwrap(),
            ("a.b".into(), "c=d".into())
        );
        assert!(parse_property("nokey").is_err());
        assert!(parse_property("=v").is_err());
    }
}
