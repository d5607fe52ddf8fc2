//! The supervisor's step as a table, one row per transition, and its
//! policies (backoff, crash-loop limit) in sequences; `sweep.rs` drives it
//! through random sequences checking its invariants.

use super::super::WorkEvent;
use super::state::*;
use super::step::step;
use crate::config::{OnChildExit, Signal};
use std::time::Duration;
use tokio::time::Instant;

const TERM: Signal = Signal {
    name: "SIGTERM",
    number: libc::SIGTERM,
};

pub(super) fn policy(on_exit: OnChildExit, restart_limit: Option<(u32, Duration)>) -> Policy {
    Policy {
        stop_signal: TERM,
        on_exit,
        restart_limit,
    }
}

pub(super) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Steps `events` in order from `s`, all at `now`.
fn run(s: &Supervision, p: &Policy, events: &[Event], now: Instant) -> (Supervision, Vec<Action>) {
    let mut s = s.clone();
    let mut all = Vec::new();
    for e in events {
        let (next, actions) = step(&s, p, *e, now);
        s = next;
        all.extend(actions);
    }
    (s, all)
}

/// A supervisor whose child 100 (token 7) started at `t0`.
fn running(p: &Policy, t0: Instant) -> Supervision {
    let s = Supervision::default();
    run(
        &s,
        p,
        &[
            Event::Start { fencing_token: 7 },
            Event::Spawned { child: 100 },
        ],
        t0,
    )
    .0
}

fn says(actions: &[Action]) -> Vec<Action> {
    actions
        .iter()
        .filter(|a| !matches!(a, Action::Say(_)))
        .copied()
        .collect()
}

