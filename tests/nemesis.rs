//! The nemesis (issue #24): a randomized fault soak over every backend, on
//! the test fixtures' real servers, judged afterwards by checkers over the
//! recorded history — Jepsen's generator / nemesis / checker split.
//! Run it through `scripts/nemesis` (options there, and in
//! docs/development.md); `cargo test` runs this binary without arguments,
//! which does nothing.
//!
//! - [`schedule`]: the fault schedule, drawn from a seed;
//! - [`history`]: what is recorded (`/leader` answers, `/proc` samples, the
//!   children's own lines, the faults);
//! - [`checkers`]: C1–C7, pure functions of the history;
//! - [`links`]: each candidate's own proxies to the store (its partition,
//!   latency and connection resets);
//! - [`sanity`]: a planted violation for each checker (`--sanity`).

#[path = "it/support/mod.rs"]
// The nemesis uses some of the fixtures only.
#[allow(dead_code, unused_imports)]
mod support;

#[path = "nemesis/checkers.rs"]
mod checkers;
#[path = "nemesis/history.rs"]
mod history;
#[path = "nemesis/links.rs"]
mod links;
#[path = "nemesis/run.rs"]
mod run;
#[path = "nemesis/sanity.rs"]
mod sanity;
#[path = "nemesis/schedule.rs"]
mod schedule;

use support::backends::{
    ClusterScene, EtcdScene, KubeScene, LockFileScene, PgScene, RedisScene, RedlockScene, Scene,
    SentinelScene, ZkScene,
};

type StartScene = fn() -> Box<dyn Scene>;

/// Every backend the nemesis runs, by the name `--backend` takes, and the
/// name `leaderd::lease::names()` registers it under.
const BACKENDS: &[(&str, &str, StartScene)] = &[
    ("lock-file", "lock-file", LockFileScene::start),
    ("redis", "redis", RedisScene::start),
    ("redis-tls", "redis", RedisScene::start_tls),
    ("sentinel", "redis", SentinelScene::start),
    ("cluster", "redis", ClusterScene::start),
    ("redlock", "redlock", RedlockScene::start3),
    ("postgres-table", "postgres-table", PgScene::table),
    ("postgres-advisory", "postgres-advisory", PgScene::advisory),
    ("etcd", "etcd", EtcdScene::three),
    ("zookeeper", "zookeeper", ZkScene::three),
    ("kubernetes", "kubernetes", KubeScene::three),
];

struct Options {
    backends: Vec<String>,
    seconds: u64,
    seed: u64,
    /// How many seeds, from `seed` on: each a soak of its own.
    seeds: u64,
    candidates: usize,
    sanity: bool,
    /// Print the schedule the seed gives, and stop.
    plan: bool,
}

fn usage() -> String {
    let names: Vec<&str> = BACKENDS.iter().map(|b| b.0).collect();
    format!(
        "usage: scripts/nemesis [--backend NAME]... [--seconds N] [--seed S] [--seeds N] [--candidates K] [--sanity] [--plan]\n  backends: {}",
        names.join(", ")
    )
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        backends: Vec::new(),
        seconds: 60,
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64 % 1_000_000),
        seeds: 1,
        candidates: 3,
        sanity: false,
        plan: false,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |what: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{arg} needs {what}\n{}", usage()))
        };
        match arg.as_str() {
            "--backend" => o.backends.push(value("a backend name")?),
            "--seconds" => {
                o.seconds = value("a number")?
                    .parse()
                    .map_err(|e| format!("--seconds: {e}"))?
            }
            "--seed" => {
                o.seed = value("a number")?
                    .parse()
                    .map_err(|e| format!("--seed: {e}"))?
            }
            "--seeds" => {
                o.seeds = value("a number")?
                    .parse()
                    .map_err(|e| format!("--seeds: {e}"))?
            }
            "--candidates" => {
                o.candidates = value("a number")?
                    .parse()
                    .map_err(|e| format!("--candidates: {e}"))?
            }
            "--sanity" => o.sanity = true,
            "--plan" => o.plan = true,
            "--nemesis" => {}
            other => return Err(format!("unknown option {other}\n{}", usage())),
        }
    }
    for name in &o.backends {
        if !BACKENDS.iter().any(|b| b.0 == name) {
            return Err(format!("no backend {name:?}\n{}", usage()));
        }
    }
    if o.seeds == 0 {
        return Err("--seeds: at least 1".into());
    }
    if o.candidates < 2 {
        return Err("--candidates: at least 2, or nothing can overlap".into());
    }
    Ok(o)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo test` runs every test binary: without `--nemesis` (which
    // scripts/nemesis passes) this one has nothing to do.
    if !args.iter().any(|a| a == "--nemesis") {
        println!("nemesis: run it with scripts/nemesis (see docs/development.md)");
        return;
    }
    let options = match parse(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    if options.sanity {
        std::process::exit(sanity::run());
    }
    let length = std::time::Duration::from_secs(options.seconds);
    if options.plan {
        for p in run::plan(options.seed, length) {
            println!("at {:?} {} for {:?}", p.at, p.kind.name(), p.lasts);
        }
        return;
    }
    // Every registered backend has a nemesis scene.
    for registered in leaderd::lease::names() {
        assert!(
            BACKENDS.iter().any(|b| b.1 == registered),
            "the backend {registered} has no nemesis scene"
        );
    }
    let chosen: Vec<&(&str, &str, StartScene)> = BACKENDS
        .iter()
        .filter(|b| options.backends.is_empty() || options.backends.iter().any(|n| n == b.0))
        .collect();
    let mut failed = false;
    let seeds = options.seed..options.seed + options.seeds;
    for (name, _, start) in chosen {
        let mut failing = Vec::new();
        for seed in seeds.clone() {
            if !run::soak(name, *start, seed, length, options.candidates) {
                failing.push(seed);
            }
        }
        if options.seeds > 1 {
            // One line per backend over every seed: what a long run says.
            println!(
                "nemesis: {name} seeds {}..={} seconds={} => {} of {} passed{}",
                seeds.start,
                seeds.end - 1,
                options.seconds,
                options.seeds as usize - failing.len(),
                options.seeds,
                if failing.is_empty() {
                    String::new()
                } else {
                    format!("; FAILED seeds {failing:?}")
                }
            );
        }
        failed |= !failing.is_empty();
    }
    std::process::exit(i32::from(failed));
}
