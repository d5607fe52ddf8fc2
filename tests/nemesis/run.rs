//! One soak: a backend's scene, K candidates with probe children, the
//! recorder, the schedule carried out, then everything stopped and judged.

use crate::checkers::{self, Report};
use crate::history::{self, History, Injected, Ports, Recorder};
use crate::links::Links;
use crate::schedule::{self, Kind, Planned};
use crate::support::backends::Scene;
use crate::support::os::mono_ns;
use crate::support::outside::{Done, Write};
use crate::support::worker::{Mode, Worker};
use crate::support::{self, Leaderd};
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const TTL: Duration = Duration::from_secs(2);
pub const RETRY: Duration = Duration::from_millis(300);
/// Before the first fault: the first leader, and Redlock's masters warm.
const WARMUP: Duration = Duration::from_secs(5);

/// Every candidate checks its worker (`Kind::Sick` turns one unhealthy), and
/// the last one has a higher `--priority` than the others (see `launch`):
/// condemned after two failed checks, 400 ms of hold-off after a step-down.
const HEALTH: [&str; 6] = [
    "--health-interval",
    "200ms",
    "--health-timeout",
    "150ms",
    "--health-failures",
    "2",
];

/// How soon a leader must be back after the last fault healed: a TTL for
/// the lease to lapse, a TTL more when it ended without a release (the
/// contract's vacancy rule), the retry interval, the slowest store's
/// failover, and a second of slack for a loaded 2-core machine.
pub fn heal_bound() -> Duration {
    TTL * 2 + RETRY + Duration::from_secs(3) + Duration::from_secs(1)
}

/// The candidates, each with its probe log; a killed one is started again
/// on a new port.
pub struct Fleet {
    pub nodes: Vec<Option<Leaderd>>,
    pub logs: Vec<PathBuf>,
    /// The lock every probe child tries at birth (`--exclusive`).
    exclusive: PathBuf,
    /// The logs of candidates killed and started again: `(who, lines)`.
    pub retired: Vec<(usize, Vec<String>)>,
    pub ports: Ports,
    /// Each candidate's own proxies to the store, and its flags.
    links: Links,
    /// Each candidate's worker, whose health endpoint it checks.
    workers: Vec<Worker>,
}

impl Fleet {
    /// `k` candidates on the store `args` select, each through its own
    /// proxies ([`Links`]), their children sharing the lock `exclusive`.
    pub fn start(args: Vec<String>, dir: &Path, exclusive: &Path, k: usize) -> Fleet {
        Fleet::start_each(vec![args; k], dir, exclusive)
    }

    /// [`Fleet::start`] with each candidate's own flags (`per[i]`).
    pub fn start_each(per: Vec<Vec<String>>, dir: &Path, exclusive: &Path) -> Fleet {
        let k = per.len();
        let logs: Vec<PathBuf> = (0..k).map(|i| dir.join(format!("c{i}.probe"))).collect();
        let mut fleet = Fleet {
            nodes: (0..k).map(|_| None).collect(),
            logs,
            exclusive: exclusive.to_path_buf(),
            retired: Vec::new(),
            ports: Ports::default(),
            links: Links::each(&per),
            workers: (0..k).map(|_| Worker::start(Mode::Healthy)).collect(),
        };
        fleet.ports = std::sync::Arc::new(std::sync::Mutex::new(vec![0; k]));
        for i in 0..k {
            fleet.launch(i);
        }
        fleet
    }

    pub fn launch(&mut self, i: usize) {
        let (probe, health) = (support::probe_child(), self.workers[i].url());
        let mut args: Vec<&str> = self.links.args[i].iter().map(String::as_str).collect();
        args.extend_from_slice(&HEALTH);
        // The last candidate outranks the others, which are equals: after a
        // fault it takes the lease back by a handover (`--handover-delay`),
        // and the others never hand over among themselves.
        let top = i + 1 == self.nodes.len();
        args.extend_from_slice(&["--priority", if top { "2" } else { "1" }]);
        args.extend_from_slice(&["--handover-delay", "1s"]);
        args.extend_from_slice(&[
            "--health",
            &health,
            "--",
            &probe,
            support::path_str(&self.logs[i]),
            // A child that takes a moment to stop, as real workers do: a
            // term that ends without a release overlaps a successor that
            // starts early by that much, so C1 sees it.
            "--term-delay",
            "500",
            "--exclusive",
            support::path_str(&self.exclusive),
        ]);
        let node = Leaderd::run(&format!("c{i}"), &args);
        self.ports.lock().unwrap()[i] = node.http_port;
        self.nodes[i] = Some(node);
    }

