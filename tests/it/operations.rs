//! What operators do to a running election: run a job once on whichever
//! node wins (`run --wait`), move leadership with `leaderd step-down`, and
//! have a crash-looping child give the lease up.

use crate::support;

use std::time::Duration;
use support::{FAST, Leaderd, Redis, Scratch, on_redis, run_to_end};

/// The suite's bound: what is awaited happens by itself, and a machine
/// under load may stall for seconds first.
const PATIENCE: Duration = support::WAIT;

fn lease_key(key: &str) -> String {
    format!("leaderd:{{{key}}}:lease")
}

/// `run --wait WAIT` on `redis` with a job that appends a line to `marker`
/// and exits 7: (exit code, how many times the job ran).
fn run_once(redis: &Redis, key: &str, wait: &str, marker: &std::path::Path) -> (i32, usize) {
    let url = redis.url();
    let job = format!("echo ran >> {}; exit 7", marker.display());
    let (code, _, err) = run_to_end(&[
        "run", "--redis", &url, "--key", key, "--id", "job", "--wait", wait, "--", "sh", "-c", &job,
    ]);
    let runs = std::fs::read_to_string(marker).map_or(0, |t| t.lines().count());
    eprintln!("{err}");
    (code, runs)
}

#[test]
fn run_once_runs_the_job_on_the_winner_only_and_exits_with_its_code() {
    let redis = Redis::start();
    let dir = Scratch::new("once");
    let key = support::key("once");

    // Free: the job runs once, its code is leaderd's, the lease is released.
    let marker = dir.join("free");
    assert_eq!(run_once(&redis, &key, "5s", &marker), (7, 1));
    assert_eq!(redis.get(&lease_key(&key)), None, "released");

    // Held elsewhere: 75 after the wait, the job never ran. `0` is one try.
    let holder = on_redis(&redis, &key, "holder", FAST);
    holder.wait_leading(PATIENCE);
    for wait in ["0", "1s"] {
        let marker = dir.join(format!("held-{wait}"));
        assert_eq!(
            run_once(&redis, &key, wait, &marker),
            (75, 0),
            "--wait {wait}"
        );
    }
    assert!(holder.is_leader(), "the holder was never disturbed");
}

#[test]
fn run_once_refuses_what_cannot_be_run_once() {
    let (code, _, err) = run_to_end(&["check", "--offline", "--wait", "10s"]);
    assert_eq!(code, 2);
    assert!(err.contains("no command is configured"), "{err}");
    let (code, _, err) = run_to_end(&[
        "check",
        "--offline",
        "--wait",
        "10s",
        "--on-child-exit",
        "restart",
        "--",
        "true",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("does not apply with child.wait"), "{err}");
}

#[test]
fn step_down_moves_leadership_and_holds_the_old_leader_off() {
    let redis = Redis::start();
    let dir = Scratch::new("step-down");
    let socket = dir.join("admin.sock");
    let socket = support::path_str(&socket);
    let key = support::key("step-down");
    let a = on_redis(
        &redis,
        &key,
        "a",
        &[FAST, &["--admin-socket", socket, "--step-down-hold", "4s"]].concat(),
    );
    a.wait_leading(PATIENCE);
    let mut b = on_redis(&redis, &key, "b", FAST);
    b.wait_log(PATIENCE, "lease held by another candidate");

    let (code, out, err) = run_to_end(&["step-down", "--admin-socket", socket]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("ok: stepping down"), "{out}");
    b.wait_leading(PATIENCE);
    a.wait_log(PATIENCE, "step-down requested");

    // Not the leader any more: nothing to do.
    let (code, out, _) = run_to_end(&["step-down", "--admin-socket", socket]);
    assert_eq!(code, 3, "{out}");
    assert!(out.starts_with("not-leader:"), "{out}");

    // b goes; a, held off, does not answer the release wake-up...
    b.signal("TERM");
    assert!(b.wait_exit(PATIENCE).success());
    std::thread::sleep(Duration::from_millis(500)); // observing that nothing happens, not synchronising
    assert!(!a.is_leader(), "a re-campaigned during its hold-off");
    // ...and campaigns again when the hold is over.
    a.wait_leading(PATIENCE);
    a.wait_log(PATIENCE, "hold-off over");

    let missing = dir.join("nobody.sock");
    let (code, _, err) = run_to_end(&["step-down", "--admin-socket", support::path_str(&missing)]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("is leaderd running with --admin-socket"),
        "{err}"
    );
}

#[test]
fn the_admin_socket_is_private_and_removed_at_exit() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Scratch::new("admin-mode");
    let socket = dir.join("admin.sock");
    let lock = dir.join("lease.lock");
    let mut node = Leaderd::run(
        "m",
        &[
            "--lock-file",
            support::path_str(&lock),
            "--admin-socket",
            support::path_str(&socket),
        ],
    );
    node.wait_leading(PATIENCE);
    let mode = std::fs::metadata(&socket)
        .expect("socket")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    // A second leaderd on the same socket is refused, and says why.
    let (code, _, err) = run_to_end(&[
        "check",
        "--lock-file",
        support::path_str(&lock),
        "--admin-socket",
        support::path_str(&socket),
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("in use by another process"), "{err}");
    node.signal("TERM");
    assert!(node.wait_exit(PATIENCE).success());
    assert!(!socket.exists(), "the socket file is removed at exit");
}

#[test]
fn a_crash_looping_child_gives_the_lease_up() {
    let redis = Redis::start();
    let key = support::key("crash-loop");
    let crashing = [
        "--on-child-exit",
        "restart",
        "--restart-limit",
        "2/1m",
        "--step-down-hold",
        "1m",
        "--",
        "sh",
        "-c",
        "exit 3",
    ];
    let a = on_redis(&redis, &key, "a", &[FAST, &crashing[..]].concat());
    a.wait_log(PATIENCE, "child started");
    let b = on_redis(&redis, &key, "b", FAST);
    a.wait_log(PATIENCE, "the child keeps failing");
    b.wait_leading(PATIENCE);
    let starts = a
        .log()
        .iter()
        .filter(|l| l.contains("child started"))
        .count();
    assert_eq!(starts, 3, "the first run and two restarts");
    assert!(!a.is_leader());
}
