//! What a candidate that does not lead remembers ([`Standing`]): the
//! transitions for its worker's health and for being outranked, and the
//! one place a waiting candidate decides to campaign.

use super::step::{stay, to};
use super::*;

impl Machine {
    /// The worker's health changed (with health gating only; see
    /// [`HealthGate`]). A leader steps down and holds off; any other state
    /// remembers it; a waiting candidate whose worker is healthy again
    /// campaigns at once if its wait is over.
    pub(super) fn on_health(&self, state: &State, unhealthy: bool, now: Instant) -> Transition {
        use State as S;
        let Some(gate) = self.health else {
            return stay(state);
        };
        let reason = if unhealthy {
            Reason::WorkerUnhealthy
        } else {
            Reason::WorkerHealthy
        };
        let step_down = AfterPause::StepDown { hold: gate.hold };
        match *state {
            S::Working { lease } if unhealthy => {
                self.pause(Some(lease), Renewal::IDLE, step_down, reason, now)
            }
            S::Renewing { lease, renewal } if unhealthy => {
                self.pause(Some(lease), renewal, step_down, reason, now)
            }
            S::Waiting {
                until,
                hold,
                standing,
            } if !unhealthy && now >= until => {
                let standing = Standing {
                    unhealthy: false,
                    ..standing
                };
                self.campaign(standing, hold, reason, now)
            }
            _ => remember(state, reason, |s| s.unhealthy = unhealthy),
        }
    }

    /// Another candidate outranks this one, or no longer does (the
    /// registry, read every renew interval). Only remembered: it matters at
    /// the next vacancy ([`Machine::campaign`]); a leader that is outranked
    /// hands over by a step-down the runner decides.
    pub(super) fn on_outranked(&self, state: &State, outranked: u8) -> Transition {
        remember(state, Reason::Outranked, |s| s.outranked = outranked)
    }

    /// A waiting candidate whose wait is over, or that a release woke: it
    /// acquires, unless other candidates outrank it and it has not yet
    /// deferred (`held`: the wait that just ended was a hold-off, a deferral
    /// included). Then it defers at the vacancy: at once when a release woke
    /// it, else once a look ([`Action::Look`]) has found the lease vacant
    /// ([`Machine::on_vacant`]). A timer is no vacancy (on the lock file it
    /// is a poll every 200 ms): a deferral started by one could end just
    /// after a release, before the candidates above had tried.
    pub(super) fn campaign(
        &self,
        standing: Standing,
        held: bool,
        reason: Reason,
        now: Instant,
    ) -> Transition {
        if standing.outranked > 0 && !held {
            if reason == Reason::ReleaseNotified {
                return self.defer(standing, now);
            }
            return to(State::looking(standing), &[Action::Look], reason);
        }
        // An outranked standby's looks after its deferrals are routine.
        let reason = if standing.outranked > 0 && reason == Reason::HoldOver {
            Reason::RetryDue
        } else {
            reason
        };
        to(State::acquiring(standing), &[Action::Acquire], reason)
    }

    /// A look found the lease vacant. An outranked candidate defers; one
    /// no longer outranked (the registry changed meanwhile) acquires; one
    /// whose worker turned unhealthy meanwhile waits for it.
    pub(super) fn on_vacant(&self, standing: Standing, now: Instant) -> Transition {
        if standing.unhealthy {
            return to(
                State::waiting(now, false, standing),
                &[],
                Reason::WorkerUnhealthy,
            );
        }
        if standing.outranked > 0 {
            return self.defer(standing, now);
        }
        to(
            State::acquiring(standing),
            &[Action::Acquire],
            Reason::Vacant,
        )
    }

    /// Holds off once, a retry interval for each candidate above, so they,
    /// woken by the same vacancy, take the lease first, the highest first;
    /// if they are gone (a crashed leader's record lingers up to a TTL),
    /// this one campaigns after them. Bounded: a deferral is a hold-off,
    /// and a hold-off's end acquires.
    fn defer(&self, standing: Standing, now: Instant) -> Transition {
        let until = now + self.timing.retry_interval * u32::from(standing.outranked);
        to(
            State::waiting(until, true, standing),
            &[Action::StepAside],
            Reason::Deferred,
        )
    }
}

/// `state` with its standing changed by `change`; states that carry none
/// (idle, leading) stay as they are.
fn remember(state: &State, reason: Reason, change: impl FnOnce(&mut Standing)) -> Transition {
    let mut next = *state;
    match &mut next {
        State::Acquiring { standing, .. }
        | State::Pausing { standing, .. }
        | State::Releasing { standing, .. }
        | State::Waiting { standing, .. } => {
            let before = *standing;
            change(standing);
            if *standing == before {
                return stay(state);
            }
            to(next, &[], reason)
        }
        _ => stay(state),
    }
}
