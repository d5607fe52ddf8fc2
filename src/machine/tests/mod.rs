//! The machine's tests, kept in a folder of their own so they are not
//! mistaken for its code: a table and the helpers here; sweeps over every
//! state × event, walks, sequences, health gating and ranks beside them.

mod health;
mod ranks;
mod sequences;
mod sweeps;
mod walks;

use crate::machine::*;

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
            looking: false,
            standing: Standing::CLEAR,
        },
        State::Acquiring {
            shutdown: true,
            notified: false,
            looking: false,
            standing: Standing::CLEAR,
        },
        State::looking(OUTRANKED),
        State::Acquiring {
            shutdown: true,
            notified: false,
            looking: true,
            standing: OUTRANKED,
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
        Event::Vacant,
        Event::ShutdownRequested,
    ]
}

pub(super) fn names(actions: &[Action]) -> Vec<&'static str> {
    actions
        .iter()
        .map(|a| match a {
            Action::Acquire => "acquire",
            Action::Look => "look",
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
                looking: false,
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
                looking: false,
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
                looking: false,
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
                looking: false,
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
