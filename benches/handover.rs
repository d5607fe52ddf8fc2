//! leaderd's handover benchmark (`scripts/bench`, or `cargo bench --bench
//! handover`): starts its own redis-server and leaderd instances and prints
//! a table of handover latency, crash takeover, idle cost, contention, binary
//! size and start-up time. See README "Performance".
//!
//! The child every leaderd runs is this binary itself (`handover __probe
//! FILE`): it appends `start PID NS` when it starts and `stop PID NS` when
//! SIGTERM arrives (CLOCK_MONOTONIC, comparable across processes), so a
//! handover is measured from the SIGTERM sent to the old leader to the
//! moment the new leader's child runs, and overlaps can be checked.

#[path = "../tests/it/support/mod.rs"]
// The benchmark uses some of the fixtures only.
#[allow(dead_code, unused_imports)]
mod support;

#[path = "handover/clientgo.rs"]
mod clientgo;
#[path = "handover/fence.rs"]
mod fence;
#[path = "handover/health.rs"]
mod health;
#[path = "handover/rollout.rs"]
mod rollout;
#[path = "handover/scale.rs"]
mod scale;
#[path = "handover/service.rs"]
mod service;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use support::{Leaderd, Redis, eventually};

const PROBE: &str = "__probe";

fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn append(file: &str, line: String) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .expect("probe file");
    f.write_all(line.as_bytes()).expect("write probe file");
}

/// The child: record the start, block until SIGTERM, record the stop.
fn probe(file: &str) -> ! {
    let mut signals =
        signal_hook::iterator::Signals::new([libc::SIGTERM]).expect("SIGTERM handler");
    let pid = std::process::id();
    append(file, format!("start {pid} {}\n", mono_ns()));
    signals.forever().next();
    append(file, format!("stop {pid} {}\n", mono_ns()));
    std::process::exit(0)
}

/// `(kind, pid, ns)` records of a probe file.
fn records(file: &Path) -> Vec<(String, u32, u64)> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((
                f.next()?.to_string(),
                f.next()?.parse().ok()?,
                f.next()?.parse().ok()?,
            ))
        })
        .collect()
}

fn starts_after(file: &Path, t: u64) -> Option<u64> {
    records(file)
        .into_iter()
        .filter(|(k, _, ns)| k == "start" && *ns > t)
        .map(|r| r.2)
        .min()
}

/// Most children alive at once according to the probe records.
fn max_overlap(file: &Path) -> i32 {
    let mut timeline: Vec<(u64, i32)> = records(file)
        .into_iter()
        .map(|(k, _, ns)| (ns, if k == "start" { 1 } else { -1 }))
        .collect();
    timeline.sort();
    let (mut running, mut most) = (0, 0);
    for (_, d) in timeline {
        running += d;
        most = most.max(running);
    }
    most
}

struct Stats {
    median: f64,
    max: f64,
    n: usize,
}

