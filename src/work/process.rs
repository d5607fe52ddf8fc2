//! Process plumbing for the child (Linux): spawning it in a process group
//! behind a guard, signalling the group, and finding stragglers in `/proc`
//! (reaping is [`super::reap`]'s).
//!
//! The group is led by a *guard*: leaderd re-executed as `leaderd __guard`,
//! whose stdin is the read end of a lifeline pipe only leaderd can write to.
//! When leaderd dies, however it dies, the kernel closes that pipe, the guard
//! reads EOF and SIGKILLs the whole group, grandchildren included. While the
//! guard lives the group exists, so its ID cannot be reused and signalling it
//! never hits a stranger. A pipe the kernel closes is also immune to the trap
//! of `PR_SET_PDEATHSIG`, which fires when the spawning *thread* exits.
//! Guards are spawned ahead of time, so a handover pays for one `posix_spawn`.

use std::ffi::OsString;
use std::io::{PipeWriter, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use tokio::time::Instant;

/// A guard process leading an (otherwise empty) process group, waiting for a
/// child to join it. Spawned ahead of time, so that starting the work at a
/// handover is a single `posix_spawn`.
#[derive(Debug)]
pub struct Guard {
    pid: i32,
    /// Dropping it tells the guard to kill its group, itself included.
    lifeline: PipeWriter,
}

impl Guard {
    pub fn pid(&self) -> i32 {
        self.pid
    }
}

/// Sets the guard's dead-man's switch (see [`guard`](super::guard)): the
/// group must be dead by `deadline`. The pipe is non-blocking, so a guard
/// that is not reading (stopped along with its group) never blocks leaderd;
/// its 64 KiB hold hours of renewals.
fn arm(lifeline: &PipeWriter, deadline: Option<Instant>) {
    let message = super::guard::message(deadline);
    match (&*lifeline).write(&message) {
        Ok(n) if n == message.len() => {}
        Ok(_) => tracing::warn!("the guard's lifeline took part of a deadline message"),
        Err(e) => tracing::warn!(error = %e, "cannot tell the child's guard its kill-by deadline"),
    }
}

/// A running child in its guard's process group.
#[derive(Debug)]
pub struct Group {
    /// The process group ID, which is the guard's PID.
    pub pgid: i32,
    pub child: i32,
    /// Dropping it tells the guard to kill whatever is left in the group.
    lifeline: Option<PipeWriter>,
}

impl Group {
    /// Lets the guard go: it kills what is left of the group, itself included.
    pub fn dismiss_guard(&mut self) {
        self.lifeline = None;
    }

    /// The group must be dead by `deadline`, whatever leaderd does meanwhile.
    pub fn arm(&self, deadline: Option<Instant>) {
        if let Some(lifeline) = &self.lifeline {
            arm(lifeline, deadline);
        }
    }
}

/// What to run and with what environment.
pub struct Spec<'a> {
    pub program: &'a Path,
    pub args: &'a [String],
    pub env_set: &'a [(&'static str, String)],
    pub env_remove: &'a [&'static str],
}

/// Starts a guard in a new process group of its own.
pub fn spawn_guard() -> std::io::Result<Guard> {
    let (reader, writer) = std::io::pipe()?;
    let mut guard = Command::new(std::env::current_exe()?);
    guard
        .arg(crate::work::guard::ARG)
        .stdin(Stdio::from(reader))
        .stdout(Stdio::null())
        .process_group(0);
    // SAFETY: signal() is async-signal-safe; ignored dispositions survive exec.
    unsafe {
        guard.pre_exec(|| {
            for signal in super::guard::GUARD_IGNORES {
                libc::signal(signal, libc::SIG_IGN);
            }
            Ok(())
        });
    }
    let pid = guard.spawn()?.id() as i32;
    // SAFETY: plain fcntl on a descriptor we own.
    unsafe {
        let fd = writer.as_raw_fd();
        libc::fcntl(
            fd,
            libc::F_SETFL,
            libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK,
        );
    }
    Ok(Guard {
        pid,
        lifeline: writer,
    })
}

/// Starts the child in `guard`'s process group. No code runs between fork
/// and exec, so this is a plain `posix_spawn`: the guard, alive before the
/// child exists, is what ties the child's life to leaderd's.
pub fn spawn(spec: &Spec<'_>, guard: Guard, deadline: Option<Instant>) -> std::io::Result<Group> {
    // Armed before the child exists, so it is never unguarded.
    arm(&guard.lifeline, deadline);
    let mut cmd = Command::new(spec.program);
    cmd.args(spec.args)
        .stdin(Stdio::null())
        .process_group(guard.pid);
    for name in spec.env_remove {
        cmd.env_remove(name);
    }
    for (name, value) in spec.env_set {
        cmd.env(name, value);
    }
    // On failure the guard is dropped: it kills its empty group and exits.
    let child = cmd.spawn()?.id() as i32;
    Ok(Group {
        pgid: guard.pid,
        child,
        lifeline: Some(guard.lifeline),
    })
}

/// Sends `signal` to every process in the group. `false` if none is left.
pub fn signal_group(pgid: i32, signal: i32) -> bool {
    // SAFETY: plain syscall; a negative PID addresses the group.
    unsafe { libc::kill(-pgid, signal) == 0 }
}

