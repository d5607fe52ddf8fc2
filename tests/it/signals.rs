//! Issue #10: a shutdown is never forgotten and leaves nothing behind.
//! SIGTERM at random instants of start-up and of a handover, SIGTERM while
//! Redis is frozen, and leaderd as PID 1 of a PID namespace; each repeated.

use crate::support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::os::{self, children_of};
use support::{FAST, Leaderd, Redis, alive, eventually, probe_child, probe_events, with_probe};

/// How long to wait for what happens by itself: the suite's bound, which
/// holds on a loaded machine (10 s and 20 s fell short under two CPU hogs).
const PATIENCE: Duration = support::WAIT;

/// In `node`'s log, no child was started after shutdown was requested.
fn started_nothing_after_the_signal(node: &Leaderd, what: &str) {
    let log = node.log();
    let signal = log
        .iter()
        .position(|l| l.contains("shutdown requested"))
        .unwrap_or_else(|| panic!("{what}: the signal was not seen:\n{}", log.join("\n")));
    // The supervisor checks the token before each spawn, and logs after
    // the signal task has set it: no "child started" may follow.
    let late = log[signal..].iter().find(|l| l.contains("child started"));
    assert!(
        late.is_none(),
        "{what}: a child started after the signal:\n{}",
        log.join("\n")
    );
}

fn started_pids(log: &Path) -> Vec<i32> {
    probe_events(log)
        .into_iter()
        .filter(|e| e.kind == "start")
        .map(|e| e.pid)
        .collect()
}

#[test]
fn sigterm_in_the_first_50ms_never_starts_a_child_after_it() {
    let redis = Redis::start();
    let dir = support::Scratch::new("early-term");
    for run in 0..40 {
        let key = support::key("early-term");
        let log = dir.join(format!("{run}.probe"));
        let mut node = with_probe(&redis, &key, "a", &log);
        // From the first instant leaderd's own code runs (the dynamic loader
        // before it can be killed by any signal, like any program).
        eventually(PATIENCE, "leaderd's code to run", || {
            os::handles_signal(node.pid(), libc::SIGTERM).then_some(())
        });
        std::thread::sleep(Duration::from_micros(os::below(50_000)));
        node.signal("TERM");
        let status = node.wait_exit(PATIENCE);
        assert_eq!(
            status.code(),
            Some(0),
            "run {run}:\n{}",
            node.log().join("\n")
        );
        started_nothing_after_the_signal(&node, &format!("run {run}"));
        for pid in started_pids(&log) {
            assert!(!alive(pid), "run {run}: child {pid} outlived leaderd");
        }
        assert_eq!(redis.get(&format!("leaderd:{{{key}}}:lease")), None);
    }
}

#[test]
fn sigterm_to_a_standby_woken_by_a_release_never_starts_its_child() {
    let redis = Redis::start();
    let dir = support::Scratch::new("woken-term");
    for run in 0..40 {
        let key = support::key(&format!("woken-term-{run}"));
        let logs: Vec<_> = ["a", "b", "c"]
            .iter()
            .map(|id| dir.join(format!("{run}-{id}.probe")))
            .collect();
        let mut nodes: Vec<Leaderd> = ["a", "b", "c"]
            .iter()
            .zip(&logs)
            .map(|(id, log)| with_probe(&redis, &key, id, log))
            .collect();
        let leader = eventually(PATIENCE, "a leader", || {
            nodes.iter().position(Leaderd::is_leader)
        });
        let standby = (leader + 1) % 3;
        nodes[standby].wait_log(PATIENCE, "lease held by another candidate");
        nodes[leader].signal("TERM");
        std::thread::sleep(Duration::from_micros(os::below(5_000)));
        nodes[standby].signal("TERM");
        for n in [leader, standby] {
            let status = nodes[n].wait_exit(PATIENCE);
            let what = format!("run {run}, {}", nodes[n].id);
            assert_eq!(status.code(), Some(0), "{what}");
            started_nothing_after_the_signal(&nodes[n], &what);
            for pid in started_pids(&logs[n]) {
                assert!(!alive(pid), "{what}: child {pid} outlived leaderd");
            }
        }
    }
}