    /// Candidate `i` gone for good (killed if it has not exited yet), its
    /// log kept among the retired ones.
    fn retire(&mut self, i: usize) {
        if let Some(mut n) = self.nodes[i].take() {
            n.signal("CONT");
            n.signal("KILL");
            n.wait_exit(Duration::from_secs(10));
            self.retired.push((i, n.log()));
        }
    }

    /// The candidate that leads now, if one says so (short timeouts: a
    /// frozen candidate must not hold up the schedule).
    pub fn leader(&self) -> Option<usize> {
        let ports = self.ports.lock().unwrap().clone();
        (0..self.nodes.len())
            .find(|&i| self.nodes[i].is_some() && history::leader_of(ports[i]) == Some(true))
    }

    /// The leader when `pick` is even and one is known, else `pick` mod K.
    fn target(&self, pick: u64) -> usize {
        match self.leader() {
            Some(l) if pick.is_multiple_of(2) => l,
            _ => (pick / 2) as usize % self.nodes.len(),
        }
    }

    /// Stops every candidate (SIGCONT first, then SIGTERM): those that do
    /// not exit within 15 s are named, then killed.
    pub fn stop(&mut self) -> Vec<String> {
        let mut stuck = Vec::new();
        for node in self.nodes.iter_mut().flatten() {
            node.signal("CONT");
            node.signal("TERM");
        }
        for node in self.nodes.iter_mut().flatten() {
            let deadline = Instant::now() + Duration::from_secs(15);
            while node.running() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if node.running() {
                stuck.push(format!(
                    "leaderd {} did not exit within 15 s of SIGTERM",
                    node.id
                ));
                node.signal("KILL");
            }
        }
        self.nodes.iter_mut().for_each(|n| *n = None);
        stuck
    }
}

/// The running child of candidate `i`, from its probe log.
fn running_child(log: &Path) -> Option<i32> {
    history::lives(&[log.to_path_buf()])
        .into_iter()
        .rev()
        .find(|l| l.stop.is_none() && support::alive(l.pid))
        .map(|l| l.pid)
}

/// Carries out one planned fault's beginning; returns the injected record
/// (its end filled in later), or `None` when it does not apply here.
fn begin(p: &Planned, scene: &mut dyn Scene, key: &str, fleet: &mut Fleet) -> Option<Injected> {
    let now = mono_ns();
    let mut tolerated = None;
    let mut keeps_leader = false;
    let applied = match p.kind {
        Kind::Cut => scene.cut(),
        Kind::FreezeOne => match scene.freeze_one(key) {
            Some(failover) => {
                tolerated = Some(TTL + RETRY + failover + Duration::from_secs(1));
                true
            }
            None => false,
        },
        Kind::FreezeFollower => {
            keeps_leader = scene.freeze_tolerated(key);
            tolerated = Some(TTL + RETRY + Duration::from_secs(1));
            keeps_leader
        }
        Kind::Crash => scene.crash(),
        Kind::Delete => {
            scene.delete(key);
            true
        }
        // Beyond what such a store promises (its documented limit).
        Kind::LoseData if !scene.survives_data_loss() => false,
        Kind::LoseData => {
            scene.lose_data(key);
            true
        }
        Kind::RestartOne => scene.restart_one(p.pick as usize),
        Kind::LeaderdStop | Kind::LeaderdKill | Kind::LeaderdTerm => {
            let i = fleet.target(p.pick);
            let signal = match p.kind {
                Kind::LeaderdStop => "STOP",
                Kind::LeaderdKill => "KILL",
                _ => "TERM",
            };
            fleet.nodes[i].as_ref().is_some_and(|n| {
                n.signal(signal);
                true
            })
        }
        Kind::Overwrite => {
            scene.steal(key);
            true
        }
        Kind::Outside => {
            // A restore puts back the copy the last other write saved: an
            // earlier term's, as a backup would.
            let write = Write::pick(p.pick);
            if write != Write::Restore {
                scene.save(key);
            }
            // A write the store has no way to make (a shorter etcd lease),
            // or nothing saved yet to put back: the holder cleared instead.
            match scene.outside(key, &write) {
                Done::No if write != Write::Clear => scene.outside(key, &Write::Clear) != Done::No,
                done => done != Done::No,
            }
        }
        Kind::Isolate | Kind::Slow | Kind::Reset => {
            let i = fleet.target(p.pick);
            let links = &fleet.links;
            match p.kind {
                _ if !links.has(i) => {}
                Kind::Isolate => links.cut(i),
                // From 0.1 s to 1.5 s a chunk, either way: past the store
                // timeouts the fixtures give, now and then.
                Kind::Slow => links.slow(i, Duration::from_millis(100 + (p.pick >> 8) % 1400)),
                _ => links.reset(i),
            }
            links.has(i)
        }
        Kind::Sick => {
            fleet.workers[fleet.target(p.pick)].set(Mode::Unhealthy);
            true
        }
        Kind::Herd => {
            for node in fleet.nodes.iter().flatten() {
                node.signal("CONT");
                node.signal("TERM");
            }
            true
        }
        Kind::ChildCrash => match fleet.leader().and_then(|l| running_child(&fleet.logs[l])) {
            Some(pid) => {
                support::os::kill(pid as u32, libc::SIGKILL);
                true
            }
            None => false,
        },
    };
    applied.then(|| Injected {
        kind: p.kind.name(),
        start: now,
        end: now,
        tolerated,
        keeps_leader,
    })
}

