//! The supervised child: started once per term on the leader only, never
//! alive on two leaders, stopped in time, never orphaned.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::{FAST, Leaderd, ProbeEvent, Redis, alive, eventually, probe_child, probe_events};

fn with_child(redis: &Redis, key: &str, id: &str, opts: &[&str], child: &[&str]) -> Leaderd {
    let args: Vec<&str> = opts.iter().chain(&["--"]).chain(child).copied().collect();
    support::on_redis(redis, key, id, &args)
}

/// A probe log in a scratch directory of its own, removed with the guard.
fn probe_log(name: &str) -> (support::Scratch, PathBuf) {
    let dir = support::Scratch::new(name);
    let log = dir.join("probe.log");
    (dir, log)
}

fn p(path: &Path) -> &str {
    support::path_str(path)
}

fn of_kind<'a>(events: &'a [ProbeEvent], kind: &str) -> Vec<&'a ProbeEvent> {
    events.iter().filter(|e| e.kind == kind).collect()
}

fn lease_key(key: &str) -> String {
    format!("leaderd:{{{key}}}:lease")
}

#[test]
fn child_runs_only_on_the_leader_once_per_term_across_renewals() {
    let redis = Redis::start();
    let (_dir, log) = probe_log("once");
    let probe = probe_child();
    let child = [probe.as_str(), p(&log)];
    // DEBUG: the renewals counted below are routine transitions.
    let args = [
        "--ttl",
        "1s",
        "--redis-timeout",
        "200ms",
        "--log-level",
        "debug",
    ];
    let a = with_child(&redis, "once", "a", &args, &child);
    let b = with_child(&redis, "once", "b", &args, &child);
    let leader = eventually(support::WAIT, "a leader", || {
        [&a, &b].into_iter().find(|n| n.is_leader())
    });
    // Several renewals (every 333 ms) under the same term.
    eventually(Duration::from_secs(10), "six renewals", || {
        (leader
            .log()
            .iter()
            .filter(|l| l.contains("reason=\"lease renewed\""))
            .count()
            >= 6)
            .then_some(())
    });
    let events = probe_events(&log);
    let starts = of_kind(&events, "start");
    assert_eq!(starts.len(), 1, "one start per term: {events:?}");
    assert!(alive(starts[0].pid), "the child survives renewals");
    let (_, body) = leader.leader().unwrap();
    assert_eq!(
        starts[0].rest[0],
        body["fencing_token"].to_string(),
        "LEADERD_FENCING_TOKEN is the term's token"
    );
    assert_eq!(
        starts[0].rest[1], "false",
        "LEADERD_REDIS_URL is removed from the child's environment"
    );
}

#[test]
fn twenty_graceful_handovers_never_overlap() {
    let redis = Redis::start();
    let (_dir, log) = probe_log("handovers");
    let probe = probe_child();
    let child = [probe.as_str(), p(&log)];
    let mut nodes: Vec<Leaderd> = (0..3)
        .map(|i| with_child(&redis, "handovers", &format!("n{i}"), FAST, &child))
        .collect();
    for round in 0..20 {
        let (leader, token) = eventually(Duration::from_secs(10), "a leader", || {
            nodes.iter().enumerate().find_map(|(i, n)| {
                let (leads, body) = n.leader()?;
                leads.then(|| (i, body["fencing_token"].to_string()))
            })
        });
        // Its child has started: /leader answers as the term begins, a
        // moment before the child writes its start.
        eventually(
            Duration::from_secs(10),
            "the leader's child to start",
            || {
                let events = probe_events(&log);
                of_kind(&events, "start")
                    .iter()
                    .any(|e| e.rest.first() == Some(&token))
                    .then_some(())
            },
        );
        let starts_before = of_kind(&probe_events(&log), "start").len();
        nodes[leader].signal("TERM");
        assert_eq!(
            nodes[leader].wait_exit(Duration::from_secs(10)).code(),
            Some(0)
        );
        let old = nodes[leader].log();
        let stopped = old
            .iter()
            .position(|l| l.contains("child stopped"))
            .expect("child stopped logged");
        let released = old
            .iter()
            .position(|l| l.contains("lease released"))
            .expect("release logged");
        assert!(
            stopped < released,
            "round {round}: release only after the child was reaped"
        );
        nodes[leader] = with_child(
            &redis,
            "handovers",
            &format!("n{}", round + 3),
            FAST,
            &child,
        );
        eventually(Duration::from_secs(10), "the next child to start", || {
            (of_kind(&probe_events(&log), "start").len() > starts_before).then_some(())
        });
    }
    // From the recorded timestamps: at no instant two children alive.
    let events = probe_events(&log);
    let mut timeline: Vec<(u128, i32)> = events
        .iter()
        .filter_map(|e| match e.kind.as_str() {
            "start" => Some((e.ns, 1)),
            "stop" => Some((e.ns, -1)),
            _ => None,
        })
        .collect();
    timeline.sort();
    let mut running = 0;
    for (ns, delta) in &timeline {
        running += delta;
        assert!(running <= 1, "two children alive at {ns}: {events:?}");
    }
    assert!(of_kind(&events, "start").len() >= 21, "{events:?}");
}

