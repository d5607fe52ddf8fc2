//! Health gating (issue #27) against a real Redis and real worker
//! endpoints (a small HTTP server per candidate): an unhealthy worker's
//! candidate never leads, a leader whose worker turns unhealthy hands over
//! at once with no child overlap, it does not take leadership back when its
//! worker recovers, nobody leads when every worker is unhealthy (and each
//! says why), a flapping worker moves leadership at most once, and health
//! commands that hang, are missing or print megabytes.

use crate::support::worker::{Mode, Worker};
use crate::support::{self, FAST, Leaderd, Redis, eventually, most_alive, path_str};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);
const INTERVAL: Duration = Duration::from_secs(1);
const TWO: [&str; 2] = ["--health-failures", "2"];

/// A candidate on `redis` with the probe child recording to `log`, gated on
/// `worker` (checked every second, given a second to answer; `extra` says
/// after how many failures it is unhealthy).
fn candidate(
    redis: &Redis,
    key: &str,
    id: &str,
    worker: &Worker,
    log: &Path,
    extra: &[&str],
) -> Leaderd {
    let (url, health, probe) = (redis.url(), worker.url(), support::probe_child());
    let args = [
        &["--redis", &url, "--key", key][..],
        FAST,
        &[
            "--health",
            &health,
            "--health-interval",
            "1s",
            // As long as the interval allows: a healthy worker that answers
            // slowly beside CPU hogs must not count as failing.
            "--health-timeout",
            "1s",
        ],
        extra,
        &["--", &probe, path_str(log)],
    ]
    .concat();
    Leaderd::run(id, &args)
}

fn starts(log: &Path) -> usize {
    support::probe_events(log)
        .iter()
        .filter(|e| e.kind == "start")
        .count()
}

fn last_start_ns(log: &Path) -> Option<u128> {
    support::probe_events(log)
        .iter()
        .rev()
        .find(|e| e.kind == "start")
        .map(|e| e.ns)
}

/// `/leader`'s word on the worker: (healthy, the last failure).
fn worker_of(node: &Leaderd) -> (Option<bool>, Option<String>) {
    let (_, body) = eventually(WAIT, "/leader to answer", || node.leader());
    (
        body["worker_healthy"].as_bool(),
        body["worker_last_failure"].as_str().map(str::to_string),
    )
}

#[test]
fn only_healthy_workers_lead_and_a_sick_leader_hands_over_at_once() {
    let redis = Redis::start();
    let key = support::key("health-gate");
    let dir = support::Scratch::new("health-gate");
    let workers = [
        Worker::start(Mode::Unhealthy),
        Worker::start(Mode::Healthy),
        Worker::start(Mode::Healthy),
    ];
    let logs: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("c{i}.log"))).collect();
    // The one with the sick worker starts first, alone, and still never leads.
    let sick = candidate(&redis, &key, "c0", &workers[0], &logs[0], &TWO);
    sick.wait_log(WAIT, "worker unhealthy: not campaigning");
    assert!(!sick.is_leader());
    let nodes = [
        sick,
        candidate(&redis, &key, "c1", &workers[1], &logs[1], &TWO),
        candidate(&redis, &key, "c2", &workers[2], &logs[2], &TWO),
    ];
    let (leader, token) = support::the_leader(&nodes, WAIT);
    assert_ne!(leader, 0, "the candidate with an unhealthy worker led");
    let standby = 3 - leader;
    eventually(WAIT, "the standby's worker to be judged healthy", || {
        (worker_of(&nodes[standby]).0 == Some(true)).then_some(())
    });

    // The leader's worker turns unhealthy: the healthy standby leads within
    // one interval (plus 100 ms) of the second failure, with no overlap.
    let since = support::os::mono_ns();
    workers[leader].set(Mode::Unhealthy);
    nodes[standby].wait_leading(WAIT);
    let condemned = workers[leader]
        .nth_failure_after(since, 2)
        .expect("the second failure was answered");
    let started = eventually(WAIT, "the next child to start", || {
        last_start_ns(&logs[standby])
    });
    let latency = Duration::from_nanos((started.saturating_sub(condemned)) as u64);
    eprintln!("step-down latency (2nd failure → next leader's child running): {latency:?}");
    assert!(
        latency < INTERVAL + Duration::from_millis(100),
        "the healthy standby's child started {latency:?} after the leader's worker was condemned"
    );
    assert_eq!(most_alive(&logs), 1, "two children at once");
    let (_, body) = nodes[standby].leader().unwrap();
    assert!(body["fencing_token"].as_u64().unwrap() > token);
    nodes[leader].wait_log(WAIT, "worker unhealthy: stepping down");

    // The old leader's worker recovers: it stays a standby, through the end
    // of its hold-off and its next look at the lease.
    workers[leader].set(Mode::Healthy);
    eventually(WAIT, "the old leader's worker to be healthy again", || {
        (worker_of(&nodes[leader]).0 == Some(true)).then_some(())
    });
    nodes[leader].wait_log(WAIT, "hold-off over");
    eventually(WAIT, "the old leader to look at the lease again", || {
        nodes[leader]
            .leader()
            .and_then(|(_, b)| (b["leader"] == nodes[standby].id.as_str()).then_some(()))
    });
    assert!(nodes[standby].is_leader(), "leadership moved back");
    assert_eq!(starts(&logs[leader]), 1);
    assert_eq!(
        starts(&logs[0]),
        0,
        "the sick candidate never ran its child"
    );

    // Every worker unhealthy: nobody leads, and each says why.
    for w in &workers {
        w.set(Mode::Unhealthy);
    }
    for node in &nodes {
        eventually(WAIT, "every candidate to see its worker unhealthy", || {
            let (healthy, failure) = worker_of(node);
            (healthy == Some(false) && !node.is_leader()).then_some(failure)
        })
        .filter(|f| f.contains("HTTP 503"))
        .expect("the last failure's reason");
        let (_, metrics) = node.get("/metrics").unwrap();
        assert!(
            metrics
                .as_str()
                .unwrap()
                .contains("\nleaderd_worker_healthy 0\n")
        );
    }
    // For two TTLs, no candidate leads and no child runs.
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        assert!(
            nodes.iter().all(|n| !n.is_leader()),
            "someone led with an unhealthy worker"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        support::probe_events(&logs[standby])
            .last()
            .is_some_and(|e| e.kind == "stop")
    );
    assert_eq!(most_alive(&logs), 1);
}

