//! Sweeps over every state × event: shutdown always ends released, and the
//! invariants hold after any event in any state.

use super::{events, machine, names, states};
use crate::machine::*;

const MS: Duration = Duration::from_millis(1);

/// A cooperative world: every request succeeds at once.
pub(super) fn answer(action: &Action, now: Instant) -> Option<Event> {
    match action {
        Action::Acquire => Some(Event::Acquired {
            fencing_token: 99,
            sent_at: now,
        }),
        Action::Look => Some(Event::Vacant),
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
            State::Acquiring { looking: true, .. } => queue.push(Event::Vacant),
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
        // Idle holds nothing, nor does a look; Releasing has its release
        // in flight already.
        let holds = !matches!(
            start,
            State::Idle | State::Releasing { .. } | State::Acquiring { looking: true, .. }
        );
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