fn stats(mut ms: Vec<f64>) -> Stats {
    ms.sort_by(f64::total_cmp);
    Stats {
        median: ms[ms.len() / 2],
        max: *ms.last().unwrap(),
        n: ms.len(),
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

struct Bench {
    redis: Redis,
    /// Redlock: the other masters (the lease is read on `redis`, the first).
    more: Vec<Redis>,
    /// Redlock: masters the candidates are given but the bench never reads
    /// (frozen: a read would hang).
    silent: Vec<Redis>,
    exe: String,
    dir: PathBuf,
    next_id: usize,
    /// Extra flags for every candidate (the CA for the TLS run).
    extra: Vec<String>,
    /// PostgreSQL instead of Redis: the server and the URL's query.
    pg: Option<(support::postgres::Postgres, &'static str)>,
    /// etcd instead of Redis.
    etcd: Option<support::etcd::Etcd>,
    /// ZooKeeper instead of Redis.
    zk: Option<support::zookeeper::ZooKeeper>,
    /// A Kubernetes Lease instead of Redis: the control plane and the
    /// candidates' kubeconfig.
    kube: Option<(support::kube::Kube, PathBuf)>,
}

impl Bench {
    fn candidate(&mut self, key: &str, ttl: &str, probe_file: Option<&Path>) -> Leaderd {
        self.next_id += 1;
        let id = format!("c{}", self.next_id);
        let urls: Vec<String> = std::iter::once(&self.redis)
            .chain(&self.more)
            .chain(&self.silent)
            .map(Redis::url)
            .collect();
        let pg_url = self.pg.as_ref().map(|(pg, query)| pg.url(query));
        let mut etcd_args = self.etcd.as_ref().map(support::etcd::Etcd::args);
        if let Some(zk) = &self.zk {
            etcd_args = Some(vec!["--zookeeper".to_string(), zk.connect()]);
        }
        if let Some((_, kubeconfig)) = &self.kube {
            let name = support::backends::lease_name(key);
            let config = kubeconfig.to_str().expect("utf-8").to_string();
            etcd_args = Some(vec![
                "--kubernetes-lease".into(),
                name,
                "--kubeconfig".into(),
                config,
            ]);
        }
        let mut args: Vec<&str> = match (&pg_url, &etcd_args) {
            (Some(url), _) => vec!["--postgres", url, "--postgres-timeout", "200ms"],
            (None, Some(etcd)) => etcd.iter().map(String::as_str).collect(),
            (None, None) => urls.iter().flat_map(|u| ["--redis", u.as_str()]).collect(),
        };
        args.extend(["--key", key, "--ttl", ttl, "--log-level", "warn"]);
        args.extend(self.extra.iter().map(String::as_str));
        let file;
        if let Some(f) = probe_file {
            file = f.to_str().unwrap().to_string();
            args.extend(["--", self.exe.as_str(), PROBE, file.as_str()]);
        }
        Leaderd::run(&id, &args)
    }

    fn holder(&self, key: &str) -> Option<String> {
        if let Some((kube, _)) = &self.kube {
            let lease = kube.lease(&support::backends::lease_name(key))?;
            return lease["spec"]["holderIdentity"].as_str().map(str::to_string);
        }
        if let Some(zk) = &self.zk {
            let path = format!("/leaderd/{key}/leader");
            let data = zk.with(async |c| c.get_data(&path).await.ok().map(|(d, _)| d))?;
            let json: serde_json::Value = serde_json::from_slice(&data).ok()?;
            return json["id"].as_str().map(str::to_string);
        }
        if let Some(etcd) = &self.etcd {
            let value = etcd.ctl(&[
                "get",
                &format!("leaderd/{key}/leader"),
                "--print-value-only",
            ])?;
            let json: serde_json::Value = serde_json::from_str(&value).ok()?;
            return json["id"].as_str().map(str::to_string);
        }
        if let Some((pg, _)) = &self.pg {
            let holder = pg.sql(&format!(
                "SELECT holder FROM leaderd_lease WHERE key = '{key}' AND expires_at > clock_timestamp()"
            ));
            return (!holder.is_empty()).then_some(holder);
        }
        // Redlock: the id a majority of the masters hold. One master alone
        // may still hold the leftover of a candidate's failed attempt
        // (given back a moment later): read as the holder, the bench once
        // sent SIGTERM to that standby and waited in vain for a handover.
        let masters: Vec<&Redis> = std::iter::once(&self.redis).chain(&self.more).collect();
        let ids: Vec<String> = masters
            .iter()
            .filter_map(|m| {
                let value = m.get(&format!("leaderd:{{{key}}}:lease"))?;
                let json: serde_json::Value = serde_json::from_str(&value).ok()?;
                json["id"].as_str().map(str::to_string)
            })
            .collect();
        let quorum = (masters.len() + self.silent.len()) / 2 + 1;
        ids.iter()
            .find(|id| ids.iter().filter(|other| other == id).count() >= quorum)
            .cloned()
    }

    /// Graceful handovers among `k` candidates: SIGTERM to the leader → the
    /// next leader's child runs. Returns the latencies (ms) and max overlap.
    fn handovers(&mut self, k: usize, rounds: usize) -> (Stats, i32) {
        self.handovers_on(&format!("graceful-{k}"), k, rounds)
    }

    /// [`Bench::handovers`] on election `key`.
    fn handovers_on(&mut self, key: &str, k: usize, rounds: usize) -> (Stats, i32) {
        let key = key.to_string();
        let file = self.dir.join(format!("{key}.probe"));
        let mut nodes: Vec<Leaderd> = (0..k)
            .map(|_| self.candidate(&key, "10s", Some(&file)))
            .collect();
        let mut latencies = Vec::new();
        for _ in 0..rounds {
            let leader = eventually(
                Duration::from_secs(30),
                "a leader with a running child",
                || {
                    let id = self.holder(&key)?;
                    let i = nodes.iter().position(|n| n.id == id)?;
                    (records(&file).iter().filter(|r| r.0 == "start").count()
                        > records(&file).iter().filter(|r| r.0 == "stop").count())
                    .then_some(i)
                },
            );
            // Let the others settle into waiting before the handover.
            std::thread::sleep(Duration::from_millis(200));
            // kill(2) directly: the test helper runs /bin/kill, whose own
            // start-up would be counted as handover time.
            let t0 = mono_ns();
            // SAFETY: plain syscall to a process we started.
            unsafe { libc::kill(nodes[leader].pid() as i32, libc::SIGTERM) };
            let started = eventually(Duration::from_secs(30), "the next child", || {
                starts_after(&file, t0)
            });
            latencies.push(ms(started - t0));
            nodes[leader].wait_exit(Duration::from_secs(30));
            nodes[leader] = self.candidate(&key, "10s", Some(&file));
        }
        (stats(latencies), max_overlap(&file))
    }

    /// SIGKILL of the leader → the next leader's child runs, measured from
    /// the lease's expiry (PTTL read just before the kill).
    fn crash_takeovers(&mut self, rounds: usize) -> Stats {
        self.crash_takeovers_both(rounds).0
    }

    /// [`Bench::crash_takeovers`], and the same measured from the kill.
    fn crash_takeovers_both(&mut self, rounds: usize) -> (Stats, Stats) {
        let key = "crash";
        let file = self.dir.join("crash.probe");
        let mut nodes: Vec<Leaderd> = (0..3)
            .map(|_| self.candidate(key, "3s", Some(&file)))
            .collect();
        let mut after_expiry = Vec::new();
        let mut after_kill = Vec::new();
        for _ in 0..rounds {
            let leader = eventually(Duration::from_secs(30), "a leader", || {
                let id = self.holder(key)?;
                nodes.iter().position(|n| n.id == id)
            });
            std::thread::sleep(Duration::from_millis(200));
            let mut asked = mono_ns();
            let pttl = match &self.pg {
                Some((pg, _)) => {
                    let left = pg
                        .sql(&format!(
                            "SELECT greatest(0, (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint) FROM leaderd_lease WHERE key = '{key}'"
                        ))
                        .parse()
                        .unwrap_or(0);
                    // psql's own start-up comes before its query: the
                    // reading is nearer the moment it exits.
                    asked = mono_ns();
                    left
                }
                // etcd's TTLs are whole seconds, and a ZooKeeper session's
                // time left is not told: counted from the kill.
                // A Lease's waiters count its duration from their own last
                // look: counted from the kill too.
                None if self.etcd.is_some() || self.zk.is_some() || self.kube.is_some() => 0,
                None => self.redis.pttl(&format!("leaderd:{{{key}}}:lease")).max(0) as u64,
            };
            nodes[leader].signal("KILL");
            let expiry = asked + pttl * 1_000_000;
            let started = eventually(Duration::from_secs(30), "the next child", || {
                starts_after(&file, asked)
            });
            after_expiry.push(ms(started.saturating_sub(expiry)));
            after_kill.push(ms(started.saturating_sub(asked)));
            nodes[leader].wait_exit(Duration::from_secs(5));
            nodes[leader] = self.candidate(key, "3s", Some(&file));
        }
        (stats(after_expiry), stats(after_kill))
    }

    /// Elect-only candidates left alone: Redis commands/s, RSS and CPU.
    fn idle(&mut self, k: usize, window: Duration) -> (f64, f64, f64, f64, f64) {
        let key = format!("idle-{k}");
        let baseline = self
            .kube
            .as_ref()
            .map(|(kube, _)| kube_requests(kube, window));
        let nodes: Vec<Leaderd> = (0..k).map(|_| self.candidate(&key, "10s", None)).collect();
        eventually(Duration::from_secs(60), "a leader", || self.holder(&key));
        std::thread::sleep(Duration::from_secs(2)); // past start-up
        let cpu_before: Vec<u64> = nodes.iter().map(|n| cpu_ticks(n.pid())).collect();
        let servers: Vec<&Redis> = std::iter::once(&self.redis).chain(&self.more).collect();
        let calls = if let Some((kube, _)) = &self.kube {
            // Requests the API server served, less what it serves with
            // nobody campaigning (its own identity Lease, the scrapes):
            // the same window measured before the candidates started.
            let n = kube_requests(kube, window) - baseline.unwrap_or(0.0);
            (n, n)
        } else if let Some(zk) = &self.zk {
            let before = zk_requests(zk);
            std::thread::sleep(window); // the measurement window itself
            let n = zk_requests(zk) - before;
            (n, n)
        } else if let Some(etcd) = &self.etcd {
            let before = etcd_requests(etcd);
            std::thread::sleep(window); // the measurement window itself
            let n = etcd_requests(etcd) - before;
            (n, n)
        } else if let Some((pg, _)) = &self.pg {
            // Statements leaderd's sessions ran (not psql's own).
            pg.sql("SELECT pg_stat_statements_reset()");
            std::thread::sleep(window); // the measurement window itself
            let n: f64 = pg
                .sql("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%'")
                .parse()
                .unwrap_or(f64::NAN);
            (n, n)
        } else {
            for server in &servers {
                server.cmd(&["CONFIG", "RESETSTAT"]);
            }
            std::thread::sleep(window); // the measurement window itself
            // Per server: every Redlock master gets the same traffic.
            let per_server: Vec<(f64, f64)> = servers.iter().map(|r| command_calls(r)).collect();
            let n = per_server.len() as f64;
            (
                per_server.iter().map(|c| c.0).sum::<f64>() / n,
                per_server.iter().map(|c| c.1).sum::<f64>() / n,
            )
        };
        // SAFETY: plain libc call without pointers.
        let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let cpu: Vec<f64> = nodes
            .iter()
            .zip(&cpu_before)
            .map(|(n, before)| {
                (cpu_ticks(n.pid()) - before) as f64 / ticks_per_s / window.as_secs_f64() * 100.0
            })
            .collect();
        let rss: Vec<f64> = nodes
            .iter()
            .map(|n| rss_kib(n.pid()) as f64 / 1024.0)
            .collect();
        let avg = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        let per_s = window.as_secs_f64();
        (
            calls.0 / per_s,
            calls.1 / per_s,
            max(&rss),
            avg(&cpu),
            max(&cpu),
        )
    }
}

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest: Vec<&str> = stat[stat.rfind(')').map_or(0, |i| i + 2)..]
        .split_whitespace()
        .collect();
    // utime and stime are fields 14 and 15; `rest` starts at field 3.
    rest.get(11)
        .and_then(|u| u.parse::<u64>().ok())
        .unwrap_or(0)
        + rest
            .get(12)
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("VmRSS:")?
                .trim()
                .trim_end_matches(" kB")
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// Calls since the last RESETSTAT, not counting the benchmark's own INFO and
/// CONFIG: `(sent by clients, all including those run inside scripts)`.
/// Redis counts the GET/PEXPIRE/… a script runs as commands too; leaderd's
/// clients only ever send EVALSHA/EVAL/SCRIPT and connection set-up.
fn command_calls(redis: &Redis) -> (f64, f64) {
    let redis::Value::BulkString(info) = redis.cmd(&["INFO", "commandstats"]) else {
        return (f64::NAN, f64::NAN);
    };
    let text = String::from_utf8_lossy(&info).into_owned();
    let calls = |filter: &dyn Fn(&str) -> bool| -> f64 {
        text.lines()
            .filter_map(|l| l.strip_prefix("cmdstat_"))
            .filter(|l| !l.starts_with("info") && !l.starts_with("config"))
            .filter(|l| filter(l.split(':').next().unwrap_or("")))
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<f64>()
                    .ok()
            })
            .sum()
    };
    let inside_scripts = ["get", "set", "pexpire", "pttl", "del", "time", "publish"];
    (
        calls(&|name| !inside_scripts.contains(&name)),
        calls(&|_| true),
    )
}

/// Requests etcd's members started (gRPC, which the JSON gateway calls),
/// summed over the members.
fn etcd_requests(etcd: &support::etcd::Etcd) -> f64 {
    etcd.members
        .iter()
        .filter_map(|m| support::http_get(m.client_port, "/metrics"))
        .map(|(_, body)| {
            body.as_str()
                .unwrap_or_default()
                .lines()
                .filter(|l| l.starts_with("grpc_server_started_total"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>()
        })
        .sum()
}

/// Requests the API server completed over `window` (a scrape of its
/// `apiserver_request_total` before and after).
fn kube_requests(kube: &support::kube::Kube, window: Duration) -> f64 {
    let total = || {
        let (_, body) = kube.raw_on(0, support::kube::ADMIN, "GET", "/metrics", None);
        body.lines()
            .filter(|l| l.starts_with("apiserver_request_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    let before = total();
    std::thread::sleep(window); // the measurement window itself
    total() - before
}

/// Packets ZooKeeper's servers received from clients (requests and the
/// sessions' pings), summed over the servers (`mntr`).
fn zk_requests(zk: &support::zookeeper::ZooKeeper) -> f64 {
    zk.servers
        .iter()
        .filter_map(|s| s.command("mntr"))
        .map(|reply| {
            reply
                .lines()
                .filter_map(|l| l.strip_prefix("zk_packets_received"))
                .filter_map(|v| v.trim().parse::<f64>().ok())
                .sum::<f64>()
        })
        .sum()
}

/// `etcdctl lock --ttl 3 KEY -- PROBE` three times over: SIGTERM to the
/// holder → the next child runs, and the same after SIGKILL.
fn etcdctl_lock(
    etcd: &support::etcd::Etcd,
    exe: &str,
    dir: &Path,
) -> (Result<Stats, String>, Result<Stats, String>) {
    let run = |signal: i32, rounds: usize| -> Result<Stats, String> {
        let file = dir.join(format!("etcdctl-{signal}.probe"));
        let spawn = || {
            Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .args(["--endpoints", &etcd.endpoints(), "lock", "--ttl", "3"])
                .args([
                    &format!("etcdctl-{signal}"),
                    exe,
                    PROBE,
                    file.to_str().unwrap(),
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("etcdctl")
        };
        let mut lockers: Vec<std::process::Child> = (0..3).map(|_| spawn()).collect();
        let mut times = Vec::new();
        for _ in 0..rounds {
            // The holder is the etcdctl whose child (the probe) runs.
            let holder = eventually(Duration::from_secs(30), "an etcdctl holder", || {
                let running: Vec<(String, u32, u64)> = records(&file);
                let stopped: Vec<u32> = running
                    .iter()
                    .filter(|r| r.0 == "stop")
                    .map(|r| r.1)
                    .collect();
                let child = running
                    .iter()
                    .find(|r| r.0 == "start" && !stopped.contains(&r.1))?
                    .1;
                let parent = std::fs::read_to_string(format!("/proc/{child}/stat")).ok()?;
                let ppid: u32 = parent[parent.rfind(')')? + 2..]
                    .split_whitespace()
                    .nth(1)?
                    .parse()
                    .ok()?;
                lockers
                    .iter()
                    .position(|l| l.id() == ppid)
                    .map(|i| (i, child))
            });
            let (holder, child) = holder;
            std::thread::sleep(Duration::from_millis(200));
            let t0 = mono_ns();
            // SAFETY: plain syscall to a process we started.
            unsafe { libc::kill(lockers[holder].id() as i32, signal) };
            let next = (0..3000).find_map(|_| {
                std::thread::sleep(Duration::from_millis(10));
                starts_after(&file, t0)
            });
            let Some(next) = next else {
                for l in &mut lockers {
                    let _ = l.kill();
                    let _ = l.wait();
                }
                return Err("no next child within 30 s".into());
            };
            times.push(ms(next - t0));
            // SIGKILLed, etcdctl leaves its child running (an orphan beside
            // the next holder's): stop it, so the next round finds the
            // right holder.
            // SAFETY: plain syscall.
            unsafe { libc::kill(child as i32, libc::SIGTERM) };
            let _ = lockers[holder].wait();
            lockers[holder] = spawn();
        }
        for l in &mut lockers {
            let _ = l.kill();
            let _ = l.wait();
        }
        let overlap = max_overlap(&file);
        if overlap > 1 {
            eprintln!("etcdctl lock ({signal}): {overlap} children alive at once");
        }
        Ok(stats(times))
    };
    (run(libc::SIGTERM, 5), run(libc::SIGKILL, 5))
}

/// The probe alone, `runs` times: (spawn → running, SIGTERM → reaped).
/// A graceful handover contains both, since the lease is released only after
/// the old child was reaped.
fn child_alone(exe: &str, dir: &Path, runs: usize) -> (Stats, Stats) {
    let file = dir.join("alone.probe");
    let (mut startups, mut stops) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let t0 = mono_ns();
        let mut child = Command::new(exe)
            .args([PROBE, file.to_str().unwrap()])
            .stdout(Stdio::null())
            .spawn()
            .expect("probe");
        let started = eventually(Duration::from_secs(10), "the probe", || {
            starts_after(&file, t0)
        });
        startups.push(ms(started - t0));
        let signalled = mono_ns();
        // SAFETY: plain syscall on our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let _ = child.wait();
        stops.push(ms(mono_ns() - signalled));
    }
    (stats(startups), stats(stops))
}

/// leaderd spawned → its child runs (first acquire on an empty Redis).
fn startup_to_first_acquire(bench: &mut Bench, runs: usize) -> Stats {
    let mut times = Vec::new();
    for i in 0..runs {
        let key = format!("startup-{i}");
        let file = bench.dir.join(format!("{key}.probe"));
        let t0 = mono_ns();
        let node = bench.candidate(&key, "10s", Some(&file));
        let started = eventually(Duration::from_secs(10), "the first child", || {
            starts_after(&file, t0)
        });
        times.push(ms(started - t0));
        drop(node);
    }
    stats(times)
}

/// A renewal's round trip (mean, from the leader's own histogram) against a
/// primary with one replica, with `--redis-wait-replicas wait`.
fn renewal_with_wait(wait: &str, window: Duration) -> (f64, u64) {
    let primary = Redis::start();
    let port = primary.port.to_string();
    let replica = Redis::start_with(&["--replicaof", "127.0.0.1", &port]);
    eventually(Duration::from_secs(30), "the replica online", || {
        primary
            .info("replication")
            .contains("state=online")
            .then_some(())
    });
    let url = primary.url();
    let node = Leaderd::run(
        "w",
        &[
            "--redis",
            &url,
            "--key",
            "wait",
            "--ttl",
            "1s",
            "--redis-timeout",
            "200ms",
            "--log-level",
            "warn",
            "--redis-wait-replicas",
            wait,
        ],
    );
    node.wait_leading(Duration::from_secs(30));
    std::thread::sleep(window); // renewals every 333 ms meanwhile
    let (_, body) = node.get("/metrics").expect("/metrics");
    let text = body.as_str().unwrap_or_default().to_string();
    let value = |name: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    let sum = value("leaderd_lease_operation_duration_seconds_sum{op=\"renew\"}");
    let count = value("leaderd_lease_operation_duration_seconds_count{op=\"renew\"}");
    drop(replica);
    (sum / count.max(1.0) * 1000.0, count as u64)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(PROBE) {
        probe(&args[2]);
    }
    // `cargo test --all-targets` runs this binary without `--bench`: it takes
    // minutes and measures, so only `cargo bench` (scripts/bench) runs it.
    if !args.iter().any(|a| a == "--bench") {
        println!("handover benchmark: run it with scripts/bench (cargo bench --bench handover)");
        return;
    }
    let exe = std::env::current_exe()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let dir = support::temp_dir("bench");
    // `BENCH_ONLY=redlock`: Redlock's handover and takeover rows alone.
    if std::env::var("BENCH_ONLY").as_deref() == Ok("redlock") {
        let mut overlaps = 0;
        println!("| measurement | median | max | n |");
        println!("|---|---|---|---|");
        redlock_rows(&exe, &dir, &mut overlaps);
        println!("most probe children alive at once: {overlaps}");
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    // `BENCH_ONLY=kubernetes`: the Kubernetes Lease beside etcd and Redis.
    if std::env::var("BENCH_ONLY").as_deref() == Ok("kubernetes") {
        kubernetes_rows(&exe, &dir);
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    // `BENCH_ONLY=clientgo`: leaderd beside client-go's elector alone.
    if std::env::var("BENCH_ONLY").as_deref() == Ok("clientgo") {
        clientgo::rows(&exe, &dir);
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    // `BENCH_ONLY=takeover`: handover and crash takeover on Redis and
    // PostgreSQL alone.
    if std::env::var("BENCH_ONLY").as_deref() == Ok("takeover") {
        takeover_rows(&exe, &dir);
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    // `BENCH_ONLY=scale`: what standbys cost the store at K = 3, 30, 100.
    if std::env::var("BENCH_ONLY").as_deref() == Ok("scale") {
        scale::rows(&exe, &dir);
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    // `BENCH_ONLY=service`: SIGTERM → a Service reaches the next leader.
    if std::env::var("BENCH_ONLY").as_deref() == Ok("service") {
        service::rows(&exe, &dir);
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    // `BENCH_ONLY=fence`: what the fence costs a write.
    if std::env::var("BENCH_ONLY").as_deref() == Ok("fence") {
        fence::rows(&exe, &dir);
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    // `BENCH_ONLY=rollout`: the rolling-update table alone.
    if std::env::var("BENCH_ONLY").as_deref() == Ok("rollout") {
        let redis = Redis::start();
        let etcd = support::etcd::Etcd::start(3);
        rollouts(&redis, &etcd, &exe, &dir);
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let mut bench = Bench {
        redis: Redis::start(),
        more: Vec::new(),
        silent: Vec::new(),
        exe: exe.clone(),
        dir: dir.clone(),
        next_id: 0,
        extra: Vec::new(),
        pg: None,
        etcd: None,
        zk: None,
        kube: None,
    };
    let (startup, stop) = child_alone(&exe, &dir, 20);
    println!(
        "# leaderd handover benchmark ({} cores, redis-server {})",
        num_cpus(),
        redis_version()
    );
    println!();
    println!("| measurement | median | max | n |");
    println!("|---|---|---|---|");
    row("child start-up alone (spawn → child running)", &startup);
    row("child stop alone (SIGTERM → reaped)", &stop);
    let mut overlaps = 0;
    for (k, rounds) in [(3, 15), (20, 10), (100, 10)] {
        let (s, overlap) = bench.handovers(k, rounds);
        overlaps = overlaps.max(overlap);
        row(
            &format!("graceful handover, K = {k} (SIGTERM → next child running)"),
            &s,
        );
    }
    {
        // The same handover with the lease on a Redis that speaks only TLS.
        let pki = support::tls::Pki::new("bench");
        let server = pki.leaf("server", &["127.0.0.1"], false);
        let ca = pki.ca().to_str().unwrap().to_string();
        let tls_dir = dir.join("tls");
        std::fs::create_dir_all(&tls_dir).expect("bench dir");
        let mut tls = Bench {
            redis: support::tls::redis(&pki, &server, false),
            more: Vec::new(),
            silent: Vec::new(),
            exe: exe.clone(),
            dir: tls_dir,
            next_id: 1000,
            extra: vec!["--redis-tls-ca".into(), ca],
            pg: None,
            etcd: None,
            zk: None,
            kube: None,
        };
        let (s, overlap) = tls.handovers(3, 15);
        overlaps = overlaps.max(overlap);
        row(
            "graceful handover over TLS (rediss://), K = 3 (SIGTERM → next child running)",
            &s,
        );
    }
    let crash = bench.crash_takeovers(5);
    row(
        "crash takeover after lease expiry, K = 3, ttl 3s (SIGKILL; → next child running)",
        &crash,
    );
    // Redlock: the same over N independent masters.
    let redlocks = redlock_rows(&exe, &dir, &mut overlaps);
    // PostgreSQL, in table and in advisory mode, on its own server.
    let mut pgs = Vec::new();
    for (mode, query) in [("table", ""), ("advisory", "mode=advisory")] {
        let pg_dir = dir.join(format!("pg-{mode}"));
        std::fs::create_dir_all(&pg_dir).expect("bench dir");
        let pg = support::postgres::Postgres::start_with(&[
            "shared_preload_libraries=pg_stat_statements",
        ]);
        pg.sql("CREATE EXTENSION pg_stat_statements");
        let mut on_pg = Bench {
            redis: Redis::start(),
            more: Vec::new(),
            silent: Vec::new(),
            exe: exe.clone(),
            dir: pg_dir,
            next_id: 3000 + pgs.len() * 100,
            extra: Vec::new(),
            pg: Some((pg, query)),
            etcd: None,
            zk: None,
            kube: None,
        };
        let (s, overlap) = on_pg.handovers(3, 15);
        overlaps = overlaps.max(overlap);
        row(
            &format!(
                "PostgreSQL {mode} mode: graceful handover, K = 3 (SIGTERM → next child running)"
            ),
            &s,
        );
        let crash = on_pg.crash_takeovers(5);
        row(
            &format!("PostgreSQL {mode} mode: crash takeover after lease expiry, K = 3, ttl 3s"),
            &crash,
        );
        pgs.push((mode, on_pg));
    }
    // etcd, three members; and etcdctl lock on the same cluster.
    let etcd_dir = dir.join("etcd");
    std::fs::create_dir_all(&etcd_dir).expect("bench dir");
    let mut on_etcd = Bench {
        redis: Redis::start(),
        more: Vec::new(),
        silent: Vec::new(),
        exe: exe.clone(),
        dir: etcd_dir,
        next_id: 4000,
        extra: Vec::new(),
        pg: None,
        etcd: Some(support::etcd::Etcd::start(3)),
        zk: None,
        kube: None,
    };
    let (s, overlap) = on_etcd.handovers(3, 15);
    overlaps = overlaps.max(overlap);
    row(
        "etcd, 3 members: graceful handover, K = 3 (SIGTERM → next child running)",
        &s,
    );
    let crash = on_etcd.crash_takeovers(5);
    row(
        "etcd, 3 members: crash takeover, K = 3, ttl 3s (SIGKILL → next child running, the lease's remaining TTL included)",
        &crash,
    );
    let etcd = on_etcd.etcd.as_ref().expect("etcd");
    let (graceful, crashed) = etcdctl_lock(etcd, &exe, &on_etcd.dir);
    let show = |name: &str, result: Result<Stats, String>| match result {
        Ok(s) => row(name, &s),
        Err(why) => println!("| {name} | {why} | | |"),
    };
    show(
        "etcdctl lock --ttl 3, K = 3: SIGTERM → next child running",
        graceful,
    );
    show(
        "etcdctl lock --ttl 3, K = 3: SIGKILL → next child running",
        crashed,
    );
    // ZooKeeper, three servers.
    let zk_dir = dir.join("zookeeper");
    std::fs::create_dir_all(&zk_dir).expect("bench dir");
    let mut on_zk = Bench {
        redis: Redis::start(),
        more: Vec::new(),
        silent: Vec::new(),
        exe: exe.clone(),
        dir: zk_dir,
        next_id: 5000,
        extra: Vec::new(),
        pg: None,
        etcd: None,
        zk: Some(support::zookeeper::ZooKeeper::start(3)),
        kube: None,
    };
    let (s, overlap) = on_zk.handovers(3, 15);
    overlaps = overlaps.max(overlap);
    row(
        "ZooKeeper, 3 servers: graceful handover, K = 3 (SIGTERM → next child running)",
        &s,
    );
    let crash = on_zk.crash_takeovers(5);
    row(
        "ZooKeeper, 3 servers: crash takeover, K = 3, ttl 3s (SIGKILL → next child running, the session timeout included)",
        &crash,
    );
    // A Kubernetes Lease on a real kube-apiserver over etcd 3.6.
    let kube_dir = dir.join("kubernetes");
    std::fs::create_dir_all(&kube_dir).expect("bench dir");
    let kube = support::kube::Kube::start(1);
    let kubeconfig = kube.kubeconfig(support::kube::CANDIDATE, 0);
    let mut on_kube = Bench {
        redis: Redis::start(),
        more: Vec::new(),
        silent: Vec::new(),
        exe: exe.clone(),
        dir: kube_dir,
        next_id: 6000,
        extra: Vec::new(),
        pg: None,
        etcd: None,
        zk: None,
        kube: Some((kube, kubeconfig)),
    };
    let (s, overlap) = on_kube.handovers(3, 15);
    overlaps = overlaps.max(overlap);
    row(
        "Kubernetes Lease (kube-apiserver, etcd 3.6): graceful handover, K = 3 (SIGTERM → next child running)",
        &s,
    );
    let crash = on_kube.crash_takeovers(5);
    row(
        "Kubernetes Lease: crash takeover, K = 3, ttl 3s (SIGKILL → next child running, the lease's duration by the waiters' clock included)",
        &crash,
    );
    let first = startup_to_first_acquire(&mut bench, 10);
    row("start-up to first acquire (spawn → child running)", &first);
    println!();
    println!("| renewal round trip, primary + 1 replica, ttl 1 s, 15 s | mean | n |");
    println!("|---|---|---|");
    for wait in ["0", "1"] {
        let (mean, n) = renewal_with_wait(wait, Duration::from_secs(15));
        println!("| --redis-wait-replicas {wait} | {mean:.3} ms | {n} |");
    }
    println!();
    println!(
        "| idle, 20 s window | Redis commands/s sent (all candidates, per server) | incl. commands inside scripts | max RSS per instance | avg CPU per instance | max CPU per instance |"
    );
    println!("|---|---|---|---|---|---|");
    let idle_row = |name: &str, (sent, all, rss, cpu_avg, cpu_max): (f64, f64, f64, f64, f64)| {
        println!(
            "| {name} | {sent:.2} | {all:.2} | {rss:.1} MiB | {cpu_avg:.3} % | {cpu_max:.3} % |"
        );
    };
    for k in [3, 100] {
        idle_row(&format!("K = {k}"), bench.idle(k, Duration::from_secs(20)));
    }
    for (n, mut redlock) in redlocks {
        idle_row(
            &format!("Redlock, N = {n}, K = 3 (per master)"),
            redlock.idle(3, Duration::from_secs(20)),
        );
    }
    for (mode, mut on_pg) in pgs {
        idle_row(
            &format!("PostgreSQL {mode} mode, K = 3 (statements/s, all candidates)"),
            on_pg.idle(3, Duration::from_secs(20)),
        );
    }
    idle_row(
        "etcd, 3 members, K = 3 (requests/s, all candidates)",
        on_etcd.idle(3, Duration::from_secs(20)),
    );
    idle_row(
        "ZooKeeper, 3 servers, K = 3 (packets/s received, pings included, all candidates)",
        on_zk.idle(3, Duration::from_secs(20)),
    );
    idle_row(
        "Kubernetes Lease, K = 3 (API requests/s completed, all candidates, the API server's own subtracted)",
        on_kube.idle(3, Duration::from_secs(20)),
    );
    println!("(CPU is read from /proc in clock ticks of 10 ms: over 20 s, one tick is 0.05 %.)");
    println!();
    let health_dir = dir.join("health");
    std::fs::create_dir_all(&health_dir).expect("bench dir");
    let step_downs = health::step_downs(&bench.redis, &exe, &health_dir, 10);
    println!("| worker health, K = 3 on Redis, checks every 500 ms | median | max | n |");
    println!("|---|---|---|---|");
    row(
        "leader's worker condemned (2nd failed check) → next leader's child running",
        &step_downs,
    );
    println!();
    println!(
        "| health check cost, one leader on a lock file, 20 s | CPU | checks | CPU per check |"
    );
    println!("|---|---|---|---|");
    for (name, cpu, n, per) in health::cost(&health_dir, Duration::from_secs(20)) {
        println!("| {name} | {cpu:.3} % | {n} | {per:.3} ms |");
    }
    println!();
    if let Some(etcd) = &on_etcd.etcd {
        rollouts(&bench.redis, etcd, &exe, &dir);
        println!();
    }
    clientgo::rows(&exe, &dir);
    println!();
    fence::rows(&exe, &dir);
    println!();
    let size = std::fs::metadata(support::BIN).map_or(0, |m| m.len());
    println!(
        "binary: {} ({:.1} MiB)",
        support::BIN,
        size as f64 / 1048576.0
    );
    println!("children alive at once, most seen in all graceful handovers: {overlaps}");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(overlaps <= 1, "two children overlapped");
}

/// The rolling-update table: K = 5 replaced one at a time, three rollouts
/// each (the leader replaced at a random step).
fn rollouts(redis: &Redis, etcd: &support::etcd::Etcd, exe: &str, dir: &Path) {
    let seeds = [1, 2, 3];
    println!(
        "| rolling update, K = 5, ttl 3 s | leadership changes, mean (each) | time without a running child, mean | max | children at once, most | rollouts |"
    );
    println!("|---|---|---|---|---|---|");
    let on_redis = vec!["--redis".to_string(), redis.url()];
    let on_etcd = etcd.args();
    for (store, args) in [("Redis", &on_redis), ("etcd, 3 members", &on_etcd)] {
        for priority in [false, true] {
            let how = if priority {
                "with --priority"
            } else {
                "without --priority"
            };
            let tag = format!("{}-{priority}", store.split(',').next().unwrap());
            rollout::row(&format!("leaderd on {store}, {how}"), &seeds, |seed| {
                rollout::leaderd(args, exe, dir, &tag, (5, priority, seed))
            });
        }
    }
    rollout::row("etcdctl lock --ttl 3, etcd, 3 members", &seeds, |seed| {
        rollout::etcdctl(&etcd.endpoints(), exe, dir, 5, seed)
    });
}

fn num_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn redis_version() -> String {
    let out = Command::new("redis-server")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    out.split_whitespace()
        .find_map(|w| w.strip_prefix("v="))
        .unwrap_or("?")
        .to_string()
}

/// Redlock's rows over N = 3 and 5 independent masters (N = 3 also with
/// one master frozen); the benches, for the idle table.
fn redlock_rows(exe: &str, dir: &Path, overlaps: &mut i32) -> Vec<(usize, Bench)> {
    let mut redlocks = Vec::new();
    for n in [3, 5] {
        let redlock_dir = dir.join(format!("redlock-{n}"));
        std::fs::create_dir_all(&redlock_dir).expect("bench dir");
        let mut redlock = Bench {
            redis: Redis::start(),
            more: (1..n).map(|_| Redis::start()).collect(),
            silent: Vec::new(),
            exe: exe.to_string(),
            dir: redlock_dir,
            next_id: 2000 + n * 100,
            extra: Vec::new(),
            pg: None,
            etcd: None,
            zk: None,
            kube: None,
        };
        let (s, overlap) = redlock.handovers(3, 15);
        *overlaps = (*overlaps).max(overlap);
        row(
            &format!("Redlock, N = {n}: graceful handover, K = 3 (SIGTERM → next child running)"),
            &s,
        );
        let crash = redlock.crash_takeovers(5);
        row(
            &format!("Redlock, N = {n}: crash takeover after lease expiry, K = 3, ttl 3s"),
            &crash,
        );
        if n == 3 {
            // One master frozen (SIGSTOP) throughout: the other two are a
            // quorum, and a handover must not wait for the third (#36).
            let frozen = redlock.more.pop().expect("three masters");
            frozen.pause();
            redlock.silent.push(frozen);
            let (s, overlap) = redlock.handovers_on("graceful-frozen", 3, 15);
            *overlaps = (*overlaps).max(overlap);
            row(
                "Redlock, N = 3, one master frozen: graceful handover, K = 3",
                &s,
            );
            let frozen = redlock.silent.pop().expect("frozen above");
            frozen.resume();
            redlock.more.push(frozen);
        }
        redlocks.push((n, redlock));
    }
    redlocks
}

/// One line of the table.
fn row(name: &str, s: &Stats) {
    println!(
        "| {name} | {:.2} ms | {:.2} ms | {} |",
        s.median, s.max, s.n
    )
}

/// A bench on `store`, its probe files under `dir`/`name`.
fn bench_on(exe: &str, dir: &Path, name: &str, next_id: usize) -> Bench {
    let sub = dir.join(name);
    std::fs::create_dir_all(&sub).expect("bench dir");
    Bench {
        redis: Redis::start(),
        more: Vec::new(),
        silent: Vec::new(),
        exe: exe.to_string(),
        dir: sub,
        next_id,
        extra: Vec::new(),
        pg: None,
        etcd: None,
        zk: None,
        kube: None,
    }
}

/// Graceful handover and crash takeover (after the lease's expiry, and from
/// the kill) on one Redis and on PostgreSQL in both modes, in one run: the
/// rows a change to their vacancy rule must keep (issue #46).
fn takeover_rows(exe: &str, dir: &Path) {
    println!(
        "# handover and crash takeover, Redis and PostgreSQL ({} cores)",
        num_cpus()
    );
    println!();
    println!(
        "| backend | graceful handover, K = 3, median / max (ms) | crash takeover, ttl 3s, after expiry, median / max (ms) | from the kill, median / max (ms) |"
    );
    println!("|---|---|---|---|");
    let mut overlaps = 0;
    let redis = bench_on(exe, dir, "t-redis", 8000);
    let mut table = bench_on(exe, dir, "t-pg-table", 8100);
    table.pg = Some((support::postgres::Postgres::start(), ""));
    let mut advisory = bench_on(exe, dir, "t-pg-advisory", 8200);
    advisory.pg = Some((support::postgres::Postgres::start(), "mode=advisory"));
    for (name, mut b) in [
        ("Redis", redis),
        ("PostgreSQL table", table),
        ("PostgreSQL advisory", advisory),
    ] {
        let (graceful, overlap) = b.handovers(3, 15);
        overlaps = overlaps.max(overlap);
        let (expiry, kill) = b.crash_takeovers_both(5);
        println!(
            "| {name} | {:.1} / {:.1} | {:.0} / {:.0} | {:.0} / {:.0} |",
            graceful.median, graceful.max, expiry.median, expiry.max, kill.median, kill.max
        );
    }
    println!("most probe children alive at once: {overlaps}");
}

/// The Kubernetes Lease's handover, takeover and idle cost beside etcd's
/// (three members) and one Redis's, in one run.
fn kubernetes_rows(exe: &str, dir: &Path) {
    let redis = bench_on(exe, dir, "k-redis", 7000);
    let mut etcd = bench_on(exe, dir, "k-etcd", 7100);
    etcd.etcd = Some(support::etcd::Etcd::start(3));
    let mut kube = bench_on(exe, dir, "k-kube", 7200);
    let control = support::kube::Kube::start(1);
    let kubeconfig = control.kubeconfig(support::kube::CANDIDATE, 0);
    kube.kube = Some((control, kubeconfig));
    println!(
        "# the Kubernetes Lease beside etcd and Redis ({} cores)",
        num_cpus()
    );
    println!();
    println!(
        "| backend | graceful handover, K = 3, median / max (ms) | crash takeover, ttl 3s, from the kill, median / max (ms) | idle, K = 3: requests/s | max RSS per instance |"
    );
    println!("|---|---|---|---|---|");
    let mut overlaps = 0;
    for (name, mut b) in [
        ("Redis", redis),
        ("etcd, 3 members", etcd),
        ("Kubernetes Lease", kube),
    ] {
        let (graceful, overlap) = b.handovers(3, 15);
        overlaps = overlaps.max(overlap);
        let (_, crash) = b.crash_takeovers_both(5);
        let (sent, _, rss, _, _) = b.idle(3, Duration::from_secs(20));
        println!(
            "| {name} | {:.1} / {:.1} | {:.0} / {:.0} | {sent:.2} | {rss:.1} MiB |",
            graceful.median, graceful.max, crash.median, crash.max
        );
    }
    println!("most probe children alive at once: {overlaps}");
}
