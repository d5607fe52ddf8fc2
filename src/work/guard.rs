//! The guard process (`leaderd __guard`): leads the child's process group and
//! kills it when leaderd goes away *or stops keeping its promise*. See
//! `process` for why it exists.
//!
//! Its stdin is the lifeline pipe from leaderd. EOF means leaderd is gone.
//! Every other message is a dead-man's switch: the instant, on the
//! system-wide `CLOCK_MONOTONIC`, by which the group must be dead. leaderd
//! sends the kill-by instant of its lease whenever the lease's validity
//! moves (acquired, renewed, stepping down), one 8-byte message per renewal.
//! If the instant passes with no extension (leaderd frozen by SIGSTOP or a
//! debugger, deadlocked, starved, blocked on a write), the guard SIGKILLs the
//! whole group on its own, before the lease can lapse on the server and
//! another candidate win. It cannot help when the guard is frozen along with
//! leaderd (the whole host or container paused): then nobody runs at all.

use std::io::Read;
use std::time::Duration;
use tokio::time::Instant;

/// The hidden first argument that turns `leaderd` into a guard.
pub const ARG: &str = "__guard";

/// One message: the kill-by instant in ns of `CLOCK_MONOTONIC`, big-endian;
/// `u64::MAX` disarms the switch. Below `PIPE_BUF`, so a write is atomic.
pub const MESSAGE_LEN: usize = 8;
const NO_DEADLINE: u64 = u64::MAX;

/// The message that sets the switch to `deadline` (`None`: disarmed).
pub fn message(deadline: Option<Instant>) -> [u8; MESSAGE_LEN] {
    deadline.map_or(NO_DEADLINE, monotonic_ns_at).to_be_bytes()
}

/// Now, in ns of `CLOCK_MONOTONIC`, which every process on the host shares.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `at` on `CLOCK_MONOTONIC`: tokio's `Instant` is read from that clock, but
/// does not expose its value, so count from now.
fn monotonic_ns_at(at: Instant) -> u64 {
    let (now, mono) = (Instant::now(), monotonic_ns());
    if at >= now {
        mono.saturating_add((at - now).as_nanos() as u64)
    } else {
        mono.saturating_sub((now - at).as_nanos() as u64)
    }
}

/// The guard's decisions, as a pure function of the bytes received and the
/// time.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Switch {
    /// The latest kill-by instant (ns); `None` until armed or when disarmed.
    deadline: Option<u64>,
    /// The start of a message whose rest has not arrived yet.
    partial: Vec<u8>,
}

/// What the guard does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Wait for input, at most this long (`None`: no deadline).
    Wait(Option<Duration>),
    /// SIGKILL the group, the guard included.
    KillGroup,
}

impl Switch {
    /// Takes in bytes from the lifeline; only the latest whole message counts.
    pub fn receive(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        let whole = self.partial.len() / MESSAGE_LEN * MESSAGE_LEN;
        if let Some(last) = self.partial[..whole].chunks_exact(MESSAGE_LEN).last() {
            let value = u64::from_be_bytes(last.try_into().expect("a whole message"));
            self.deadline = (value != NO_DEADLINE).then_some(value);
        }
        self.partial.drain(..whole);
    }

    /// At `now` (ns), with `eof` once leaderd's end of the lifeline closed.
    pub fn next(&self, now: u64, eof: bool) -> Next {
        match self.deadline {
            _ if eof => Next::KillGroup,
            Some(deadline) if now >= deadline => Next::KillGroup,
            Some(deadline) => Next::Wait(Some(Duration::from_nanos(deadline - now))),
            None => Next::Wait(None),
        }
    }
}

/// The signals leaderd sends to the child's group to stop or notify it; the
/// guard ignores them from birth.
pub(crate) const GUARD_IGNORES: [i32; 7] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGHUP,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGPIPE,
];

