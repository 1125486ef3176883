//! CPU time spent by Redis and by the bench process over a scenario: unlike
//! records/s, the CPU one record costs hardly moves when the shared
//! machine is busy with something else.

use stockledger_io::RedisConn;

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
            bench: own_cpu().unwrap_or(0.0),
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

/// User + system CPU seconds of this process, from `/proc/self/stat`.
fn own_cpu() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) end with ')'.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 here.
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / TICKS_PER_SECOND)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_cpu_adds_user_and_system_time_of_the_server() {
        let info = "# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\nused_cpu_sys_children:9.000000\r\nused_cpu_user_children:9.000000\r\n";
        assert_eq!(redis_cpu(info), 3.75);
    }

    #[test]
    fn this_process_has_used_some_cpu() {
        let spent = own_cpu().expect("a Linux /proc");
        assert!(spent >= 0.0);
    }
}
