//! The machine, tested as a table and as a sweep over every state × event.

use super::*;

const MS: Duration = Duration::from_millis(1);

pub(super) const OUTRANKED: Standing = Standing {
    unhealthy: false,
    outranked: 1,
};

pub(super) fn machine() -> Machine {
    Machine {
        timing: Timing::default(), // ttl 10s, renew 3.333s, deadline 6.666s, retry 2s
        stop_timeout: Duration::from_secs(10),
        health: Some(HealthGate {
            wait_for_first_check: false,
            hold: Duration::from_secs(6),
        }),
    }
}

pub(super) fn lease(t0: Instant) -> Lease {
    Lease {
        fencing_token: 7,
        sent_at: t0,
    }
}

/// One state of every kind, with the variants that matter.
pub(super) fn states(t0: Instant) -> Vec<State> {
    let l = lease(t0);
    let pausing = |lease, after| State::Pausing {
        lease,
        renewal: Renewal::IDLE,
        stop_started: t0,
        kill_at: t0 + 9 * MS,
        after,
        standing: Standing::CLEAR,
    };
    vec![
        State::Idle,
        State::Acquiring {
            shutdown: false,
            notified: false,
            standing: Standing::CLEAR,
        },
        State::Acquiring {
            shutdown: true,
            notified: false,
            standing: Standing::CLEAR,
        },
        State::Working { lease: l },
        State::Renewing {
            lease: l,
            renewal: Renewal::IN_FLIGHT,
        },
        State::Renewing {
            lease: l,
            renewal: Renewal {
                in_flight: false,
                retry_at: Some(t0 + 4000 * MS),
            },
        },
        pausing(Some(l), AfterPause::Release { exit: true }),
        pausing(Some(l), AfterPause::Release { exit: false }),
        pausing(None, AfterPause::Wait),
        pausing(
            Some(l),
            AfterPause::StepDown {
                hold: Duration::from_secs(30),
            },
        ),
        State::Releasing {
            after: AfterRelease::Exit,
            standing: Standing::CLEAR,
        },
        State::Releasing {
            after: AfterRelease::Hold {
                hold: Duration::from_secs(30),
            },
            standing: Standing::CLEAR,
        },
        State::Releasing {
            after: AfterRelease::Wait,
            standing: Standing::CLEAR,
        },
        State::Waiting {
            until: t0 + 1000 * MS,
            hold: false,
            standing: Standing::CLEAR,
        },
        State::Waiting {
            until: t0 + 1000 * MS,
            hold: true,
            standing: Standing::CLEAR,
        },
        // Outranked: waiting, and deferring.
        State::waiting(t0 + 1000 * MS, false, OUTRANKED),
        State::waiting(t0 + 1000 * MS, true, OUTRANKED),
        // The worker is unhealthy: campaigning, stepping down, held off.
        State::acquiring(Standing::UNHEALTHY),
        State::Pausing {
            lease: Some(l),
            renewal: Renewal::IDLE,
            stop_started: t0,
            kill_at: t0 + 9 * MS,
            after: AfterPause::StepDown {
                hold: Duration::from_secs(6),
            },
            standing: Standing::UNHEALTHY,
        },
        State::Releasing {
            after: AfterRelease::Wait,
            standing: Standing::UNHEALTHY,
        },
        State::waiting(t0 + 1000 * MS, false, Standing::UNHEALTHY),
        State::waiting(t0 + 1000 * MS, true, Standing::UNHEALTHY),
    ]
}

pub(super) fn events(t0: Instant) -> Vec<Event> {
    vec![
        Event::Started,
        Event::Tick,
        Event::Acquired {
            fencing_token: 8,
            sent_at: t0,
        },
        Event::Refused {
            expires_in: Some(Duration::from_secs(5)),
        },
        Event::Refused { expires_in: None },
        Event::AcquireFailed {
            misconfigured: false,
        },
        Event::AcquireFailed {
            misconfigured: true,
        },
        Event::Renewed {
            sent_at: t0 + 3400 * MS,
        },
        Event::RenewFailed,
        Event::Lost,
        Event::Released,
        Event::WorkStopped,
        Event::WorkExited { exit: false },
        Event::WorkExited { exit: true },
        Event::ReleaseNotified,
        Event::StepDown {
            hold: Duration::from_secs(30),
            reason: Reason::StepDownRequested,
        },
        Event::WorkerHealthy,
        Event::WorkerUnhealthy,
        Event::Outranked(1),
        Event::Outranked(2),
        Event::Outranked(0),
        Event::ShutdownRequested,
    ]
}

