//! The transition function and the timer it asks for.

use super::*;

pub(super) fn to(next: State, actions: &[Action], reason: Reason) -> Transition {
    Transition {
        next,
        actions: actions.to_vec(),
        reason,
    }
}

pub(super) fn stay(state: &State) -> Transition {
    to(*state, &[], Reason::Ignored)
}

/// Added to a holder's remaining time, so the next look finds the key gone
/// rather than in its last millisecond.
const EXPIRY_SLACK: Duration = Duration::from_millis(1);

impl Machine {
    /// How long to back off after a backend error: the retry interval, and for
    /// errors only a person can fix (auth, permissions) at least 10 s, so a
    /// misconfiguration is loud in the logs but never a hot loop.
    pub fn backoff(&self, misconfigured: bool) -> Duration {
        if misconfigured {
            self.timing.refused_backoff()
        } else {
            self.timing.retry_interval
        }
    }

    pub(super) fn renew_due(&self, lease: &Lease) -> Instant {
        lease.sent_at + self.timing.renew_interval
    }

    pub(super) fn renew_deadline(&self, lease: &Lease) -> Instant {
        lease.sent_at + self.timing.renew_deadline
    }

    pub(super) fn kill_by(&self, lease: &Lease) -> Instant {
        self.timing.kill_by(self.timing.validity_end(lease.sent_at))
    }

    /// Start stopping the work.
    pub(super) fn pause(
        &self,
        lease: Option<Lease>,
        renewal: Renewal,
        after: AfterPause,
        reason: Reason,
        now: Instant,
    ) -> Transition {
        // Leading implies a healthy worker; only a step-down for health
        // pauses with the flag set (see `on_health`).
        let standing = Standing {
            unhealthy: reason == Reason::WorkerUnhealthy,
            outranked: 0,
        };
        let graceful = now + self.stop_timeout;
        let kill_at = lease
            .map_or(now, |l| graceful.min(self.kill_by(&l)))
            .min(graceful);
        let next = State::Pausing {
            lease,
            renewal,
            stop_started: now,
            kill_at,
            after,
            standing,
        };
        to(next, &[Action::StopWork { kill_at }], reason)
    }

    /// The instant by which the work must be dead whatever leaderd does
    /// next (the guard's dead-man's switch, see `work::guard`): the kill-by
    /// instant of the lease while leading, the stop's kill deadline while
    /// pausing. `None` where no work runs.
    pub fn work_deadline(&self, state: &State) -> Option<Instant> {
        match state {
            State::Working { lease } | State::Renewing { lease, .. } => Some(self.kill_by(lease)),
            State::Pausing { kill_at, .. } => Some(*kill_at),
            _ => None,
        }
    }

    /// The next instant at which a [`Event::Tick`] may change something:
    /// the next renewal try or the renew deadline while the lease is kept,
    /// the end of a wait.
    pub fn next_deadline(&self, state: &State) -> Option<Instant> {
        let (lease, next_try) = match state {
            State::Working { lease } => (lease, Some(self.renew_due(lease))),
            State::Renewing { lease, renewal } => {
                (lease, renewal.retry_at.filter(|_| !renewal.in_flight))
            }
            State::Pausing {
                lease: Some(lease),
                renewal,
                after: AfterPause::Release { exit: true },
                ..
            } => {
                let next_try = renewal.retry_at.unwrap_or(self.renew_due(lease));
                (lease, Some(next_try).filter(|_| !renewal.in_flight))
            }
            // Unhealthy: nothing is due until the worker is healthy again.
            State::Waiting {
                standing: Standing {
                    unhealthy: true, ..
                },
                ..
            } => return None,
            State::Waiting { until, .. } => return Some(*until),
            _ => return None,
        };
        let deadline = self.renew_deadline(lease);
        Some(next_try.map_or(deadline, |t| t.min(deadline)))
    }