#[test]
fn the_transition_table() {
    let t0 = Instant::now();
    let release = policy(OnChildExit::Release, None);
    let restart = policy(OnChildExit::Restart, None);
    let idle = Supervision::default();
    let run_ = running(&release, t0);
    let stopping = run(
        &run_,
        &release,
        &[Event::Stop {
            kill_at: t0 + ms(5000),
        }],
        t0,
    )
    .0;
    let reaped = run(
        &stopping,
        &release,
        &[Event::Exited { pid: 100, code: 0 }],
        t0,
    )
    .0;
    let shut = run(&idle, &release, &[Event::ShutdownRequested], t0).0;
    let late = run(&idle, &release, &[Event::Deadline(Some(t0))], t0).0;
    let backing = {
        let r = running(&restart, t0);
        let (s, _) = run(&r, &restart, &[Event::Exited { pid: 100, code: 1 }], t0);
        run(&s, &restart, &[Event::Swept { empty: true }], t0).0
    };
    let starting = step(&idle, &release, Event::Start { fencing_token: 7 }, t0).0;
    let run_restart = running(&restart, t0);
    let alive_stop = |kill_at, killed| Phase::Stopping {
        child: 100,
        child_alive: true,
        kill_at,
        killed,
        then: Then::ReportStopped,
    };
    type Row<'a> = (
        &'a str,
        &'a Supervision,
        &'a Policy,
        Event,
        Instant,
        Phase,
        Vec<Action>,
    );
    let rows: Vec<Row> = vec![
        (
            "start from idle spawns",
            &idle,
            &release,
            Event::Start { fencing_token: 7 },
            t0,
            Phase::Starting { fencing_token: 7 },
            vec![Action::Spawn { fencing_token: 7 }],
        ),
        (
            "a spawn that fails reports exit 127",
            &starting,
            &release,
            Event::SpawnFailed,
            t0,
            Phase::Idle,
            vec![Action::Report(WorkEvent::Exited {
                exit: false,
                code: 127,
            })],
        ),
        (
            "stop signals the group",
            &run_,
            &release,
            Event::Stop {
                kill_at: t0 + ms(5000),
            },
            t0,
            alive_stop(t0 + ms(5000), false),
            vec![Action::Signal(libc::SIGTERM)],
        ),
        (
            "the child stopping is swept for",
            &stopping,
            &release,
            Event::Exited { pid: 100, code: 0 },
            t0,
            Phase::Stopping {
                child: 100,
                child_alive: false,
                kill_at: t0 + ms(5000),
                killed: false,
                then: Then::ReportStopped,
            },
            vec![Action::Sweep { kill: false }],
        ),
        (
            "an empty group ends the stop",
            &reaped,
            &release,
            Event::Swept { empty: true },
            t0,
            Phase::Idle,
            vec![Action::DismissGuard, Action::Report(WorkEvent::Stopped)],
        ),
        (
            "stragglers keep it stopping",
            &reaped,
            &release,
            Event::Swept { empty: false },
            t0,
            reaped.phase,
            vec![],
        ),
        (
            "past the kill-by instant: SIGKILL",
            &stopping,
            &release,
            Event::Timer,
            t0 + ms(5000),
            alive_stop(t0 + ms(5000), true),
            vec![Action::Signal(libc::SIGKILL), Action::Sweep { kill: true }],
        ),
        (
            "before it: nothing",
            &stopping,
            &release,
            Event::Timer,
            t0 + ms(4999),
            stopping.phase,
            vec![],
        ),
        (
            "a second signal kills now",
            &stopping,
            &release,
            Event::Hurry,
            t0 + ms(10),
            alive_stop(t0 + ms(10), true),
            vec![Action::Signal(libc::SIGKILL), Action::Sweep { kill: true }],
        ),
        (
            "an exit under release cleans up, then reports",
            &run_,
            &release,
            Event::Exited { pid: 100, code: 3 },
            t0,
            Phase::Stopping {
                child: 100,
                child_alive: false,
                kill_at: t0,
                killed: true,
                then: Then::ReportExited {
                    exit: false,
                    code: 3,
                },
            },
            vec![Action::Signal(libc::SIGKILL), Action::Sweep { kill: true }],
        ),
        (
            "an exit under restart backs off 1 s",
            &run_restart,
            &restart,
            Event::Exited { pid: 100, code: 1 },
            t0,
            Phase::Stopping {
                child: 100,
                child_alive: false,
                kill_at: t0,
                killed: true,
                then: Then::Restart {
                    fencing_token: 7,
                    at: t0 + ms(1000),
                },
            },
            vec![Action::Signal(libc::SIGKILL), Action::Sweep { kill: true }],
        ),
        (
            "the backoff's end spawns again",
            &backing,
            &restart,
            Event::Timer,
            t0 + ms(1000),
            Phase::Starting { fencing_token: 7 },
            vec![Action::Spawn { fencing_token: 7 }],
        ),
        (
            "a stop while backing off is done at once",
            &backing,
            &restart,
            Event::Stop { kill_at: t0 },
            t0,
            Phase::Idle,
            vec![Action::Report(WorkEvent::Stopped)],
        ),
        (
            "another process's exit is not the child's",
            &run_,
            &release,
            Event::Exited { pid: 5, code: 0 },
            t0,
            run_.phase,
            vec![],
        ),
        (
            "signals are forwarded to a running child",
            &run_,
            &release,
            Event::Forward {
                signal: libc::SIGHUP,
            },
            t0,
            run_.phase,
            vec![Action::Signal(libc::SIGHUP)],
        ),
        (
            "and to nothing else",
            &idle,
            &release,
            Event::Forward {
                signal: libc::SIGHUP,
            },
            t0,
            Phase::Idle,
            vec![],
        ),
        (
            "a stop with nothing running is done",
            &idle,
            &release,
            Event::Stop { kill_at: t0 },
            t0,
            Phase::Idle,
            vec![Action::Report(WorkEvent::Stopped)],
        ),
        (
            "no child after a shutdown request",
            &shut,
            &release,
            Event::Start { fencing_token: 8 },
            t0,
            Phase::Idle,
            vec![],
        ),
        (
            "no child past the kill-by instant",
            &late,
            &release,
            Event::Start { fencing_token: 8 },
            t0,
            Phase::Idle,
            vec![],
        ),
        (
            "a start while stopping waits for the stop",
            &stopping,
            &release,
            Event::Start { fencing_token: 8 },
            t0,
            Phase::Stopping {
                child: 100,
                child_alive: true,
                kill_at: t0 + ms(5000),
                killed: false,
                then: Then::Restart {
                    fencing_token: 8,
                    at: t0,
                },
            },
            vec![],
        ),
        (
            "a start while running is ignored",
            &run_,
            &release,
            Event::Start { fencing_token: 8 },
            t0,
            run_.phase,
            vec![],
        ),
        (
            "the deadline arms the guard of a live group",
            &run_,
            &release,
            Event::Deadline(Some(t0 + ms(9))),
            t0,
            run_.phase,
            vec![Action::Arm(Some(t0 + ms(9)))],
        ),
        (
            "and is only kept without one",
            &idle,
            &release,
            Event::Deadline(Some(t0 + ms(9))),
            t0,
            Phase::Idle,
            vec![],
        ),
    ];
    for (name, from, p, event, now, phase, actions) in rows {
        let (next, got) = step(from, p, event, now);
        assert_eq!(next.phase, phase, "{name}: phase");
        assert_eq!(says(&got), actions, "{name}: actions");
    }
}