#[test]
fn a_flapping_worker_moves_leadership_at_most_once() {
    let redis = Redis::start();
    let key = support::key("health-flap");
    let dir = support::Scratch::new("health-flap");
    let workers = [
        Worker::start(Mode::Flapping),
        Worker::start(Mode::Healthy),
        Worker::start(Mode::Healthy),
    ];
    let logs: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("c{i}.log"))).collect();
    // The most sensitive setting: a single failure condemns the worker.
    let fast = ["--health-failures", "1"];
    let nodes: Vec<Leaderd> = (0..3)
        .map(|i| candidate(&redis, &key, &format!("c{i}"), &workers[i], &logs[i], &fast))
        .collect();
    support::the_leader(&nodes, WAIT);
    let until = Instant::now() + Duration::from_secs(60);
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(500));
        assert!(most_alive(&logs) <= 1, "two children at once");
    }
    let terms: usize = logs.iter().map(|l| starts(l)).sum();
    assert!(
        terms <= 2,
        "one flapping worker among healthy ones moved leadership {} times in 60 s",
        terms - 1
    );
    assert!(
        workers[0].answered().len() > 40,
        "the flapping worker was not checked"
    );
    let flips = workers[0]
        .answered()
        .windows(2)
        .filter(|w| w[0].passed != w[1].passed)
        .count();
    assert!(flips > 40, "the worker did not flap ({flips} flips)");
    // And leaderd judged it: condemned (and cleared) again and again, so
    // the bound above held while the verdict flapped too.
    let condemned = nodes[0]
        .log()
        .iter()
        .filter(|l| l.contains("worker unhealthy"))
        .count();
    assert!(
        condemned >= 5,
        "the flapping worker was condemned {condemned} times in 60 s"
    );
}

/// A health command run by `run`, for the command tests.
fn with_command(redis: &Redis, key: &str, command: &str, extra: &[&str]) -> Leaderd {
    let url = redis.url();
    let args = [
        &["--redis", &url, "--key", key][..],
        FAST,
        &["--health-command", command, "--health-interval", "1s"],
        extra,
    ]
    .concat();
    Leaderd::run("cmd", &args)
}

