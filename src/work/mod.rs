//! The work run while leader. The runner calls `start` and `stop` as the
//! machine's actions say, and receives [`WorkEvent`]s on the channel handed
//! out by the constructor.
//!
//! - elect-only: no work; stopping completes at once.
//! - child: a supervised command ([`child`]) in its own process group behind
//!   a guard ([`guard`], [`process`]), so it never outlives the lease or leaderd.
//! - webhooks ([`webhook`]): `elected` / `demoted`, alone or with a child.

pub mod child;
pub mod guard;
pub mod process;
pub mod reap;
pub mod webhook;

use crate::metrics::Metrics;
use std::sync::Arc;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkEvent {
    /// Everything the work started has stopped (for a child: reaped).
    Stopped,
    /// The child exited on its own (policy `release` or `exit`; `restart`
    /// is handled inside the supervisor). `code` is 128+N for signal N.
    Exited { exit: bool, code: i32 },
    /// Under `restart`, the child exited more often than the restart limit
    /// allows: give the lease up for a while.
    CrashLoop { code: i32 },
}

enum Kind {
    ElectOnly {
        events: mpsc::UnboundedSender<WorkEvent>,
        /// `Stopped` has been reported since the last start.
        stop_reported: bool,
    },
    Child {
        commands: mpsc::UnboundedSender<child::Command>,
        supervisor: JoinHandle<()>,
        /// When the running child started; `None` while none runs.
        running: watch::Receiver<Option<Instant>>,
    },
}

pub struct Work {
    kind: Kind,
    webhooks: Option<webhook::Webhooks>,
    /// The fencing token of the term whose work is started and not yet stopped.
    term: Option<u64>,
}

/// How long webhook deliveries may still run after the lease was released.
const WEBHOOK_GRACE_AT_EXIT: std::time::Duration = std::time::Duration::from_secs(2);

impl Work {
    /// The work: a supervised child if `child` is given, else elect-only (the
    /// worker beside leaderd asks `/leader`); webhooks with either. No child
    /// is started once a shutdown is requested, and a running one is killed
    /// at once when `signals.hurry` is cancelled. Must be called inside the runtime, whose thread then spawns the children (see
    /// `process` on parent-death signals).
    pub fn new(
        child: Option<child::ChildSpec>,
        webhooks: Option<webhook::Webhooks>,
        metrics: Arc<Metrics>,
        signals: crate::shutdown::Signals,
    ) -> (Self, mpsc::UnboundedReceiver<WorkEvent>) {
        let (events, rx) = mpsc::unbounded_channel();
        let kind = match child {
            Some(spec) => {
                let (commands, command_rx) = mpsc::unbounded_channel();
                let (running_tx, running) = watch::channel(None);
                let supervisor = tokio::spawn(child::supervise(
                    spec, command_rx, events, metrics, signals, running_tx,
                ));
                Kind::Child {
                    commands,
                    supervisor,
                    running,
                }
            }
            None => Kind::ElectOnly {
                events,
                stop_reported: false,
            },
        };
        let work = Work {
            kind,
            webhooks,
            term: None,
        };
        (work, rx)
    }

    pub fn start(&mut self, fencing_token: u64, reason: &str) {
        self.term = Some(fencing_token);
        if let Some(hooks) = &self.webhooks {
            hooks.notify("elected", fencing_token, reason);
        }
        match &mut self.kind {
            Kind::ElectOnly { stop_reported, .. } => {
                tracing::debug!(fencing_token, "elect-only: nothing to start");
                *stop_reported = false;
            }
            Kind::Child { commands, .. } => {
                let _ = commands.send(child::Command::Start { fencing_token });
            }
        }
    }

    /// Stops the work; it must be dead by `kill_at`. Called again with a new
    /// `kill_at` when the lease's validity moves. Reports `Stopped` once.
    pub fn stop(&mut self, kill_at: Instant, reason: &str) {
        if let (Some(fencing_token), Some(hooks)) = (self.term.take(), &self.webhooks) {
            hooks.notify("demoted", fencing_token, reason);
        }
        match &mut self.kind {
            Kind::ElectOnly {
                events,
                stop_reported,
            } => {
                if !*stop_reported {
                    *stop_reported = true;
                    let _ = events.send(WorkEvent::Stopped);
                }
            }
            Kind::Child { commands, .. } => {
                let _ = commands.send(child::Command::Stop { kill_at });
            }
        }
    }

    /// The instant by which the work must be dead whatever leaderd does next
    /// (the guard's dead-man's switch); called whenever it moves. Only a
    /// child can be killed from outside leaderd; webhooks and elect-only
    /// rely on the worker asking `/leader`.
    pub fn set_deadline(&mut self, deadline: Option<Instant>) {
        if let Kind::Child { commands, .. } = &self.kind {
            let _ = commands.send(child::Command::Deadline(deadline));
        }
    }

    /// When the running child started (`None` while none runs); `None`
    /// altogether without a child.
    pub fn child_running(&self) -> Option<watch::Receiver<Option<Instant>>> {
        match &self.kind {
            Kind::Child { running, .. } => Some(running.clone()),
            Kind::ElectOnly { .. } => None,
        }
    }

    /// Ends the supervisor, killing anything still running, and waits for it.
    pub async fn finish(self) {
        if let Kind::Child {
            commands,
            supervisor,
            ..
        } = self.kind
        {
            drop(commands);
            let _ = supervisor.await;
        }
        if let Some(hooks) = self.webhooks {
            hooks.finish(WEBHOOK_GRACE_AT_EXIT).await;
        }
    }
}
