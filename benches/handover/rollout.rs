//! Rolling updates (issue #28): K candidates replaced one at a time as a
//! Deployment does — a new one started and registered, then an old one
//! stopped with SIGTERM, the old ones in a random order, so the leader goes
//! at a random step — with and without `--priority`, and `etcdctl lock` on
//! the same rollout. Counted: leadership changes (children started after
//! the rollout began) and the time no child ran.

use super::{PROBE, mono_ns, records};
use crate::support::{Leaderd, eventually};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// One rollout's outcome.
pub struct Outcome {
    pub changes: usize,
    pub leaderless_ms: f64,
    pub overlap: i32,
}

/// `0..k` in a seeded random order (splitmix64 keys).
fn shuffled(k: usize, seed: u64) -> Vec<usize> {
    let mut keyed: Vec<(u64, usize)> = (0..k)
        .map(|i| {
            let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i as u64 + 1));
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31), i)
        })
        .collect();
    keyed.sort();
    keyed.into_iter().map(|(_, i)| i).collect()
}

/// The probe file's records, with a stop line for each child killed with
/// SIGKILL (which writes none) at the instant it was killed.
fn with_kills(file: &Path, killed: &[(u32, u64)]) -> Vec<(String, u32, u64)> {
    let mut recs = records(file);
    recs.extend(
        killed
            .iter()
            .map(|&(pid, ns)| ("stop".to_string(), pid, ns)),
    );
    recs
}

/// The most children alive at once, by the records and the kills.
fn most_alive(file: &Path, killed: &[(u32, u64)]) -> i32 {
    let mut events: Vec<(u64, i32)> = with_kills(file, killed)
        .into_iter()
        .filter_map(|(k, _, ns)| match k.as_str() {
            "start" => Some((ns, 1)),
            "stop" => Some((ns, -1)),
            _ => None,
        })
        .collect();
    events.sort();
    let (mut alive, mut most) = (0, 0);
    for (_, change) in events {
        alive += change;
        most = most.max(alive);
    }
    most
}

/// A child runs now, by the probe file (and the kills).
fn running(file: &Path, killed: &[(u32, u64)]) -> bool {
    let recs = with_kills(file, killed);
    recs.iter()
        .any(|(k, pid, _)| k == "start" && !recs.iter().any(|(s, p, _)| s == "stop" && p == pid))
}

/// Children started after `from`, and the time in `from..to` no child ran
/// (a child without a stop line runs to `to`).
fn judge(file: &Path, from: u64, to: u64, killed: &[(u32, u64)]) -> (usize, f64) {
    let recs = with_kills(file, killed);
    let mut spans: Vec<(u64, u64)> = recs
        .iter()
        .filter(|(k, _, _)| k == "start")
        .map(|(_, pid, start)| {
            let stop = recs
                .iter()
                .find(|(k, p, _)| k == "stop" && p == pid)
                .map_or(to, |(_, _, ns)| *ns);
            ((*start).max(from), stop.min(to))
        })
        .filter(|(a, b)| a < b)
        .collect();
    spans.sort();
    let (mut covered, mut reach) = (0u64, from);
    for (a, b) in spans {
        if b > reach {
            covered += b - a.max(reach);
            reach = b;
        }
    }
    let changes = recs
        .iter()
        .filter(|(k, _, ns)| k == "start" && *ns > from)
        .count();
    (changes, (to - from).saturating_sub(covered) as f64 / 1e6)
}

