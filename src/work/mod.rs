//! The work run while leader. The runner calls `start` and `stop` as the
//! machine's actions say, and receives [`WorkEvent`]s on the channel handed
//! out by the constructor. Elect-only mode has no work: stopping completes at
//! once. The supervised child and webhooks plug in here.

use tokio::sync::mpsc;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkEvent {
    /// Everything the work started has stopped (for a child: reaped).
    Stopped,
}

pub struct Work {
    events: mpsc::UnboundedSender<WorkEvent>,
    /// `Stopped` has been reported since the last start.
    stop_reported: bool,
}

impl Work {
    /// No work: the worker beside leaderd asks `/leader` instead.
    pub fn elect_only() -> (Self, mpsc::UnboundedReceiver<WorkEvent>) {
        let (events, rx) = mpsc::unbounded_channel();
        (
            Work {
                events,
                stop_reported: false,
            },
            rx,
        )
    }

    pub fn start(&mut self, fencing_token: u64) {
        tracing::debug!(fencing_token, "work started (elect-only: nothing to run)");
        self.stop_reported = false;
    }

    /// Stops the work; it must be dead by `kill_at`. Called again with a new
    /// `kill_at` when the lease's validity moves. Reports `Stopped` once.
    pub fn stop(&mut self, _kill_at: Instant) {
        if !self.stop_reported {
            self.stop_reported = true;
            // The runner owns the receiver for as long as it calls us.
            let _ = self.events.send(WorkEvent::Stopped);
        }
    }
}