pub(super) fn names(actions: &[Action]) -> Vec<&'static str> {
    actions
        .iter()
        .map(|a| match a {
            Action::Acquire => "acquire",
            Action::Renew => "renew",
            Action::Release => "release",
            Action::StartWork { .. } => "start",
            Action::StopWork { .. } => "stop",
            Action::Exit => "exit",
            Action::StepAside => "step aside",
        })
        .collect()
}

#[test]
fn transition_table() {
    let m = machine();
    let t0 = Instant::now();
    let l = lease(t0);
    let cases: Vec<(State, Event, Duration, StateName, Vec<&str>)> = vec![
        (
            State::Idle,
            Event::Started,
            Duration::ZERO,
            StateName::Acquiring,
            vec!["acquire"],
        ),
        (
            State::Acquiring {
                shutdown: false,
                notified: false,
                standing: Standing::CLEAR,
            },
            Event::Acquired {
                fencing_token: 7,
                sent_at: t0,
            },
            5 * MS,
            StateName::Working,
            vec!["start"],
        ),
        (
            State::Acquiring {
                shutdown: false,
                notified: false,
                standing: Standing::CLEAR,
            },
            Event::Refused {
                expires_in: Some(Duration::from_secs(1)),
            },
            Duration::ZERO,
            StateName::Waiting,
            vec![],
        ),
        (
            State::Acquiring {
                shutdown: false,
                notified: false,
                standing: Standing::CLEAR,
            },
            Event::AcquireFailed {
                misconfigured: false,
            },
            Duration::ZERO,
            StateName::Waiting,
            vec![],
        ),
        (
            State::Acquiring {
                shutdown: true,
                notified: false,
                standing: Standing::CLEAR,
            },
            Event::Acquired {
                fencing_token: 7,
                sent_at: t0,
            },
            5 * MS,
            StateName::Releasing,
            vec!["release"],
        ),
        (
            State::Working { lease: l },
            Event::Tick,
            1000 * MS,
            StateName::Working,
            vec![],
        ),
        (
            State::Working { lease: l },
            Event::Tick,
            3333 * MS,
            StateName::Renewing,
            vec!["renew"],
        ),
        (
            State::Working { lease: l },
            Event::Tick,
            6666 * MS,
            StateName::Pausing,
            vec!["stop"],
        ),
        (
            State::Renewing {
                lease: l,
                renewal: Renewal::IN_FLIGHT,
            },
            Event::Renewed {
                sent_at: t0 + 3333 * MS,
            },
            3340 * MS,
            StateName::Working,
            vec![],
        ),
        (
            State::Renewing {
                lease: l,
                renewal: Renewal::IN_FLIGHT,
            },
            Event::RenewFailed,
            3840 * MS,
            StateName::Renewing,
            vec![],
        ),
        (
            State::Renewing {
                lease: l,
                renewal: Renewal::IN_FLIGHT,
            },
            Event::Lost,
            3340 * MS,
            StateName::Pausing,
            vec!["stop"],
        ),
        (
            State::Renewing {
                lease: l,
                renewal: Renewal::IN_FLIGHT,
            },
            Event::Tick,
            6666 * MS,
            StateName::Pausing,
            vec!["stop"],
        ),
        (
            State::Releasing {
                after: AfterRelease::Exit,
                standing: Standing::CLEAR,
            },
            Event::Released,
            Duration::ZERO,
            StateName::Idle,
            vec!["exit"],
        ),
        (
            State::Releasing {
                after: AfterRelease::Wait,
                standing: Standing::CLEAR,
            },
            Event::Released,
            Duration::ZERO,
            StateName::Waiting,
            vec![],
        ),
        (
            State::Waiting {
                until: t0 + 1000 * MS,
                hold: false,
                standing: Standing::CLEAR,
            },
            Event::Tick,
            999 * MS,
            StateName::Waiting,
            vec![],
        ),
        (
            State::Waiting {
                until: t0 + 1000 * MS,
                hold: false,
                standing: Standing::CLEAR,
            },
            Event::Tick,
            1000 * MS,
            StateName::Acquiring,
            vec!["acquire"],
        ),
        (
            State::Waiting {
                until: t0 + 1000 * MS,
                hold: false,
                standing: Standing::CLEAR,
            },
            Event::ReleaseNotified,
            10 * MS,
            StateName::Acquiring,
            vec!["acquire"],
        ),
        (
            State::Waiting {
                until: t0,
                hold: false,
                standing: Standing::CLEAR,
            },
            Event::ShutdownRequested,
            Duration::ZERO,
            StateName::Releasing,
            vec!["release"],
        ),
        (
            State::Idle,
            Event::ShutdownRequested,
            Duration::ZERO,
            StateName::Idle,
            vec!["exit"],
        ),
        (
            State::Working { lease: l },
            Event::ShutdownRequested,
            Duration::ZERO,
            StateName::Pausing,
            vec!["stop"],
        ),
        (
            State::Working { lease: l },
            Event::Acquired {
                fencing_token: 9,
                sent_at: t0,
            },
            Duration::ZERO,
            StateName::Working,
            vec![],
        ),
    ];
    for (state, event, at, want_state, want_actions) in cases {
        let label = format!("{:?} + {event:?} at +{at:?}", state.name());
        let tr = m.step(&state, event, t0 + at);
        assert_eq!(tr.next.name(), want_state, "{label}");
        assert_eq!(names(&tr.actions), want_actions, "{label}");
    }
}

