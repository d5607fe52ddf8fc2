use super::*;
use crate::machine::{AfterPause, AfterRelease, Lease, Renewal, Standing};

fn at(ms: u64) -> Instant {
    // One base per process: tables compare instants built from it.
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *BASE.get_or_init(Instant::now) + Duration::from_millis(ms)
}

fn standing(outranked: u8, unhealthy: bool) -> Standing {
    Standing {
        unhealthy,
        outranked,
    }
}

fn lease() -> Lease {
    Lease {
        fencing_token: 7,
        sent_at: at(0),
    }
}

fn waiting(s: Standing) -> State {
    State::Waiting {
        until: at(1_000),
        hold: false,
        standing: s,
    }
}

fn working() -> State {
    State::Working { lease: lease() }
}

fn pausing(exit: bool, s: Standing) -> State {
    State::Pausing {
        lease: Some(lease()),
        renewal: Renewal {
            in_flight: false,
            retry_at: None,
        },
        stop_started: at(0),
        kill_at: at(5_000),
        after: AfterPause::Release { exit },
        standing: s,
    }
}

#[test]
fn a_standby_names_the_holder_once_and_again_after_it_changes_or_we_led() {
    let a = || Some("a".to_string());
    let b = || Some("b".to_string());
    // (reason, leads, holder seen) → (quiet, holder named)
    type Row = (Reason, bool, Option<String>, bool, Option<String>);
    let table: &[Row] = &[
        (Reason::HeldByOther, false, a(), false, a()),
        (Reason::HeldByOther, false, a(), true, a()),
        (Reason::RetryDue, false, a(), true, a()),
        (Reason::HeldByOther, false, b(), false, b()),
        (Reason::HeldByOther, false, None, false, None),
        (Reason::HeldByOther, false, None, true, None),
        (Reason::HeldByOther, false, a(), false, a()),
        (Reason::Acquired, true, None, false, None),
        (Reason::HeldByOther, false, a(), false, a()),
    ];
    let mut announced = Announced::default();
    for (i, (reason, leads, holder, quiet, named)) in table.iter().enumerate() {
        let got = announced.line(*reason, *leads, holder.clone());
        assert_eq!(got, (*quiet, named.clone()), "row {i}: {reason:?}");
    }
}

#[test]
fn the_machine_hears_its_standing_only_where_it_is_remembered_and_changed() {
    let acquiring = |s| State::Acquiring {
        shutdown: false,
        notified: false,
        looking: false,
        standing: s,
    };
    let releasing = |s| State::Releasing {
        after: AfterRelease::Wait,
        standing: s,
    };
    let table: &[(State, u8, Option<Event>)] = &[
        (State::Idle, 2, None),
        (working(), 2, None),
        (waiting(standing(0, false)), 0, None),
        (waiting(standing(0, false)), 2, Some(Event::Outranked(2))),
        (waiting(standing(2, true)), 2, None),
        (waiting(standing(2, false)), 0, Some(Event::Outranked(0))),
        (acquiring(standing(0, false)), 1, Some(Event::Outranked(1))),
        (releasing(standing(1, false)), 3, Some(Event::Outranked(3))),
        (
            pausing(false, standing(0, false)),
            1,
            Some(Event::Outranked(1)),
        ),
        // On the way out nothing of the election matters any more.
        (pausing(true, standing(0, false)), 1, None),
    ];
    for (i, (state, outranked, want)) in table.iter().enumerate() {
        assert_eq!(
            standing_news(state, *outranked),
            *want,
            "row {i}: {state:?}"
        );
    }
}

#[test]
fn a_handover_steps_down_at_its_instant_only_while_leading_and_only_once() {
    let mut h = Handover::default();
    assert_eq!(h.at(), None);
    assert_eq!(h.due(true), None, "nothing announced, nothing due");
    let hold = Duration::from_secs(3);
    h.announce(at(100), Duration::from_millis(1_250), hold);
    assert_eq!(h.at(), Some(at(1_350)));
    let step_down = Event::StepDown {
        hold,
        reason: Reason::HandOverTo,
    };
    assert_eq!(h.due(true), Some(step_down));
    assert_eq!((h.at(), h.due(true)), (None, None), "over once due");
    h.announce(at(0), Duration::ZERO, hold);
    assert_eq!(
        h.due(false),
        None,
        "a term that ended has nothing to hand over"
    );
    assert_eq!(h.at(), None);
}

#[test]
fn run_once_gives_up_at_the_deadline_only_after_a_real_try_and_fails_a_lost_run() {
    let wait = Duration::from_millis(500);
    let before = at(100);
    let after = at(600);
    let acquiring = State::Acquiring {
        shutdown: false,
        notified: false,
        looking: false,
        standing: Standing::CLEAR,
    };
    // (answered, started, state, shutdown seen, now) → exit code
    type Row = (bool, bool, State, bool, Instant, Option<i32>);
    let table: &[Row] = &[
        (false, false, waiting(Standing::CLEAR), false, after, None),
        (true, false, waiting(Standing::CLEAR), false, before, None),
        (
            true,
            false,
            waiting(Standing::CLEAR),
            false,
            after,
            Some(EXIT_NOT_LEADER),
        ),
        (true, false, acquiring, false, after, None),
        (true, false, working(), false, after, None),
        (true, false, waiting(Standing::CLEAR), true, after, None),
        // An unhealthy worker never lets an acquire out: the deadline decides.
        (
            false,
            false,
            waiting(standing(0, true)),
            false,
            after,
            Some(EXIT_NOT_LEADER),
        ),
        (
            false,
            false,
            waiting(standing(0, true)),
            false,
            before,
            None,
        ),
        (true, true, working(), false, after, None),
        (true, true, waiting(Standing::CLEAR), false, before, Some(1)),
        (true, true, waiting(Standing::CLEAR), true, before, None),
    ];
    for (i, (answered, started, state, shutdown, now, want)) in table.iter().enumerate() {
        let mut once = Once::new(at(0), wait);
        once.answered = *answered;
        once.started = *started;
        let got = once.verdict(state, *shutdown, *now).map(OnceEnd::code);
        assert_eq!(got, *want, "row {i}: {state:?}");
    }
}

#[test]
fn run_once_wakes_once_at_a_future_deadline_while_the_command_has_not_started() {
    let mut once = Once::new(at(0), Duration::from_millis(500));
    assert_eq!(once.wake(at(100)), Some(at(500)));
    assert_eq!(
        once.wake(at(500)),
        None,
        "a past deadline would fire every turn"
    );
    once.started = true;
    assert_eq!(once.wake(at(100)), None);
}