    /// The transition for `event` in `state` at `now`. Never panics; an event
    /// that does not apply leaves the state as it is.
    pub fn step(&self, state: &State, event: Event, now: Instant) -> Transition {
        use Event as E;
        use State as S;
        if event == E::ShutdownRequested {
            return self.on_shutdown(state, now);
        }
        if state.exiting() {
            // On the way out nothing may acquire or start work, whatever
            // arrives: these states have their own, short, table.
            return self.step_exiting(state, event, now);
        }
        match (*state, event) {
            (S::Idle, E::Started) => match self.health {
                Some(gate) if gate.wait_for_first_check => to(
                    S::waiting(now, false, Standing::UNHEALTHY),
                    &[],
                    Reason::FirstHealthCheck,
                ),
                _ => to(
                    S::acquiring(Standing::CLEAR),
                    &[Action::Acquire],
                    Reason::Start,
                ),
            },
            (_, E::WorkerHealthy) => self.on_health(state, false, now),
            (_, E::WorkerUnhealthy) => self.on_health(state, true, now),
            (_, E::Outranked(outranked)) => self.on_outranked(state, outranked),

            (
                S::Acquiring {
                    standing:
                        Standing {
                            unhealthy: true, ..
                        },
                    ..
                },
                E::Acquired { .. },
            ) => to(
                // The worker turned unhealthy meanwhile: never work on it.
                S::Releasing {
                    after: AfterRelease::Wait,
                    standing: Standing::UNHEALTHY,
                },
                &[Action::Release],
                Reason::WorkerUnhealthy,
            ),
            (
                S::Acquiring { .. },
                E::Acquired {
                    fencing_token,
                    sent_at,
                },
            ) => {
                let lease = Lease {
                    fencing_token,
                    sent_at,
                };
                if now >= self.renew_deadline(&lease) {
                    // Answered so late that the lease is nearly spent: never start
                    // work on it; hand it back.
                    return to(
                        S::Releasing {
                            after: AfterRelease::Wait,
                            standing: Standing::CLEAR,
                        },
                        &[Action::Release],
                        Reason::RenewDeadlinePassed,
                    );
                }
                to(
                    S::Working { lease },
                    &[Action::StartWork { fencing_token }],
                    Reason::Acquired,
                )
            }
            (
                S::Acquiring {
                    notified: true,
                    standing,
                    ..
                },
                E::Refused { .. },
            ) => to(S::waiting(now, false, standing), &[], Reason::HeldByOther),
            (
                S::Acquiring {
                    looking, standing, ..
                },
                E::ReleaseNotified,
            ) => to(
                S::Acquiring {
                    shutdown: false,
                    notified: true,
                    looking,
                    standing,
                },
                &[],
                Reason::ReleaseNotified,
            ),
            (S::Acquiring { standing, .. }, E::Refused { expires_in }) => {
                // Look again when the holder's lease would expire: a holder that
                // renews has pushed that out by then, and we simply look again.
                // A release wakes us sooner (`ReleaseNotified`). Without a known
                // expiry, poll at the retry interval.
                let wait = expires_in.map_or(self.timing.retry_interval, |e| e + EXPIRY_SLACK);
                to(
                    S::waiting(now + wait, false, standing),
                    &[],
                    Reason::HeldByOther,
                )
            }
            (
                S::Acquiring {
                    looking: true,
                    standing,
                    ..
                },
                E::Vacant,
            ) => self.on_vacant(standing, now),
            (S::Acquiring { standing, .. }, E::AcquireFailed { misconfigured }) => to(
                S::waiting(now + self.backoff(misconfigured), false, standing),
                &[],
                Reason::BackendError,
            ),

            (S::Working { lease }, E::Tick) => self.tick_leading(
                state,
                lease,
                Renewal::IDLE,
                Some(self.renew_due(&lease)),
                now,
            ),
            // A release announced while we lead: the key we hold changed
            // (revoked, deleted, taken) or it is a catch-up wake-up; either
            // way, check now rather than at the next renewal, so a lease
            // taken away stops the work at once.
            (S::Working { lease }, E::ReleaseNotified) => to(
                S::Renewing {
                    lease,
                    renewal: Renewal::IN_FLIGHT,
                },
                &[Action::Renew],
                Reason::ReleaseNotified,
            ),
            (S::Renewing { lease, renewal }, E::Tick) => {
                let next_try = if renewal.in_flight {
                    None
                } else {
                    renewal.retry_at
                };
                self.tick_leading(state, lease, renewal, next_try, now)
            }
            (S::Renewing { lease, renewal }, E::Renewed { sent_at }) if renewal.in_flight => {
                let lease = Lease {
                    sent_at: sent_at.max(lease.sent_at),
                    ..lease
                };
                to(S::Working { lease }, &[], Reason::Renewed)
            }
            (S::Renewing { lease, renewal }, E::RenewFailed) if renewal.in_flight => {
                let renewal = Renewal {
                    in_flight: false,
                    retry_at: Some(now + self.timing.renew_retry_delay()),
                };
                to(S::Renewing { lease, renewal }, &[], Reason::RenewFailed)
            }
            (S::Renewing { lease, .. }, E::Lost) => self
                .pause(
                    Some(lease),
                    Renewal::IDLE,
                    AfterPause::Wait,
                    Reason::LeaseLost,
                    now,
                )
                .with_lease(None),

            (S::Working { lease }, E::WorkExited { exit }) => self.pause(
                Some(lease),
                Renewal::IDLE,
                AfterPause::Release { exit },
                Reason::ChildExited,
                now,
            ),
            (S::Renewing { lease, renewal }, E::WorkExited { exit }) => self.pause(
                Some(lease),
                renewal,
                AfterPause::Release { exit },
                Reason::ChildExited,
                now,
            ),

            (S::Working { lease }, E::StepDown { hold, reason }) => self.pause(
                Some(lease),
                Renewal::IDLE,
                AfterPause::StepDown { hold },
                reason,
                now,
            ),
            (S::Renewing { lease, renewal }, E::StepDown { hold, reason }) => self.pause(
                Some(lease),
                renewal,
                AfterPause::StepDown { hold },
                reason,
                now,
            ),

            (S::Pausing { .. }, event) => self.pausing(state, event, now),

            (S::Releasing { after, standing }, E::Released) => match after {
                AfterRelease::Exit => to(S::Idle, &[Action::Exit], Reason::Released),
                AfterRelease::Hold { hold } => to(
                    S::waiting(now + hold, true, standing),
                    &[],
                    Reason::Released,
                ),
                AfterRelease::Wait => to(
                    S::waiting(now + self.timing.retry_interval, false, standing),
                    &[],
                    Reason::Released,
                ),
            },

            (
                S::Waiting {
                    until,
                    hold,
                    standing,
                },
                E::Tick,
            ) if now >= until && !standing.unhealthy => {
                let reason = if hold {
                    Reason::HoldOver
                } else {
                    Reason::RetryDue
                };
                self.campaign(standing, hold, reason, now)
            }
            (
                S::Waiting {
                    hold: false,
                    standing,
                    ..
                },
                E::ReleaseNotified,
            ) if !standing.unhealthy => {
                self.campaign(standing, false, Reason::ReleaseNotified, now)
            }

            _ => stay(state),
        }
    }

