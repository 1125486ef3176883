//! A decision's time broken into its hops, from the caller's send to the
//! caller having its answer: the caller's clock for the send, the broker's
//! acknowledgement and the answer, the applier's ([`RecordHops`]) for what
//! happened in between, all on this one machine's monotonic clock.

use std::collections::HashMap;
use std::sync::mpsc::Receiver;

use stockledger_applier::applier::hops::RecordHops;

use crate::timeline::Sample;
use crate::Measurement;

/// The steps an applier reported on `receiver` until now (read once it
/// stopped: it reports a batch once its outcomes are delivered), by the
/// command's partition and offset.
pub(crate) fn steps(receiver: &Receiver<Vec<RecordHops>>) -> HashMap<(i32, i64), RecordHops> {
    receiver
        .try_iter()
        .flatten()
        .map(|h| ((h.partition, h.offset), h))
        .collect()
}

/// Where the caller learns its decision, so where its last hop starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Caller {
    /// From Redis, announced by the batch's write.
    Redis,
    /// From the outcomes topic, once the outcome is acknowledged.
    Outcomes,
}

/// The hops, in the order a decision passes them; `send_to_read` is the
/// first two together, the one a caller that does not see the broker's
/// acknowledgement (the gateway's) can time.
pub(crate) const HOPS: [&str; 7] = [
    "send_to_ack",
    "ack_to_read",
    "send_to_read",
    "read_to_decided",
    "decided_to_written",
    "written_to_delivered",
    "to_caller",
];

/// Each hop's p50, p99 and p999 (milliseconds) over the decisions whose
/// steps were seen (a hop no caller saw left out), how many those were,
/// and the share of the machine's CPU time stolen during the run.
#[derive(Debug, Clone)]
pub(crate) struct Hops {
    pub(crate) ms: Vec<(&'static str, [f64; 3])>,
    pub(crate) timed: usize,
    pub(crate) steal_percent: Option<f64>,
}

impl Hops {
    /// The hops of `samples`, matched by their position to the applier's
    /// `steps`.
    pub(crate) fn of(
        samples: &[Sample],
        steps: &HashMap<(i32, i64), RecordHops>,
        caller: Caller,
        steal_percent: Option<f64>,
    ) -> anyhow::Result<Self> {
        let mut hops: Vec<hdrhistogram::Histogram<u64>> = HOPS
            .iter()
            .map(|_| hdrhistogram::Histogram::new(3))
            .collect::<Result<_, _>>()?;
        let mut timed = 0;
        for sample in samples {
            let Some(step) = sample.position.and_then(|p| steps.get(&p)) else {
                continue;
            };
            let (due, answered) = (sample.due.into_std(), sample.answered.into_std());
            let acked = sample.acked.map(tokio::time::Instant::into_std);
            let heard = match caller {
                Caller::Redis => step.written,
                Caller::Outcomes => step.delivered,
            };
            let spans = [
                acked.map(|acked| (due, acked)),
                acked.map(|acked| (acked, step.read)),
                Some((due, step.read)),
                Some((step.read, step.decided)),
                Some((step.decided, step.written)),
                Some((step.written, step.delivered)),
                Some((heard, answered)),
            ];
            for (h, (from, to)) in hops
                .iter_mut()
                .zip(spans)
                .filter_map(|(h, s)| Some((h, s?)))
            {
                // A step seen on two threads may be read a hair before the
                // one it follows: counted as no time.
                h.record(to.saturating_duration_since(from).as_micros() as u64)?;
            }
            timed += 1;
        }
        anyhow::ensure!(
            timed > 0,
            "no decision's hops could be timed: the applier reported no step of the commands offered"
        );
        Ok(Self {
            ms: (HOPS.iter().zip(&hops))
                .filter(|(_, h)| !h.is_empty())
                .map(|(&name, h)| (name, crate::percentiles_ms(h)))
                .collect(),
            timed,
            steal_percent,
        })
    }

