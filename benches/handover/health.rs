//! Health gating's figures: how fast a leader whose worker is condemned
//! hands over (the Nth failed check → the next leader's child running), and
//! what the checks cost leaderd in CPU.

use super::{PROBE, Stats, cpu_ticks, stats};
use crate::support::worker::{Mode, Worker};
use crate::support::{Leaderd, Redis, eventually};
use std::path::Path;
use std::time::{Duration, Instant};

/// Every child start in the probe file, in ns.
fn starts(file: &Path) -> Vec<u64> {
    super::records(file)
        .into_iter()
        .filter(|(kind, _, _)| kind == "start")
        .map(|(_, _, ns)| ns)
        .collect()
}

/// `rounds` step-downs among three candidates on `redis`, each leader's
/// worker turned unhealthy in turn (checks every 500 ms, two failures).
/// Latencies in ms, from the second failed check to the next child running.
pub fn step_downs(redis: &Redis, exe: &str, dir: &Path, rounds: usize) -> Stats {
    let file = dir.join("health.probe");
    let workers: Vec<Worker> = (0..3).map(|_| Worker::start(Mode::Healthy)).collect();
    let url = redis.url();
    let nodes: Vec<Leaderd> = workers
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let health = w.url();
            let args = [
                "--redis",
                &url,
                "--key",
                "health",
                "--ttl",
                "10s",
                "--log-level",
                "warn",
                "--health",
                &health,
                "--health-interval",
                "500ms",
                "--health-timeout",
                "250ms",
                "--health-failures",
                "2",
                "--",
                exe,
                PROBE,
                file.to_str().unwrap(),
            ];
            Leaderd::run(&format!("h{i}"), &args)
        })
        .collect();
    let mut latencies = Vec::new();
    for _ in 0..rounds {
        let leader = eventually(Duration::from_secs(30), "a leader", || {
            nodes.iter().position(Leaderd::is_leader)
        });
        let known = starts(&file).len();
        let since = crate::support::os::mono_ns();
        workers[leader].set(Mode::Unhealthy);
        let next = eventually(Duration::from_secs(30), "the next child", || {
            starts(&file).get(known).copied()
        });
        let condemned = workers[leader]
            .nth_failure_after(since, 2)
            .expect("the second failure was answered") as u64;
        latencies.push(super::ms(next.saturating_sub(condemned)));
        workers[leader].set(Mode::Healthy);
    }
    stats(latencies)
}

/// One candidate on a lock file for `window`: its CPU %, and how many
/// checks it ran.
fn cpu_for(dir: &Path, name: &str, health: &[&str], window: Duration) -> (f64, u64) {
    let lock = dir.join(format!("{name}.lock"));
    let mut args = vec!["--lock-file", lock.to_str().unwrap(), "--log-level", "warn"];
    args.extend_from_slice(health);
    let node = Leaderd::run(name, &args);
    node.wait_leading(Duration::from_secs(30));
    let checks = |node: &Leaderd| -> u64 {
        let (_, body) = node.get("/metrics").expect("/metrics");
        body.as_str()
            .unwrap_or("")
            .lines()
            .filter(|l| l.starts_with("leaderd_health_checks_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    let (t0, c0, n0) = (Instant::now(), cpu_ticks(node.pid()), checks(&node));
    std::thread::sleep(window);
    let (ticks, n) = (cpu_ticks(node.pid()) - c0, checks(&node) - n0);
    let tick_s = 0.01; // USER_HZ is 100 on Linux
    (
        ticks as f64 * tick_s / t0.elapsed().as_secs_f64() * 100.0,
        n,
    )
}

/// The checks' CPU cost on leaderd, over `window` each: none, an HTTP
/// check and a command check, every 100 ms. Rows: (what, CPU %, checks,
/// CPU ms per check above the baseline).
pub fn cost(dir: &Path, window: Duration) -> Vec<(String, f64, u64, f64)> {
    let worker = Worker::start(Mode::Healthy);
    let url = worker.url();
    let every = ["--health-interval", "100ms", "--health-timeout", "90ms"];
    let (base, _) = cpu_for(dir, "none", &[], window);
    let http = [&["--health", url.as_str()][..], &every].concat();
    let command = [&["--health-command", "true"][..], &every].concat();
    let mut rows = vec![("no health check".to_string(), base, 0, 0.0)];
    for (id, name, args) in [
        ("http", "GET every 100 ms", http),
        ("command", "`true` every 100 ms", command),
    ] {
        let (cpu, n) = cpu_for(dir, id, &args, window);
        let per_check =
            (cpu - base).max(0.0) / 100.0 * window.as_secs_f64() * 1000.0 / n.max(1) as f64;
        rows.push((name.to_string(), cpu, n, per_check));
    }
    rows
}
