//! The transitions on the way out of leading: pausing (the work stops
//! before the lease may go), a shutdown request in every state, and the
//! states that lead only to the exit.

use super::step::{stay, to};
use super::*;

impl Machine {
    /// The table of the states that lead only to the exit (see
    /// [`State::exiting`]): an outstanding acquire is answered with a release,
    /// the work is stopped and the lease released; nothing else.
    pub(super) fn step_exiting(&self, state: &State, event: Event, now: Instant) -> Transition {
        use Event as E;
        use State as S;
        match (*state, event) {
            // A look took nothing: there is nothing to give back.
            (
                S::Acquiring { looking: true, .. },
                E::Vacant | E::Refused { .. } | E::AcquireFailed { .. },
            ) => to(S::Idle, &[Action::Exit], Reason::Shutdown),
            (
                S::Acquiring { .. },
                E::Acquired { .. } | E::Refused { .. } | E::AcquireFailed { .. },
            ) => {
                // Release even after a refusal or failure: a timed-out acquire may
                // have succeeded, and the release is owner-checked.
                to(
                    S::Releasing {
                        after: AfterRelease::Exit,
                        standing: Standing::CLEAR,
                    },
                    &[Action::Release],
                    Reason::Shutdown,
                )
            }
            (S::Pausing { .. }, event) => self.pausing(state, event, now),
            (S::Releasing { .. }, E::Released) => to(S::Idle, &[Action::Exit], Reason::Released),
            _ => stay(state),
        }
    }

    pub(super) fn pausing(&self, state: &State, event: Event, now: Instant) -> Transition {
        let State::Pausing {
            lease,
            renewal,
            stop_started,
            kill_at,
            after,
            standing,
        } = *state
        else {
            return stay(state);
        };
        let keep_renewing = after == AfterPause::Release { exit: true };
        let with = |lease: Option<Lease>, renewal: Renewal, kill_at: Instant| State::Pausing {
            lease,
            renewal,
            stop_started,
            kill_at,
            after,
            standing,
        };
        match (event, lease) {
            (Event::WorkStopped, _) => match after {
                AfterPause::Release { exit } => {
                    let after = if exit {
                        AfterRelease::Exit
                    } else {
                        AfterRelease::Wait
                    };
                    to(
                        State::Releasing { after, standing },
                        &[Action::Release],
                        Reason::WorkStopped,
                    )
                }
                AfterPause::StepDown { hold } => to(
                    State::Releasing {
                        after: AfterRelease::Hold { hold },
                        standing,
                    },
                    &[Action::Release],
                    Reason::WorkStopped,
                ),
                AfterPause::Wait => to(
                    State::waiting(now + self.timing.retry_interval, false, standing),
                    &[],
                    Reason::WorkStopped,
                ),
            },
            (Event::Tick, Some(held)) if keep_renewing => {
                if now >= self.renew_deadline(&held) {
                    to(
                        with(None, Renewal::IDLE, kill_at),
                        &[],
                        Reason::RenewDeadlinePassed,
                    )
                } else if !renewal.in_flight
                    && now >= renewal.retry_at.unwrap_or(self.renew_due(&held))
                {
                    to(
                        with(lease, Renewal::IN_FLIGHT, kill_at),
                        &[Action::Renew],
                        Reason::RenewDue,
                    )
                } else {
                    stay(state)
                }
            }
            (Event::Renewed { sent_at }, Some(held)) if renewal.in_flight => {
                let held = Lease {
                    sent_at: sent_at.max(held.sent_at),
                    ..held
                };
                let moved = (stop_started + self.stop_timeout).min(self.kill_by(&held));
                let actions: &[Action] = if moved != kill_at {
                    &[Action::StopWork { kill_at: moved }]
                } else {
                    &[]
                };
                to(
                    with(Some(held), Renewal::IDLE, moved),
                    actions,
                    Reason::Renewed,
                )
            }
            (Event::RenewFailed, Some(_)) if renewal.in_flight => {
                let renewal = Renewal {
                    in_flight: false,
                    retry_at: Some(now + self.timing.renew_retry_delay()),
                };
                to(with(lease, renewal, kill_at), &[], Reason::RenewFailed)
            }
            (Event::Renewed { .. } | Event::RenewFailed, _) => {
                to(with(lease, Renewal::IDLE, kill_at), &[], Reason::Ignored)
            }
            (Event::Lost, _) => to(with(None, Renewal::IDLE, kill_at), &[], Reason::LeaseLost),
            _ => stay(state),
        }
    }

    pub(super) fn on_shutdown(&self, state: &State, now: Instant) -> Transition {
        use State as S;
        let reason = Reason::Shutdown;
        match *state {
            S::Idle => to(S::Idle, &[Action::Exit], reason),
            S::Acquiring {
                looking, standing, ..
            } => to(
                S::Acquiring {
                    shutdown: true,
                    notified: false,
                    looking,
                    standing,
                },
                &[],
                reason,
            ),
            S::Working { lease } => self.pause(
                Some(lease),
                Renewal::IDLE,
                AfterPause::Release { exit: true },
                reason,
                now,
            ),
            S::Renewing { lease, renewal } => self.pause(
                Some(lease),
                renewal,
                AfterPause::Release { exit: true },
                reason,
                now,
            ),
            S::Pausing {
                lease,
                renewal,
                stop_started,
                kill_at,
                standing,
                ..
            } => {
                let sooner = kill_at.min(now + self.stop_timeout);
                let actions: &[Action] = if sooner != kill_at {
                    &[Action::StopWork { kill_at: sooner }]
                } else {
                    &[]
                };
                let after = AfterPause::Release { exit: true };
                to(
                    S::Pausing {
                        lease,
                        renewal,
                        stop_started,
                        kill_at: sooner,
                        after,
                        standing,
                    },
                    actions,
                    reason,
                )
            }
            S::Releasing { standing, .. } => to(
                S::Releasing {
                    after: AfterRelease::Exit,
                    standing,
                },
                &[],
                reason,
            ),
            S::Waiting { standing, .. } => to(
                S::Releasing {
                    after: AfterRelease::Exit,
                    standing,
                },
                &[Action::Release],
                reason,
            ),
        }
    }
}