    /// A timer while leading: step down at the renew deadline, else renew
    /// when the next try is due.
    fn tick_leading(
        &self,
        state: &State,
        lease: Lease,
        renewal: Renewal,
        next_try: Option<Instant>,
        now: Instant,
    ) -> Transition {
        if now >= self.renew_deadline(&lease) {
            let after = AfterPause::Release { exit: false };
            self.pause(
                Some(lease),
                renewal,
                after,
                Reason::RenewDeadlinePassed,
                now,
            )
        } else if next_try.is_some_and(|t| now >= t) {
            let renewing = State::Renewing {
                lease,
                renewal: Renewal::IN_FLIGHT,
            };
            to(renewing, &[Action::Renew], Reason::RenewDue)
        } else {
            stay(state)
        }
    }
}

impl State {
    /// Campaigning, with nothing else pending.
    pub(crate) const fn acquiring(standing: Standing) -> State {
        State::Acquiring {
            shutdown: false,
            notified: false,
            looking: false,
            standing,
        }
    }

    /// Looking at the lease, with nothing else pending.
    pub(crate) const fn looking(standing: Standing) -> State {
        State::Acquiring {
            shutdown: false,
            notified: false,
            looking: true,
            standing,
        }
    }

    pub(crate) const fn waiting(until: Instant, hold: bool, standing: Standing) -> State {
        State::Waiting {
            until,
            hold,
            standing,
        }
    }
}

impl Transition {
    /// Replaces the lease a `Pausing` state keeps (used when it was lost).
    fn with_lease(mut self, new: Option<Lease>) -> Self {
        if let State::Pausing { lease, .. } = &mut self.next {
            *lease = new;
        }
        self
    }
}