    /// `measurement` with these hops, told in its setup too.
    pub(crate) fn add_to(self, mut measurement: Measurement) -> Measurement {
        measurement.setup = format!("{}; {}", measurement.setup, self.line());
        measurement.hops = Some(self);
        measurement
    }

    /// One line for the results: "hops p50/p99/p999 ms: send_to_ack
    /// 1.2/4.0/9.1, …; 2.1 % stolen".
    pub(crate) fn line(&self) -> String {
        let hops: Vec<String> = self
            .ms
            .iter()
            .map(|(name, [p50, p99, p999])| format!("{name} {p50:.1}/{p99:.1}/{p999:.1}"))
            .collect();
        let steal = self
            .steal_percent
            .map_or(String::new(), |s| format!("; {s:.1} % of the CPU stolen"));
        format!(
            "hops p50/p99/p999 ms over {} decisions: {}{steal}",
            self.timed,
            hops.join(", ")
        )
    }

    /// The hops as `results.json` gives them.
    pub(crate) fn json(&self) -> serde_json::Value {
        (self.ms.iter())
            .map(|(name, [p50, p99, p999])| {
                (
                    (*name).to_owned(),
                    serde_json::json!({"p50": p50, "p99": p99, "p999": p999}),
                )
            })
            .collect::<serde_json::Map<_, _>>()
            .into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::time::Instant;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn each_hop_runs_from_one_step_to_the_next_and_the_caller_hears_where_it_listens() {
        let due = Instant::now();
        let sample = Sample {
            due_s: 0.0,
            total_us: 20_000,
            ack_us: Some(2_000),
            due,
            acked: Some(due + ms(2)),
            answered: due + ms(20),
            position: Some((3, 41)),
        };
        let start = due.into_std();
        let step = RecordHops {
            partition: 3,
            offset: 41,
            read: start + ms(5),
            decided: start + ms(9),
            written: start + ms(10),
            delivered: start + ms(16),
        };
        let steps = HashMap::from([((3, 41), step)]);
        let unseen = Sample {
            position: Some((3, 42)),
            ..sample
        };
        let redis = Hops::of(&[sample, unseen], &steps, Caller::Redis, Some(1.5)).unwrap();
        // To a tenth of a millisecond: the histograms keep 3 figures.
        let tenth = |ms: f64| (ms * 10.0).round() / 10.0;
        let p50: Vec<(&str, f64)> = (redis.ms.iter())
            .map(|(n, [p50, ..])| (*n, tenth(*p50)))
            .collect();
        assert_eq!(
            p50,
            [
                ("send_to_ack", 2.0),
                ("ack_to_read", 3.0),
                ("send_to_read", 5.0),
                ("read_to_decided", 4.0),
                ("decided_to_written", 1.0),
                ("written_to_delivered", 6.0),
                ("to_caller", 10.0),
            ]
        );
        assert_eq!(redis.timed, 1, "the sample the applier did not report");
        let outcomes = Hops::of(&[sample], &steps, Caller::Outcomes, None).unwrap();
        assert_eq!(
            (outcomes.ms[6].0, tenth(outcomes.ms[6].1[1])),
            ("to_caller", 4.0)
        );
        // Without the acknowledgement (the gateway's callers): its two
        // hops are left out, the send to the read is not.
        let unacked = Sample {
            acked: None,
            ..sample
        };
        let gateway = Hops::of(&[unacked], &steps, Caller::Redis, None).unwrap();
        let names: Vec<&str> = gateway.ms.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, HOPS[2..]);
        assert!(
            redis.line().contains("to_caller 10.0/10.0/10.0"),
            "{}",
            redis.line()
        );
        let json = redis.json();
        assert_eq!(json["ack_to_read"]["p99"].as_f64().map(tenth), Some(3.0));
        assert!(Hops::of(&[unseen], &steps, Caller::Redis, None).is_err());
    }
}