#[test]
fn a_slow_graceful_stop_keeps_the_lease_meanwhile() {
    let redis = Redis::start();
    let (_dir, log) = probe_log("slowstop");
    let probe = probe_child();
    let child = [probe.as_str(), p(&log), "--term-delay", "3000"];
    let mut a = with_child(&redis, "slowstop", "a", FAST, &child);
    a.wait_leading(support::WAIT);
    let b = with_child(&redis, "slowstop", "b", FAST, &child);
    b.wait_log(support::WAIT, "lease held by another candidate");
    a.signal("TERM");
    let signalled = Instant::now();
    // Past the 2s TTL the key still names a: the lease was renewed while the child stopped.
    eventually(Duration::from_secs(5), "2.5s to pass", || {
        (signalled.elapsed() > Duration::from_millis(2500)).then_some(())
    });
    let holder = redis.get(&lease_key("slowstop")).unwrap_or_default();
    assert!(holder.contains("\"id\":\"a\""), "{holder}");
    assert_eq!(a.wait_exit(Duration::from_secs(10)).code(), Some(0));
    eventually(support::WAIT, "b's child to start", || {
        (of_kind(&probe_events(&log), "start").len() == 2).then_some(())
    });
    let events = probe_events(&log);
    let a_stop = of_kind(&events, "stop")[0].ns;
    let b_start = of_kind(&events, "start")[1].ns;
    assert!(
        a_stop < b_start,
        "nobody else started before a's child stopped: {events:?}"
    );
    assert!(a_stop - of_kind(&events, "term")[0].ns >= 3_000_000_000);
}

#[test]
fn a_child_ignoring_sigterm_is_killed_at_stop_timeout_on_shutdown() {
    let redis = Redis::start();
    let (_dir, log) = probe_log("ignore-term");
    let probe = probe_child();
    let child = [probe.as_str(), p(&log), "--ignore-term"];
    let mut a = with_child(
        &redis,
        "ignore",
        "a",
        &["--ttl", "10s", "--stop-timeout", "1s"],
        &child,
    );
    a.wait_leading(support::WAIT);
    let pid = eventually(support::WAIT, "the child", || {
        of_kind(&probe_events(&log), "start").first().map(|e| e.pid)
    });
    a.signal("TERM");
    let signalled = Instant::now();
    eventually(support::WAIT, "the child to get SIGTERM", || {
        (!of_kind(&probe_events(&log), "term").is_empty()).then_some(())
    });
    eventually(support::WAIT, "the child to die", || {
        (!alive(pid)).then_some(())
    });
    let died = signalled.elapsed();
    assert!(
        died >= Duration::from_millis(900),
        "killed after {died:?}, before the 1s stop timeout"
    );
    assert_eq!(a.wait_exit(support::WAIT).code(), Some(0));
}

#[test]
fn a_child_ignoring_sigterm_dies_before_a_lost_lease_could_be_won_elsewhere() {
    let redis = Redis::start();
    let (_dir, log) = probe_log("lost");
    let probe = probe_child();
    let child = [
        probe.as_str(),
        p(&log),
        "--ignore-term",
        "--grandchildren",
        "2",
    ];
    let a = with_child(
        &redis,
        "lost",
        "a",
        &[
            "--ttl",
            "2s",
            "--redis-timeout",
            "200ms",
            "--stop-timeout",
            "60s",
        ],
        &child,
    );
    a.wait_leading(support::WAIT);
    let events = eventually(
        Duration::from_secs(5),
        "the child and grandchildren",
        || {
            let e = probe_events(&log);
            (of_kind(&e, "grandchild").len() == 2).then_some(e)
        },
    );
    let pids: Vec<i32> = events
        .iter()
        .filter(|e| e.kind == "start" || e.kind == "grandchild")
        .map(|e| e.pid)
        .collect();
    // The last renewal was sent at most one renew interval ago, so the lease's
    // validity ends within 2s of now: everything must be dead by then.
    let overwritten = Instant::now();
    redis.cmd(&[
        "SET",
        &lease_key("lost"),
        "{\"id\":\"thief\",\"fencing_token\":1,\"token\":\"t\"}",
        "PX",
        "60000",
    ]);
    eventually(
        Duration::from_secs(2),
        "child and grandchildren to die before the validity end",
        || pids.iter().all(|p| !alive(*p)).then_some(()),
    );
    eprintln!(
        "work dead {:?} after the key was overwritten",
        overwritten.elapsed()
    );
    a.wait_log(support::WAIT, "from=\"pausing\" to=\"waiting\"");
}

