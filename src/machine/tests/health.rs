//! Health gating (issue #27), tested as a table, a sweep over every state ×
//! event, and over sequences: an unhealthy worker never gets `StartWork`,
//! its candidate never campaigns, a leader whose worker turns unhealthy
//! steps down, releases and holds off, and a shutdown is never forgotten.

use super::{events, lease, machine, names, states};
use crate::machine::*;
use std::collections::HashSet;

const MS: Duration = Duration::from_millis(1);

fn unhealthy(state: &State) -> bool {
    state.worker_unhealthy()
}

fn campaigns(actions: &[Action]) -> bool {
    actions
        .iter()
        .any(|a| matches!(a, Action::Acquire | Action::StartWork { .. }))
}

#[test]
fn health_table() {
    let m = machine();
    let t0 = Instant::now();
    let l = lease(t0);
    let gate = m.health.expect("the tests' machine gates on health");
    let cases: Vec<(State, Event, Duration, State, Vec<&str>)> = vec![
        // A leader whose worker turns unhealthy stops the work first.
        (
            State::Working { lease: l },
            Event::WorkerUnhealthy,
            MS,
            State::Pausing {
                lease: Some(l),
                renewal: Renewal::IDLE,
                stop_started: t0 + MS,
                kill_at: (t0 + MS + m.stop_timeout)
                    .min(m.timing.kill_by(m.timing.validity_end(t0))),
                after: AfterPause::StepDown { hold: gate.hold },
                standing: Standing::UNHEALTHY,
            },
            vec!["stop"],
        ),
        // A healthy report changes nothing for a leader.
        (
            State::Working { lease: l },
            Event::WorkerHealthy,
            MS,
            State::Working { lease: l },
            vec![],
        ),
        // Then releases, and holds off for the health hold.
        (
            State::Pausing {
                lease: Some(l),
                renewal: Renewal::IDLE,
                stop_started: t0,
                kill_at: t0 + 10 * MS,
                after: AfterPause::StepDown { hold: gate.hold },
                standing: Standing::UNHEALTHY,
            },
            Event::WorkStopped,
            MS,
            State::Releasing {
                after: AfterRelease::Hold { hold: gate.hold },
                standing: Standing::UNHEALTHY,
            },
            vec!["release"],
        ),
        (
            State::Releasing {
                after: AfterRelease::Hold { hold: gate.hold },
                standing: Standing::UNHEALTHY,
            },
            Event::Released,
            MS,
            State::waiting(t0 + MS + gate.hold, true, Standing::UNHEALTHY),
            vec![],
        ),
        // Healthy again within the hold: still held off.
        (
            State::waiting(t0 + gate.hold, true, Standing::UNHEALTHY),
            Event::WorkerHealthy,
            MS,
            State::waiting(t0 + gate.hold, true, Standing::CLEAR),
            vec![],
        ),
        // Healthy again after the hold: campaign at once.
        (
            State::waiting(t0 + gate.hold, true, Standing::UNHEALTHY),
            Event::WorkerHealthy,
            gate.hold,
            State::acquiring(Standing::CLEAR),
            vec!["acquire"],
        ),
        // Unhealthy and waiting: neither the timer nor a release wakes it.
        (
            State::waiting(t0, false, Standing::UNHEALTHY),
            Event::Tick,
            MS,
            State::waiting(t0, false, Standing::UNHEALTHY),
            vec![],
        ),
        (
            State::waiting(t0, false, Standing::UNHEALTHY),
            Event::ReleaseNotified,
            MS,
            State::waiting(t0, false, Standing::UNHEALTHY),
            vec![],
        ),
        // A standby whose worker turns unhealthy stops campaigning.
        (
            State::waiting(t0 + 5 * MS, false, Standing::CLEAR),
            Event::WorkerUnhealthy,
            MS,
            State::waiting(t0 + 5 * MS, false, Standing::UNHEALTHY),
            vec![],
        ),
        // An acquire answered after the worker turned unhealthy: hand it back.
        (
            State::acquiring(Standing::UNHEALTHY),
            Event::Acquired {
                fencing_token: 9,
                sent_at: t0,
            },
            MS,
            State::Releasing {
                after: AfterRelease::Wait,
                standing: Standing::UNHEALTHY,
            },
            vec!["release"],
        ),
        (
            State::acquiring(Standing::CLEAR),
            Event::WorkerUnhealthy,
            MS,
            State::acquiring(Standing::UNHEALTHY),
            vec![],
        ),
        (
            State::acquiring(Standing::UNHEALTHY),
            Event::Refused { expires_in: None },
            MS,
            State::waiting(
                t0 + MS + m.timing.retry_interval,
                false,
                Standing::UNHEALTHY,
            ),
            vec![],
        ),
        // A stop under way remembers the report for what follows.
        (
            State::Pausing {
                lease: None,
                renewal: Renewal::IDLE,
                stop_started: t0,
                kill_at: t0 + 10 * MS,
                after: AfterPause::Wait,
                standing: Standing::CLEAR,
            },
            Event::WorkerUnhealthy,
            MS,
            State::Pausing {
                lease: None,
                renewal: Renewal::IDLE,
                stop_started: t0,
                kill_at: t0 + 10 * MS,
                after: AfterPause::Wait,
                standing: Standing::UNHEALTHY,
            },
            vec![],
        ),
    ];
    for (state, event, after, expected, actions) in cases {
        let tr = m.step(&state, event.clone(), t0 + after);
        assert_eq!(tr.next, expected, "{state:?} + {event:?}");
        assert_eq!(names(&tr.actions), actions, "{state:?} + {event:?}");
    }
}

