//! The wake-ups: ZooKeeper watches on the nodes that matter to this
//! candidate now — the queue node before it, or the lease node it waits
//! for, or, while it leads, its own lease node and queue node — set
//! through the candidate's own session. A deletion (or the session's end)
//! sends one notice: a waiter then tries at once, a leader renews at once
//! and learns of its loss.

use crate::lease::contract::Wakeups;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use zookeeper_client::{Client, EventType, SessionState};

/// The nodes to watch, and the session to watch them through.
#[derive(Clone)]
pub(super) struct Aim {
    pub client: Client,
    pub paths: Vec<String>,
}

/// Watches whatever `aims` names, until `stop`.
pub(super) fn spawn(mut aims: watch::Receiver<Option<Aim>>, wakeups: Wakeups) -> JoinHandle<()> {
    let Wakeups {
        notices,
        retry,
        stop,
        ..
    } = wakeups;
    tokio::spawn(async move {
        let mut warned = false;
        loop {
            let aim = aims.borrow_and_update().clone();
            let outcome = match aim {
                None => Outcome::Wait,
                Some(aim) => tokio::select! {
                    _ = stop.cancelled() => return,
                    outcome = once(&aim) => outcome,
                    // Aimed elsewhere meanwhile.
                    changed = aims.changed() => match changed {
                        Ok(()) => Outcome::Again,
                        Err(_) => return,
                    },
                },
            };
            match outcome {
                Outcome::Gone => {
                    if notices.send(()).is_err() {
                        return;
                    }
                }
                Outcome::Again => continue,
                Outcome::Wait => {}
                Outcome::Failed(e) => {
                    if !warned {
                        warned = true;
                        tracing::warn!(error = %e, "cannot watch ZooKeeper for release wake-ups; waiters fall back to their timers until this works");
                    }
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = aims.changed() => {}
                        _ = tokio::time::sleep(retry) => {}
                    }
                    continue;
                }
            }
            // Until the backend aims again (it does after every attempt).
            tokio::select! {
                _ = stop.cancelled() => return,
                changed = aims.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
        }
    })
}

enum Outcome {
    /// The node is gone, or the session ended: worth a try (or a renewal).
    Gone,
    /// The watch fired for something else (data written): watch again.
    Again,
    /// Nothing to watch until the backend aims again.
    Wait,
    Failed(String),
}

/// One watch on each of `aim`'s nodes, until one fires.
async fn once(aim: &Aim) -> Outcome {
    let mut watchers = Vec::new();
    for path in &aim.paths {
        let (stat, watcher) = match aim.client.check_and_watch_stat(path).await {
            Ok(watched) => watched,
            Err(
                zookeeper_client::Error::SessionExpired | zookeeper_client::Error::ClientClosed,
            ) => {
                return Outcome::Gone;
            }
            Err(e) => return Outcome::Failed(e.to_string()),
        };
        if stat.is_none() {
            return Outcome::Gone;
        }
        watchers.push(Box::pin(watcher.changed()));
    }
    if watchers.is_empty() {
        return Outcome::Wait;
    }
    let (event, _, _) = futures_util::future::select_all(watchers).await;
    match event.event_type {
        EventType::NodeDeleted => Outcome::Gone,
        EventType::Session
            if matches!(
                event.session_state,
                SessionState::Expired | SessionState::Closed | SessionState::AuthFailed
            ) =>
        {
            Outcome::Gone
        }
        _ => Outcome::Again,
    }
}