/// SIGTERM to a leader and a standby whose Redis is frozen (SIGSTOP): both
/// exit 0 while it is still frozen, the leader by its own release timeout,
/// and nothing either started outlives it.
#[test]
fn sigterm_while_redis_is_frozen_exits_by_its_own_timeouts_and_leaves_nothing_behind() {
    let redis = Redis::start();
    let dir = support::Scratch::new("frozen-redis-term");
    let mut slowest = Duration::ZERO;
    for run in 0..10 {
        let key = support::key(&format!("frozen-redis-{run}"));
        let log = dir.join(format!("{run}.probe"));
        let mut a = with_probe(&redis, &key, "a", &log);
        a.wait_leading(PATIENCE);
        let mut b = with_probe(&redis, &key, "b", &dir.join(format!("{run}-b.probe")));
        b.wait_log(PATIENCE, "lease held by another candidate");
        eventually(PATIENCE, "a's child", || started_pids(&log).pop());
        // Every process each one started: guards (the standby guard
        // included, once spawned) and the child.
        let spawned = eventually(PATIENCE, "standby guards to be spawned", || {
            let (ca, cb) = (children_of(a.pid()), children_of(b.pid()));
            (ca.len() >= 3 && !cb.is_empty()).then(|| [ca, cb].concat())
        });
        redis.pause();
        let signalled = Instant::now();
        a.signal("TERM");
        b.signal("TERM");
        for node in [&mut a, &mut b] {
            let status = node.wait_exit(PATIENCE);
            assert_eq!(status.code(), Some(0), "run {run}, {}", node.id);
        }
        slowest = slowest.max(signalled.elapsed());
        // The store answered nothing until now: the leader's exit came
        // from its own timeout on the release, not from the store.
        let failed = a.wait_log(PATIENCE, "release failed; the lease will expire by its TTL");
        assert!(
            failed.contains("did not answer within"),
            "run {run}: {failed}"
        );
        redis.resume();
        let left: Vec<_> = spawned.iter().filter(|p| alive(**p)).collect();
        assert!(left.is_empty(), "run {run}: outlived leaderd: {left:?}");
    }
    // Printed, not asserted: about a second unloaded, 5.2 s once beside
    // two CPU hogs, and 39.7 s in loaded run 32, when the kernel reported
    // the whole machine stalled for up to 51 s. What this test claims is
    // above: each exit, with code 0, came while the store was frozen, by
    // leaderd's own release timeout.
    eprintln!("slowest exit with Redis frozen: {slowest:?}");
}

/// `unshare` arguments that make a PID namespace here, or why not.
fn pid_namespace() -> Result<Vec<&'static str>, String> {
    let mut tried = Vec::new();
    for args in [
        vec!["--pid", "--fork", "--mount-proc"],
        vec![
            "--user",
            "--map-root-user",
            "--pid",
            "--fork",
            "--mount-proc",
        ],
    ] {
        let out = Command::new("unshare")
            .args(&args)
            .arg("true")
            .output()
            .map_err(|e| format!("unshare: {e}"))?;
        if out.status.success() {
            return Ok(args);
        }
        tried.push(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Err(tried.join("; "))
}

fn pid_ns_of(pid: i32) -> Option<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()
}

#[test]
fn as_pid_1_of_a_pid_namespace_sigterm_stops_releases_and_empties_it() {
    let unshare = match pid_namespace() {
        Ok(args) => args,
        Err(why) if std::env::var_os("CI").is_none() => {
            eprintln!("SKIPPED: cannot create a PID namespace here ({why})");
            return;
        }
        Err(why) => panic!("cannot create a PID namespace in CI: {why}"),
    };
    let redis = Redis::start();
    let dir = support::Scratch::new("pid1");
    for run in 0..10 {
        let key = support::key(&format!("pid1-{run}"));
        let log = dir.join(format!("{run}.probe"));
        let (url, probe, http) = (redis.url(), probe_child(), support::free_port());
        let http = format!("127.0.0.1:{http}");
        let mut args = vec!["run", "--id", "pid1", "--http", &http];
        args.extend_from_slice(&["--redis", &url, "--key", &key]);
        args.extend_from_slice(FAST);
        args.extend_from_slice(&["--", &probe, support::path_str(&log)]);
        let mut outer = Command::new("unshare")
            .args(&unshare)
            .arg(support::BIN)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn unshare");
        let leaderd = eventually(PATIENCE, "leaderd inside the namespace", || {
            children_of(outer.id()).first().copied()
        });
        let ns = pid_ns_of(leaderd).expect("its PID namespace");
        // (Its PID in the probe log is the namespace's own.)
        eventually(PATIENCE, "the child", || started_pids(&log).pop());
        let lease = format!("leaderd:{{{key}}}:lease");
        assert!(redis.get(&lease).is_some(), "run {run}: leading");
        os::kill(leaderd as u32, libc::SIGTERM);
        let status = eventually(PATIENCE, "unshare to exit", || {
            outer.try_wait().expect("wait")
        });
        assert_eq!(status.code(), Some(0), "run {run}: leaderd's exit code");
        let stopped = probe_events(&log).iter().any(|e| e.kind == "stop");
        assert!(stopped, "run {run}: the child was stopped gracefully");
        assert_eq!(redis.get(&lease), None, "run {run}: released");
        let left: Vec<i32> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| alive(*pid) && pid_ns_of(*pid).as_ref() == Some(&ns))
            .collect();
        assert!(
            left.is_empty(),
            "run {run}: left in the namespace: {left:?}"
        );
    }
}

