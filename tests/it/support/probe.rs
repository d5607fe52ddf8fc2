//! What the probe children wrote (`examples/probe_child.rs`): their start and
//! stop lines, and the invariants read from them.

use super::{Leaderd, alive, eventually, within};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One line of a probe log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeEvent {
    pub kind: String,
    pub pid: i32,
    pub ns: u128,
    pub rest: Vec<String>,
}

pub fn probe_events(log: &Path) -> Vec<ProbeEvent> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let kind = f.next()?.to_string();
            let pid = f.next()?.parse().ok()?;
            let ns = f.next().and_then(|n| n.parse().ok()).unwrap_or(0);
            Some(ProbeEvent {
                kind,
                pid,
                ns,
                rest: f.map(str::to_string).collect(),
            })
        })
        .collect()
}

/// `-- probe LOG --exclusive LOCK`, the child command line of a candidate
/// whose overlap [`born_beside_a_live_one`] judges: children whose logs
/// share a directory share the lock `exclusive` there.
pub fn exclusive_probe(log: &Path) -> Vec<String> {
    let lock = log.with_file_name("exclusive");
    let (log, lock) = (super::path_str(log), super::path_str(&lock));
    ["--", &super::probe_child(), log, "--exclusive", lock]
        .map(String::from)
        .to_vec()
}

/// The end of every candidate's log, for a failure to say what each did.
pub fn tails(nodes: &[Leaderd]) -> String {
    let tails: Vec<String> = nodes
        .iter()
        .map(|n| format!("--- {}:\n{}", n.id, n.tail()))
        .collect();
    tails.join("\n")
}

/// The one candidate that leads, once exactly one does, and its token; on
/// a timeout, the end of every candidate's log says what each did instead.
pub fn the_leader(nodes: &[Leaderd], limit: Duration) -> (usize, u64) {
    within(limit, || {
        let leading: Vec<usize> = (0..nodes.len()).filter(|&i| nodes[i].is_leader()).collect();
        let [one] = leading[..] else { return None };
        let (_, body) = nodes[one].leader()?;
        Some((one, body["fencing_token"].as_u64()?))
    })
    .unwrap_or_else(|| {
        panic!(
            "timed out after {limit:?} waiting for exactly one leader; the ends of their logs:\n{}",
            tails(nodes)
        )
    })
}

/// Whether the next child (the first `start` in `next`) began while the
/// child last started in `old` was still alive: checked the moment the
/// start line appears (10 ms apart), by the old child's own stop line or,
/// when it has none (killed with SIGKILL), by its pid in `/proc`.
pub fn started_beside(old: &Path, next: &Path, limit: Duration) -> bool {
    let old_child = probe_events(old)
        .into_iter()
        .rev()
        .find(|e| e.kind == "start")
        .expect("the old child started");
    // The start line first, then the old pid: alive after the new start
    // was written is alive beside it.
    let start = eventually(limit, "the next child to start", || {
        let start = probe_events(next).into_iter().find(|e| e.kind == "start")?;
        Some((start.ns, alive(old_child.pid)))
    });
    let stopped = probe_events(old)
        .into_iter()
        .find(|e| e.kind == "stop" && e.pid == old_child.pid);
    match stopped {
        Some(stop) => stop.ns > start.0,
        None => start.1,
    }
}

/// The most children alive at once, over every candidate's probe log, by
/// their `start` and `stop` lines (other lines, such as `inherited`, say
/// nothing of life: counting them as stops made this blind). A child with
/// no stop line (killed with SIGKILL) counts as alive to the end: a test
/// whose children are killed so checks their pids instead.
pub fn most_alive(logs: &[PathBuf]) -> usize {
    let mut events: Vec<(u128, i32)> = logs
        .iter()
        .flat_map(|l| probe_events(l))
        .filter_map(|e| match e.kind.as_str() {
            "start" => Some((e.ns, 1)),
            "stop" => Some((e.ns, -1)),
            _ => None,
        })
        .collect();
    events.sort();
    let (mut alive, mut most) = (0i32, 0i32);
    for (_, change) in events {
        alive += change;
        most = most.max(alive);
    }
    most as usize
}

/// How many children were born while an earlier one was still alive, for
/// children run with `--exclusive LOCK` (one lock for all): each tries an
/// exclusive `flock` on LOCK before its start line, and the kernel drops a
/// dying process's lock before anyone can learn that it died. So this is
/// exact whatever the scheduler does, and it sees the end of a child killed
/// with SIGKILL (by the guard, when leaderd is starved), which writes no
/// stop line and which [`most_alive`] therefore counts alive to the end.
/// Panics when children started and none tried the lock (a child killed
/// between its start line and its lock line tells nothing of its birth,
/// but the lock it held still shows to any child born beside it).
pub fn born_beside_a_live_one(logs: &[PathBuf]) -> usize {
    let events: Vec<ProbeEvent> = logs.iter().flat_map(|l| probe_events(l)).collect();
    let starts = events.iter().filter(|e| e.kind == "start").count();
    let births: Vec<&ProbeEvent> = events.iter().filter(|e| e.kind == "exclusive").collect();
    assert!(
        starts == 0 || !births.is_empty(),
        "children run without --exclusive: {events:#?}"
    );
    births
        .iter()
        .filter(|e| e.rest.first().map(String::as_str) != Some("free"))
        .count()
}
