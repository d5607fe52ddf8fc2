//! The wake-ups: one ZooKeeper watch on the one node that matters to this
//! candidate now — the queue node before it, the lease node it waits for,
//! or its own lease node while it leads — set through the candidate's own
//! session. A deletion (or the session's end) sends one notice: a waiter
//! then tries at once, a leader renews at once and learns of its loss.

use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use zookeeper_client::{Client, EventType, SessionState};

/// A node to watch, and the session to watch it through.
#[derive(Clone)]
pub(super) struct Aim {
    pub client: Client,
    pub path: String,
}

/// Watches whatever `aims` names, until `stop`.
pub(super) fn spawn(
    mut aims: watch::Receiver<Option<Aim>>,
    retry: Duration,
    notices: mpsc::UnboundedSender<()>,
    stop: CancellationToken,
) -> JoinHandle<()> {
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

/// One watch on `aim`, until it fires.
async fn once(aim: &Aim) -> Outcome {
    let (stat, watcher) = match aim.client.check_and_watch_stat(&aim.path).await {
        Ok(watched) => watched,
        Err(zookeeper_client::Error::SessionExpired | zookeeper_client::Error::ClientClosed) => {
            return Outcome::Gone;
        }
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    if stat.is_none() {
        return Outcome::Gone;
    }
    let event = watcher.changed().await;
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
