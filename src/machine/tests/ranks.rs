//! Priorities (issue #28) in the machine: an outranked candidate defers
//! once at a vacancy (a release, or a look that found the lease vacant),
//! for the retry interval, then campaigns; the one that
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
        // Its timer is no vacancy (the holder may have renewed; on the lock
        // file it is a poll): it looks first.
        (
            State::waiting(t0, false, OUTRANKED),
            Event::Tick,
            MS,
            State::looking(OUTRANKED),
            vec!["look"],
        ),
        // Seen vacant: it defers from now, and steps aside.
        (
            State::looking(OUTRANKED),
            Event::Vacant,
            MS,
            State::waiting(t0 + MS + retry, true, OUTRANKED),
            vec!["step aside"],
        ),
        // Seen held: no deferral, it waits for that lease as any standby.
        (
            State::looking(OUTRANKED),
            Event::Refused {
                expires_in: Some(retry),
            },
            MS,
            State::waiting(t0 + MS + retry + MS, false, OUTRANKED),
            vec![],
        ),
        // No longer outranked by the time it saw the vacancy: it acquires.
        (
            State::looking(Standing::CLEAR),
            Event::Vacant,
            MS,
            State::acquiring(Standing::CLEAR),
            vec!["acquire"],
        ),
        // Unhealthy by then: it waits for its worker.
        (
            State::looking(both),
            Event::Vacant,
            MS,
            State::waiting(t0 + MS, false, both),
            vec![],
        ),
        // A release announced during the look: it looks again if refused.
        (
            State::looking(OUTRANKED),
            Event::ReleaseNotified,
            MS,
            State::Acquiring {
                shutdown: false,
                notified: true,
                looking: true,
                standing: OUTRANKED,
            },
            vec![],
        ),
        (
            State::Acquiring {
                shutdown: false,
                notified: true,
                looking: true,
                standing: OUTRANKED,
            },
            Event::Refused { expires_in: None },
            MS,
            State::waiting(t0 + MS, false, OUTRANKED),
            vec![],
        ),
        // Shutdown during a look: nothing was taken, so nothing to release.
        (
            State::Acquiring {
                shutdown: true,
                notified: false,
                looking: true,
                standing: OUTRANKED,
            },
            Event::Vacant,
            MS,
            State::Idle,
            vec!["exit"],
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
        // Healthy again while outranked and its wait is over: it looks.
        (
            State::waiting(t0, false, both),
            Event::WorkerHealthy,
            MS,
            State::looking(OUTRANKED),
            vec!["look"],
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
/// unless its worker is unhealthy or it is on the way out), it never
/// acquires on the very first wake-up of a vacancy, and a timer alone
/// never starts a deferral (only a release or a look that saw a vacancy).
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
            until,
            hold: false,
            standing: OUTRANKED,
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
            // Its timer looks; only a vacancy seen defers.
            let at = until.max(now);
            let due = m.step(&state, Event::Tick, at);
            assert_eq!(names(&due.actions), vec!["look"], "{state:?}: {due:?}");
            let seen = m.step(&due.next, Event::Vacant, at + MS);
            assert_eq!(
                names(&seen.actions),
                vec!["step aside"],
                "{due:?} → {seen:?}"
            );
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