/// A leaderd rollout of `k` candidates on the store `backend` selects.
pub fn leaderd(
    backend: &[String],
    exe: &str,
    dir: &Path,
    tag: &str,
    (k, priority, seed): (usize, bool, u64),
) -> Outcome {
    let file = dir.join(format!("{tag}-{seed}.probe"));
    let key = format!("rollout-{tag}-{seed}");
    let spawn = |id: String, rank: &str| {
        let mut args: Vec<&str> = backend.iter().map(String::as_str).collect();
        args.extend(["--key", &key, "--ttl", "3s", "--log-level", "warn"]);
        if priority {
            args.extend(["--priority", rank, "--handover-delay", "2s"]);
        }
        args.extend(["--", exe, PROBE, file.to_str().unwrap()]);
        Leaderd::run(&id, &args)
    };
    let mut old: Vec<Option<Leaderd>> = (0..k)
        .map(|i| Some(spawn(format!("old{i}"), "1.4")))
        .collect();
    eventually(Duration::from_secs(30), "a first leader", || {
        running(&file, &[]).then_some(())
    });
    let from = mono_ns();
    let mut new: Vec<Leaderd> = Vec::new();
    for (step, victim) in shuffled(k, seed).into_iter().enumerate() {
        let id = format!("new{step}");
        new.push(spawn(id.clone(), "1.5"));
        // Registered, and seen by every candidate (a pod's readiness takes
        // longer than a renew interval).
        eventually(Duration::from_secs(30), "the new candidate seen", || {
            old.iter()
                .flatten()
                .chain(&new)
                .all(|n| {
                    n.leader().is_some_and(|(_, b)| {
                        b["candidates"]
                            .as_array()
                            .is_some_and(|c| c.iter().any(|r| r["id"] == id.as_str()))
                    })
                })
                .then_some(())
        });
        if let Some(mut n) = old[victim].take() {
            n.signal("TERM");
            n.wait_exit(Duration::from_secs(30));
        }
    }
    // A pending handover has its delay to happen, then the leader's child.
    std::thread::sleep(Duration::from_secs(3));
    eventually(
        Duration::from_secs(30),
        "a leader after the rollout",
        || running(&file, &[]).then_some(()),
    );
    let to = mono_ns();
    let (changes, leaderless_ms) = judge(&file, from, to, &[]);
    drop(new);
    Outcome {
        changes,
        leaderless_ms,
        overlap: most_alive(&file, &[]),
    }
}

/// Rollouts with `seeds`, each `run`: mean and worst changes, mean and
/// worst leaderless time, most children at once.
pub fn row(name: &str, seeds: &[u64], mut run: impl FnMut(u64) -> Outcome) {
    let outcomes: Vec<Outcome> = seeds.iter().map(|&s| run(s)).collect();
    let n = outcomes.len() as f64;
    let changes: Vec<usize> = outcomes.iter().map(|o| o.changes).collect();
    let mean_changes = changes.iter().sum::<usize>() as f64 / n;
    let mean_gap = outcomes.iter().map(|o| o.leaderless_ms).sum::<f64>() / n;
    let max_gap = outcomes.iter().map(|o| o.leaderless_ms).fold(0.0, f64::max);
    let overlap = outcomes.iter().map(|o| o.overlap).max().unwrap_or(0);
    println!(
        "| {name} | {mean_changes:.1} ({changes:?}) | {mean_gap:.0} ms | {max_gap:.0} ms | {overlap} | {} |",
        outcomes.len()
    );
}

/// The same rollout with `etcdctl lock --ttl 3`: SIGTERM to an old one,
/// then, after a 2 s grace, SIGKILL to it and its command (as a kubelet
/// ends a pod), since a holder keeps the lock while its command runs.
pub fn etcdctl(endpoints: &str, exe: &str, dir: &Path, k: usize, seed: u64) -> Outcome {
    let file = dir.join(format!("etcdctl-rollout-{seed}.probe"));
    let key = format!("etcdctl-rollout-{seed}");
    let spawn = || {
        Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", endpoints, "lock", "--ttl", "3", &key])
            .args([exe, PROBE, file.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcdctl")
    };
    let mut old: Vec<Option<std::process::Child>> = (0..k).map(|_| Some(spawn())).collect();
    eventually(Duration::from_secs(30), "a first holder", || {
        running(&file, &[]).then_some(())
    });
    let mut killed: Vec<(u32, u64)> = Vec::new();
    let from = mono_ns();
    let mut new = Vec::new();
    for victim in shuffled(k, seed) {
        new.push(spawn());
        std::thread::sleep(Duration::from_millis(500));
        let Some(mut n) = old[victim].take() else {
            continue;
        };
        let pid = n.id() as i32;
        let children = crate::support::os::children_of(n.id());
        // SAFETY: plain syscalls to processes we started.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let exited = (0..200).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            n.try_wait().ok().flatten().is_some()
        });
        if !exited {
            for child in children {
                // SAFETY: as above.
                unsafe { libc::kill(child, libc::SIGKILL) };
                killed.push((child as u32, mono_ns()));
            }
            let _ = n.kill();
        }
        let _ = n.wait();
    }
    std::thread::sleep(Duration::from_secs(1));
    let got = (0..600).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        running(&file, &killed)
    });
    let to = mono_ns();
    let (changes, leaderless_ms) = judge(&file, from, to, &killed);
    for mut n in new {
        for child in crate::support::os::children_of(n.id()) {
            // SAFETY: plain syscall to a process we started.
            unsafe { libc::kill(child, libc::SIGKILL) };
        }
        let _ = n.kill();
        let _ = n.wait();
    }
    if !got {
        eprintln!("etcdctl rollout {seed}: no holder 30 s after the rollout");
    }
    Outcome {
        changes,
        leaderless_ms,
        overlap: most_alive(&file, &killed),
    }
}