#[test]
fn a_health_command_that_hangs_is_killed_with_its_group_and_fails() {
    let redis = Redis::start();
    let node = with_command(
        &redis,
        &support::key("health-hang"),
        "sh -c 'sleep 31.7 & sleep 31.7'",
        &["--health-timeout", "300ms", "--health-failures", "1"],
    );
    let failure = eventually(WAIT, "the hung check to fail", || worker_of(&node).1);
    assert!(
        failure.contains("did not finish within 300ms; killed"),
        "{failure}"
    );
    assert!(!node.is_leader());
    // Nothing the check started outlives it: neither the shell nor what it
    // left in the background.
    eventually(WAIT, "the hung checks' processes to be gone", || {
        let left = running_with_arg("31.7");
        left.is_empty().then_some(())
    });
    // And none appears later: every hung check is killed whole.
    std::thread::sleep(Duration::from_secs(2));
    let found = running_with_arg("31.7");
    assert!(
        found.len() <= 2,
        "processes of killed checks survive: {found:?}"
    );
}

/// Live processes with `arg` among their arguments.
fn running_with_arg(arg: &str) -> Vec<i32> {
    support::live_processes(|_, _| true)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == arg.as_bytes()))
        })
        .collect()
}

#[test]
fn a_health_command_that_prints_megabytes_never_blocks() {
    let redis = Redis::start();
    let loud = "sh -c 'head -c 20000000 /dev/zero; head -c 20000000 /dev/zero >&2; exit 0'";
    let node = with_command(
        &redis,
        &support::key("health-loud"),
        loud,
        // Its subject is pipes that never fill: a check blocked on one would
        // never finish, so the whole interval (1 s) bounds it.
        &["--health-timeout", "1s"],
    );
    node.wait_leading(WAIT);
    assert_eq!(worker_of(&node), (Some(true), None));
    let failing = with_command(
        &redis,
        &support::key("health-says-why"),
        "sh -c 'echo; echo \"database unreachable\" >&2; exit 3'",
        &["--health-failures", "1"],
    );
    let failure = eventually(WAIT, "the failing check's reason", || worker_of(&failing).1);
    assert!(
        failure.starts_with("exit 3: database unreachable"),
        "{failure}"
    );
}

#[test]
fn a_missing_health_command_is_exit_2_from_run_and_check() {
    let redis = Redis::start();
    let url = redis.url();
    for command in ["run", "check"] {
        let (code, _, err) = support::run_to_end(&[
            command,
            "--redis",
            &url,
            "--http",
            "off",
            "--health-command",
            "no-such-health-check-leaderd --now",
        ]);
        assert_eq!(code, 2, "{command}: {err}");
        assert!(
            err.contains("health command: `no-such-health-check-leaderd` was not found on PATH"),
            "{command}: {err}"
        );
    }
}

#[test]
fn check_runs_the_health_check_once_and_says_what_run_would_do() {
    let redis = Redis::start();
    let url = redis.url();
    let worker = Worker::start(Mode::Unhealthy);
    let health = worker.url();
    let args = [
        "check", "--redis", &url, "--http", "off", "--health", &health,
    ];
    let (code, out, err) = support::run_to_end(&args);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("# warning: worker health check failed: HTTP 503"),
        "{out}"
    );
    assert!(
        out.contains("`run` does not campaign until a check passes"),
        "{out}"
    );
    worker.set(Mode::Healthy);
    let (code, out, _) = support::run_to_end(&args);
    assert_eq!(code, 0);
    assert!(
        out.contains("# ok: worker health check passed: HTTP 200"),
        "{out}"
    );
    assert!(out.contains("health.url = "), "{out}");
}

#[test]
fn report_policy_shows_an_unhealthy_worker_but_keeps_leading() {
    let redis = Redis::start();
    let worker = Worker::start(Mode::Healthy);
    let (url, health) = (redis.url(), worker.url());
    let args = [
        &[
            "--redis",
            &url,
            "--key",
            "t-health-report",
            "--health",
            &health,
        ][..],
        &[
            "--health-interval",
            "1s",
            "--health-timeout",
            "1s",
            "--health-failures",
            "1",
        ],
        &["--health-policy", "report"],
    ]
    .concat();
    let node = Leaderd::run("reporter", &args);
    node.wait_leading(WAIT);
    worker.set(Mode::Unhealthy);
    node.wait_log(WAIT, "worker unhealthy (--health-policy report");
    let (healthy, failure) = worker_of(&node);
    assert_eq!(healthy, Some(false));
    assert!(failure.unwrap().contains("HTTP 503"));
    assert!(node.is_leader(), "report only: the leader kept leading");
}