#[test]
fn refusal_waits_until_the_holders_lease_would_expire() {
    let m = machine();
    let t0 = Instant::now();
    let acquiring = State::Acquiring {
        shutdown: false,
        notified: false,
        standing: Standing::CLEAR,
    };
    let soon = m.step(
        &acquiring,
        Event::Refused {
            expires_in: Some(300 * MS),
        },
        t0,
    );
    assert_eq!(
        soon.next,
        State::Waiting {
            until: t0 + 301 * MS,
            hold: false,
            standing: Standing::CLEAR,
        }
    );
    let late = m.step(
        &acquiring,
        Event::Refused {
            expires_in: Some(Duration::from_secs(9)),
        },
        t0,
    );
    assert_eq!(
        late.next,
        State::Waiting {
            until: t0 + Duration::from_secs(9) + MS,
            hold: false,
            standing: Standing::CLEAR,
        },
        "no fixed poll"
    );
    let unknown = m.step(&acquiring, Event::Refused { expires_in: None }, t0);
    assert_eq!(
        unknown.next,
        State::Waiting {
            until: t0 + m.timing.retry_interval,
            hold: false,
            standing: Standing::CLEAR,
        }
    );
    let auth = m.step(
        &acquiring,
        Event::AcquireFailed {
            misconfigured: true,
        },
        t0,
    );
    assert_eq!(
        auth.next,
        State::Waiting {
            until: t0 + Duration::from_secs(10),
            hold: false,
            standing: Standing::CLEAR,
        },
        "auth errors are retried slowly"
    );
}

#[test]
fn renewal_does_not_restart_the_work() {
    let m = machine();
    let t0 = Instant::now();
    let mut state = m
        .step(
            &State::Acquiring {
                shutdown: false,
                notified: false,
                standing: Standing::CLEAR,
            },
            Event::Acquired {
                fencing_token: 1,
                sent_at: t0,
            },
            t0,
        )
        .next;
    let mut now = t0;
    for _ in 0..10 {
        now = m
            .next_deadline(&state)
            .expect("working has a renewal timer");
        let due = m.step(&state, Event::Tick, now);
        assert_eq!(
            (due.next.name(), names(&due.actions)),
            (StateName::Renewing, vec!["renew"])
        );
        let renewed = m.step(&due.next, Event::Renewed { sent_at: now }, now + 2 * MS);
        assert_eq!(
            (renewed.next.name(), names(&renewed.actions)),
            (StateName::Working, vec![])
        );
        state = renewed.next;
    }
    assert_eq!(
        state.leading().map(|l| (l.fencing_token, l.sent_at)),
        Some((1, now))
    );
}

