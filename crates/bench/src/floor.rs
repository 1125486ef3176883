//! The floor under `send_to_ack`: what the broker's acknowledgement costs
//! a bare librdkafka producer with the ledger's contract settings, offered
//! open loop at the latency scenarios' rate on the same broker, with none
//! of the ledger's client, applier or readers around it.

use std::time::Duration;

use rdkafka::producer::{FutureProducer, FutureRecord};
use stockledger_cli::Global;
use stockledger_kafka::admin::{create_topics, TopicSpec};
use stockledger_kafka::config::CONTRACT_SETTINGS;

use crate::cpu::Steal;
use crate::{timeline, BenchArgs, Measurement};

/// The lingers measured: none, and the library's for waiting callers
/// (`Tuning::Latency`).
const LINGERS_MS: [u32; 2] = [0, 1];

/// Records of about a deduct's size, keyed by 100 SKUs, offered at `rate`
/// a second by a producer of each linger in turn, each timed from its due
/// time until the broker acknowledged it.
pub(crate) async fn kafka_floor(
    g: &Global,
    args: &BenchArgs,
    run_id: &str,
    rate: u64,
    records: u64,
) -> anyhow::Result<Vec<Measurement>> {
    let kafka = g.kafka();
    let topic = format!("{run_id}.kafka-floor");
    let spec = TopicSpec {
        name: topic.clone(),
        partitions: args.partitions,
        replication: 1,
        configs: Vec::new(),
    };
    create_topics(&kafka, &[spec]).await?;
    let mut results = Vec::new();
    for linger in LINGERS_MS {
        let linger_ms = linger.to_string();
        let settings: Vec<(&str, &str)> = (CONTRACT_SETTINGS.iter().copied())
            .chain([("linger.ms", linger_ms.as_str())])
            .collect();
        let producer: FutureProducer = kafka.client_config(&settings).create()?;
        let payload = vec![b'x'; 64];
        let offer = |i: u64| {
            let (producer, topic, payload) = (producer.clone(), topic.clone(), payload.clone());
            async move {
                let key = format!("SKU-{:03}", i % 100);
                let record = FutureRecord::to(&topic).key(&key).payload(&payload);
                producer
                    .send(record, Duration::from_secs(30))
                    .await
                    .map_err(|(e, _)| e)?;
                anyhow::Ok(timeline::Answer {
                    acked: Some(tokio::time::Instant::now()),
                    position: None,
                })
            }
        };
        // A second not counted, as the latency scenarios' warm-up.
        timeline::open_loop(rate, 0, rate, offer).await?;
        let steal = Steal::now();
        let run = timeline::open_loop(rate, rate, records, offer).await?;
        let steal = steal.percent_since();
        let [p50, p99, p999] = crate::percentiles_ms(&run.totals()?);
        let stolen = steal.map_or(String::new(), |s| format!("; {s:.1} % of the CPU stolen"));
        let measurement = Measurement::of_latency(
            "kafka-floor",
            &run,
            [p50, p99, p999],
            format!(
                "a bare librdkafka producer (acks=all, idempotent, linger.ms={linger}), {rate}/s offered open loop over 100 keys, 64-byte values, timed from each one's due time until acknowledged: p50 {p50:.1} ms, p99 {p99:.1} ms, p999 {p999:.1} ms{stolen}"
            ),
        );
        crate::print_measurement(&measurement);
        results.push(measurement);
    }
    Ok(results)
}