/// Carries out a fault's end: heal, thaw, recover, continue or restart.
fn end(p: &Planned, scene: &mut dyn Scene, key: &str, fleet: &mut Fleet, target: usize) {
    match p.kind {
        Kind::Overwrite => scene.delete(key),
        Kind::Isolate | Kind::Slow => fleet.links.heal(target),
        Kind::Sick => fleet.workers[target].set(Mode::Healthy),
        Kind::Cut => scene.heal(),
        Kind::FreezeOne => scene.thaw_one(),
        Kind::FreezeFollower => scene.thaw_tolerated(),
        Kind::Crash => scene.recover(),
        Kind::LeaderdStop => {
            if let Some(n) = &fleet.nodes[target] {
                n.signal("CONT");
            }
        }
        Kind::LeaderdKill | Kind::LeaderdTerm => {
            fleet.retire(target);
            fleet.launch(target);
        }
        Kind::Herd => {
            (0..fleet.nodes.len()).for_each(|i| fleet.retire(i));
            // All at once: no candidate waits for another to be up.
            (0..fleet.nodes.len()).for_each(|i| fleet.launch(i));
        }
        _ => {}
    }
}

/// The schedule of a soak of `length` with `seed`.
pub fn plan(seed: u64, length: Duration) -> Vec<Planned> {
    let settle = heal_bound() + Duration::from_secs(1);
    schedule::plan(seed, length, TTL, WARMUP, settle)
}

