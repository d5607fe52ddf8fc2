//! Operating-system probes for the safety tests: the shared monotonic clock,
//! signals by number, processes by parent, pipes, and CPU time.

use std::os::fd::{AsRawFd, OwnedFd};

/// Now on `CLOCK_MONOTONIC`, in ns: the clock the probe child stamps its
/// lines with (and the guard's dead-man's switch runs on), so instants
/// compare across processes.
pub fn mono_ns() -> u128 {
    u128::from(leaderd::work::guard::monotonic_ns())
}

/// kill(2) without starting a process, so the instant is the test's own.
pub fn kill(pid: u32, signal: i32) {
    // SAFETY: plain syscall.
    unsafe {
        libc::kill(pid as i32, signal);
    }
}

/// kill(2), then waits until a thread of `pid` has taken the signal (it is
/// no longer pending process-wide), at most `limit`. Standard signals do
/// not queue: a second one sent while the first is still pending (no thread
/// of `pid` ran in between, as beside two CPU hogs) merges with it, and the
/// process sees one.
pub fn deliver(pid: u32, signal: i32, limit: std::time::Duration) {
    kill(pid, signal);
    let start = std::time::Instant::now();
    while signal_in(pid, signal, &["ShdPnd:"]) {
        assert!(
            start.elapsed() < limit,
            "signal {signal} still pending in {pid} after {limit:?}"
        );
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
}

/// Live (not zombie) processes whose parent is `parent`.
pub fn children_of(parent: u32) -> Vec<i32> {
    super::live_processes(|ppid, _| ppid == parent as i32)
}

/// `pid` and every process below it.
pub fn tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    let mut i = 0;
    while i < all.len() {
        let below = children_of(all[i]);
        all.extend(below.into_iter().map(|p| p as u32));
        i += 1;
    }
    all
}

/// Its command line, the arguments joined by spaces.
pub fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// User + system CPU time of `pid`, in clock ticks.
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("process exists");
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime")
}

pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: plain libc call.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) as u64 }
}

/// Whether `signal` is caught or blocked by `pid`: its own code has started.
pub fn handles_signal(pid: u32, signal: i32) -> bool {
    signal_in(pid, signal, &["SigBlk:", "SigCgt:"])
}

/// Whether `signal` is set in any of the signal masks `fields` of
/// `/proc/PID/status` (false when the process is gone).
fn signal_in(pid: u32, signal: i32, fields: &[&str]) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    let bit = 1u64 << (signal - 1);
    status.lines().any(|l| {
        fields.iter().any(|field| {
            l.strip_prefix(field)
                .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
                .is_some_and(|mask| mask & bit != 0)
        })
    })
}

/// A pipe whose buffer is already full, as when its reader stopped reading:
/// (read end, write end). The write end is blocking again, as a log pipe is.
pub fn full_pipe() -> (OwnedFd, OwnedFd) {
    let (read, write) = std::io::pipe().expect("pipe");
    let (read, write): (OwnedFd, OwnedFd) = (read.into(), write.into());
    let fd = write.as_raw_fd();
    // SAFETY: fcntl and write on a descriptor we own, with a valid buffer.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        let block = [b'x'; 4096];
        while libc::write(fd, block.as_ptr().cast(), block.len()) > 0 {}
        let mut byte = [b'x'; 1];
        while libc::write(fd, byte.as_mut_ptr().cast(), 1) > 0 {}
        libc::fcntl(fd, libc::F_SETFL, flags);
    }
    (read, write)
}

/// Reads what is in the pipe now, without blocking.
pub fn drain(read: &OwnedFd) -> Vec<u8> {
    let fd = read.as_raw_fd();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    // SAFETY: fcntl and read on a descriptor we own, with a valid buffer.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        loop {
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            if n <= 0 {
                break;
            }
            out.extend_from_slice(&buf[..n as usize]);
        }
    }
    out
}

/// A number from the Prometheus text at `port`'s `/metrics`: the sample
/// whose line starts with `series` (name and labels as printed).
pub fn metric(port: u16, series: &str) -> Option<f64> {
    let (_, body) = super::http_get(port, "/metrics")?;
    let text = body.as_str()?.to_string();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

/// A pseudo-random number below `n`, from the clock: enough to spread
/// signal instants, no crate needed.
pub fn below(n: u64) -> u64 {
    (mono_ns() as u64 ^ (mono_ns() as u64 >> 17)).wrapping_mul(0x9E37_79B9_7F4A_7C15) % n
}

/// A process a test spawned itself, killed and reaped when the test ends,
/// failed or not: a panicking test must not leave a leaderd running (a
/// failed frozen-leaderd test once left one, still renewing into nothing,
/// for hours).
pub struct Reaped(pub std::process::Child);

impl std::ops::Deref for Reaped {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        // SIGKILL ends a stopped process too; its guard then kills the child.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