/// Issues #12 and #49 (signals): what leaderd's parent left behind does
/// not reach leaderd or its child. Started with every signal blocked,
/// SIGTERM, SIGQUIT and SIGCHLD ignored and fd 7 open (a supervisor that
/// spawns from a thread blocking signals, as some process builders and
/// thread pools do), leaderd still hands over on SIGTERM with its child
/// stopped gracefully, and its child gets only fds 0–2 and no ignored
/// signal.
#[test]
fn an_inherited_signal_mask_ignored_sigterm_and_open_fds_are_not_passed_on() {
    use std::os::unix::process::CommandExt;
    let dir = support::Scratch::new("inherited");
    let (lock, log) = (dir.join("l.lock"), dir.join("probe"));
    let stray = std::fs::File::create(dir.join("stray")).unwrap();
    let stray_fd = std::os::fd::AsRawFd::as_raw_fd(&stray);
    let http = format!("127.0.0.1:{}", support::free_port());
    let probe = probe_child();
    let mut cmd = support::command(&[
        "run",
        "--id",
        "inh",
        "--http",
        &http,
        "--lock-file",
        support::path_str(&lock),
        "--",
        &probe,
        support::path_str(&log),
    ]);
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    // SAFETY: async-signal-safe calls only, in the child before exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::dup2(stray_fd, 7); // the copy has no close-on-exec
            libc::signal(libc::SIGTERM, libc::SIG_IGN);
            // One leaderd has no handler for: only the reset clears it.
            libc::signal(libc::SIGQUIT, libc::SIG_IGN);
            // Ignored, its exits would be reaped by the kernel unseen.
            libc::signal(libc::SIGCHLD, libc::SIG_IGN);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut set);
            libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            Ok(())
        });
    }
    let mut leaderd = support::os::Reaped(cmd.spawn().expect("spawn leaderd"));
    let inherited = eventually(PATIENCE, "the child's first line", || {
        probe_events(&log)
            .into_iter()
            .find(|e| e.kind == "inherited")
    });
    // `inherited PID SIGIGN FDS`, read as text (the mask is hex).
    let line = std::fs::read_to_string(&log).unwrap();
    let first = line.lines().next().unwrap().to_string();
    let fields: Vec<&str> = first.split_whitespace().collect();
    // Signals 1–31 only: the probe's own Rust runtime ignores SIGPIPE, and
    // glibc's posix_spawn sets its internal signals 32 and 33 to ignored in
    // every child it spawns; neither comes from leaderd's parent.
    let mask = u64::from_str_radix(fields[2], 16).expect("hex mask");
    let from_parent = mask & 0x7fff_ffff & !(1 << (libc::SIGPIPE - 1));
    assert_eq!(from_parent, 0, "ignored signals passed on: {first}");
    assert_eq!(
        fields[3], "0,1,2",
        "descriptors passed on: {first} ({inherited:?})"
    );
    // Its start line comes after its SIGTERM handler is in place: a
    // SIGTERM before that (a loaded machine) would kill it, not stop it.
    eventually(PATIENCE, "the child's start line", || {
        probe_events(&log).into_iter().find(|e| e.kind == "start")
    });
    // A standby on the same lock file, started plainly.
    let standby = support::Leaderd::run("standby", &["--lock-file", support::path_str(&lock)]);
    standby.wait_log(PATIENCE, "held by another candidate");
    os::kill(leaderd.id(), libc::SIGTERM);
    let status = eventually(PATIENCE, "leaderd to exit", || leaderd.try_wait().unwrap());
    assert_eq!(
        status.code(),
        Some(0),
        "SIGTERM, blocked and ignored at birth, still works"
    );
    let stopped = probe_events(&log).iter().any(|e| e.kind == "stop");
    assert!(stopped, "the child was not stopped gracefully");
    standby.wait_leading(PATIENCE);
}

