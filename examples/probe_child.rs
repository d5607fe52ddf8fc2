//! A child for leaderd's tests: records what happens to it, with monotonic
//! timestamps (ns, comparable across processes), in an append-only log.
//!
//! probe_child LOG [--ignore-term] [--term-delay MS] [--grandchildren N]
//!                 [--exit-after MS CODE|signal:N] [--exclusive PATH]
//!
//! Lines: `inherited PID SIGIGN FDS` (its ignored-signal mask in hex and
//! its open descriptors, as it found them at birth), `start PID NS TOKEN
//! REDIS_URL_PRESENT`, `grandchild PID`, `term PID NS`, `usr1 PID NS`,
//! `stop PID NS`, and with `--exclusive`, `exclusive PID NS free|busy`.
//!
//! `--exclusive PATH` takes an exclusive `flock` on PATH at birth (without
//! waiting) and holds it until death: "busy" means an earlier probe of the
//! same run still held it, so two were alive at once — exactly, whatever
//! the scheduler's delays, since the kernel drops a dying process's locks
//! before its parent can learn that it died.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn mono_ns() -> u128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128
}

fn record(log: &str, line: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("open probe log");
    f.write_all(format!("{line}\n").as_bytes())
        .expect("write probe log");
}

/// `SIGIGN FD,FD,...`: the ignored-signal mask from /proc and the open
/// descriptors, without the one reading the directory opens.
fn inherited() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let ignored = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .unwrap_or("?")
        .trim()
        .to_string();
    let mut fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| {
            let e = e.ok()?;
            let target = std::fs::read_link(e.path()).ok()?;
            // The directory being read is an fd of its own.
            (!target.starts_with("/proc")).then_some(())?;
            e.file_name().to_str()?.parse().ok()
        })
        .collect();
    fds.sort();
    let fds: Vec<String> = fds.iter().map(i32::to_string).collect();
    format!("{ignored} {}", fds.join(","))
}

/// Takes an exclusive lock on `path` without waiting, and keeps it (the
/// descriptor is leaked on purpose: it lives as long as the process);
/// `false` when another process holds it.
fn exclusive(path: &str) -> bool {
    use std::os::fd::IntoRawFd;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open the --exclusive file");
    let fd = file.into_raw_fd();
    // SAFETY: fd is an open descriptor we own and never close.
    if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return true;
    }
    let error = std::io::Error::last_os_error();
    assert_eq!(
        error.raw_os_error(),
        Some(libc::EWOULDBLOCK),
        "flock {path}: {error}"
    );
    false
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let log = args
        .first()
        .expect("usage: probe_child LOG [options]")
        .clone();
    let flag = |name: &str| args.iter().position(|a| a == name);
    let value = |name: &str, n: usize| flag(name).map(|i| args[i + n].clone());
    let pid = std::process::id();
    // Before any handler is installed: what the parent passed on.
    record(&log, &format!("inherited {pid} {}", inherited()));
    let term = Arc::new(AtomicBool::new(false));
    let usr1 = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(libc::SIGTERM, term.clone()).expect("SIGTERM handler");
    signal_hook::flag::register(libc::SIGUSR1, usr1.clone()).expect("SIGUSR1 handler");
    // Before the start line, so "free" proves every earlier probe had
    // stopped running before this one's start.
    let exclusive = value("--exclusive", 1).map(|path| (exclusive(&path), mono_ns()));
    let token = std::env::var("LEADERD_FENCING_TOKEN").unwrap_or_default();
    let redis_url = std::env::var_os("LEADERD_REDIS_URL").is_some();
    record(
        &log,
        &format!("start {pid} {} {token} {redis_url}", mono_ns()),
    );
    if let Some((free, when)) = exclusive {
        let state = if free { "free" } else { "busy" };
        record(&log, &format!("exclusive {pid} {when} {state}"));
    }
    let count: usize = value("--grandchildren", 1).map_or(0, |n| n.parse().expect("N"));
    // Grandchildren are left to leaderd to kill and reap: that is what the tests check.
    #[allow(clippy::zombie_processes)]
    for _ in 0..count {
        let child = std::process::Command::new("sleep")
            .arg("1000")
            .spawn()
            .expect("spawn sleep");
        record(&log, &format!("grandchild {}", child.id()));
    }
    let exit_at = value("--exit-after", 1)
        .map(|ms| Instant::now() + Duration::from_millis(ms.parse().expect("MS")));
    let exit_how = value("--exit-after", 2);
    let term_delay =
        value("--term-delay", 1).map(|ms| Duration::from_millis(ms.parse().expect("MS")));
    let ignore_term = flag("--ignore-term").is_some();
    let mut term_seen = false;
    loop {
        std::thread::sleep(Duration::from_millis(2));
        if usr1.swap(false, Ordering::SeqCst) {
            record(&log, &format!("usr1 {pid} {}", mono_ns()));
        }
        if term.swap(false, Ordering::SeqCst) && !term_seen {
            term_seen = true;
            record(&log, &format!("term {pid} {}", mono_ns()));
            if !ignore_term {
                std::thread::sleep(term_delay.unwrap_or_default());
                record(&log, &format!("stop {pid} {}", mono_ns()));
                std::process::exit(0);
            }
        }
        if exit_at.is_some_and(|at| Instant::now() >= at) {
            record(&log, &format!("stop {pid} {}", mono_ns()));
            match exit_how.as_deref().and_then(|h| h.strip_prefix("signal:")) {
                // SAFETY: plain syscall.
                Some(n) => unsafe {
                    libc::signal(libc::SIGTERM, libc::SIG_DFL);
                    libc::raise(n.parse().expect("signal number"));
                },
                None => std::process::exit(exit_how.map_or(0, |c| c.parse().expect("CODE"))),
            }
        }
    }
}