#[test]
fn hurried_stops_kill_at_once_and_the_stop_replans() {
    let t0 = Instant::now();
    let p = policy(OnChildExit::Release, None);
    let s = run(&running(&p, t0), &p, &[Event::Hurry], t0).0;
    let (s, a) = step(
        &s,
        &p,
        Event::Stop {
            kill_at: t0 + ms(5000),
        },
        t0,
    );
    assert!(matches!(s.phase, Phase::Stopping { killed: true, kill_at, .. } if kill_at == t0));
    assert_eq!(
        says(&a),
        [
            Action::Signal(libc::SIGTERM),
            Action::Signal(libc::SIGKILL),
            Action::Sweep { kill: true }
        ]
    );
}

#[test]
fn the_backoff_doubles_to_its_cap_and_resets_after_a_long_run() {
    let t0 = Instant::now();
    let p = policy(OnChildExit::Restart, None);
    let mut s = running(&p, t0);
    let mut now = t0;
    let mut delays = Vec::new();
    for child in 100..108 {
        let (next, actions) = step(
            &s,
            &p,
            Event::Exited {
                pid: child,
                code: 1,
            },
            now,
        );
        delays.extend(actions.iter().filter_map(|a| match a {
            Action::Say(Say::Restarting { delay, .. }) => Some(delay.as_secs()),
            _ => None,
        }));
        let Phase::Stopping {
            then: Then::Restart { at, .. },
            ..
        } = next.phase
        else {
            panic!("{:?}", next.phase)
        };
        now = at;
        s = run(
            &next,
            &p,
            &[
                Event::Swept { empty: true },
                Event::Timer,
                Event::Spawned { child: child + 1 },
            ],
            now,
        )
        .0;
    }
    assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30, 30]);
    // A run of 30 s or more starts the backoff over.
    let (_, actions) = step(
        &s,
        &p,
        Event::Exited { pid: 108, code: 1 },
        now + BACKOFF_CAP,
    );
    assert!(actions.contains(&Action::Say(Say::Restarting {
        code: 1,
        delay: BACKOFF_FIRST
    })));
}

#[test]
fn more_exits_than_the_limit_within_its_window_is_a_crash_loop() {
    let t0 = Instant::now();
    let p = policy(OnChildExit::Restart, Some((2, Duration::from_secs(60))));
    let mut s = running(&p, t0);
    let mut now = t0;
    for child in 100..103 {
        let (next, _) = step(
            &s,
            &p,
            Event::Exited {
                pid: child,
                code: 1,
            },
            now,
        );
        let (next, actions) = step(&next, &p, Event::Swept { empty: true }, now);
        if child == 102 {
            assert_eq!(
                says(&actions),
                [
                    Action::DismissGuard,
                    Action::Report(WorkEvent::CrashLoop { code: 1 })
                ]
            );
            assert_eq!(next.phase, Phase::Idle);
            return;
        }
        now = next.next_timer(now).expect("a backoff");
        s = run(
            &next,
            &p,
            &[Event::Timer, Event::Spawned { child: child + 1 }],
            now,
        )
        .0;
    }
    unreachable!("the third exit is one more than the limit");
}