#[test]
fn sh_c_descendants_are_all_gone_after_a_step_down() {
    let redis = Redis::start();
    let a = with_child(
        &redis,
        "shc",
        "a",
        FAST,
        &["sh", "-c", "sleep 1000 & sleep 1000"],
    );
    a.wait_leading(support::WAIT);
    let child_pid: i32 = a
        .wait_log(support::WAIT, "child started")
        .split("pid=")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // The guard leads the group.
    let guard = support::pgid_of(child_pid);
    let members = eventually(support::WAIT, "sh and both sleeps", || {
        let m = support::group_members(guard);
        (m.len() >= 4).then_some(m) // guard, sh, two sleeps
    });
    redis.cmd(&[
        "SET",
        &lease_key("shc"),
        "{\"id\":\"other\",\"fencing_token\":1,\"token\":\"t\"}",
        "PX",
        "60000",
    ]);
    a.wait_log(support::WAIT, "from=\"pausing\" to=\"waiting\"");
    // The work (sh and both sleeps) is reaped before that line; the guard,
    // dismissed then, exits a moment later on its own.
    let work: Vec<i32> = members.iter().copied().filter(|&p| p != guard).collect();
    let left: Vec<i32> = work.into_iter().filter(|p| alive(*p)).collect();
    assert!(left.is_empty(), "still alive after the step-down: {left:?}");
    eventually(
        Duration::from_secs(5),
        "the dismissed guard to exit",
        || (!alive(guard)).then_some(()),
    );
}

#[test]
fn kill_9_of_leaderd_takes_the_child_and_grandchildren_along_even_after_idling() {
    let dir = support::Scratch::new("kill9");
    let log = dir.join("probe.log");
    let lock = dir.join("l.lock");
    let probe = probe_child();
    let mut a = Leaderd::run(
        "a",
        &[
            "--lock-file",
            p(&lock),
            "--",
            &probe,
            p(&log),
            "--grandchildren",
            "2",
        ],
    );
    let events = eventually(support::WAIT, "child and grandchildren", || {
        let e = probe_events(&log);
        (of_kind(&e, "grandchild").len() == 2).then_some(e)
    });
    let pids: Vec<i32> = events
        .iter()
        .filter(|e| e.kind == "start" || e.kind == "grandchild")
        .map(|e| e.pid)
        .collect();
    // Longer than tokio's 10s blocking-thread keep-alive: a parent-death
    // signal tied to a retired thread would have killed the child by now;
    // leaderd's guard must not.
    std::thread::sleep(Duration::from_secs(11));
    assert!(
        pids.iter().all(|p| alive(*p)),
        "the child must live until leaderd stops it"
    );
    assert_eq!(of_kind(&probe_events(&log), "start").len(), 1);
    a.signal("KILL");
    a.wait_exit(support::WAIT);
    eventually(
        support::WAIT,
        "child and grandchildren to die with leaderd",
        || pids.iter().all(|p| !alive(*p)).then_some(()),
    );
}

#[test]
fn on_child_exit_restart_keeps_leading_and_restarts_with_backoff() {
    let dir = support::Scratch::new("restart");
    let log = dir.join("probe.log");
    let probe = probe_child();
    let a = Leaderd::run(
        "a",
        &[
            "--lock-file",
            p(&dir.join("l")),
            "--on-child-exit",
            "restart",
            "--",
            &probe,
            p(&log),
            "--exit-after",
            "50",
            "3",
        ],
    );
    eventually(Duration::from_secs(10), "three starts", || {
        (of_kind(&probe_events(&log), "start").len() >= 3).then_some(())
    });
    assert!(a.is_leader(), "restart keeps the lease");
    let starts: Vec<u128> = of_kind(&probe_events(&log), "start")
        .iter()
        .map(|e| e.ns)
        .collect();
    assert!(
        starts[2] - starts[1] > starts[1] - starts[0],
        "the backoff grows: {starts:?}"
    );
    assert!(
        starts[1] - starts[0] >= 900_000_000,
        "not a hot loop: {starts:?}"
    );
}