#[test]
fn failed_renewals_retry_then_step_down_at_the_deadline() {
    let m = machine();
    let t0 = Instant::now();
    let mut state = State::Renewing {
        lease: lease(t0),
        renewal: Renewal::IN_FLIGHT,
    };
    let mut now = t0 + 3333 * MS;
    let mut renews = 0;
    loop {
        let failed = m.step(&state, Event::RenewFailed, now + 500 * MS);
        state = failed.next;
        now = m.next_deadline(&state).unwrap();
        let tick = m.step(&state, Event::Tick, now);
        state = tick.next;
        if state.name() == StateName::Pausing {
            assert_eq!(
                now,
                t0 + m.timing.renew_deadline,
                "steps down exactly at the deadline"
            );
            break;
        }
        assert_eq!(names(&tick.actions), vec!["renew"]);
        renews += 1;
    }
    assert!(
        renews >= 2,
        "several retries fit before the deadline, got {renews}"
    );
    let State::Pausing {
        kill_at,
        lease: Some(l),
        after,
        ..
    } = state
    else {
        panic!("{state:?}")
    };
    assert_eq!(
        after,
        AfterPause::Release { exit: false },
        "voluntary step-down releases, then waits"
    );
    assert!(kill_at <= m.timing.kill_by(m.timing.validity_end(l.sent_at)));
}

#[test]
fn lost_lease_goes_through_pausing_to_waiting() {
    let m = machine();
    let t0 = Instant::now();
    let working = State::Working { lease: lease(t0) };
    let mut now = t0 + 3333 * MS;
    let mut path = vec![working.name()];
    let mut state = m.step(&working, Event::Tick, now).next;
    path.push(state.name());
    let lost = m.step(&state, Event::Lost, now);
    let Some(Action::StopWork { kill_at }) = lost.actions.first().copied() else {
        panic!("{lost:?}")
    };
    assert!(kill_at <= t0 + m.timing.ttl - m.timing.drift() - m.timing.kill_margin());
    state = lost.next;
    path.push(state.name());
    now += 100 * MS;
    state = m.step(&state, Event::WorkStopped, now).next;
    path.push(state.name());
    assert_eq!(
        path,
        [
            StateName::Working,
            StateName::Renewing,
            StateName::Pausing,
            StateName::Waiting
        ]
    );
}

#[test]
fn shutdown_while_leading_keeps_renewing_until_the_work_stopped() {
    let m = Machine {
        stop_timeout: Duration::from_secs(30),
        ..machine()
    };
    let t0 = Instant::now();
    let tr = m.step(
        &State::Working { lease: lease(t0) },
        Event::ShutdownRequested,
        t0 + 100 * MS,
    );
    let State::Pausing { kill_at, .. } = tr.next else {
        panic!()
    };
    assert_eq!(
        kill_at,
        m.timing.kill_by(m.timing.validity_end(t0)),
        "kill clamped to the lease"
    );
    let due = m.next_deadline(&tr.next).unwrap();
    assert_eq!(due, t0 + m.timing.renew_interval);
    let tick = m.step(&tr.next, Event::Tick, due);
    assert_eq!(names(&tick.actions), vec!["renew"]);
    let renewed = m.step(&tick.next, Event::Renewed { sent_at: due }, due + 5 * MS);
    let State::Pausing { kill_at: moved, .. } = renewed.next else {
        panic!()
    };
    assert_eq!(
        moved,
        m.timing.kill_by(m.timing.validity_end(due)),
        "renewal moves the kill deadline"
    );
    assert_eq!(renewed.actions, vec![Action::StopWork { kill_at: moved }]);
    let stopped = m.step(&renewed.next, Event::WorkStopped, due + 10 * MS);
    assert_eq!(
        (stopped.next.name(), names(&stopped.actions)),
        (StateName::Releasing, vec!["release"])
    );
    let released = m.step(&stopped.next, Event::Released, due + 20 * MS);
    assert_eq!(names(&released.actions), vec!["exit"]);
}

/// A cooperative world: every request succeeds at once.
pub(super) fn answer(action: &Action, now: Instant) -> Option<Event> {
    match action {
        Action::Acquire => Some(Event::Acquired {
            fencing_token: 99,
            sent_at: now,
        }),
        Action::Renew => Some(Event::Renewed { sent_at: now }),
        Action::Release => Some(Event::Released),
        Action::StopWork { .. } => Some(Event::WorkStopped),
        Action::StartWork { .. } | Action::Exit | Action::StepAside => None,
    }
}

