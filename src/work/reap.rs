//! Reaping leaderd's children: which exited ones the child supervisor may
//! reap, and on leaderd's exit, all of them.
//!
//! leaderd is the parent of more than the work: the health command is
//! spawned through tokio, which waits for it by PID. A `waitpid(-1)` in the
//! supervisor would take that exit status first, and the health check
//! would fail with "cannot wait for it" (ECHILD) while the worker is fine.
//! So the children someone else waits for are *claimed* here, under a lock
//! held from before their spawn until their PID is noted, and the
//! supervisor reaps every other child by PID: the work, the guards, and the
//! orphans it adopts as subreaper, which nobody else would ever reap.
//! The kernel's list of children is read while it may change, so one
//! reading can miss a child; the next finds it (another SIGCHLD, or the
//! supervisor's periodic check).

use super::process;
use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// PIDs of children another part of leaderd waits for itself.
static CLAIMED: Mutex<Option<HashSet<i32>>> = Mutex::new(None);

fn claimed() -> MutexGuard<'static, Option<HashSet<i32>>> {
    // The set stays consistent whatever panicked while it was held.
    CLAIMED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A child spawned by [`spawn_claimed`]: the supervisor leaves it alone
/// until this is dropped, which must be after its exit status was read.
#[derive(Debug)]
pub struct Claim(i32);

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(set) = claimed().as_mut() {
            set.remove(&self.0);
        }
    }
}

/// Spawns a child that its caller waits for itself. The lock is held
/// across the spawn, so the supervisor never sees the child exited and not
/// yet claimed, however soon it exits.
pub fn spawn_claimed<C>(
    spawn: impl FnOnce() -> std::io::Result<C>,
    pid: impl Fn(&C) -> Option<u32>,
) -> std::io::Result<(C, Option<Claim>)> {
    let mut set = claimed();
    let child = spawn()?;
    let claim = pid(&child).and_then(|p| i32::try_from(p).ok()).map(|p| {
        set.get_or_insert_with(HashSet::new).insert(p);
        Claim(p)
    });
    Ok((child, claim))
}

/// Reaps every exited child of leaderd that nobody claimed, without
/// blocking: (pid, exit code as a shell reports it, 128+N for signal N).
pub fn reap_unclaimed() -> Vec<(i32, i32)> {
    if !any_exited() {
        // The usual periodic check: nothing to read /proc for.
        return Vec::new();
    }
    let set = claimed();
    let Some(children) = children() else {
        // Without /proc nothing tells leaderd's children apart: all are
        // reaped, as before claims existed (a health check may then fail).
        return reap_any();
    };
    let mut reaped = Vec::new();
    for pid in children {
        if set.as_ref().is_some_and(|s| s.contains(&pid)) {
            continue;
        }
        let mut status = 0;
        // SAFETY: plain syscall with a valid out-pointer, on our own child.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
            reaped.push((pid, exit_code(status)));
        }
    }
    reaped
}

/// Whether any child of leaderd has exited and is not yet reaped (it is
/// left in place: `WNOWAIT`).
fn any_exited() -> bool {
    // SAFETY: siginfo_t is plain data; waitid only writes into it.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        libc::waitid(libc::P_ALL, 0, &mut info, flags) == 0 && info.si_pid() != 0
    }
}

/// leaderd's children, live or exited: from each thread's `children` file
/// (a child is listed under the thread that spawned it, an adopted orphan
/// under one the kernel picked), or by reading every process's parent when
/// the kernel was built without those files. `None` without `/proc`.
fn children() -> Option<Vec<i32>> {
    if !std::path::Path::new("/proc/self/task").exists() {
        return None;
    }
    listed().or_else(|| {
        let me = std::process::id() as i32;
        let all = process::all_processes().into_iter();
        Some(
            all.filter(|&(_, ppid, ..)| ppid == me)
                .map(|(pid, ..)| pid)
                .collect(),
        )
    })
}