#[test]
fn on_child_exit_release_hands_the_lease_to_another_candidate() {
    let redis = Redis::start();
    let (_dir, log) = probe_log("release");
    let probe = probe_child();
    let quitter = [probe.as_str(), p(&log), "--exit-after", "300", "0"];
    let a = with_child(&redis, "release", "a", FAST, &quitter);
    a.wait_leading(support::WAIT);
    let b = with_child(&redis, "release", "b", FAST, &[probe.as_str(), p(&log)]);
    eventually(
        Duration::from_secs(5),
        "b to lead after a's child exited",
        || b.is_leader().then_some(()),
    );
    a.wait_log(support::WAIT, "reason=\"child exited\"");
}

#[test]
fn on_child_exit_exit_maps_the_exit_code() {
    let probe = probe_child();
    for (how, want) in [("7", 7), ("signal:9", 137)] {
        let dir = support::Scratch::new(&format!("exit-{want}"));
        let log = dir.join("probe.log");
        let mut a = Leaderd::run(
            "a",
            &[
                "--lock-file",
                p(&dir.join("l")),
                "--on-child-exit",
                "exit",
                "--",
                &probe,
                p(&log),
                "--exit-after",
                "100",
                how,
            ],
        );
        assert_eq!(
            a.wait_exit(Duration::from_secs(10)).code(),
            Some(want),
            "{how}"
        );
        assert!(a.log().iter().any(|l| l.contains("lease released")));
    }
}

#[test]
fn signals_are_forwarded_to_the_child() {
    let dir = support::Scratch::new("forward");
    let log = dir.join("probe.log");
    let probe = probe_child();
    let a = Leaderd::run(
        "a",
        &["--lock-file", p(&dir.join("l")), "--", &probe, p(&log)],
    );
    eventually(support::WAIT, "the child", || {
        (!of_kind(&probe_events(&log), "start").is_empty()).then_some(())
    });
    a.signal("USR1");
    eventually(support::WAIT, "the child to get SIGUSR1", || {
        (!of_kind(&probe_events(&log), "usr1").is_empty()).then_some(())
    });
    assert!(a.is_leader(), "leaderd itself is unaffected");
}

#[test]
fn a_missing_command_is_an_error_at_start_up() {
    let (code, _, err) = support::run_to_end(&[
        "run",
        "--lock-file",
        "/tmp/leaderd-missing.lock",
        "--",
        "no-such-worker-binary",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("no-such-worker-binary") && err.contains("not found on PATH"),
        "{err}"
    );
}

/// Guard processes whose parent is `pid`.
fn guards_of(pid: u32) -> usize {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            let ppid = stat
                .rfind(')')
                .and_then(|i| stat[i + 2..].split_whitespace().nth(1)?.parse::<u32>().ok());
            String::from_utf8_lossy(&cmdline).contains("__guard") && ppid == Some(pid)
        })
        .count()
}

#[test]
fn a_standby_guard_does_not_hold_up_the_stop() {
    let dir = support::Scratch::new("standby");
    let lock = dir.join("l");
    let log = dir.join("probe.log");
    let probe = probe_child();
    // `a` leads only after another candidate lets go, long after its first
    // spare guard was spawned: the child takes that spare, and the spare
    // kept beside a running child is the one spawned after it.
    let mut first = Leaderd::run("first", &["--lock-file", p(&lock)]);
    first.wait_leading(support::WAIT);
    let mut a = Leaderd::run(
        "a",
        &[
            "--lock-file",
            p(&lock),
            "--stop-timeout",
            "30s",
            "--",
            &probe,
            p(&log),
        ],
    );
    eventually(support::WAIT, "a's spare guard", || {
        (guards_of(a.pid()) == 1).then_some(())
    });
    first.signal("TERM");
    assert_eq!(first.wait_exit(support::WAIT).code(), Some(0));
    eventually(support::WAIT, "the child", || {
        (!of_kind(&probe_events(&log), "start").is_empty()).then_some(())
    });
    // The child's guard, and the spare guard kept ready beside it.
    eventually(support::WAIT, "two guards", || {
        (guards_of(a.pid()) == 2).then_some(())
    });
    a.signal("TERM");
    let status = a.wait_exit(Duration::from_secs(10));
    assert_eq!(
        status.code(),
        Some(0),
        "stopped well before the 30s stop timeout"
    );
}