/// Runs the guard: waits on the lifeline until EOF or a missed deadline,
/// then SIGKILLs its own process group, itself included. Ignores the signals
/// leaderd sends to the group to stop or notify the child, so it outlives
/// the child's stop.
pub fn main() -> ! {
    // Already ignored from birth (set before exec); repeated in case the
    // guard was started some other way.
    for signal in GUARD_IGNORES {
        // SAFETY: setting a disposition to SIG_IGN before any other thread exists.
        unsafe {
            libc::signal(signal, libc::SIG_IGN);
        }
    }
    let mut switch = Switch::default();
    let mut stdin = std::io::stdin().lock();
    let mut buf = [0u8; 64];
    let mut eof = false;
    while let Next::Wait(timeout) = switch.next(monotonic_ns(), eof) {
        if !readable(timeout) {
            continue;
        }
        match stdin.read(&mut buf) {
            Ok(0) => eof = true,
            Ok(n) => switch.receive(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => eof = true,
        }
    }
    // SAFETY: plain syscall; 0 addresses our own process group.
    unsafe {
        libc::kill(0, libc::SIGKILL);
    }
    std::process::exit(137)
}

/// Waits until stdin is readable (or closed), at most `timeout`.
fn readable(timeout: Option<Duration>) -> bool {
    // Rounded up, so the wait never ends just before the deadline.
    let ms = timeout.map_or(-1, |t| {
        i32::try_from(t.as_nanos().div_ceil(1_000_000)).unwrap_or(i32::MAX)
    });
    let mut fd = libc::pollfd {
        fd: 0,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let ready = unsafe { libc::poll(&mut fd, 1, ms) };
    ready > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn the_switch_as_a_table() {
        let armed = |ns: u64| {
            let mut s = Switch::default();
            s.receive(&ns.to_be_bytes());
            s
        };
        let cases: Vec<(Switch, u64, bool, Next)> = vec![
            // A standby guard: no deadline, waits for leaderd.
            (Switch::default(), 5 * S, false, Next::Wait(None)),
            (Switch::default(), 5 * S, true, Next::KillGroup),
            // Armed: waits until the deadline, kills at it.
            (
                armed(10 * S),
                4 * S,
                false,
                Next::Wait(Some(Duration::from_secs(6))),
            ),
            (armed(10 * S), 10 * S, false, Next::KillGroup),
            (armed(10 * S), 11 * S, false, Next::KillGroup),
            (armed(10 * S), 4 * S, true, Next::KillGroup),
        ];
        for (switch, now, eof, expected) in cases {
            assert_eq!(
                switch.next(now, eof),
                expected,
                "{switch:?} at {now} eof {eof}"
            );
        }
    }

    #[test]
    fn the_latest_whole_message_counts_and_disarming_works() {
        let mut s = Switch::default();
        let mut bytes = (10 * S).to_be_bytes().to_vec();
        bytes.extend_from_slice(&(20 * S).to_be_bytes());
        bytes.extend_from_slice(&(30 * S).to_be_bytes()[..3]);
        s.receive(&bytes);
        assert_eq!(
            s.next(15 * S, false),
            Next::Wait(Some(Duration::from_secs(5)))
        );
        s.receive(&(30 * S).to_be_bytes()[3..]);
        assert_eq!(
            s.next(25 * S, false),
            Next::Wait(Some(Duration::from_secs(5)))
        );
        // A deadline may move earlier (a stop with a nearer kill deadline).
        s.receive(&(26 * S).to_be_bytes());
        assert_eq!(s.next(27 * S, false), Next::KillGroup);
        s.receive(&message(None));
        assert_eq!(s.next(99 * S, false), Next::Wait(None));
    }

    #[test]
    fn messages_carry_the_shared_monotonic_clock() {
        let at = Instant::now() + Duration::from_secs(3);
        let ns = u64::from_be_bytes(message(Some(at)));
        let expected = monotonic_ns() + 3 * S;
        assert!(ns.abs_diff(expected) < S / 10, "{ns} vs {expected}");
    }
}
