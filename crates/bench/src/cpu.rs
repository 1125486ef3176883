//! CPU time spent by Redis and by the bench process over a scenario: unlike
//! records/s, the CPU one record costs hardly moves when the shared
//! machine is busy with something else.

use stockledger_redis::RedisConn;

/// Linux's `USER_HZ`: the unit of the times in `/proc/<pid>/stat`.
const TICKS_PER_SECOND: f64 = 100.0;

/// CPU seconds (user + system) Redis and this process have used so far.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuTimes {
    redis: f64,
    bench: f64,
}

impl CpuTimes {
    pub(crate) async fn now(redis: &RedisConn) -> anyhow::Result<Self> {
        let info: String = redis
            .query_each(vec![redis::cmd("INFO").arg("cpu").clone()])
            .await?
            .pop()
            .unwrap_or_default();
        Ok(Self {
            redis: redis_cpu(&info),
            bench: pid_cpu(std::process::id()).unwrap_or(0.0),
        })
    }

    /// What `records` cost since `self`: "Redis A µs, bench process B µs
    /// of CPU per record".
    pub(crate) async fn per_record(
        self,
        redis: &RedisConn,
        records: u64,
    ) -> anyhow::Result<String> {
        let now = Self::now(redis).await?;
        let per = |seconds: f64| seconds * 1e6 / records.max(1) as f64;
        Ok(format!(
            "CPU per record: Redis {:.1} µs, bench process {:.1} µs",
            per(now.redis - self.redis),
            per(now.bench - self.bench)
        ))
    }
}

/// The whole machine's busy CPU time (every process: the broker, Redis,
/// PostgreSQL, the bench, the JVM of the Kafka Streams peer, and anything
/// else running), read from `/proc/stat`, around a scenario's timed part.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MachineCpu(Option<f64>);

impl MachineCpu {
    pub(crate) fn now() -> Self {
        Self(proc_stat().and_then(|s| machine_busy(&s)))
    }

    /// Busy CPU seconds of the whole machine since `self` (`None` without
    /// a Linux `/proc`).
    pub(crate) fn since(self) -> Option<f64> {
        Some(Self::now().0? - self.0?)
    }
}

/// Busy seconds of the `cpu` line of `/proc/stat`: user, nice, system,
/// irq and softirq (guest time is within user; idle, iowait and steal
/// are not work done here).
fn machine_busy(stat: &str) -> Option<f64> {
    let ticks = cpu_ticks(stat)?;
    let at = |i: usize| ticks.get(i).copied();
    Some((at(0)? + at(1)? + at(2)? + at(5)? + at(6)?) / TICKS_PER_SECOND)
}

/// The `cpu` line of `/proc/stat` at one moment: the ticks stolen from
/// this machine by its host, and all ticks, to tell a run on a busy
/// machine from one on a quiet one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Steal(Option<(f64, f64)>);

impl Steal {
    pub(crate) fn now() -> Self {
        Self(proc_stat().and_then(|s| steal_and_total(&s)))
    }

    /// The share of the machine's CPU time stolen since `self`, in per
    /// cent (`None` without a Linux `/proc`).
    pub(crate) fn percent_since(self) -> Option<f64> {
        let (steal, total) = self.0?;
        let (steal_now, total_now) = Self::now().0?;
        Some(100.0 * (steal_now - steal) / (total_now - total).max(1.0))
    }
}

/// Steal ticks and all ticks of the `cpu` line of `/proc/stat` (guest
/// time is within user, so not counted twice).
fn steal_and_total(stat: &str) -> Option<(f64, f64)> {
    let ticks = cpu_ticks(stat)?;
    Some((*ticks.get(7)?, ticks.iter().take(8).sum()))
}

/// The tick counts of the `cpu` line (all CPUs) of `/proc/stat`, in order.
fn cpu_ticks(stat: &str) -> Option<Vec<f64>> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    line.split_whitespace()
        .skip(1)
        .map(|t| t.parse().ok())
        .collect()
}

