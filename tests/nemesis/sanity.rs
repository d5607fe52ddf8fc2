//! `--sanity`: every checker shown to fail on a violation planted for real.
//! - C1 and C3: two candidate groups on two different lock files (two
//!   stores), sharing one child-log directory, one recorder and one
//!   `--exclusive` lock: both lead, both children run, and each of C1's
//!   three measures must see it;
//! - C2: a token counter set back: the lock file rewritten with a token far
//!   in the future, then with none, under fresh candidates;
//! - C4, C6 and C7: one Redis frozen for 14 s, recorded as a fault the
//!   store tolerates, as one that keeps the leader, and as healed 3 s into
//!   it;
//! - C5: a probe child started outside leaderd and left running.
//!
//! Exit 1 when every checker failed as it must (the run "fails", on
//! purpose), 3 when one of them passed a planted violation (a checker that
//! cannot fail), and the schedule's own promises are checked first.

use crate::checkers::{self, Verdict};
use crate::history::{self, History, Injected, Recorder};
use crate::run::{Fleet, TTL, heal_bound};
use crate::schedule;
use crate::support::os::mono_ns;
use crate::support::{self, Leaderd, Redis, Scratch};
use std::path::Path;
use std::time::Duration;

fn say(v: &Verdict) -> bool {
    println!(
        "nemesis: sanity: {} {}: {}",
        v.name,
        if v.ok { "PASS" } else { "FAIL" },
        v.figure
    );
    !v.ok
}

fn lock_args(path: &Path) -> Vec<String> {
    [
        "--lock-file",
        support::path_str(path),
        "--ttl",
        "2s",
        "--retry-interval",
        "300ms",
    ]
    .map(String::from)
    .to_vec()
}

/// C1 and C3: two groups on two stores, one history.
fn two_stores() -> (Verdict, Verdict) {
    let dir = Scratch::new(&format!("sanity-two-{}", support::os::below(1 << 30)));
    for group in ["a", "b"] {
        std::fs::create_dir_all(dir.join(group)).expect("a group's directory");
    }
    let exclusive = dir.join("exclusive");
    let a = Fleet::start(
        lock_args(&dir.join("x.lock")),
        &dir.join("a"),
        &exclusive,
        1,
    );
    let b = Fleet::start(
        lock_args(&dir.join("y.lock")),
        &dir.join("b"),
        &exclusive,
        1,
    );
    let ports = std::sync::Arc::new(std::sync::Mutex::new(vec![
        a.ports.lock().unwrap()[0],
        b.ports.lock().unwrap()[0],
    ]));
    let recorder = Recorder::start(ports, dir.to_path_buf());
    support::eventually(Duration::from_secs(10), "both groups to lead", || {
        (a.leader().is_some() && b.leader().is_some()).then_some(())
    });
    std::thread::sleep(Duration::from_secs(1));
    let end = mono_ns();
    let (mut a, mut b) = (a, b);
    a.stop();
    b.stop();
    let (answers, samples, deaths) = recorder.finish();
    let mut logs = a.logs.clone();
    logs.extend(b.logs.clone());
    let history = History {
        answers,
        samples,
        deaths,
        lives: history::lives(&logs),
        ..History::default()
    };
    let each = checkers::Overlaps::of(&history, end);
    if !each.all_saw() {
        println!("nemesis: sanity: one of C1's measures missed two live children: {each:?}");
    }
    let mut c1 = checkers::c1(&history, end).0;
    // C1 fails here only if each of its measures does on its own.
    c1.ok |= !each.all_saw();
    (c1, checkers::c3(&history).0)
}

