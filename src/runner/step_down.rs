//! A step-down asked for over the admin socket: the leader steps down, or
//! hands over to a registered candidate; anyone else says why not. The
//! decision ([`decide`]) is pure and table-tested; [`step_down`] logs it
//! and sends the reply.

use crate::admin::Reply;
use crate::lease::registry::Record;
use crate::machine::{Event, Reason, State};
use std::time::Duration;

/// What an admin request asks of the runner.
#[derive(Debug, PartialEq, Eq)]
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

/// Who is asked, and what the registry knows: this candidate's id, the
/// registered candidates, and how long every candidate takes to read an
/// announcement.
pub(super) type Context<'a> = (&'a str, &'a [Record], Duration);

/// `leaderd step-down [--to ID]`, decided: the reply and what the runner
/// does. `hold` is the request's, else the configured one.
pub(super) fn decide(
    state: &State,
    to: Option<&str>,
    hold: Duration,
    (me, candidates, after): Context<'_>,
) -> (Reply, Asked) {
    let Some(lease) = state.leading() else {
        let state = state.name().as_str();
        return (Reply::NotLeader { state }, Asked::Nothing);
    };
    let fencing_token = lease.fencing_token;
    let Some(to) = to else {
        let event = Event::StepDown {
            hold,
            reason: Reason::StepDownRequested,
        };
        let reply = Reply::SteppingDown {
            fencing_token,
            hold,
        };
        return (reply, Asked::StepDown(event));
    };
    let refused = |why: String| (Reply::Refused { why }, Asked::Nothing);
    match candidates.iter().find(|r| r.id == to) {
        _ if to == me => refused(format!("{to} is this instance, which leads already")),
        None => {
            let known: Vec<&str> = candidates.iter().map(|r| r.id.as_str()).collect();
            refused(format!(
                "no candidate `{to}` is registered (registered: {})",
                known.join(", ")
            ))
        }
        Some(r) if !r.eligible() => {
            refused(format!("{to}'s worker is unhealthy; it would not lead"))
        }
        Some(_) => {
            let to = to.to_string();
            let reply = Reply::HandingOver {
                fencing_token,
                to: to.clone(),
                after,
            };
            (reply, Asked::HandOver { to, hold })
        }
    }
}

/// [`decide`], logged, and its reply sent.
pub(super) fn step_down(
    state: &State,
    request: crate::admin::Request,
    hold: Duration,
    context: Context<'_>,
) -> Asked {
    let hold = request.hold.unwrap_or(hold);
    let to = request.to.as_deref();
    let (reply, asked) = decide(state, to, hold, context);
    match (&reply, to) {
        (Reply::HandingOver { fencing_token, .. }, Some(to)) => {
            tracing::info!(successor = %to, fencing_token, "handover requested over the admin socket");
        }
        (Reply::Refused { why }, Some(to)) => {
            tracing::info!(successor = %to, "handover refused: {why}");
        }
        (Reply::SteppingDown { fencing_token, .. }, _) => {
            tracing::info!(hold = ?hold, fencing_token, "step-down requested over the admin socket");
        }
        _ => {}
    }
    let _ = request.reply.send(reply);
    asked
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::Lease;
    use tokio::time::Instant;

    fn record(id: &str, healthy: Option<bool>) -> Record {
        Record {
            id: id.into(),
            healthy,
            ..Record::default()
        }
    }

    #[test]
    fn the_leader_steps_down_or_hands_over_to_a_healthy_registered_other_and_no_one_else_acts() {
        let now = Instant::now();
        let leading = State::Working {
            lease: Lease {
                fencing_token: 7,
                sent_at: now,
            },
        };
        let (hold, after) = (Duration::from_secs(30), Duration::from_secs(2));
        let all = [
            record("a", None),
            record("b", Some(true)),
            record("c", Some(false)),
        ];
        let step = Asked::StepDown(Event::StepDown {
            hold,
            reason: Reason::StepDownRequested,
        });
        let handover = |to: &str| {
            let reply = Reply::HandingOver {
                fencing_token: 7,
                to: to.into(),
                after,
            };
            (
                reply,
                Asked::HandOver {
                    to: to.into(),
                    hold,
                },
            )
        };
        let refused = |why: &str| (Reply::Refused { why: why.into() }, Asked::Nothing);
        #[rustfmt::skip]
        let rows: Vec<(&State, Option<&str>, (Reply, Asked))> = vec![
            (&State::Idle, None, (Reply::NotLeader { state: "idle" }, Asked::Nothing)),
            (&State::Idle, Some("b"), (Reply::NotLeader { state: "idle" }, Asked::Nothing)),
            (&leading, None, (Reply::SteppingDown { fencing_token: 7, hold }, step)),
            (&leading, Some("b"), handover("b")),
            (&leading, Some("a"), refused("a is this instance, which leads already")),
            (&leading, Some("c"), refused("c's worker is unhealthy; it would not lead")),
            (&leading, Some("z"), refused("no candidate `z` is registered (registered: a, b, c)")),
        ];
        for (i, (state, to, want)) in rows.into_iter().enumerate() {
            assert_eq!(decide(state, to, hold, ("a", &all, after)), want, "row {i}");
        }
    }
}