/// `/proc/stat` now (`None` without a Linux `/proc`).
fn proc_stat() -> Option<String> {
    std::fs::read_to_string("/proc/stat").ok()
}

/// CPU seconds so far of every service a pipeline runs on, each read
/// where it is kept: `INFO cpu` for Redis, `/proc/<pid>/stat` for the
/// rest (the broker's process id from the local stack's state directory,
/// PostgreSQL's as every process named `postgres`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ServiceCpu {
    pub(crate) appliers: f64,
    pub(crate) archiver: f64,
    pub(crate) redis: f64,
    pub(crate) postgres: f64,
    /// `None` where the broker's process is not known (not the local stack).
    pub(crate) broker: Option<f64>,
    /// The bench process: the order services' producers.
    pub(crate) producers: f64,
}

impl ServiceCpu {
    pub(crate) async fn now(
        redis: &RedisConn,
        appliers: &[u32],
        archiver: Option<u32>,
    ) -> anyhow::Result<Self> {
        let times = CpuTimes::now(redis).await?;
        Ok(Self {
            appliers: appliers.iter().filter_map(|&p| pid_cpu(p)).sum(),
            archiver: archiver.and_then(pid_cpu).unwrap_or(0.0),
            redis: times.redis,
            postgres: named_cpu("postgres"),
            broker: broker_pid().and_then(pid_cpu),
            producers: times.bench,
        })
    }

    /// What each service spent from `self` to `later`, in CPU seconds per
    /// million of `records`.
    pub(crate) fn per_million(&self, later: &Self, records: u64) -> Self {
        let per = |a: f64, b: f64| per_million(a, b, records);
        Self {
            appliers: per(self.appliers, later.appliers),
            archiver: per(self.archiver, later.archiver),
            redis: per(self.redis, later.redis),
            postgres: per(self.postgres, later.postgres),
            broker: self.broker.zip(later.broker).map(|(a, b)| per(a, b)),
            producers: per(self.producers, later.producers),
        }
    }
}

impl std::fmt::Display for ServiceCpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "appliers {:.1}, archiver {:.1}, Redis {:.1}, PostgreSQL {:.1}, broker {}, producers {:.1}",
            self.appliers,
            self.archiver,
            self.redis,
            self.postgres,
            shown(self.broker),
            self.producers
        )
    }
}

/// CPU seconds per million of `count` things done between two readings of
/// CPU seconds.
fn per_million(before: f64, after: f64, count: u64) -> f64 {
    (after - before) * 1e6 / count.max(1) as f64
}

/// [`per_million`] of two readings either of which may be missing,
/// [`shown`].
pub(crate) fn shown_per_million(before: Option<f64>, after: Option<f64>, count: u64) -> String {
    shown(
        before
            .zip(after)
            .map(|(before, after)| per_million(before, after, count)),
    )
}

/// CPU seconds with one decimal, or "unknown" where they could not be read.
pub(crate) fn shown(seconds: Option<f64>) -> String {
    seconds.map_or_else(|| "unknown".into(), |s| format!("{s:.1}"))
}