pub fn signal_process(pid: i32, signal: i32) {
    // SAFETY: plain syscall.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// Marks every descriptor above 2 close-on-exec, so the child (and the
/// guard) get only stdin, stdout and stderr, whatever leaderd's own parent
/// left open. leaderd itself keeps them. Called first thing in `main`.
pub fn cloexec_inherited_fds() {
    // SAFETY: plain syscall on our own descriptor table (Linux ≥ 5.11).
    let done = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    } == 0;
    if done {
        return;
    }
    // Older kernels: one by one, from /proc (collected first: reading the
    // directory opens a descriptor of its own).
    let fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd > 2)
        .collect();
    for fd in fds {
        // SAFETY: fcntl on a descriptor number; a closed one just fails.
        unsafe {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}

/// Gives back the default action to every signal leaderd's parent set to
/// be ignored (`nohup`, some init systems), so neither leaderd nor its
/// child inherits a deaf ear: an ignored disposition survives `exec`.
/// SIGPIPE stays ignored in leaderd (Rust's runtime wants EPIPE) and is
/// reset for the child by the standard library.
pub fn reset_ignored_signals() {
    for signal in 1..32 {
        if matches!(signal, libc::SIGKILL | libc::SIGSTOP | libc::SIGPIPE) {
            continue;
        }
        // SAFETY: sigaction with a null new action only reads the current
        // one into a zeroed struct; called before any other thread exists.
        unsafe {
            let mut current: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut current) == 0
                && current.sa_sigaction == libc::SIG_IGN
            {
                libc::signal(signal, libc::SIG_DFL);
            }
        }
    }
}

/// Makes leaderd the reaper of its orphaned descendants, so a grandchild
/// whose parent died is reaped (and can be found and killed) by us.
pub fn become_subreaper() {
    // SAFETY: plain prctl on the calling process.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong);
    }
}

/// `(pid, ppid, pgrp)` of the live processes with a PID of at least
/// `min_pid`, from `/proc/*/stat`.
pub(super) fn processes(min_pid: i32) -> Vec<(i32, i32, i32)> {
    scan(min_pid)
        .into_iter()
        .filter(|&(.., zombie)| !zombie)
        .map(|(pid, ppid, pgrp, _)| (pid, ppid, pgrp))
        .collect()
}

/// `(pid, ppid, pgrp, zombie)` of every process, exited ones included.
pub(super) fn all_processes() -> Vec<(i32, i32, i32, bool)> {
    scan(1)
}

fn scan(min_pid: i32) -> Vec<(i32, i32, i32, bool)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid >= min_pid)
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // The command name may contain spaces and parentheses: parse after the last ')'.
            let rest = &stat[stat.rfind(')')? + 2..];
            let mut fields = rest.split_whitespace();
            let state = fields.next()?;
            let ppid = fields.next()?.parse().ok()?;
            let pgrp = fields.next()?.parse().ok()?;
            Some((pid, ppid, pgrp, state == "Z"))
        })
        .collect()
}

/// Live processes that belong to the work: members of the group other than
/// the guard, and processes adopted by leaderd (descendants that left the
/// group and lost their parent), except the standby guard for the next term,
/// which is leaderd's own child too.
///
/// Everything in the work's tree was spawned after its guard, whose PID is
/// `pgid`, so only higher PIDs are read, unless PIDs have wrapped around
/// since (then every process is read). This keeps the check on a handover's
/// path cheap on a busy host.
pub fn stragglers(group: &Group, standby: Option<&Guard>) -> Vec<i32> {
    let spare = standby.map_or(0, Guard::pid);
    let me = std::process::id() as i32;
    let last_pid = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok());
    let min_pid = match last_pid {
        Some(last) if last >= group.pgid => group.pgid,
        _ => 1,
    };
    processes(min_pid)
        .into_iter()
        .filter(|&(pid, ppid, pgrp)| {
            pid != group.pgid && pid != spare && (pgrp == group.pgid || ppid == me)
        })
        .map(|(pid, _, _)| pid)
        .collect()
}

/// Finds `program` the way exec would: a path as given, else on `PATH`.
/// Checked at start-up so a typo is an error now, not at first leadership.
pub fn resolve(program: &str, path_var: Option<OsString>) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let path = PathBuf::from(program);
        return match std::fs::metadata(&path) {
            Err(e) => Err(format!("`{program}`: {e}")),
            Ok(m) if !m.is_file() => Err(format!("`{program}` is not a file")),
            Ok(_) if !executable(&path) => {
                Err(format!("`{program}` is not executable; chmod +x it"))
            }
            Ok(_) => Ok(path),
        };
    }
    let path_var = path_var.unwrap_or_default();
    std::env::split_paths(&path_var)
        .map(|dir| dir.join(program))
        .find(|candidate| executable(candidate))
        .ok_or_else(|| {
            format!("`{program}` was not found on PATH; give its full path or install it")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_like_exec() {
        assert!(resolve("sh", std::env::var_os("PATH")).is_ok());
        assert!(resolve("/bin/sh", None).is_ok());
        assert!(
            resolve("no-such-program-leaderd", std::env::var_os("PATH"))
                .unwrap_err()
                .contains("not found on PATH")
        );
        let plain = std::env::temp_dir().join(format!("leaderd-not-exec-{}", std::process::id()));
        std::fs::write(&plain, "data").unwrap();
        let err = resolve(plain.to_str().unwrap(), None).unwrap_err();
        let _ = std::fs::remove_file(&plain);
        assert!(err.contains("not executable"), "{err}");
        assert!(resolve("/tmp", None).unwrap_err().contains("not a file"));
    }
}