#[test]
fn every_state_handles_shutdown_and_ends_released() {
    let m = machine();
    let t0 = Instant::now();
    for start in states(t0) {
        let mut now = t0 + 10 * MS;
        let mut state = start;
        let mut queue = vec![Event::ShutdownRequested];
        // Outstanding requests in the start state answer first.
        match start {
            State::Acquiring { .. } => queue.push(Event::Acquired {
                fencing_token: 99,
                sent_at: now,
            }),
            State::Renewing {
                renewal: Renewal {
                    in_flight: true, ..
                },
                ..
            } => queue.push(Event::Renewed { sent_at: now }),
            State::Releasing { .. } => queue.push(Event::Released),
            State::Pausing { .. } => queue.push(Event::WorkStopped),
            _ => {}
        }
        let mut done = Vec::new();
        let mut exited = false;
        for _ in 0..20 {
            let Some(event) = (if queue.is_empty() {
                None
            } else {
                Some(queue.remove(0))
            }) else {
                break;
            };
            let tr = m.step(&state, event, now);
            for a in &tr.actions {
                assert!(
                    !matches!(a, Action::StartWork { .. }),
                    "{start:?}: no work starts during shutdown"
                );
                done.push(names(std::slice::from_ref(a))[0]);
                exited |= *a == Action::Exit;
                queue.extend(answer(a, now));
            }
            state = tr.next;
            now += MS;
        }
        assert!(exited, "{start:?} never exited: {done:?}");
        // Idle holds nothing; Releasing has its release in flight already.
        let holds = !matches!(start, State::Idle | State::Releasing { .. });
        if holds {
            let release = done.iter().position(|a| *a == "release");
            assert!(
                release.is_some_and(|r| r < done.len() - 1),
                "{start:?}: release before exit: {done:?}"
            );
        }
        if let Some(stop) = done.iter().position(|a| *a == "stop") {
            assert!(
                stop < done.iter().position(|a| *a == "release").unwrap(),
                "{start:?}: stop before release: {done:?}"
            );
        }
    }
}

#[test]
fn sweep_invariants_over_every_state_and_event() {
    let m = machine();
    let t0 = Instant::now();
    for state in states(t0) {
        for event in events(t0) {
            for at in [0, 1000, 3333, 4000, 6666, 9000, 12000] {
                let now = t0 + at * MS;
                let tr = m.step(&state, event.clone(), now);
                let label = format!(
                    "{state:?} + {event:?} at +{at}ms → {:?} {:?}",
                    tr.next, tr.actions
                );
                // Work starts only on a fresh acquisition, into working, with its token.
                for a in &tr.actions {
                    if let Action::StartWork { fencing_token } = a {
                        let Some(lease) = tr.next.leading() else {
                            panic!("start without a lease: {label}")
                        };
                        assert_eq!(*fencing_token, lease.fencing_token, "{label}");
                        assert!(now < m.timing.validity_end(lease.sent_at), "{label}");
                        assert!(matches!(event, Event::Acquired { .. }), "{label}");
                    }
                }
                // Entering working from elsewhere always starts the work.
                if tr.next.name() == StateName::Working && state.leading().is_none() {
                    assert!(
                        tr.actions
                            .iter()
                            .any(|a| matches!(a, Action::StartWork { .. })),
                        "{label}"
                    );
                }
                // Every kill deadline fits inside the lease we last held.
                if let State::Pausing {
                    kill_at,
                    lease: Some(l),
                    ..
                } = tr.next
                {
                    assert!(
                        kill_at <= m.timing.kill_by(m.timing.validity_end(l.sent_at)),
                        "{label}"
                    );
                }
                // Never leading past the renew deadline.
                if let Some(l) = tr.next.leading() {
                    assert!(
                        now < l.sent_at + m.timing.renew_deadline || event != Event::Tick,
                        "{label}"
                    );
                }
            }
        }
    }
}