/// C2: the file's counter set back under fresh candidates.
fn counter_set_back() -> Verdict {
    let dir = Scratch::new(&format!("sanity-back-{}", support::os::below(1 << 30)));
    let lock = dir.join("z.lock");
    let mut logs = Vec::new();
    for (round, planted) in [None, Some(9_000_000_000_000_000u64), Some(0)]
        .iter()
        .enumerate()
    {
        if let Some(token) = planted {
            std::fs::write(
                &lock,
                format!("{{\"id\":\"planted\",\"fencing_token\":{token}}}\n"),
            )
            .expect("rewrite the lock file");
        }
        let log = dir.join(format!("r{round}.probe"));
        let probe = support::probe_child();
        let mut args = lock_args(&lock);
        args.extend(["--".to_string(), probe, support::path_str(&log).to_string()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut node = Leaderd::run(&format!("r{round}"), &args);
        support::eventually(Duration::from_secs(10), "the child", || {
            history::lives(std::slice::from_ref(&log))
                .first()
                .map(|_| ())
        });
        node.signal("TERM");
        node.wait_exit(Duration::from_secs(10));
        logs.push(log);
    }
    let history = History {
        lives: history::lives(&logs),
        ..History::default()
    };
    checkers::c2(&history).0
}

/// C4, C6 and C7: a single Redis frozen for 14 s, recorded as tolerated,
/// as keeping the leader, and as healed at once.
fn frozen_without_failover() -> (Verdict, Verdict, Verdict) {
    let redis = Redis::start();
    let dir = Scratch::new(&format!("sanity-frozen-{}", support::os::below(1 << 30)));
    let args: Vec<String> = [
        "--redis",
        &redis.url(),
        "--key",
        "sanity",
        "--ttl",
        "2s",
        "--retry-interval",
        "300ms",
    ]
    .map(String::from)
    .to_vec();
    let mut fleet = Fleet::start(args, &dir, &dir.join("exclusive"), 2);
    let recorder = Recorder::start(fleet.ports.clone(), dir.to_path_buf());
    support::eventually(Duration::from_secs(10), "a leader", || fleet.leader());
    // C7 judges the child alive when the fault begins, and a child starts a
    // moment after its leader's `/leader` says 200: on a loaded machine long
    // enough that the freeze came first and C7 judged nothing (found with
    // two CPU hogs beside the suite).
    support::eventually(support::WAIT, "the leader's child", || {
        let lives = history::lives(&fleet.logs);
        lives.iter().any(|l| l.stop.is_none()).then_some(())
    });
    let start = mono_ns();
    redis.pause();
    std::thread::sleep(Duration::from_secs(14));
    let end = mono_ns();
    redis.resume();
    support::eventually(Duration::from_secs(10), "a leader again", || fleet.leader());
    fleet.stop();
    let (answers, samples, deaths) = recorder.finish();
    let history = History {
        answers,
        samples,
        deaths,
        faults: vec![Injected {
            kind: "freeze-one",
            start,
            end,
            tolerated: Some(TTL + Duration::from_millis(1300)),
            // Recorded as a fault that keeps the leader, which a single
            // Redis frozen is not: its leader's term ends (C7).
            keeps_leader: true,
        }],
        lives: history::lives(&fleet.logs),
        ..History::default()
    };
    // Said healed 3 s into the freeze, while it lasted 14 s: no leader can be
    // back before 11 s after that, beyond the 8.3 s bound.
    let said_healed = start + 3_000_000_000;
    (
        checkers::c4(&history, said_healed, heal_bound()),
        checkers::c6(&history),
        checkers::c7(&history, mono_ns()),
    )
}

/// C5: a probe child nobody stops.
fn child_left_behind() -> Verdict {
    let dir = Scratch::new(&format!("sanity-left-{}", support::os::below(1 << 30)));
    let log = dir.join("stray.probe");
    let mut stray = std::process::Command::new(support::probe_child())
        .arg(&log)
        .spawn()
        .expect("start a probe child");
    support::eventually(Duration::from_secs(5), "the stray child", || {
        (!history::probes_alive(&dir).is_empty()).then_some(())
    });
    let history = History {
        leftovers: history::probes_alive(&dir)
            .into_iter()
            .map(|pid| format!("probe child {pid}"))
            .collect(),
        ..History::default()
    };
    let _ = stray.kill();
    let _ = stray.wait();
    checkers::c5(&history)
}

pub fn run() -> i32 {
    if let Err(e) = schedule::self_test() {
        println!("nemesis: sanity: the schedule broke a promise: {e}");
        return 3;
    }
    if let Err(e) = checkers::self_test() {
        println!("nemesis: sanity: C3's streaks are wrong: {e}");
        return 3;
    }
    if let Err(e) = crate::links::self_test() {
        println!("nemesis: sanity: the links' rewriting is wrong: {e}");
        return 3;
    }
    let (c1, c3) = two_stores();
    let c2 = counter_set_back();
    let (c4, c6, c7) = frozen_without_failover();
    let c5 = child_left_behind();
    let mut all_failed = true;
    for v in [&c1, &c2, &c3, &c4, &c5, &c6, &c7] {
        all_failed &= say(v);
    }
    if all_failed {
        println!(
            "nemesis: sanity: every checker failed on its planted violation => FAIL (as it must)"
        );
        1
    } else {
        println!("nemesis: sanity: a checker passed a planted violation: it cannot fail");
        3
    }
}
