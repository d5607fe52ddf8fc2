//! The loop every backend's release watcher runs in (Redis's wake list,
//! PostgreSQL's `LISTEN`, etcd's watch): watch until the watch ends, then
//! again after `retry`, until `stop`. A failure is said once as a warning
//! (a missing permission would otherwise go unnoticed: waiters still work,
//! only slower, on their timers), then quietly.

use super::contract::{BoxFuture, Wakeups};
use tokio::task::JoinHandle;

/// Why a watch failed, and whether the store refused our credentials or
/// permissions: then the next try waits as long as the lease's own
/// (`timing::refused_backoff`), not the retry interval.
pub(crate) struct Failed {
    pub(crate) text: String,
    pub(crate) refused: bool,
}

impl From<String> for Failed {
    fn from(text: String) -> Self {
        Failed {
            text,
            refused: false,
        }
    }
}

impl From<super::contract::Error> for Failed {
    fn from(e: super::contract::Error) -> Self {
        Failed {
            refused: e.needs_a_person(),
            text: e.to_string(),
        }
    }
}

/// How one watch ended.
pub(crate) enum Watch {
    /// The connection or stream ended: watch again.
    Again,
    /// Nobody listens any more (shutting down), or watching cannot work.
    Stop,
}

/// Spawns the loop around `once`, which watches until the watch ends.
/// `server` names the server in the warning.
pub(crate) fn spawn<S: Send + 'static>(
    mut state: S,
    server: String,
    wakeups: &Wakeups,
    once: for<'a> fn(&'a mut S) -> BoxFuture<'a, Result<Watch, Failed>>,
) -> JoinHandle<()> {
    let (retry, stop) = (wakeups.retry, wakeups.stop.clone());
    tokio::spawn(async move {
        let mut warned = false;
        loop {
            let outcome = tokio::select! {
                _ = stop.cancelled() => return,
                outcome = once(&mut state) => outcome,
            };
            let mut wait = retry;
            match outcome {
                Ok(Watch::Stop) => return,
                Ok(Watch::Again) => {}
                Err(e) => {
                    if e.refused {
                        wait = crate::timing::refused_backoff(retry);
                    }
                    if !warned {
                        warned = true;
                        tracing::warn!(error = %e.text, %server, "cannot wait for release wake-ups; waiters fall back to their timers until this works");
                    } else {
                        tracing::debug!(error = %e.text, %server, "release wake-ups lost; watching again")
                    }
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    })
}
