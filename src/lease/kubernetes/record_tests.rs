use super::*;

const S: Duration = Duration::from_secs(1);

fn seen(holder: Option<&str>, renewed_s: i64) -> Seen {
    Seen {
        holder: holder.map(str::to_string),
        duration: 15 * S,
        acquired: Some(Timestamp::from_second(0).unwrap()),
        renewed: Some(Timestamp::from_second(renewed_s).unwrap()),
        transitions: 0,
    }
}

/// The observer's clock, look by look: (record, seconds since start,
/// expected remaining seconds).
#[test]
fn another_holders_lease_expires_by_the_observers_clock() {
    let t0 = Instant::now();
    let mut o = Observer::default();
    // A renewTime an hour in the past or the future changes nothing: only
    // when this observer saw the record change counts.
    let table: &[(Seen, u64, Option<u64>)] = &[
        (seen(Some("a"), -3600), 0, Some(15)),
        (seen(Some("a"), -3600), 10, Some(5)),
        (seen(Some("a"), -3600), 15, Some(0)),
        (seen(Some("a"), 3600), 16, Some(15)),
        (seen(Some("a"), 3600), 20, Some(11)),
        (seen(None, 3600), 21, None),
        (seen(Some("b"), 3600), 22, Some(15)),
    ];
    for (i, (record, at, left)) in table.iter().enumerate() {
        let got = o.look(record, t0 + S * *at as u32);
        assert_eq!(got, left.map(|l| S * l as u32), "row {i}");
    }
    let (last, expiry) = o.expiry().unwrap();
    assert_eq!(last.holder.as_deref(), Some("b"));
    assert_eq!(expiry, t0 + 37 * S);
}

#[test]
fn writes_keep_client_gos_record() {
    let now = Timestamp::from_second(1_000).unwrap();
    let created = acquisition(None, "job", "pod-a", "d1", 15, now);
    let s = Seen::of(&created);
    assert_eq!(s.holder.as_deref(), Some("pod-a"));
    assert_eq!(s.transitions, 0);
    assert!(is_ours(&created, "pod-a", "d1"));
    assert!(!is_ours(&created, "pod-a", "d2"));
    let taken = acquisition(Some(&created), "job", "pod-b", "d2", 15, now);
    assert_eq!(Seen::of(&taken).transitions, 1);
    let again = acquisition(Some(&taken), "job", "pod-b", "d2", 15, now);
    assert_eq!(
        Seen::of(&again).transitions,
        1,
        "a new term of the same holder"
    );
    let shown = with_token(again, 42);
    assert_eq!(shown_token(&shown), Some(42));
    // A client-go elector takes over after pod-b crashed: it keeps the
    // annotations, but the token is not its own.
    let mut theirs = shown.clone();
    theirs.spec.as_mut().unwrap().holder_identity = Some("client-go-1".into());
    assert_eq!(shown_token(&theirs), None);
    let released = release(shown, now);
    let s = Seen::of(&released);
    assert_eq!((s.holder, s.duration, s.transitions), (None, S, 1));
    assert_eq!(shown_token(&released), None);
}