/// Reaps every exited child, whoever waits for it.
pub(super) fn reap_any() -> Vec<(i32, i32)> {
    let mut reaped = Vec::new();
    loop {
        let mut status = 0;
        // SAFETY: plain syscall with a valid out-pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return reaped;
        }
        reaped.push((pid, exit_code(status)));
    }
}

/// `None` when the kernel has no `children` files. A thread that exits
/// while they are read hands its children to another, maybe one already
/// read: then they are read again.
fn listed() -> Option<Vec<i32>> {
    'again: loop {
        let mut pids = Vec::new();
        for task in std::fs::read_dir("/proc/self/task").ok()? {
            let Ok(task) = task else { continue 'again };
            match std::fs::read_to_string(task.path().join("children")) {
                Ok(text) => pids.extend(
                    text.split_whitespace()
                        .filter_map(|p| p.parse::<i32>().ok()),
                ),
                Err(_) if task.path().exists() => return None,
                Err(_) => continue 'again,
            }
        }
        return Some(pids);
    }
}

/// SIGKILLs every child leaderd has (guards, children adopted as their
/// subreaper) and reaps them until none is left. `false` if some were still
/// there after `limit`.
pub fn kill_and_reap_all_children(limit: std::time::Duration) -> bool {
    let me = std::process::id() as i32;
    let started = std::time::Instant::now();
    let until = started + limit;
    loop {
        reap_any();
        // SAFETY: plain syscall; WNOHANG with a null status pointer.
        let left = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
        if left < 0 {
            return true; // ECHILD: no child left at all
        }
        if std::time::Instant::now() >= until {
            return false;
        }
        // What we SIGKILLed ourselves dies within microseconds: wait for it
        // a moment before reading /proc, so the usual exit costs no scan
        // while the next leader is starting its work. Whatever is left then
        // (an orphan adopted as subreaper) is found there and killed.
        if started.elapsed() < std::time::Duration::from_millis(20) {
            std::thread::sleep(std::time::Duration::from_micros(200));
            continue;
        }
        for (pid, ppid, _) in process::processes(1) {
            if ppid == me {
                process::signal_process(pid, libc::SIGKILL);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The exit code as a shell reports it: 128+N for signal N.
fn exit_code(status: i32) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::{Duration, Instant};

    fn zombie(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s[s.rfind(')').unwrap() + 2..].starts_with('Z'))
    }

    fn await_zombie(pid: i32) {
        let until = Instant::now() + Duration::from_secs(30);
        while !zombie(pid) {
            assert!(Instant::now() < until, "{pid} did not exit");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A claimed child's exit status stays for its owner to read; an
    /// unclaimed one is reaped (one test, so no other test's reap races it).
    #[test]
    fn a_claimed_child_is_left_to_its_owner_and_others_are_reaped() {
        let (mut owned, claim) =
            spawn_claimed(|| Command::new("true").spawn(), |c| Some(c.id())).unwrap();
        let pid = owned.id() as i32;
        await_zombie(pid);
        reap_unclaimed();
        assert!(zombie(pid), "the supervisor took a claimed child's status");
        assert!(owned.wait().unwrap().success(), "its owner reads it");
        drop(claim);

        // Left for reap_unclaimed to reap: what this test checks.
        #[allow(clippy::zombie_processes)]
        let stray = Command::new("sh").args(["-c", "exit 3"]).spawn().unwrap();
        let pid = stray.id() as i32;
        await_zombie(pid);
        let reaped = reap_unclaimed();
        assert!(reaped.contains(&(pid, 3)), "{reaped:?}");
        let owned = owned.id() as i32;
        assert!(
            !claimed().as_ref().is_some_and(|s| s.contains(&owned)),
            "unclaimed on drop"
        );
    }

    #[test]
    fn exit_codes_map_signals_to_128_plus_n() {
        assert_eq!(exit_code(3 << 8), 3);
        assert_eq!(exit_code(libc::SIGKILL), 137);
    }
}