#[test]
fn with_health_target_child_only_the_running_child_is_checked() {
    let redis = Redis::start();
    let key = support::key("health-child");
    let dir = support::Scratch::new("health-child");
    let endpoints = [Worker::start(Mode::Healthy), Worker::start(Mode::Unhealthy)];
    let logs: Vec<PathBuf> = (0..2).map(|i| dir.join(format!("c{i}.log"))).collect();
    let child = ["--health-target", "child", "--health-failures", "2"];
    let first = candidate(&redis, &key, "c0", &endpoints[0], &logs[0], &child);
    first.wait_leading(WAIT);
    // The standby runs no child, so nothing is checked: it counts as
    // healthy, although the endpoint its child would serve says 503.
    let with_start = [&child[..], &["--health-start-period", "3s"]].concat();
    let second = candidate(&redis, &key, "c1", &endpoints[1], &logs[1], &with_start);
    eventually(WAIT, "the standby to be up", || second.leader().map(|_| ()));
    assert_eq!(worker_of(&second), (Some(true), None));
    assert_eq!(
        endpoints[1].answered().len(),
        0,
        "a standby's child endpoint was checked"
    );

    // The leader's child turns unhealthy: it steps down, the standby leads.
    endpoints[0].set(Mode::Unhealthy);
    second.wait_leading(WAIT);
    first.wait_log(WAIT, "worker unhealthy: stepping down");
    // Its child stopped, its verdict goes with it.
    first.wait_log(WAIT, "the child is not running");
    assert_eq!(worker_of(&first).0, Some(true));
    // The new leader's child fails from its start, but not before the start
    // period is over: it runs at least that long.
    second.wait_log(WAIT, "worker unhealthy: stepping down");
    let events = support::probe_events(&logs[1]);
    let start = events.iter().find(|e| e.kind == "start").expect("started");
    let stop = eventually(WAIT, "the child to stop", || {
        support::probe_events(&logs[1])
            .into_iter()
            .find(|e| e.kind == "stop")
    });
    let ran = Duration::from_nanos((stop.ns - start.ns) as u64);
    assert!(
        ran >= Duration::from_secs(3),
        "condemned within its start period, after {ran:?}"
    );
    assert_eq!(most_alive(&logs), 1, "two children at once");
}

#[test]
fn each_change_of_health_is_one_event_on_the_stream_and_one_log_line() {
    let dir = support::Scratch::new("health-sse");
    let worker = Worker::start(Mode::Healthy);
    let (lock, health) = (dir.join("lock"), worker.url());
    let args = ["--lock-file", path_str(&lock), "--health", &health];
    // One failure counts, so a healthy worker must never seem to fail: the
    // check gets the whole interval, however loaded the machine.
    let fast = [
        "--health-interval",
        "1s",
        "--health-timeout",
        "1s",
        "--health-failures",
        "1",
    ];
    let node = Leaderd::run("sse", &[&args[..], &fast].concat());
    node.wait_leading(WAIT);
    let mut lines = crate::http::subscribe(&node, None);
    let _headers: Vec<String> = lines.by_ref().take_while(|l| !l.is_empty()).collect();
    worker.set(Mode::Unhealthy);
    let events = crate::http::read_events(&mut lines, 4);
    let (name, _, data) = &events[1];
    assert_eq!(name, "health", "{events:#?}");
    assert!(data.contains("\"reason\":\"worker unhealthy\""), "{data}");
    assert!(data.contains("\"worker_healthy\":false"), "{data}");
    assert!(events[2].2.contains("\"state\":\"pausing\""), "{events:#?}");
    // Checks go on every second; the log says it once per change.
    let before = worker.answered().len();
    eventually(WAIT, "five more checks", || {
        (worker.answered().len() >= before + 5).then_some(())
    });
    let said = node
        .log()
        .iter()
        .filter(|l| l.contains("worker unhealthy:"))
        .count();
    assert_eq!(said, 1, "{:#?}", node.log());
}

#[test]
fn run_once_with_a_worker_that_never_passes_gives_up_at_the_deadline() {
    let dir = support::Scratch::new("health-once");
    let lock = dir.join("lock");
    let args = [
        "--lock-file",
        path_str(&lock),
        "--health-command",
        "false",
        "--wait",
        "1s",
    ];
    let mut node = Leaderd::run("once", &[&args[..], &["--", "true"]].concat());
    let status = node.wait_exit(WAIT);
    assert_eq!(status.code(), Some(75), "{:#?}", node.log());
    assert!(
        node.log()
            .iter()
            .any(|l| l.contains("not leader within --wait"))
    );
}