/// Runs one soak and prints its report; `true` when every checker passed.
pub fn soak(
    name: &str,
    start: fn() -> Box<dyn Scene>,
    seed: u64,
    length: Duration,
    k: usize,
) -> bool {
    eprintln!("nemesis: {name}: starting its servers");
    let mut scene = start();
    let key = format!("nemesis-{seed}");
    let dir = support::Scratch::new(&format!("nemesis-{name}-{}", support::os::below(1 << 30)));
    let per = (0..k)
        .map(|i| {
            let mut args = scene.candidate_args(&key, i);
            args.extend(["--ttl", "2s", "--retry-interval", "300ms"].map(String::from));
            args
        })
        .collect();
    let mut fleet = Fleet::start_each(per, &dir, &dir.join("exclusive"));
    let recorder = Recorder::start(fleet.ports.clone(), dir.to_path_buf());
    let plan = plan(seed, length);
    // Events in time order: each fault's beginning and, if it lasts, its end.
    let mut events: Vec<(Duration, usize, bool)> = Vec::new();
    for (i, p) in plan.iter().enumerate() {
        events.push((p.at, i, true));
        if !p.lasts.is_zero() {
            events.push((p.at + p.lasts, i, false));
        }
    }
    events.sort_by_key(|e| (e.0, !e.2));
    let began = Instant::now();
    let clocks = Clocks::now();
    let mut injected: BTreeMap<usize, (Injected, usize)> = BTreeMap::new();
    let mut skipped = Vec::new();
    for (at, i, is_begin) in events {
        if let Some(wait) = at.checked_sub(began.elapsed()) {
            std::thread::sleep(wait);
        }
        let p = &plan[i];
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
            if is_begin {
                let target = fleet.target(p.pick);
                begin(p, scene.as_mut(), &key, &mut fleet).map(|f| (f, target))
            } else {
                if let Some((f, target)) = injected.get_mut(&i) {
                    end(p, scene.as_mut(), &key, &mut fleet, *target);
                    f.end = mono_ns();
                    if p.kind == Kind::Overwrite {
                        // A thief a failover or restart brings back after
                        // its deletion lives until its TTL.
                        f.end = f.end.max(f.start + support::backends::THIEF_TTL.as_nanos());
                    }
                }
                None
            }
        }));
        match outcome {
            Ok(Some(record)) => {
                injected.insert(i, record);
            }
            Ok(None) => {
                if is_begin {
                    skipped.push(p.kind.name());
                }
            }
            Err(_) => eprintln!(
                "nemesis: {name}: could not carry out {:?} (see the panic above)",
                p.kind
            ),
        }
    }
    if let Some(rest) = length.checked_sub(began.elapsed()) {
        std::thread::sleep(rest);
    }
    let healed = injected
        .values()
        .map(|(f, _)| f.end)
        .max()
        .unwrap_or_else(mono_ns);
    // Wait for C4's leader (or its bound), then stop everything.
    let deadline = Instant::now() + heal_bound() + Duration::from_secs(1);
    while fleet.leader().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(200));
    let end_of_run = mono_ns();
    let tails: Vec<Vec<String>> = fleet
        .nodes
        .iter()
        .map(|n| n.as_ref().map_or_else(Vec::new, |n| n.log()))
        .collect();
    let mut every_log = fleet.retired.clone();
    every_log.extend(tails.iter().cloned().enumerate());
    let mut leftovers = fleet.stop();
    let (answers, samples, deaths) = recorder.finish();
    // What the scene started (servers, and what they started): all of it
    // must be gone once the scene is dropped.
    let servers = history::descendants();
    drop(scene);
    std::thread::sleep(Duration::from_millis(300));
    leftovers.extend(
        history::probes_alive(&dir)
            .into_iter()
            .map(|pid| format!("probe child {pid}")),
    );
    leftovers.extend(
        servers
            .into_iter()
            .filter(|(pid, _)| support::alive(*pid))
            .map(|(pid, command)| format!("server {pid} ({command})")),
    );
    let history = History {
        answers,
        samples,
        deaths,
        faults: injected.values().map(|(f, _)| f.clone()).collect(),
        lives: history::lives(&fleet.logs),
        leftovers,
    };
    let report = checkers::judge(&history, end_of_run, healed, heal_bound());
    print_report(name, seed, length, &history, &report, &plan, &skipped);
    if let (_, Some(at)) = checkers::worst_overlap(&history, end_of_run) {
        explain(name, &history, "the worst overlap of two children", at);
    }
    if let Some(at) = checkers::first_busy(&history) {
        explain(name, &history, "the first child born beside a live one", at);
    }
    if let Some(at) = checkers::first_dual(&history) {
        explain(name, &history, "the first two 200s at once", at);
        around(name, &every_log, &clocks, at, (4.0, 2.0));
    }
    // NEMESIS_WINDOW=SECONDS widens what the candidates' logs show around
    // the worst overlap (replaying a finding whose cause began earlier).
    if let ((_, Some(at)), Ok(window)) = (
        checkers::worst_overlap(&history, end_of_run),
        std::env::var("NEMESIS_WINDOW").map(|w| w.parse::<f64>().unwrap_or(60.0)),
    ) {
        around(name, &every_log, &clocks, at, (window, 2.0));
    }
    if let (_, Some((_, _, at))) = checkers::worst_tolerated(&history) {
        let what = "the tolerated fault with the longest stretch without a leader";
        explain(name, &history, what, at);
        around(name, &every_log, &clocks, at, (2.0, 8.0));
    }
    if !report.passed() {
        for (i, lines) in tails.iter().enumerate() {
            for line in lines.iter().skip(lines.len().saturating_sub(12)) {
                println!("nemesis: {name}: c{i} said: {line}");
            }
        }
    }
    report.passed()
}

