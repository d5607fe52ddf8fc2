use super::*;
use crate::lease::kubernetes::record::{acquisition, renewal};
use k8s_openapi::jiff::Timestamp;

const S: Duration = Duration::from_secs(1);
const NONE: Duration = Duration::ZERO;

/// A record of `holder`, renewed at `renewed` (seconds on its wall clock),
/// at resourceVersion `version`.
fn lease(holder: &str, renewed: i64, duration: i32, version: u64) -> Lease {
    let acquired = Timestamp::from_second(0).unwrap();
    let mut l = acquisition(None, "job", holder, "d", duration, acquired);
    l = renewal(l, duration, Timestamp::from_second(renewed).unwrap());
    l.metadata.resource_version = Some(version.to_string());
    l
}

/// The observer's clock, look by look: (record, seconds since start,
/// expected remaining seconds).
#[test]
fn another_holders_lease_expires_by_the_observers_clock() {
    let t0 = Instant::now();
    let mut o = Observer::default();
    // A renewTime an hour in the past or the future changes nothing: only
    // when this observer saw the record change counts.
    let table: &[(Lease, u64, Option<u64>)] = &[
        (lease("a", -3600, 15, 10), 0, Some(15)),
        (lease("a", -3600, 15, 10), 10, Some(5)),
        (lease("a", -3600, 15, 10), 15, Some(0)),
        (lease("a", 3600, 15, 11), 16, Some(15)),
        (lease("a", 3600, 15, 11), 20, Some(11)),
        (lease("b", 3600, 15, 13), 22, Some(15)),
    ];
    for (i, (record, at, left)) in table.iter().enumerate() {
        o.look(Some(record), t0 + S * *at as u32);
        let got = o.left(t0 + S * *at as u32, NONE);
        assert_eq!(got, left.map(|l| S * l as u32), "row {i}");
    }
}

#[test]
fn an_older_answer_than_one_seen_changes_nothing() {
    let t0 = Instant::now();
    let mut o = Observer::default();
    // The watch delivered the renewal at 1 s; a GET sent before it
    // answers at 2 s with the record before it.
    o.look(Some(&lease("a", 0, 15, 10)), t0);
    o.look(Some(&lease("a", 5, 15, 12)), t0 + S);
    o.look(Some(&lease("a", 0, 15, 10)), t0 + 2 * S);
    assert_eq!(o.left(t0 + 2 * S, NONE), Some(14 * S));
    // The same record at a later look keeps its first sighting.
    o.look(Some(&lease("a", 5, 15, 12)), t0 + 3 * S);
    assert_eq!(o.left(t0 + 3 * S, NONE), Some(13 * S));
}

#[test]
fn a_duration_shortened_from_outside_does_not_shorten_the_wait_for_its_term() {
    let t0 = Instant::now();
    let mut o = Observer::default();
    o.look(Some(&lease("a", 0, 15, 10)), t0);
    // kubectl patch: leaseDurationSeconds 15 → 1, same term.
    o.look(Some(&lease("a", 0, 1, 11)), t0 + S);
    assert_eq!(o.left(t0 + 2 * S, NONE), Some(14 * S));
    // A floor: this waiter's own TTL when longer than the record's.
    let mut fresh = Observer::default();
    fresh.look(Some(&lease("a", 0, 1, 11)), t0);
    assert_eq!(fresh.left(t0, 4 * S), Some(4 * S));
}

#[test]
fn a_deleted_object_is_absent_until_seen_again_and_keeps_its_last_record() {
    let t0 = Instant::now();
    let mut o = Observer::default();
    o.look(Some(&lease("a", 0, 15, 10)), t0);
    o.deleted(Some(11));
    assert!(o.present().is_none());
    assert_eq!(o.left(t0, NONE), None);
    assert_eq!(o.last_held().unwrap().seen.holder.as_deref(), Some("a"));
    // A late answer from before the delete does not bring it back.
    o.look(Some(&lease("a", 0, 15, 10)), t0 + S);
    assert!(o.present().is_none());
    // A create after it does.
    o.look(Some(&lease("b", 0, 15, 12)), t0 + 2 * S);
    assert_eq!(o.present().unwrap().seen.holder.as_deref(), Some("b"));
    // A GET that found nothing.
    o.look(None, t0 + 3 * S);
    assert!(o.present().is_none());
}

#[test]
fn an_emptied_record_keeps_the_term_it_emptied() {
    let t0 = Instant::now();
    let mut o = Observer::default();
    let held = lease("a", 0, 15, 10);
    o.look(Some(&held), t0);
    let mut cleared = held.clone();
    cleared.spec.as_mut().unwrap().holder_identity = None;
    cleared.metadata.resource_version = Some("11".into());
    o.look(Some(&cleared), t0 + S);
    assert_eq!(o.left(t0 + S, NONE), None, "nobody holds it");
    let term = o.last_held().unwrap();
    assert_eq!(term.seen.holder.as_deref(), Some("a"));
    assert_eq!(o.wait_for(&term.seen, NONE), 15 * S);
}

#[test]
fn nothing_is_judged_of_a_record_the_watch_has_seen_change() {
    let t0 = Instant::now();
    let mut o = Observer::default();
    let read = lease("a", 0, 15, 10);
    let seen = Seen::of(&read);
    o.look(Some(&read), t0);
    assert_eq!(o.left_of(&seen, t0 + 20 * S, NONE), Some(Duration::ZERO));
    // A renewal the watch delivered after the GET's answer: the GET's
    // record is not the one there now.
    o.look(Some(&lease("a", 5, 15, 11)), t0 + 20 * S);
    assert_eq!(o.left_of(&seen, t0 + 20 * S, NONE), None);
    // Nor after a delete: a held record read before it must never be
    // taken for one seen past its expiry.
    let mut o = Observer::default();
    o.look(Some(&read), t0);
    o.deleted(Some(12));
    o.look(Some(&read), t0 + 20 * S);
    assert_eq!(o.left_of(&seen, t0 + 20 * S, NONE), None);
}

/// Found by `contract::outside` (Restore): a waiter without a watch saw a's
/// record, missed its release and c's term, and then saw a's record put
/// back exactly as it had seen it, but written again (a new
/// resourceVersion). It is a new sighting, counted from now: counted from
/// the old one it was expired at once, and the waiter started beside c.
#[test]
fn a_record_put_back_as_it_was_seen_is_counted_from_its_new_sighting() {
    let t0 = Instant::now();
    let mut o = Observer::default();
    o.look(Some(&lease("a", 0, 2, 10)), t0);
    // Unseen: a's release (11), c's term (12..20); then the copy (21).
    o.look(Some(&lease("a", 0, 2, 21)), t0 + 3 * S);
    assert_eq!(o.left(t0 + 3 * S, NONE), Some(2 * S));
    // The same write at a later look keeps its sighting.
    o.look(Some(&lease("a", 0, 2, 21)), t0 + 4 * S);
    assert_eq!(o.left(t0 + 4 * S, NONE), Some(S));
}