/// Two SIGTERMs 1 ms apart (GNU `timeout -k`, some runtimes): the second one
/// kills the child at once, and the lease is still released.
#[test]
fn two_signals_a_millisecond_apart_still_release_and_a_third_exits_at_once() {
    let redis = Redis::start();
    let key = support::key("two-signals");
    // A child that ignores SIGTERM, a TTL far longer than the test's limits:
    // a handover before it can only come from the release.
    let stubborn = ["--", "sh", "-c", "trap '' TERM; sleep 300 & wait"];
    let args = |extra: &[&'static str]| -> Vec<&'static str> {
        let mut args = vec!["--ttl", "30s", "--stop-timeout", "25s"];
        args.extend(extra);
        args
    };
    let mut a = support::on_redis(&redis, &key, "a", &args(&stubborn));
    a.wait_log(PATIENCE, "child started");
    let b = support::on_redis(&redis, &key, "b", &args(&[]));
    b.wait_log(PATIENCE, "lease held by another candidate");
    let sent = Instant::now();
    // The second is sent once the first was taken (about a millisecond
    // unloaded): sent while the first was still pending, the two merged
    // into one under two CPU hogs (the eleventh loaded run), and the
    // stubborn child was given its whole stop timeout.
    os::deliver(a.pid(), libc::SIGTERM, PATIENCE);
    os::kill(a.pid(), libc::SIGTERM);
    let status = a.wait_exit(PATIENCE);
    assert_eq!(status.code(), Some(0), "{}", a.log().join("\n"));
    // The key was deleted: b may already hold it again.
    a.wait_log(PATIENCE, "lease released");
    b.wait_leading(PATIENCE);
    assert!(
        sent.elapsed() < Duration::from_secs(15),
        "long before the 30 s TTL"
    );
    a.wait_log(PATIENCE, "second signal");

    // Three signals: out at once, the lease left to expire.
    let mut b = b;
    let c = support::on_redis(&redis, &key, "c", &args(&[]));
    c.wait_log(PATIENCE, "lease held by another candidate");
    drop(c);
    redis.pause();
    for _ in 0..3 {
        os::deliver(b.pid(), libc::SIGTERM, PATIENCE);
    }
    let status = b.wait_exit(PATIENCE);
    redis.resume();
    assert_eq!(status.code(), Some(128 + 15), "{}", b.log().join("\n"));
    b.wait_log(PATIENCE, "third signal");
}

/// A SIGTERM already pending when leaderd starts: sent while its loader ran
/// and its `.init_array` had blocked the signal, or before exec by a parent
/// that had it blocked. The moment `main` unblocks it, it is delivered, and
/// it must find leaderd's handler: exit 0 after "shutdown requested", not
/// death by the signal's default action. Deterministic: the pending signal
/// is made in the child before exec (pending signals survive exec). Found
/// by `sigterm_in_the_first_50ms_never_starts_a_child_after_it` failing 1
/// run in a few hundred on a loaded machine, when `catch` unblocked first.
#[test]
fn a_sigterm_pending_at_exec_is_caught_not_fatal() {
    use std::os::unix::process::CommandExt;
    let dir = support::Scratch::new("pending-term");
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let lock = dir.join(format!("{signal}.lock"));
        let mut cmd =
            support::command(&["run", "--id", "p", "--lock-file", support::path_str(&lock)]);
        cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        // SAFETY: async-signal-safe calls only, in the child before exec.
        unsafe {
            cmd.pre_exec(move || {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, signal);
                libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
                // Blocked, so it stays pending, through exec.
                libc::raise(signal);
                Ok(())
            });
        }
        let out = cmd.output().expect("run leaderd");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "signal {signal} pending at exec: {:?}\n{stderr}",
            out.status
        );
        assert!(
            stderr.contains("shutdown requested during start-up"),
            "{stderr}"
        );
    }
}
