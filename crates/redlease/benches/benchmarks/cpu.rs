//! This process's CPU time and resident memory, and the Redis server's CPU time, read from
//! `/proc` and `INFO`: the costs the many-leases and concurrent comparisons report.

use redis::aio::MultiplexedConnection;

use crate::setup::info_field;

/// CPU time this process has used, in seconds: the sum over its threads of the time on CPU
/// (`/proc/self/task/*/schedstat`, nanoseconds), else `utime + stime` of `/proc/self/stat`
/// (clock ticks, assumed 100 Hz). `None` off Linux.
pub(crate) fn process_cpu() -> Option<f64> {
    let mut total_ns: u64 = 0;
    let mut any = false;
    for entry in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let path = entry.path().join("schedstat");
        if let Some(ns) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        {
            total_ns += ns;
            any = true;
        }
    }
    if any {
        return Some(total_ns as f64 / 1e9);
    }
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    // After the command name: state is field 3, utime 14 and stime 15 (1-based).
    Some((ticks(11)? + ticks(12)?) / 100.0)
}

/// This process's anonymous resident memory, in bytes: the resident set minus its
/// file-backed pages (`/proc/self/statm`: resident − shared, 4 KiB pages). What a held lock or
/// election costs is heap; the program's code, paged in as the lock's code first runs (about
/// 1 MB here, the first time a process obtains and renews), is file-backed and does not grow
/// with the number of locks, so it is left out.
pub(crate) fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let mut fields = statm.split_whitespace().skip(1);
    let resident: u64 = fields.next()?.parse().ok()?;
    let shared: u64 = fields.next()?.parse().ok()?;
    Some(resident.saturating_sub(shared) * 4096)
}

/// What a Redis server has done so far: CPU seconds (user + system) and calls per command.
#[derive(Debug, Clone, Default)]
pub(crate) struct ServerSample {
    pub(crate) cpu: f64,
    pub(crate) calls: std::collections::HashMap<String, u64>,
}

impl ServerSample {
    pub(crate) async fn read(conn: &mut MultiplexedConnection) -> ServerSample {
        let info: String = match redis::cmd("INFO").arg("everything").query_async(conn).await {
            Ok(info) => info,
            Err(_) => return ServerSample::default(),
        };
        let num = |f: &str| info_field(&info, f).and_then(|v| v.parse::<f64>().ok());
        let cpu = num("used_cpu_user").unwrap_or(0.0) + num("used_cpu_sys").unwrap_or(0.0);
        let calls = info
            .lines()
            .filter_map(|l| {
                let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = rest
                    .split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse()
                    .ok()?;
                Some((name.to_owned(), calls))
            })
            .collect();
        ServerSample { cpu, calls }
    }

    /// Calls of `names` since `before`.
    pub(crate) fn calls_since(&self, before: &ServerSample, names: &[&str]) -> u64 {
        names
            .iter()
            .map(|n| {
                let now = self.calls.get(*n).copied().unwrap_or(0);
                now.saturating_sub(before.calls.get(*n).copied().unwrap_or(0))
            })
            .sum()
    }

    /// Every call since `before` (the INFO that read `self` included).
    pub(crate) fn all_calls_since(&self, before: &ServerSample) -> u64 {
        let names: Vec<&str> = self.calls.keys().map(String::as_str).collect();
        self.calls_since(before, &names)
    }
}
