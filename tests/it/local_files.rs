//! Issue #23, cases 4 and 5: the lock file deleted from outside while a
//! leader works never makes two children, and nobody else can reach a
//! lease's local files (a symlink planted at the path, a file or directory
//! of another user's, a directory others can swap files in).

use crate::support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;
use support::{Leaderd, Scratch, eventually, most_alive, probe_child, probe_events, the_leader};

/// The suite's bound: what is awaited happens by itself, and a machine
/// under load may stall for seconds first.
const PATIENCE: Duration = support::WAIT;
/// The user `nobody`, whom root's tests make the other local user.
const NOBODY: u32 = 65534;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).expect("chown as root");
}

/// `leaderd check` with `args` and `env`: (exit code, everything it said).
fn check(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut all = vec!["check", "--http", "off"];
    all.extend_from_slice(args);
    let out = support::command(&all)
        .envs(env.iter().copied())
        .output()
        .expect("run leaderd");
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn a_lock_file_deleted_from_outside_never_makes_two_children() {
    let dir = Scratch::new(&format!("lock-deleted-{}", support::os::below(1 << 30)));
    let lock = dir.join("jobs.lock");
    let logs: Vec<_> = ["a", "b"].iter().map(|id| dir.join(id)).collect();
    let probe = probe_child();
    let nodes: Vec<Leaderd> = ["a", "b"]
        .iter()
        .zip(&logs)
        .map(|(id, log)| {
            Leaderd::run(
                id,
                &[
                    "--lock-file",
                    support::path_str(&lock),
                    "--ttl",
                    "2s",
                    "--retry-interval",
                    "300ms",
                    "--",
                    &probe,
                    support::path_str(log),
                ],
            )
        })
        .collect();
    for _ in 0..3 {
        let (leader, _) = the_leader(&nodes, PATIENCE);
        eventually(PATIENCE, "the leader's child", || {
            let events = probe_events(&logs[leader]);
            let starts = events.iter().filter(|e| e.kind == "start").count();
            let stops = events.iter().filter(|e| e.kind == "stop").count();
            (starts > stops).then_some(())
        });
        std::fs::remove_file(&lock).expect("delete the lock file");
        eventually(PATIENCE, "the old leader to step down", || {
            (!nodes[leader].is_leader()).then_some(())
        });
    }
    the_leader(&nodes, PATIENCE);
    assert!(most_alive(&logs) <= 1, "two children ran at once");
}

#[test]
fn a_symlink_at_the_lock_path_is_refused_and_never_written_through() {
    let dir = Scratch::new(&format!("lock-symlink-{}", support::os::below(1 << 30)));
    let target = dir.join("precious");
    std::fs::write(&target, "keep me\n").unwrap();
    let lock = dir.join("x.lock");
    std::os::unix::fs::symlink(&target, &lock).unwrap();
    for command in ["check", "run"] {
        let (code, said) = if command == "check" {
            check(&["--lock-file", support::path_str(&lock)], &[])
        } else {
            let (code, _, err) = support::run_to_end(&[
                "run",
                "--http",
                "off",
                "--lock-file",
                support::path_str(&lock),
            ]);
            (code, err)
        };
        assert_eq!(code, 2, "{command}: {said}");
        assert!(said.contains("symbolic link"), "{command}: {said}");
    }
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me\n");
}

#[test]
fn a_directory_others_can_swap_files_in_is_refused() {
    let dir = Scratch::new(&format!("lock-open-dir-{}", support::os::below(1 << 30)));
    let open = dir.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let lock = open.join("x.lock");
    let (code, said) = check(&["--lock-file", support::path_str(&lock)], &[]);
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("sticky"), "{said}");
    // With the sticky bit (as /tmp has), others cannot rename our file away.
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let (code, said) = check(&["--lock-file", support::path_str(&lock)], &[]);
    assert_eq!(code, 0, "{said}");
    let mode = std::fs::metadata(&lock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "created 0600");
    // The admin socket's directory gets the same care.
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let socket = open.join("admin.sock");
    let (code, _, err) = support::run_to_end(&[
        "run",
        "--http",
        "off",
        "--lock-file",
        support::path_str(&dir.join("y.lock")),
        "--admin-socket",
        support::path_str(&socket),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("admin.socket") && err.contains("sticky"),
        "{err}"
    );
}

/// As root, with `nobody` as the other local user: a lock file of theirs at
/// the path (held with `flock` for as long as they like, in the issue) and
/// a per-user directory they created first are refused, never used.
#[test]
fn another_users_files_are_refused() {
    if !is_root() {
        eprintln!("skipped: needs root to act as another user (nobody)");
        return;
    }
    let dir = Scratch::new(&format!("lock-other-user-{}", support::os::below(1 << 30)));
    let sticky = dir.join("tmp");
    std::fs::create_dir(&sticky).unwrap();
    std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let lock = sticky.join("x.lock");
    std::fs::write(&lock, "").unwrap();
    chown(&lock, NOBODY);
    let (code, said) = check(&["--lock-file", support::path_str(&lock)], &[]);
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("belongs to another user"), "{said}");
    // The default without XDG_RUNTIME_DIR: leaderd-UID under TMPDIR, made
    // 0700 by leaderd; one that another user made first is refused.
    let tmp = support::path_str(&sticky);
    let (code, said) = check(&["--key", "dflt"], &[("TMPDIR", tmp)]);
    assert_eq!(code, 0, "{said}");
    let own = sticky.join("leaderd-0");
    let meta = std::fs::metadata(&own).unwrap();
    assert_eq!((meta.uid(), meta.permissions().mode() & 0o777), (0, 0o700));
    assert!(own.join("leaderd-dflt.lock").exists());
    std::fs::remove_dir_all(&own).unwrap();
    std::fs::create_dir(&own).unwrap();
    chown(&own, NOBODY);
    let (code, said) = check(&["--key", "dflt"], &[("TMPDIR", tmp)]);
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("another user created it first"), "{said}");
}