#[test]
fn a_worker_checked_from_the_start_campaigns_only_after_its_first_pass() {
    let gated = Machine {
        health: Some(HealthGate {
            wait_for_first_check: true,
            hold: Duration::from_secs(6),
        }),
        ..machine()
    };
    let t0 = Instant::now();
    let tr = gated.step(&State::Idle, Event::Started, t0);
    assert_eq!(tr.next, State::waiting(t0, false, Standing::UNHEALTHY));
    assert!(tr.actions.is_empty());
    assert_eq!(
        gated.next_deadline(&tr.next),
        None,
        "no timer while unhealthy"
    );
    let tr = gated.step(&tr.next, Event::WorkerHealthy, t0 + MS);
    assert_eq!(names(&tr.actions), vec!["acquire"]);

    // Without gating the health events are ignored altogether.
    let plain = Machine {
        health: None,
        ..machine()
    };
    let tr = plain.step(&State::Idle, Event::Started, t0);
    assert_eq!(names(&tr.actions), vec!["acquire"]);
    let l = lease(t0);
    let tr = plain.step(&State::Working { lease: l }, Event::WorkerUnhealthy, t0);
    assert_eq!(tr.next, State::Working { lease: l });
}

#[test]
fn sweep_an_unhealthy_worker_never_campaigns() {
    let m = machine();
    let t0 = Instant::now();
    for state in states(t0) {
        for event in events(t0) {
            for at in [0, 1000, 3333, 6666, 9000] {
                let tr = m.step(&state, event.clone(), t0 + at * MS);
                let label = format!("{state:?} + {event:?} at +{at}ms → {tr:?}");
                let sick = (unhealthy(&state) && event != Event::WorkerHealthy)
                    || event == Event::WorkerUnhealthy;
                if sick {
                    assert!(!campaigns(&tr.actions), "{label}");
                    assert!(tr.next.leading().is_none(), "{label}");
                }
                if event == Event::WorkerUnhealthy && !tr.next.exiting() {
                    assert!(unhealthy(&tr.next) || tr.next == State::Idle, "{label}");
                }
                if event == Event::WorkerUnhealthy && state.leading().is_some() {
                    assert_eq!(names(&tr.actions), vec!["stop"], "{label}");
                }
            }
        }
    }
}

/// Over every path of up to `DEPTH` events from every state: while the last
/// health report was unhealthy, nothing acquires, starts work or leads, and
/// once a report comes in it sticks until the next one.
#[test]
fn no_path_campaigns_while_the_worker_is_unhealthy() {
    const DEPTH: usize = 5;
    const GAPS: [Duration; 2] = [MS, Duration::from_millis(6500)];
    let m = machine();
    let t0 = Instant::now();
    let mut visited: HashSet<(State, Option<bool>, Instant)> = HashSet::new();
    // `sick`: the last health report on the path (None: none yet).
    let mut stack: Vec<(State, Option<bool>, Instant, usize)> =
        states(t0).into_iter().map(|s| (s, None, t0, 0)).collect();
    let mut steps = 0u64;
    while let Some((state, sick, now, depth)) = stack.pop() {
        if depth == DEPTH || !visited.insert((state, sick, now)) {
            continue;
        }
        for event in events(t0) {
            let health = matches!(event, Event::WorkerHealthy | Event::WorkerUnhealthy);
            if health && state == State::Idle {
                continue; // the runner's first event is always `Started`
            }
            for gap in GAPS {
                let at = now + gap;
                let tr = m.step(&state, event.clone(), at);
                steps += 1;
                let sick = match event {
                    Event::WorkerHealthy => Some(false),
                    Event::WorkerUnhealthy => Some(true),
                    _ => sick,
                };
                if sick == Some(true) {
                    let label = format!("{state:?} + {event:?} → {tr:?}");
                    assert!(!campaigns(&tr.actions), "{label}");
                    assert!(tr.next.leading().is_none(), "{label}");
                }
                if tr.actions.contains(&Action::Exit) {
                    continue;
                }
                stack.push((tr.next, sick, at, depth + 1));
            }
        }
    }
    assert!(steps > 10_000, "explored only {steps} steps");
}