/// The faults in force or just before `what` began at `at`: where to look
/// first.
fn explain(name: &str, history: &History, what: &str, at: u128) {
    let window = (TTL * 3).as_nanos();
    let first = history.answers.iter().map(|a| a.sent).min().unwrap_or(at);
    let near: Vec<String> = history
        .faults
        .iter()
        .filter(|f| f.end + window >= at && f.start <= at)
        .map(|f| {
            format!(
                "{} from {:.2}s to {:.2}s",
                f.kind,
                (f.start.saturating_sub(first)) as f64 / 1e9,
                (f.end.saturating_sub(first)) as f64 / 1e9
            )
        })
        .collect();
    println!(
        "nemesis: {name}: {what} began at {:.2}s, after: {}",
        (at.saturating_sub(first)) as f64 / 1e9,
        if near.is_empty() {
            "no fault".to_string()
        } else {
            near.join("; ")
        }
    );
}

/// CLOCK_MONOTONIC and the wall clock read together, to place a monotonic
/// instant among the candidates' log lines (stamped in UTC).
struct Clocks {
    mono: u128,
    /// Seconds since midnight UTC at `mono`.
    day_secs: f64,
}

impl Clocks {
    fn now() -> Clocks {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970");
        Clocks {
            mono: mono_ns(),
            day_secs: wall.as_secs_f64() % 86_400.0,
        }
    }

    /// Seconds since midnight UTC at the monotonic instant `at`.
    fn day_secs(&self, at: u128) -> f64 {
        self.day_secs + (at as f64 - self.mono as f64) / 1e9
    }
}

/// A log line's time of day: `2026-11-26T00:36:57.787634Z ...` → seconds.
fn line_secs(line: &str) -> Option<f64> {
    let time = line.split_whitespace().next()?.split('T').nth(1)?;
    let mut parts = time.trim_end_matches('Z').split(':');
    let (h, m, s) = (parts.next()?, parts.next()?, parts.next()?);
    Some(h.parse::<f64>().ok()? * 3600.0 + m.parse::<f64>().ok()? * 60.0 + s.parse::<f64>().ok()?)
}

/// Every candidate's log lines from `before` seconds before `at` to `after`
/// seconds after: what each believed then.
fn around(
    name: &str,
    logs: &[(usize, Vec<String>)],
    clocks: &Clocks,
    at: u128,
    (before, after): (f64, f64),
) {
    let t = clocks.day_secs(at);
    for (who, lines) in logs {
        for line in lines {
            if line_secs(line).is_some_and(|s| s > t - before && s < t + after) {
                println!("nemesis: {name}: near it c{who} said: {line}");
            }
        }
    }
}

fn print_report(
    name: &str,
    seed: u64,
    length: Duration,
    history: &History,
    report: &Report,
    plan: &[Planned],
    skipped: &[&str],
) {
    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for f in &history.faults {
        *by_kind.entry(f.kind).or_default() += 1;
    }
    let kinds: Vec<String> = by_kind.iter().map(|(k, n)| format!("{k}={n}")).collect();
    println!("nemesis: {name}: faults injected: {}", kinds.join(" "));
    if !skipped.is_empty() {
        println!(
            "nemesis: {name}: not applicable here: {}",
            skipped.join(" ")
        );
    }
    println!(
        "nemesis: {name}: terms {}, handovers {}, longest leaderless stretch {:.0} ms",
        report.terms, report.handovers, report.longest_leaderless_ms
    );
    for v in &report.verdicts {
        println!(
            "nemesis: {name}: {} {}: {}",
            v.name,
            if v.ok { "PASS" } else { "FAIL" },
            v.figure
        );
    }
    if !report.passed() {
        println!(
            "nemesis: {name}: the schedule (replay: scripts/nemesis --seed {seed} --backend {name} --seconds {}):",
            length.as_secs()
        );
        for p in plan {
            println!(
                "nemesis: {name}:   at {:?} {} for {:?} (pick {})",
                p.at,
                p.kind.name(),
                p.lasts,
                p.pick
            );
        }
    }
    println!(
        "nemesis: {name} seed={seed} seconds={} faults={} terms={} overlap_ms={:.1} token_regressions={} dual_leaders={} => {}",
        length.as_secs(),
        history.faults.len(),
        report.terms,
        report.overlap_ms,
        report.token_regressions,
        report.dual_leaders,
        if report.passed() { "PASS" } else { "FAIL" }
    );
}