#[test]
fn child_exit_policies_release_then_wait_or_exit() {
    let m = machine();
    let t0 = Instant::now();
    for (exit, last) in [(false, StateName::Waiting), (true, StateName::Idle)] {
        let paused = m.step(
            &State::Working { lease: lease(t0) },
            Event::WorkExited { exit },
            t0 + 10 * MS,
        );
        assert_eq!(paused.reason, Reason::ChildExited);
        let releasing = m.step(&paused.next, Event::WorkStopped, t0 + 20 * MS);
        assert_eq!(names(&releasing.actions), vec!["release"]);
        let done = m.step(&releasing.next, Event::Released, t0 + 30 * MS);
        assert_eq!(done.next.name(), last);
        assert_eq!(done.actions.contains(&Action::Exit), exit);
    }
}

#[test]
fn a_release_announced_during_an_acquire_is_not_missed() {
    let m = machine();
    let t0 = Instant::now();
    let acquiring = State::Acquiring {
        shutdown: false,
        notified: false,
        standing: Standing::CLEAR,
    };
    let notified = m.step(&acquiring, Event::ReleaseNotified, t0);
    assert_eq!(
        notified.next,
        State::Acquiring {
            shutdown: false,
            notified: true,
            standing: Standing::CLEAR,
        }
    );
    let refused = m.step(
        &notified.next,
        Event::Refused {
            expires_in: Some(Duration::from_secs(9)),
        },
        t0 + MS,
    );
    assert_eq!(
        refused.next,
        State::Waiting {
            until: t0 + MS,
            hold: false,
            standing: Standing::CLEAR,
        },
        "looks again at once, not in 9s"
    );
}

#[test]
fn a_step_down_stops_the_work_releases_and_holds_off() {
    let m = machine();
    let t0 = Instant::now();
    let hold = Duration::from_secs(30);
    let step_down = Event::StepDown {
        hold,
        reason: Reason::StepDownRequested,
    };
    let tr = m.step(&State::Working { lease: lease(t0) }, step_down.clone(), t0);
    assert_eq!(tr.next.name(), StateName::Pausing);
    assert_eq!(names(&tr.actions), ["stop"]);
    let tr = m.step(&tr.next, Event::WorkStopped, t0 + MS);
    assert_eq!(
        (tr.next, names(&tr.actions)),
        (
            State::Releasing {
                after: AfterRelease::Hold { hold },
                standing: Standing::CLEAR,
            },
            vec!["release"]
        )
    );
    let tr = m.step(&tr.next, Event::Released, t0 + 2 * MS);
    let held = State::Waiting {
        until: t0 + 2 * MS + hold,
        hold: true,
        standing: Standing::CLEAR,
    };
    assert_eq!(tr.next, held);
    // Held off: a release wake-up and early ticks do nothing.
    for event in [Event::ReleaseNotified, Event::Tick] {
        let tr = m.step(&held, event, t0 + Duration::from_secs(10));
        assert_eq!((tr.next, tr.actions.len()), (held, 0));
    }
    let tr = m.step(&held, Event::Tick, t0 + 2 * MS + hold);
    assert_eq!(
        (tr.next.name(), names(&tr.actions), tr.reason),
        (StateName::Acquiring, vec!["acquire"], Reason::HoldOver)
    );
    // Anywhere but leading, a step-down changes nothing.
    for state in states(t0).into_iter().filter(|s| s.leading().is_none()) {
        let tr = m.step(&state, step_down.clone(), t0);
        assert_eq!((tr.next, tr.actions.len()), (state, 0), "{state:?}");
    }
}

#[test]
fn a_release_announced_while_working_renews_at_once() {
    let m = machine();
    let t0 = Instant::now();
    let lease = Lease {
        fencing_token: 7,
        sent_at: t0,
    };
    let working = State::Working { lease };
    let checked = m.step(&working, Event::ReleaseNotified, t0);
    assert_eq!(checked.actions, vec![Action::Renew]);
    assert_eq!(
        checked.next,
        State::Renewing {
            lease,
            renewal: Renewal::IN_FLIGHT
        }
    );
    // Lost at that renewal: the work stops now.
    let lost = m.step(&checked.next, Event::Lost, t0);
    assert!(
        lost.actions
            .iter()
            .any(|a| matches!(a, Action::StopWork { .. })),
        "{:?}",
        lost.actions
    );
}
