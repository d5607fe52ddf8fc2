//! Priorities (issue #28) against a real Redis: a crashed leader's lease
//! goes to the candidate of higher priority (a lower one never starts its
//! child first), equal priorities never move the lease however candidates
//! come and go, and a bad priority is refused.

use crate::support::{self, FAST, Leaderd, Redis, eventually, most_alive, path_str, probe_events};
use std::path::Path;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

fn ranked(redis: &Redis, key: &str, id: &str, priority: &str, log: &Path) -> Leaderd {
    let (url, probe) = (redis.url(), support::probe_child());
    let args = [
        &["--redis", &url, "--key", key][..],
        FAST,
        &["--priority", priority, "--handover-delay", "2s"],
        &["--", &probe, path_str(log)],
    ]
    .concat();
    Leaderd::run(id, &args)
}

fn starts(log: &Path) -> usize {
    probe_events(log)
        .iter()
        .filter(|e| e.kind == "start")
        .count()
}

/// Whether every node's `/leader` lists `id`.
fn all_see(nodes: &[&Leaderd], id: &str) -> bool {
    nodes.iter().all(|n| {
        n.leader().is_some_and(|(_, b)| {
            b["candidates"]
                .as_array()
                .is_some_and(|c| c.iter().any(|r| r["id"] == id))
        })
    })
}

#[test]
fn a_crashed_leaders_lease_goes_to_the_higher_candidate_first() {
    let redis = Redis::start();
    let key = support::key("priority-crash");
    let dir = support::Scratch::new("priority-crash");
    let logs: Vec<_> = ["top", "low", "lower"]
        .iter()
        .map(|id| dir.join(id))
        .collect();
    // The top candidate leads; kill it, and the next highest takes over
    // before the lowest ever runs its child, over several rounds.
    let mut top = ranked(&redis, &key, "top", "9", &logs[0]);
    top.wait_leading(WAIT);
    let low = ranked(&redis, &key, "low", "5", &logs[1]);
    let lower = ranked(&redis, &key, "lower", "1", &logs[2]);
    eventually(WAIT, "everyone to see everyone", || {
        let all = [&top, &low, &lower];
        ["top", "low", "lower"]
            .iter()
            .all(|id| all_see(&all, id))
            .then_some(())
    });
    let killed = Instant::now();
    top.signal("KILL");
    top.wait_exit(WAIT);
    low.wait_leading(WAIT);
    let took = killed.elapsed();
    // The TTL (2 s) plus the usual jitter and a loaded machine's slack.
    assert!(
        took < Duration::from_secs(4),
        "the higher candidate took {took:?}: {:#?}",
        low.log()
    );
    assert_eq!(
        starts(&logs[2]),
        0,
        "the lowest candidate ran its child first"
    );
    // The killed leader's child dies by its guard's SIGKILL (no stop line):
    // judged by its pid when the next one started.
    assert!(
        !support::started_beside(&logs[0], &logs[1], WAIT),
        "two children at once"
    );
}

#[test]
fn equal_priorities_never_move_the_lease() {
    let redis = Redis::start();
    let key = support::key("priority-equal");
    let dir = support::Scratch::new("priority-equal");
    let log = |i: usize| dir.join(format!("c{i}"));
    let first = ranked(&redis, &key, "c0", "1.2", &log(0));
    first.wait_leading(WAIT);
    // For 60 s, candidates of the same priority (1.2 is 1.2.0) join and
    // leave around the leader; it never hands over.
    let mut others: Vec<Leaderd> = Vec::new();
    let until = Instant::now() + Duration::from_secs(60);
    let mut n = 1;
    while Instant::now() < until {
        let node = ranked(&redis, &key, &format!("c{n}"), "1.2.0", &log(n));
        eventually(WAIT, "the leader to see the newcomer", || {
            all_see(&[&first], &node.id).then_some(())
        });
        others.push(node);
        if others.len() > 2 {
            let mut gone = others.remove(0);
            gone.signal("TERM");
            gone.wait_exit(WAIT);
        }
        // Past the handover delay with the newcomer registered.
        std::thread::sleep(Duration::from_millis(2500));
        assert!(first.is_leader(), "the lease moved between equals");
        n += 1;
    }
    assert!(n > 10, "only {n} candidates came and went");
    let logs: Vec<_> = (0..n).map(log).collect();
    let terms: usize = logs.iter().map(|l| starts(l)).sum();
    assert_eq!(
        terms, 1,
        "leadership moved between candidates of equal priority"
    );
    assert_eq!(most_alive(&logs), 1);
}

#[test]
fn a_priority_that_is_not_one_is_refused() {
    let (code, _, err) = support::run_to_end(&[
        "run",
        "--lock-file",
        "/tmp/leaderd-priority-never.lock",
        "--priority",
        "1.14.2-rc1",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--priority: `1.14.2-rc1` is not a priority"),
        "{err}"
    );
    assert!(err.contains("a suffix such as -rc1"), "{err}");
}

/// `step-down --to ID`: the leader tells the others, then releases, and
/// the named candidate leads (not the one of higher priority); an unknown
/// id is refused and the leader keeps leading.
#[test]
fn step_down_to_hands_the_lease_to_the_named_candidate() {
    let redis = Redis::start();
    let key = support::key("priority-to");
    let dir = support::Scratch::new("priority-to");
    let socket = dir.join("admin.sock");
    let logs: Vec<_> = ["a", "b", "c"].iter().map(|id| dir.join(id)).collect();
    let (url, probe) = (redis.url(), support::probe_child());
    let leader_args = [
        &["--redis", &url, "--key", &key][..],
        FAST,
        &["--admin-socket", path_str(&socket)],
        &["--", &probe, path_str(&logs[0])],
    ]
    .concat();
    let a = Leaderd::run("a", &leader_args);
    a.wait_leading(WAIT);
    // b outranks c, yet c is the one named.
    let _b = ranked(&redis, &key, "b", "5", &logs[1]);
    let c = ranked(&redis, &key, "c", "1", &logs[2]);
    eventually(WAIT, "the leader to see both", || {
        all_see(&[&a], "b").then_some(())?;
        all_see(&[&a], "c").then_some(())
    });
    let ask = |to: &str| {
        support::run_to_end(&["step-down", "--admin-socket", path_str(&socket), "--to", to])
    };
    let (code, out, err) = ask("nobody");
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        out.contains("refused: no candidate `nobody` is registered (registered: "),
        "{out}"
    );
    assert!(
        a.is_leader(),
        "the leader stopped leading after a refused handover"
    );
    let (code, out, err) = ask("c");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("ok: handing over to c"), "{out}");
    c.wait_leading(WAIT);
    assert_eq!(starts(&logs[1]), 0, "the lease went to b, not the named c");
    assert!(support::most_alive(&logs) <= 1, "two children at once");
    // The handover was the release: a's log names it.
    a.wait_log(WAIT, "handing over to the candidate step-down --to named");
}
