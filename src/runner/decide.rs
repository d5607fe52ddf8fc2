//! The runner's own decisions, pure and table-tested beside the machine's:
//! how a transition is logged (a standby names the holder once), when the
//! machine is told its standing, a targeted handover's announcement and its
//! step-down, and run-once mode's verdict. Each takes the instant it judges
//! at; none sends, logs or sleeps.

use crate::machine::{Event, Reason, State, StateName};
use std::time::Duration;
use tokio::time::Instant;

/// The holder a standby last named at INFO: a standby says once who leads,
/// not at every re-check. `None` until a refusal named one (or since we
/// led).
#[derive(Debug, Default)]
pub(super) struct Announced(Option<Option<String>>);

impl Announced {
    /// How a transition for `reason` is logged: at DEBUG or not, and the
    /// holder it names. `holder`: who the store last said holds the lease;
    /// `leads`: whether the transition enters a leading state.
    pub(super) fn line(
        &mut self,
        reason: Reason,
        leads: bool,
        holder: Option<String>,
    ) -> (bool, Option<String>) {
        let mut quiet = reason.routine();
        if reason == Reason::HeldByOther {
            quiet = self.0.as_ref() == Some(&holder);
            self.0 = Some(holder);
        } else if leads {
            self.0 = None;
        }
        (quiet, self.0.clone().flatten())
    }
}

/// The machine's event that tells it how many candidates outrank this one,
/// when its state remembers another count. Idle, leading and exiting states
/// remember none: there [`Event::Outranked`] would change nothing.
pub(super) fn standing_news(state: &State, outranked: u8) -> Option<Event> {
    let carries = !state.exiting()
        && matches!(
            state.name(),
            StateName::Acquiring | StateName::Pausing | StateName::Releasing | StateName::Waiting
        );
    (carries && state.standing().outranked != outranked).then_some(Event::Outranked(outranked))
}

/// A targeted handover under way (`leaderd step-down --to`): announced in
/// the registry, then, once every candidate has read it, a step-down.
#[derive(Debug, Default)]
pub(super) struct Handover(Option<(Instant, Duration)>);

impl Handover {
    /// Announced now: the step-down comes `after` from `now`, and holds
    /// the lease off for `hold`.
    pub(super) fn announce(&mut self, now: Instant, after: Duration, hold: Duration) {
        self.0 = Some((now + after, hold));
    }

    /// When the step-down is due.
    pub(super) fn at(&self) -> Option<Instant> {
        self.0.map(|(at, _)| at)
    }

    /// It is due: the step-down, if we still lead (a term that ended
    /// meanwhile has nothing to hand over). Either way it is over.
    pub(super) fn due(&mut self, leading: bool) -> Option<Event> {
        let (_, hold) = self.0.take()?;
        leading.then_some(Event::StepDown {
            hold,
            reason: Reason::HandOverTo,
        })
    }
}

/// Not leader within `--wait`: the command never ran (EX_TEMPFAIL).
pub const EXIT_NOT_LEADER: i32 = 75;

/// Run-once mode (`--wait`): lead within the deadline and run the command
/// once, or give up.
#[derive(Debug)]
pub(super) struct Once {
    pub(super) deadline: Instant,
    /// An acquire has been answered (so `--wait 0` is one real try).
    pub(super) answered: bool,
    /// The command was started: from now on its exit ends the run.
    pub(super) started: bool,
}

impl Once {
    pub(super) fn new(now: Instant, wait: Duration) -> Once {
        Once {
            deadline: now + wait,
            answered: false,
            started: false,
        }
    }

    /// When the runner must wake to judge: once, at the deadline, while the
    /// command has not started (a deadline in the past would fire at every
    /// turn; an answer after it is judged as it comes).
    pub(super) fn wake(&self, now: Instant) -> Option<Instant> {
        (!self.started && self.deadline > now).then_some(self.deadline)
    }

    /// How the run ends, if the run-once outcome is known (once known,
    /// the runner stops asking).
    pub(super) fn verdict(
        &self,
        state: &State,
        shutdown_seen: bool,
        now: Instant,
    ) -> Option<OnceEnd> {
        if shutdown_seen {
            return None;
        }
        if !self.started {
            // An unhealthy worker never lets an acquire out: the deadline
            // alone decides then.
            let out_of_time = (self.answered || state.worker_unhealthy())
                && now >= self.deadline
                && state.leading().is_none()
                && state.name() != StateName::Acquiring;
            return out_of_time.then_some(OnceEnd::NotLeaderInTime);
        }
        (state.name() == StateName::Waiting).then_some(OnceEnd::LostWhileRunning)
    }
}

/// How a run-once ends before its command finished: its exit code, and
/// the line the runner logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OnceEnd {
    /// Not leader within `--wait`: the command never ran.
    NotLeaderInTime,
    /// The lease was lost while the command ran: it was stopped.
    LostWhileRunning,
}

impl OnceEnd {
    pub(super) fn code(self) -> i32 {
        match self {
            OnceEnd::NotLeaderInTime => EXIT_NOT_LEADER,
            OnceEnd::LostWhileRunning => 1,
        }
    }

    pub(super) fn log(self) {
        match self {
            OnceEnd::NotLeaderInTime => {
                tracing::info!("not leader within --wait: exiting without running the command")
            }
            OnceEnd::LostWhileRunning => tracing::error!(
                "the lease was lost while the command ran; it was stopped and is not run again"
            ),
        }
    }
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
