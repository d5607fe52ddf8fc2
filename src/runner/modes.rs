//! The two ways out of the election besides a shutdown: run-once mode
//! (`--wait`), and a step-down asked for over the admin socket.

use crate::lease::registry::Record;
use crate::machine::{Event, Reason, State, StateName};
use std::time::Duration;
use tokio::time::Instant;

/// What an admin request asks of the runner.
pub(super) enum Asked {
    /// Step down now.
    StepDown(Event),
    /// Hand over to a registered candidate: announce it, then step down.
    HandOver {
        to: String,
        hold: Duration,
    },
    Nothing,
}

/// `leaderd step-down [--to ID]`: the leader steps down (or hands over to
/// a registered, healthy candidate: `after` is how long it waits for every
/// candidate to have read the announcement); anyone else says so.
pub(super) fn step_down(
    state: &State,
    request: crate::admin::Request,
    hold: Duration,
    (me, candidates, after): (&str, &[Record], Duration),
) -> Asked {
    use crate::admin::Reply;
    let hold = request.hold.unwrap_or(hold);
    if let (Some(lease), Some(to)) = (state.leading(), request.to.clone()) {
        let known: Vec<&str> = candidates.iter().map(|r| r.id.as_str()).collect();
        let why = match candidates.iter().find(|r| r.id == to) {
            _ if to == me => format!("{to} is this instance, which leads already"),
            None => format!(
                "no candidate `{to}` is registered (registered: {})",
                known.join(", ")
            ),
            Some(r) if !r.eligible() => format!("{to}'s worker is unhealthy; it would not lead"),
            Some(_) => {
                tracing::info!(successor = %to, fencing_token = lease.fencing_token, "handover requested over the admin socket");
                let _ = request.reply.send(Reply::HandingOver {
                    fencing_token: lease.fencing_token,
                    to: to.clone(),
                    after,
                });
                return Asked::HandOver { to, hold };
            }
        };
        tracing::info!(successor = %to, "handover refused: {why}");
        let _ = request.reply.send(Reply::Refused { why });
        return Asked::Nothing;
    }
    match state.leading() {
        Some(lease) => {
            tracing::info!(hold = ?hold, fencing_token = lease.fencing_token, "step-down requested over the admin socket");
            let _ = request.reply.send(Reply::SteppingDown {
                fencing_token: lease.fencing_token,
                hold,
            });
            Asked::StepDown(Event::StepDown {
                hold,
                reason: Reason::StepDownRequested,
            })
        }
        None => {
            let _ = request.reply.send(Reply::NotLeader {
                state: state.name().as_str(),
            });
            Asked::Nothing
        }
    }
}

/// Run-once mode (`--wait`): lead within the deadline and run the command
/// once, or give up.
pub(super) struct Once {
    pub(super) deadline: Instant,
    /// An acquire has been answered (so `--wait 0` is one real try).
    pub(super) answered: bool,
    /// The command was started: from now on its exit ends the run.
    pub(super) started: bool,
}

/// Not leader within `--wait`: the command never ran (EX_TEMPFAIL).
pub const EXIT_NOT_LEADER: i32 = 75;

impl Once {
    /// The exit code to end the run with, if the run-once outcome is known
    /// (once known, the runner stops asking).
    pub(super) fn verdict(&mut self, state: &State, shutdown_seen: bool) -> Option<i32> {
        if shutdown_seen {
            return None;
        }
        if !self.started {
            // An unhealthy worker never lets an acquire out: the deadline
            // alone decides then.
            if (self.answered || state.worker_unhealthy())
                && Instant::now() >= self.deadline
                && state.leading().is_none()
                && state.name() != StateName::Acquiring
            {
                tracing::info!("not leader within --wait: exiting without running the command");
                return Some(EXIT_NOT_LEADER);
            }
            return None;
        }
        if state.name() == StateName::Waiting {
            tracing::error!(
                "the lease was lost while the command ran; it was stopped and is not run again"
            );
            return Some(1);
        }
        None
    }
}
