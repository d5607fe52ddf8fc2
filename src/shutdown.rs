//! Signals → cancellation tokens. The first SIGTERM or SIGINT cancels
//! [`Signals::requested`] (the state machine then stops the work and
//! releases the lease); a second one cancels [`Signals::hurry`] (the child's
//! process group gets SIGKILL now, and the lease is still released once it
//! is reaped: GNU `timeout` and some runtimes send two signals a moment
//! apart); only a third exits at once with 128 + the signal number (the
//! child's guard then kills the child's group; the lease expires by its TTL).
//!
//! The handlers are installed by [`catch`], the first thing `main` does, and
//! the signals are unblocked there too: a signal that arrives while the
//! configuration is read or the runtime starts is kept (one byte in a pipe)
//! and honoured the same way once the runner looks, rather than killing
//! leaderd by default, or being dropped (as PID 1 of a PID namespace, a
//! signal without a handler is), or staying blocked forever because the
//! parent started leaderd with them in its signal mask.

use signal_hook::consts::{SIGINT, SIGTERM};
use std::io::Read;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

/// The signals that ask leaderd to shut down.
const SHUTDOWN: [(i32, &str); 2] = [(SIGTERM, "SIGTERM"), (SIGINT, "SIGINT")];

/// What the shutdown signals have asked for so far.
#[derive(Debug, Clone)]
pub struct Signals {
    /// Stop the work, release the lease, exit (the first signal).
    pub requested: CancellationToken,
    /// Stop the work by SIGKILL, now (the second signal).
    pub hurry: CancellationToken,
}

/// Shutdown signals caught since start-up, not yet handed to the runtime.
pub struct Caught {
    /// One pipe per signal in [`SHUTDOWN`]: the handler writes a byte per
    /// delivery (signal-hook's async-signal-safe self-pipe).
    pipes: Vec<UnixStream>,
    /// Once set, the signals act as by default again (for the commands that
    /// hold nothing: `status`, `check`).
    default: Arc<AtomicBool>,
}

/// Catches SIGTERM and SIGINT, then unblocks them. Call it before anything
/// else. In that order: a signal already pending (sent while the loader
/// ran, or before exec, with the signal blocked) is delivered the moment
/// it is unblocked, and must find the handler, not the default action.
pub fn catch() -> std::io::Result<Caught> {
    let default = Arc::new(AtomicBool::new(false));
    let mut pipes = Vec::new();
    for (signal, _) in SHUTDOWN {
        let (read, write) = UnixStream::pair()?;
        signal_hook::flag::register_conditional_default(signal, default.clone())?;
        signal_hook::low_level::pipe::register(signal, write)?;
        pipes.push(read);
    }
    unblock(&SHUTDOWN.map(|(n, _)| n))?;
    Ok(Caught { pipes, default })
}

/// Removes `signals` from the inherited signal mask.
fn unblock(signals: &[i32]) -> std::io::Result<()> {
    match mask(libc::SIG_UNBLOCK, signals) {
        0 => Ok(()),
        e => Err(std::io::Error::from_raw_os_error(e)),
    }
}

/// Makes the signal mask the shutdown signals alone; [`catch`] unblocks
/// them. Runs from the binary's `.init_array`, before `main` and before any
/// thread exists (every thread inherits this mask). Whatever else the
/// parent had blocked is unblocked here, as init-like supervisors (tini,
/// dumb-init) do: a parent that spawns from a thread blocking signals
/// would otherwise leave SIGCHLD blocked, and the child's exit, which a
/// shutdown waits for, would never be heard.
pub extern "C" fn block_before_main() {
    mask(libc::SIG_SETMASK, &SHUTDOWN.map(|(n, _)| n));
}

fn mask(how: i32, signals: &[i32]) -> i32 {
    // SAFETY: sigset_t is plain data, initialised by sigemptyset before use;
    // called before any other thread exists, so the mask is the process's.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &signal in signals {
            libc::sigaddset(&mut set, signal);
        }
        libc::pthread_sigmask(how, &set, std::ptr::null_mut())
    }
}

