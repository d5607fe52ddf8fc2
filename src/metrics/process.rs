//! The standard `process_*` metrics (resident memory, CPU seconds, open and
//! maximum file descriptors, start time), read from `/proc/self` at scrape
//! time. A few reads of small files: cheaper than a crate that collects far
//! more than a sidecar needs.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Registered as a collector: read afresh at each scrape.
#[derive(Debug)]
pub struct ProcessMetrics;

/// What `/proc/self/stat` says, in Prometheus's units.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Stat {
    cpu_seconds: f64,
    resident_bytes: f64,
    start_time_seconds: f64,
}

/// Parses `/proc/self/stat`: fields after the command name (which may hold
/// spaces and parentheses, so the split is at the last `)`).
fn parse_stat(text: &str, ticks_per_second: f64, page_size: f64, boot_time: f64) -> Option<Stat> {
    let fields: Vec<&str> = text.rsplit_once(')')?.1.split_whitespace().collect();
    // Field numbers as in proc(5), counted from 3 (state) at index 0.
    let field = |n: usize| fields.get(n - 3)?.parse::<f64>().ok();
    Some(Stat {
        cpu_seconds: (field(14)? + field(15)?) / ticks_per_second,
        resident_bytes: field(24)? * page_size,
        start_time_seconds: boot_time + field(22)? / ticks_per_second,
    })
}

fn boot_time() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

fn stat() -> Option<Stat> {
    // SAFETY: sysconf reads a constant of the running system.
    let (ticks, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if ticks <= 0 || page <= 0 {
        return None;
    }
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    parse_stat(&text, ticks as f64, page as f64, boot_time()?)
}

fn open_fds() -> Option<i64> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    // Less the descriptor read_dir itself holds open.
    Some(entries.count() as i64 - 1)
}

fn max_fds() -> Option<i64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    ok.then(|| i64::try_from(limit.rlim_cur).unwrap_or(i64::MAX))
}

impl Collector for ProcessMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stat = stat();
        if let Some(stat) = stat {
            let cpu = ConstCounter::new(stat.cpu_seconds);
            cpu.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                cpu.metric_type(),
            )?)?;
        }
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                stat.map(|s| s.resident_bytes),
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch in seconds",
                stat.map(|s| s.start_time_seconds),
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                open_fds().map(|n| n as f64),
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                max_fds().map(|n| n as f64),
            ),
        ];
        for (name, help, value) in gauges {
            let Some(value) = value else { continue };
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        // A command name with a space and a parenthesis in it.
        let line = "4242 (lead erd) x) S 1 4242 4242 0 -1 4194560 500 0 0 0 250 150 0 0 20 0 3 0 1000 12345678 2048 18446744073709551615";
        let stat = parse_stat(line, 100.0, 4096.0, 1_700_000_000.0).expect("parses");
        assert_eq!(
            stat,
            Stat {
                cpu_seconds: 4.0,
                resident_bytes: 2048.0 * 4096.0,
                start_time_seconds: 1_700_000_010.0,
            }
        );
        assert_eq!(parse_stat("garbage", 100.0, 4096.0, 0.0), None);
    }

    #[test]
    fn this_process_has_memory_and_descriptors() {
        let stat = stat().expect("/proc/self/stat");
        assert!(stat.resident_bytes > 0.0);
        assert!(open_fds().expect("/proc/self/fd") >= 3);
        assert!(max_fds().expect("RLIMIT_NOFILE") >= 3);
    }
}