/// User + system CPU seconds of process `pid`.
pub(crate) fn pid_cpu(pid: u32) -> Option<f64> {
    stat_cpu(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// User + system CPU seconds of every running process whose command name
/// is `name`.
fn named_cpu(name: &str) -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    entries
        .filter_map(|e| {
            let stat = std::fs::read_to_string(e.ok()?.path().join("stat")).ok()?;
            let command = stat.split_once('(')?.1.rsplit_once(')')?.0;
            (command == name).then(|| stat_cpu(&stat))?
        })
        .sum()
}

/// The broker's process id as the local stack records it
/// (`$STOCKLEDGER_HOME/broker.pid`, by default `~/.stockledger`).
pub(crate) fn broker_pid() -> Option<u32> {
    std::fs::read_to_string(crate::stack_home()?.join("broker.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// `used_cpu_user` + `used_cpu_sys` of an `INFO cpu` reply (the server's
/// main thread and its others; not its children).
fn redis_cpu(info: &str) -> f64 {
    info.lines()
        .filter_map(|l| {
            let (name, value) = l.trim().split_once(':')?;
            matches!(name, "used_cpu_user" | "used_cpu_sys").then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

/// User + system CPU seconds of this process's children that have ended
/// and been waited for (`cutime` + `cstime` of `/proc/self/stat`): around
/// one child's run, while no other ends, that child's CPU.
pub(crate) fn ended_children_cpu() -> Option<f64> {
    stat_seconds(&std::fs::read_to_string("/proc/self/stat").ok()?, 13)
}

/// User + system CPU seconds of a `/proc/<pid>/stat` line.
fn stat_cpu(stat: &str) -> Option<f64> {
    // utime and stime are fields 14 and 15 of the line.
    stat_seconds(stat, 11)
}

/// The sum, in seconds, of the two tick counts at `first` and after it,
/// counting the fields that follow the command name from 0 (field 3 of
/// the line is 0 here).
fn stat_seconds(stat: &str, first: usize) -> Option<f64> {
    // Fields after the command name (which may hold spaces and parentheses)
    // follow its last ')'.
    let rest = stat.rsplit_once(')')?.1;
    let mut fields = rest.split_whitespace().skip(first);
    let mut ticks = || fields.next()?.parse::<f64>().ok();
    Some((ticks()? + ticks()?) / TICKS_PER_SECOND)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_is_busy_for_user_nice_system_irq_and_softirq_time() {
        let stat = "cpu  100 20 30 5000 70 4 6 900 0 0\ncpu0 50 10 15 2500 35 2 3 450 0 0\n";
        assert_eq!(machine_busy(stat), Some(1.6));
        assert_eq!(machine_busy("cpu0 1 2 3\n"), None);
        assert!(MachineCpu::now().since().is_some(), "a Linux /proc/stat");
    }

    #[test]
    fn steal_is_the_eighth_tick_count_of_the_cpu_line_out_of_the_first_eight() {
        let stat = "cpu  100 20 30 5000 70 4 6 900 0 0\ncpu0 50 10 15 2500 35 2 3 450 0 0\n";
        assert_eq!(steal_and_total(stat), Some((900.0, 6130.0)));
        assert_eq!(steal_and_total("cpu  1 2 3\n"), None);
        assert!(Steal::now().percent_since().is_some(), "a Linux /proc/stat");
    }

    #[test]
    fn redis_cpu_adds_user_and_system_time_of_the_server() {
        let info = "# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\nused_cpu_sys_children:9.000000\r\nused_cpu_user_children:9.000000\r\n";
        assert_eq!(redis_cpu(info), 3.75);
    }

    #[test]
    fn a_stat_line_gives_user_plus_system_time_past_a_command_name_with_parentheses() {
        let stat = "4242 (bench (x) 1) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 75 40 10 20 0 9 0";
        assert_eq!(stat_cpu(stat), Some(3.25));
        assert_eq!(stat_seconds(stat, 13), Some(0.5), "the children's times");
        assert_eq!(stat_cpu("4242 (bench) S 1"), None);
    }

    #[test]
    fn this_process_is_seen_spending_cpu_while_it_works() {
        let own = || pid_cpu(std::process::id()).expect("a Linux /proc");
        let before = own();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut spin = 0u64;
        while own() <= before {
            assert!(
                std::time::Instant::now() < deadline,
                "10 s of work and no CPU time counted"
            );
            for i in 0..100_000u64 {
                spin = std::hint::black_box(spin.wrapping_mul(31).wrapping_add(i));
            }
        }
    }

    #[test]
    fn a_child_that_worked_and_ended_is_counted() {
        let before = ended_children_cpu().expect("a Linux /proc");
        // A shell counting until it has used a tick of CPU or more.
        let status = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"])
            .status()
            .expect("sh runs");
        assert!(status.success());
        let after = ended_children_cpu().expect("a Linux /proc");
        assert!(after > before, "{before} s then {after} s");
    }
}