impl Caught {
    /// For the commands that hold no lease: the signals terminate as by
    /// default from now on, and one already caught does so now.
    pub fn restore_default(self) {
        self.default.store(true, Ordering::SeqCst);
        for (pipe, (number, _)) in self.pipes.iter().zip(SHUTDOWN) {
            let mut byte = [0u8; 1];
            if pipe.set_nonblocking(true).is_ok() && (&*pipe).read(&mut byte).is_ok_and(|n| n > 0) {
                std::process::exit(128 + number);
            }
        }
    }

    /// For `status --watch`, which holds nothing but should end as asked:
    /// the first SIGINT or SIGTERM cancels the returned token, quietly; a
    /// second acts as by default. Call it inside the runtime.
    pub fn into_quiet_stop(self) -> std::io::Result<CancellationToken> {
        let stop = CancellationToken::new();
        let default = self.default.clone();
        for pipe in self.pipes {
            pipe.set_nonblocking(true)?;
            let mut pipe = tokio::net::UnixStream::from_std(pipe)?;
            let (stop, default) = (stop.clone(), default.clone());
            tokio::spawn(async move {
                let mut byte = [0u8; 1];
                if let Ok(1..) = pipe.read(&mut byte).await {
                    default.store(true, Ordering::SeqCst);
                    stop.cancel();
                }
            });
        }
        Ok(stop)
    }

    /// Hands the caught signals to the runtime: returns the tokens every
    /// task watches, `requested` already cancelled if a signal came during
    /// start-up. Call it inside the runtime.
    pub fn into_signals(self) -> std::io::Result<Signals> {
        let token = CancellationToken::new();
        let hurry = CancellationToken::new();
        let mut pipes = Vec::new();
        let mut early = None;
        for (pipe, (number, name)) in self.pipes.into_iter().zip(SHUTDOWN) {
            pipe.set_nonblocking(true)?;
            let mut byte = [0u8; 1];
            if (&pipe).read(&mut byte).is_ok_and(|n| n > 0) {
                early = Some(name);
            }
            pipes.push((tokio::net::UnixStream::from_std(pipe)?, number, name));
        }
        let mut received = 0;
        if let Some(name) = early {
            // Caught during start-up: the runner sees the token cancelled
            // before it asks for anything.
            tracing::info!(
                signal = name,
                "shutdown requested during start-up: exiting without campaigning"
            );
            token.cancel();
            received = 1;
        }
        let [(mut term, term_n, term_name), (mut int, int_n, int_name)]: [_; 2] = pipes
            .try_into()
            .map_err(|_| std::io::Error::other("two shutdown signals"))?;
        let cancel = token.clone();
        let hurry_now = hurry.clone();
        tokio::spawn(async move {
            let (mut a, mut b) = ([0u8; 1], [0u8; 1]);
            loop {
                let (name, number) = tokio::select! {
                    Ok(1..) = term.read(&mut a) => (term_name, term_n),
                    Ok(1..) = int.read(&mut b) => (int_name, int_n),
                    else => return,
                };
                received += 1;
                if received == 1 {
                    tracing::info!(
                        signal = name,
                        "shutdown requested: stopping the work and releasing the lease"
                    );
                    cancel.cancel();
                } else if received == 2 {
                    tracing::warn!(
                        signal = name,
                        "second signal: killing the child now; the lease is still released (a third signal exits at once)"
                    );
                    hurry_now.cancel();
                } else {
                    // The child's guard sees leaderd go and kills the child's group.
                    tracing::warn!(
                        signal = name,
                        "third signal: exiting at once without releasing"
                    );
                    crate::telemetry::flush();
                    std::process::exit(128 + number);
                }
            }
        });
        Ok(Signals {
            requested: token,
            hurry,
        })
    }
}
