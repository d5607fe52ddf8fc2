//! The machine walked event by event through the paths that matter: a
//! refusal, renewals that succeed, fail and are lost, a shutdown while
//! leading, the child's exit policies, release notices, a step-down.

use super::{lease, machine, names, states};
use crate::machine::*;

const MS: Duration = Duration::from_millis(1);

#[test]
fn refusal_waits_until_the_holders_lease_would_expire() {
    let m = machine();
    let t0 = Instant::now();
    let acquiring = State::Acquiring {
        shutdown: false,
        notified: false,
        looking: false,
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
                looking: false,
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
        looking: false,
        standing: Standing::CLEAR,
    };
    let notified = m.step(&acquiring, Event::ReleaseNotified, t0);
    assert_eq!(
        notified.next,
        State::Acquiring {
            shutdown: false,
            notified: true,
            looking: false,
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
