//! The contract's vacancy rule against writes from outside (issue #46):
//! the holder's record cleared, re-pointed at another live candidate, its
//! duration shortened, or an old copy of another term put back, with the
//! store's own tools, as an operator, a restore or a peer would (the
//! delete has a test of its own). On every backend where the store has
//! the write: the holder's term ends, no child starts while another may
//! still run, and someone leads again.

use super::{PATIENCE, Scene, TTL, for_each_backend};
use crate::support;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::outside::{Done, Write};
use support::{Leaderd, eventually, most_alive, probe_child, probe_events, run_to_end};

/// A candidate whose probe child takes 500 ms to stop on SIGTERM, with an
/// admin socket (for a step-down) beside its log. `i` chooses the way in:
/// on Kubernetes candidate 0 has a Role without `watch`, so it learns of
/// changes only on its timer.
fn slow(scene: &dyn Scene, key: &str, i: usize, id: &str, log: &Path) -> Leaderd {
    let socket = log.with_extension("sock");
    let mut args = scene.candidate_args(key, i);
    args.extend(
        [
            "--ttl",
            TTL,
            "--retry-interval",
            "300ms",
            "--admin-socket",
            support::path_str(&socket),
            "--step-down-hold",
            "300ms",
            "--",
            &probe_child(),
            support::path_str(log),
            "--term-delay",
            "500",
        ]
        .map(String::from),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Leaderd::run(id, &args)
}

fn dump(logs: &[PathBuf], nodes: &[Leaderd]) -> String {
    let mut out = String::new();
    for (log, node) in logs.iter().zip(nodes) {
        out += &std::fs::read_to_string(log).unwrap_or_default();
        out += &node.log().join("\n");
        out += "\n";
    }
    out
}

/// One write on a fresh election of three; `false` where the store has no
/// such write.
fn round(scene: &dyn Scene, write: &Write) -> bool {
    let name = scene.name();
    let key = support::key("contract-outside");
    let dir = support::Scratch::new(&format!("outside-{}", support::os::below(1 << 30)));
    let ids = ["a", "b", "c"];
    let logs: Vec<PathBuf> = ids.iter().map(|id| dir.join(id)).collect();
    // a first, so it leads; b is the Kubernetes scene's blind candidate.
    let mut nodes = vec![slow(scene, &key, 1, "a", &logs[0])];
    nodes[0].wait_leading(PATIENCE);
    nodes.push(slow(scene, &key, 0, "b", &logs[1]));
    nodes.push(slow(scene, &key, 2, "c", &logs[2]));
    if *write == Write::Restore {
        // a's term saved; a steps down and another takes over: the copy
        // put back names a, the process that wrote it.
        scene.save(&key);
        let socket = logs[0].with_extension("sock");
        let (code, out, err) =
            run_to_end(&["step-down", "--admin-socket", support::path_str(&socket)]);
        assert_eq!(code, 0, "{out}{err}");
        eventually(PATIENCE, "another leader", || {
            (!nodes[0].is_leader() && nodes[1..].iter().any(Leaderd::is_leader)).then_some(())
        });
    }
    let (holder, _) = support::the_leader(&nodes, PATIENCE);
    // Every standby has looked at the lease and stands by: the write must
    // meet candidates that each have a view of the term it changes.
    for (_, node) in nodes.iter().enumerate().filter(|(i, _)| *i != holder) {
        node.wait_log(PATIENCE, "lease held by another candidate");
    }
    let child = eventually(PATIENCE, "the holder's child", || {
        probe_events(&logs[holder])
            .into_iter()
            .rfind(|e| e.kind == "start")
    });
    if *write != Write::Restore {
        scene.save(&key);
    }
    let done = scene.outside(&key, write);
    match done {
        Done::No => {
            eprintln!("{name}: {write:?}: the store has no such write; not applicable");
            return false;
        }
        Done::Ends => {
            let stopped = || {
                probe_events(&logs[holder])
                    .iter()
                    .any(|e| e.kind == "stop" && e.pid == child.pid)
            };
            let began = std::time::Instant::now();
            while !stopped() && began.elapsed() < PATIENCE {
                std::thread::sleep(Duration::from_millis(20));
            }
            if !stopped() {
                let failed = format!("{name}: {write:?}: the holder's term did not end");
                FAILED.lock().unwrap().push(failed);
            }
        }
        Done::Kept => {}
    }
    let (now, _) = support::the_leader(&nodes, PATIENCE * 2);
    eventually(PATIENCE, "the new leader's child", || {
        probe_events(&logs[now])
            .iter()
            .any(|e| e.kind == "start")
            .then_some(())
    });
    if most_alive(&logs) > 1 {
        eprintln!("{}", dump(&logs, &nodes));
        FAILED
            .lock()
            .unwrap()
            .push(format!("{name}: {write:?}: two children at once"));
        return true;
    }
    eprintln!(
        "{name}: {write:?}: {} led, {} leads, never two children",
        ids[holder], ids[now]
    );
    true
}

/// Every round runs, and the test fails at the end naming each write that
/// made two children at once: the whole picture in one run.
static FAILED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

#[test]
fn a_lease_changed_from_outside_ends_its_holders_term_and_starts_nobodys_early() {
    for_each_backend(|scene| {
        for write in [
            Write::Clear,
            Write::Repoint("c".into()),
            Write::Shorten,
            Write::Restore,
        ] {
            round(scene, &write);
        }
    });
    let failed = FAILED.lock().unwrap();
    assert!(failed.is_empty(), "{failed:#?}");
}

/// Two processes with one id (issue #46): both are told, the holder as
/// the standby, and neither leads in silence. The standby sees the lease
/// held under its own id at once; the holder sees the other's registry
/// record (kept under its instance) once it has run longer than a
/// replaced process's record can outlive it (a record's lapse and a TTL:
/// a 1 s registry heartbeat here, so that is a few seconds, not the
/// default's four minutes). When the second stops, the holder says so
/// again.
#[test]
fn two_processes_with_one_id_both_report_it() {
    for_each_backend(|scene| {
        let name = scene.name();
        let key = support::key("contract-same-id");
        let mut args = scene.args(&key);
        args.extend(["--registry-heartbeat".to_string(), "1s".to_string()]);
        let first = super::candidate_on(&args, "web-0", TTL, None);
        first.wait_leading(PATIENCE);
        let mut second = super::candidate_on(&args, "web-0", TTL, None);
        for (who, node) in [("the standby", &second), ("the holder", &first)] {
            node.wait_log(PATIENCE * 2, "give every candidate a unique --id");
            let (_, body) = node.leader().expect("/leader answers");
            assert_eq!(body["duplicate_id"], true, "{name}: {who}: {body}");
        }
        assert!(first.is_leader() && !second.is_leader(), "{name}");
        second.signal("TERM");
        assert!(second.wait_exit(PATIENCE).success());
        first.wait_log(
            PATIENCE,
            "no other process keeps a record under this instance's id any more",
        );
        eventually(PATIENCE, "duplicate_id cleared", || {
            let (_, body) = first.leader()?;
            (body["duplicate_id"] == false).then_some(())
        });
    });
}
