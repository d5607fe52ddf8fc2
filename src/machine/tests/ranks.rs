//! Priorities (issue #28) in the machine: an outranked candidate defers
//! once at a vacancy, for the retry interval, then campaigns; the one that
//! outranks it does not defer; leading is not affected (the runner hands
//! over by a step-down). Tested as a table and over sequences.

use super::{OUTRANKED, events, lease, machine, names, states};
use crate::machine::*;
use std::collections::HashSet;

const MS: Duration = Duration::from_millis(1);

#[test]
fn ranks_table() {
    let m = machine();
    let t0 = Instant::now();
    let retry = m.timing.retry_interval;
    let both = Standing {
        unhealthy: true,
        outranked: 1,
    };
    let third = Standing {
        unhealthy: false,
        outranked: 2,
    };
    let cases: Vec<(State, Event, Duration, State, Vec<&str>)> = vec![
        // A release wakes an outranked standby: it defers, once, and gives
        // up its place in line (ZooKeeper's queue).
        (
            State::waiting(t0 + 9 * MS, false, OUTRANKED),
            Event::ReleaseNotified,
            MS,
            State::waiting(t0 + MS + retry, true, OUTRANKED),
            vec!["step aside"],
        ),
        // So does its timer (the holder's lease would have expired).
        (
            State::waiting(t0, false, OUTRANKED),
            Event::Tick,
            MS,
            State::waiting(t0 + MS + retry, true, OUTRANKED),
            vec!["step aside"],
        ),
        // The deferral over: it campaigns, still outranked (bounded).
        (
            State::waiting(t0 + retry, true, OUTRANKED),
            Event::Tick,
            retry,
            State::acquiring(OUTRANKED),
            vec!["acquire"],
        ),
        // While deferring, a release does not wake it.
        (
            State::waiting(t0 + retry, true, OUTRANKED),
            Event::ReleaseNotified,
            MS,
            State::waiting(t0 + retry, true, OUTRANKED),
            vec![],
        ),
        // Third in rank: defers two retry intervals.
        (
            State::waiting(t0, false, third),
            Event::ReleaseNotified,
            MS,
            State::waiting(t0 + MS + retry * 2, true, third),
            vec!["step aside"],
        ),
        // Not outranked: campaigns at once.
        (
            State::waiting(t0 + 9 * MS, false, Standing::CLEAR),
            Event::ReleaseNotified,
            MS,
            State::acquiring(Standing::CLEAR),
            vec!["acquire"],
        ),
        // Outranked and unhealthy: nothing at all.
        (
            State::waiting(t0, false, both),
            Event::ReleaseNotified,
            MS,
            State::waiting(t0, false, both),
            vec![],
        ),
        // Remembered by a standby, whatever it is doing.
        (
            State::waiting(t0 + 9 * MS, false, Standing::CLEAR),
            Event::Outranked(1),
            MS,
            State::waiting(t0 + 9 * MS, false, OUTRANKED),
            vec![],
        ),
        (
            State::acquiring(OUTRANKED),
            Event::Outranked(0),
            MS,
            State::acquiring(Standing::CLEAR),
            vec![],
        ),
        // A leader is not affected: the runner decides a handover.
        (
            State::Working { lease: lease(t0) },
            Event::Outranked(1),
            MS,
            State::Working { lease: lease(t0) },
            vec![],
        ),
        // Healthy again while outranked and its wait is over: it defers.
        (
            State::waiting(t0, false, both),
            Event::WorkerHealthy,
            MS,
            State::waiting(t0 + MS + retry, true, OUTRANKED),
            vec!["step aside"],
        ),
    ];
    for (state, event, after, expected, actions) in cases {
        let tr = m.step(&state, event.clone(), t0 + after);
        assert_eq!(tr.next, expected, "{state:?} + {event:?}");
        assert_eq!(names(&tr.actions), actions, "{state:?} + {event:?}");
    }
}

/// Over every path of up to `DEPTH` events: an outranked candidate's
/// deferral is bounded (two timer ticks after a vacancy it has acquired,
/// unless its worker is unhealthy or it is on the way out), and it never
/// acquires on the very first wake-up of a vacancy.
#[test]
fn an_outranked_candidate_defers_once_and_only_once() {
    const DEPTH: usize = 4;
    let m = machine();
    let t0 = Instant::now();
    let far = m.timing.retry_interval + MS;
    let mut visited: HashSet<(State, Instant)> = HashSet::new();
    let mut stack: Vec<(State, Instant, usize)> =
        states(t0).into_iter().map(|s| (s, t0, 0)).collect();
    let mut checked = 0;
    while let Some((state, now, depth)) = stack.pop() {
        if depth == DEPTH || !visited.insert((state, now)) {
            continue;
        }
        if let State::Waiting {
            hold: false,
            standing: OUTRANKED,
            ..
        } = state
        {
            // The first wake-up defers; the tick after the deferral acquires.
            let woke = m.step(&state, Event::ReleaseNotified, now + MS);
            assert_eq!(
                names(&woke.actions),
                vec!["step aside"],
                "{state:?}: {woke:?}"
            );
            let then = m.step(&woke.next, Event::Tick, now + MS + far);
            assert_eq!(names(&then.actions), vec!["acquire"], "{woke:?} → {then:?}");
            checked += 1;
        }
        for event in events(t0) {
            let at = now + far;
            let tr = m.step(&state, event, at);
            if !tr.actions.contains(&Action::Exit) {
                stack.push((tr.next, at, depth + 1));
            }
        }
    }
    assert!(checked > 10, "reached only {checked} outranked waits");
}
