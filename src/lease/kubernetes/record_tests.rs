use super::*;

const S: Duration = Duration::from_secs(1);

#[test]
fn writes_keep_client_gos_record() {
    let now = Timestamp::from_second(1_000).unwrap();
    let created = acquisition(None, "job", "pod-a", "d1", 15, now);
    let s = Seen::of(&created);
    assert_eq!(s.holder.as_deref(), Some("pod-a"));
    assert_eq!(s.transitions, 0);
    assert!(is_ours(&created, "d1", &[&s]));
    assert!(!is_ours(&created, "d2", &[&s]));
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
    // Ours only while our latest write is there: a renewal someone else
    // wrote under our id (a client-go elector with the same id), or a
    // restored copy of an earlier term, is not.
    let ours = Seen::of(&shown);
    assert!(is_ours(&shown, "d2", &[&ours]));
    let renewed_by_another = renewal(shown.clone(), 15, Timestamp::from_second(1_001).unwrap());
    assert!(!is_ours(&renewed_by_another, "d2", &[&ours]));
    assert!(!is_ours(&created, "d1", &[&ours]));
    // An annotation someone added keeps it ours.
    let mut annotated = shown.clone();
    let notes = annotated.metadata.annotations.as_mut().unwrap();
    notes.insert("example.com/note".into(), "x".into());
    assert!(is_ours(&annotated, "d2", &[&ours]));
    let released = release(shown, now);
    let s = Seen::of(&released);
    assert_eq!((s.holder, s.duration, s.transitions), (None, S, 1));
    assert_eq!(shown_token(&released), None);
}

#[test]
fn a_cleared_holder_is_a_release_only_when_its_holder_announced_it() {
    let now = Timestamp::from_second(1_000).unwrap();
    let leaderd = with_token(acquisition(None, "job", "pod-a", "d1", 15, now), 7);
    let before = Seen::of(&leaderd);
    // leaderd's own release: its annotations gone.
    assert!(announced_release(
        &release(leaderd.clone(), now),
        Some(&before)
    ));
    assert!(announced_release(&release(leaderd.clone(), now), None));
    // The holder cleared from outside, annotations kept: not announced,
    // whether or not this waiter saw the term.
    let mut cleared = leaderd.clone();
    cleared.spec.as_mut().unwrap().holder_identity = None;
    assert!(!announced_release(&cleared, Some(&before)));
    assert!(!announced_release(&cleared, None));
    let mut emptied = leaderd.clone();
    emptied.spec.as_mut().unwrap().holder_identity = Some(String::new());
    assert!(!announced_release(&emptied, Some(&before)));
    // A client-go elector that took over from a crashed leaderd keeps its
    // annotations; its own release clears a client-go term.
    let mut theirs = leaderd.clone();
    theirs.spec.as_mut().unwrap().holder_identity = Some("go-1".into());
    let theirs_seen = Seen::of(&theirs);
    let mut go_release = theirs;
    go_release.spec.as_mut().unwrap().holder_identity = Some(String::new());
    assert!(announced_release(&go_release, Some(&theirs_seen)));
    assert!(!announced_release(&go_release, None));
}

#[test]
fn stamps_keep_microseconds() {
    let t = Timestamp::from_nanosecond(1_700_000_000_123_456_789).unwrap();
    assert_eq!(stamp(t).as_microsecond(), 1_700_000_000_123_456);
    assert_eq!(stamp(t).subsec_nanosecond() % 1000, 0);
}
