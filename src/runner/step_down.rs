//! A step-down asked for over the admin socket: the leader steps down, or
//! hands over to a registered candidate; anyone else says why not.

use crate::lease::registry::Record;
use crate::machine::{Event, Reason, State};
use std::time::Duration;

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
