//! The machine tested over *sequences* of events, not single steps: a
//! bounded exploration of every path from every state, checking what must
//! hold along a whole path. Issue #10 found a shutdown forgotten three steps
//! after it was requested; a sweep of single steps cannot see that.

use super::{events, machine, names, states};
use crate::machine::*;
use std::collections::HashSet;

const MS: Duration = Duration::from_millis(1);

/// How far apart consecutive events are: at once, and far enough for a
/// renewal, a renew deadline or a wait to come due within a few steps.
const GAPS: [Duration; 2] = [Duration::from_millis(1), Duration::from_millis(2500)];

/// Events per path. Every state of the machine is reached within two steps
/// of some state in `states()`, and a shutdown path ends within four.
const DEPTH: usize = 6;

/// What must hold once shutdown was requested, for one step.
fn check_after_shutdown(from: &State, event: &Event, tr: &Transition, path: &[String]) {
    let label = || format!("{path:?} then {from:?} + {event:?} → {tr:?}");
    for action in &tr.actions {
        assert!(
            !matches!(action, Action::StartWork { .. } | Action::Acquire),
            "after a shutdown request: {}",
            label()
        );
    }
    let exits = tr.actions.contains(&Action::Exit);
    assert!(
        tr.next.exiting() || (exits && tr.next == State::Idle),
        "after a shutdown request the machine left the way out: {}",
        label()
    );
}

/// From a state on the way out, the answers to what is outstanding lead to
/// the exit within a few steps, with the work stopped before the release.
fn check_finishes(m: &Machine, start: State, now: Instant) {
    let mut state = start;
    let mut seen = Vec::new();
    for step in 0..8 {
        let event = match state {
            State::Acquiring { .. } => Event::Refused { expires_in: None },
            State::Pausing { .. } => Event::WorkStopped,
            State::Releasing { .. } => Event::Released,
            _ => Event::Tick,
        };
        let tr = m.step(&state, event, now + step * MS);
        seen.extend(names(&tr.actions));
        if tr.actions.contains(&Action::Exit) {
            return;
        }
        state = tr.next;
    }
    panic!("{start:?} did not reach the exit: {seen:?}");
}

#[test]
fn a_shutdown_between_two_wake_ups_is_not_forgotten() {
    // The exact sequence of issue #10: a release pushes three wake entries,
    // popped one at a time, so a second wake-up after the signal is common.
    let m = machine();
    let t0 = Instant::now();
    let steps = [
        (Event::ReleaseNotified, vec!["acquire"]),
        (Event::ShutdownRequested, vec![]),
        (Event::ReleaseNotified, vec![]),
        (
            Event::Acquired {
                fencing_token: 9,
                sent_at: t0,
            },
            vec!["release"],
        ),
        (Event::Released, vec!["exit"]),
    ];
    let mut state = State::Waiting {
        until: t0,
        hold: false,
        standing: Standing::CLEAR,
    };
    for (n, (event, expected)) in steps.into_iter().enumerate() {
        let tr = m.step(&state, event.clone(), t0 + n as u32 * MS);
        assert_eq!(names(&tr.actions), expected, "{state:?} + {event:?}");
        state = tr.next;
    }
    assert_eq!(state, State::Idle);
}

#[test]
fn no_path_starts_work_or_stays_running_after_a_shutdown_request() {
    let m = machine();
    let t0 = Instant::now();
    let mut visited: HashSet<(State, bool, Instant)> = HashSet::new();
    let mut stack: Vec<(State, bool, Instant, Vec<String>)> = states(t0)
        .into_iter()
        .map(|s| (s, false, t0, Vec::new()))
        .collect();
    let mut paths = 0u64;
    while let Some((state, shut, now, path)) = stack.pop() {
        if path.len() == DEPTH || !visited.insert((state, shut, now)) {
            continue;
        }
        if shut {
            check_finishes(&m, state, now);
        }
        for event in events(t0) {
            for gap in GAPS {
                let at = now + gap;
                let tr = m.step(&state, event.clone(), at);
                paths += 1;
                let shut_now = shut || event == Event::ShutdownRequested;
                if shut_now {
                    check_after_shutdown(&state, &event, &tr, &path);
                }
                if tr.actions.contains(&Action::Exit) {
                    continue; // the runner stops here
                }
                let mut longer = path.clone();
                longer.push(format!("{:?} +{}ms", event, gap.as_millis()));
                stack.push((tr.next, shut_now, at, longer));
            }
        }
    }
    assert!(paths > 10_000, "explored only {paths} steps");
}
