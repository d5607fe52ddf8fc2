//! The lock file against itself: one holder, fencing, deleted files.

use super::*;

#[test]
fn one_holder_at_a_time_and_fencing_grows() {
    let dir = std::env::temp_dir().join(format!("leaderd-file-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("a.lock");
    let _ = std::fs::remove_file(&path);
    let mut a = FileLease::new(&path, "a");
    let mut b = FileLease::new(&path, "b");
    let Acquire::Won {
        fencing_token: first,
        ..
    } = a.acquire_now().unwrap()
    else {
        panic!()
    };
    let Acquire::Held { holder, .. } = b.acquire_now().unwrap() else {
        panic!("b must be refused")
    };
    assert_eq!(holder.id.as_deref(), Some("a"));
    assert!(matches!(a.renew_now().unwrap(), Renew::Renewed { .. }));
    assert_eq!(
        b.peek_now().unwrap().holder.and_then(|h| h.fencing_token),
        Some(first)
    );
    assert!(a.release_now());
    let Acquire::Won {
        fencing_token: second,
        ..
    } = b.acquire_now().unwrap()
    else {
        panic!()
    };
    assert!(second > first);
    std::fs::remove_file(&path).unwrap();
    assert!(
        matches!(b.renew_now().unwrap(), Renew::Lost { .. }),
        "a deleted lock file is a lost lease"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn scratch(name: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("leaderd-file-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("a.lock");
    (dir, path)
}

fn pair(path: &Path, ttl: Duration) -> (FileLease, FileLease) {
    let a = FileLease {
        ttl,
        ..FileLease::new(path, "a")
    };
    let b = FileLease {
        ttl,
        ..FileLease::new(path, "b")
    };
    (a, b)
}

fn held(r: Result<Acquire, Error>) -> bool {
    matches!(r, Ok(Acquire::Held { .. }))
}

fn won(r: Result<Acquire, Error>) -> bool {
    matches!(r, Ok(Acquire::Won { .. }))
}

/// The file deleted under its holder: `.held` still names it, so nobody
/// takes the path while the holder works, and everybody may the moment it
/// lets go (no TTL to wait out).
#[test]
fn a_file_deleted_under_its_holder_is_free_the_moment_it_lets_go() {
    let (dir, path) = scratch("deleted");
    let (mut a, mut b) = pair(&path, Duration::from_secs(3600));
    assert!(won(a.acquire_now()));
    std::fs::remove_file(&path).unwrap();
    assert!(
        held(b.acquire_now()),
        "b took the path while a still worked"
    );
    let peeked = b.peek_now().unwrap().holder.and_then(|h| h.id);
    assert_eq!(peeked.as_deref(), Some("a"), "status names the holder");
    assert!(matches!(a.renew_now(), Ok(Renew::Lost { .. })));
    assert!(
        held(b.acquire_now()),
        "a let go when it learned of the loss, before its work stopped"
    );
    // a's work has stopped: the machine releases, or acquires again.
    assert!(!a.release_now(), "the lease was no longer a's to release");
    assert!(won(b.acquire_now()), "free once a let go");
    assert!(held(a.acquire_now()));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Found by the nemesis (seed 7002, lock file, 161 s in: two children for
/// 1 ms, two `/leader` 200s for 83 ms): a holder that learned its file was
/// deleted unlocked it at once, before the machine had stopped its child,
/// so a waiter locked the new file while that child still ran. Now the
/// lock stays until the work stopped, which the next acquire means.
#[test]
fn a_holder_keeps_its_deleted_file_locked_until_it_acquires_again() {
    let (dir, path) = scratch("lost");
    let (mut a, mut b) = pair(&path, Duration::from_secs(3600));
    assert!(won(a.acquire_now()));
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(a.renew_now(), Ok(Renew::Lost { .. })));
    for _ in 0..3 {
        assert!(held(b.acquire_now()), "b took it while a's work may run");
    }
    assert!(won(a.acquire_now()), "a looks again once its work stopped");
    assert!(held(b.acquire_now()));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Found by the contract scene that deletes the file three times, here with
/// `.held` deleted too (what a candidate remembers is all that is left): a
/// waiter still waiting out the first deleted file must notice the holder's
/// next file, or when that one is deleted too it takes the path at once
/// while the holder still works on the deleted file.
#[test]
fn a_waiter_waiting_out_a_deleted_file_watches_the_next_one() {
    let (dir, path) = scratch("next");
    let ttl = Duration::from_millis(300);
    let (mut a, mut b) = pair(&path, ttl);
    let delete = || {
        std::fs::remove_file(&path).unwrap();
        std::fs::remove_file(held::path(&path)).unwrap();
    };
    assert!(won(a.acquire_now()));
    assert!(held(b.acquire_now()));
    delete();
    assert!(held(b.acquire_now()), "a deleted file is waited out");
    assert!(matches!(a.renew_now(), Ok(Renew::Lost { .. })));
    assert!(won(a.acquire_now()));
    assert!(held(b.acquire_now()), "a holds the new file");
    std::thread::sleep(ttl + Duration::from_millis(50));
    // The first vacancy has been waited out; the second has just begun,
    // and a has not looked yet.
    delete();
    assert!(
        held(b.acquire_now()),
        "b took the path while a still worked on the file deleted under it"
    );
    std::thread::sleep(ttl + Duration::from_millis(50));
    assert!(won(b.acquire_now()));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `.held` is opened as the lock file is: a symlink planted there is
/// refused with an error naming it, never followed.
#[test]
fn a_symlink_planted_at_held_is_refused() {
    let (dir, path) = scratch("planted");
    std::os::unix::fs::symlink("/etc/passwd", held::path(&path)).unwrap();
    let mut a = FileLease::new(&path, "a");
    let Err(Error::File {
        path: named,
        detail,
    }) = a.acquire_now()
    else {
        panic!("a planted .held must be refused")
    };
    assert!(named.ends_with("a.lock.held"), "{named}");
    assert!(detail.contains("symbolic link"), "{detail}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A rolling update on the lock file moved leadership twice (o1 → o2 →
/// n2) in about one run in five: a standby's copy of the registry is a
/// heartbeat old, and with no release announced, none read it before taking
/// the lease, so an old one that had not seen the new one took it. The
/// first look that finds the released lock announces the release to its
/// own runner (which reads the registry first) and lets go; the next
/// attempt takes it. Once per term; without a runner (`status`), at once.
#[test]
fn a_release_found_by_polling_is_announced_before_it_is_taken() {
    let (dir, path) = scratch("announce");
    let (mut a, mut b) = pair(&path, Duration::from_secs(3600));
    let (notices, mut woken) = tokio::sync::mpsc::unbounded_channel();
    let wakeups = Wakeups {
        notices,
        retry: Duration::from_secs(1),
        stop: tokio_util::sync::CancellationToken::new(),
    };
    b.wakeups.set(wakeups).unwrap();
    assert!(won(a.acquire_now()));
    assert!(held(b.acquire_now()));
    assert!(woken.try_recv().is_err(), "held is no release");
    assert!(a.release_now());
    assert!(held(b.acquire_now()), "b took a release not yet announced");
    assert!(woken.try_recv().is_ok(), "b's runner was not woken");
    assert!(
        b.peek_now().unwrap().holder.is_none(),
        "b kept the lock it let go"
    );
    assert!(won(b.acquire_now()), "announced once, then taken");
    // The next term's end is announced again.
    assert!(b.release_now());
    assert!(won(a.acquire_now()));
    assert!(held(b.acquire_now()));
    assert!(a.release_now());
    assert!(held(b.acquire_now()));
    assert!(woken.try_recv().is_ok());
    assert!(won(b.acquire_now()));
    let _ = std::fs::remove_dir_all(&dir);
}
