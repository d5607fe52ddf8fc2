//! ZooKeeper's queue: the leader is the first in line, and stays first, or
//! its term ends before anyone else can start. Each test here was a hole,
//! found by the nemesis or by CI.

use super::{PATIENCE, Rig};
use crate::support;
use std::time::{Duration, Instant};
use support::zk_gate::ZkGate;
use support::zookeeper::ZooKeeper;
use support::{Leaderd, eventually, probe_events, the_leader};

/// Found by the nemesis (seed 9010): a leader whose queue node was gone
/// kept leading, so a later deletion of its lease node let the next in
/// line start beside it. Now a leader out of line stops its work at once,
/// and its lease node goes only after.
#[test]
fn a_leader_whose_queue_node_is_deleted_stops_before_anyone_else_starts() {
    let zk = ZooKeeper::start(1);
    let r = Rig::new("zk-unqueued", 2);
    // a's way to the server, slowed before the lease node is deleted: a
    // leader that had not stopped by then learns of it late.
    let proxy = support::proxy::Proxy::start(zk.servers[0].client_port);
    let a = r.start(0, &format!("127.0.0.1:{}", proxy.port));
    a.wait_leading(PATIENCE);
    eventually(PATIENCE, "a's child", || r.child_running(0).then_some(()));
    let b = r.start(1, &zk.connect());
    let election = format!("/leaderd/{}", r.key);
    eventually(PATIENCE, "b to queue", || {
        (zk.children(&election).len() == 3).then_some(())
    });
    // The first queue node is a's.
    let mut queue: Vec<String> = zk
        .children(&election)
        .into_iter()
        .filter(|n| n.starts_with("c-"))
        .collect();
    queue.sort_by_key(|n| n.rsplit('-').next().and_then(|s| s.parse::<u64>().ok()));
    zk.delete(&format!("{election}/{}", queue[0]));
    let deleted = Instant::now();
    // Given the time to notice, then the lease node deleted too.
    let _ = std::panic::catch_unwind(|| {
        eventually(Duration::from_secs(2), "a's child to stop", || {
            (!r.child_running(0)).then_some(())
        })
    });
    proxy.slow(Duration::from_millis(400));
    zk.delete(&format!("{election}/leader"));
    b.wait_leading(PATIENCE);
    proxy.slow(Duration::ZERO);
    eprintln!("b led {:?} after a's queue node went", deleted.elapsed());
    eventually(PATIENCE, "a to queue again", || {
        (zk.children(&election).len() == 3).then_some(())
    });
    r.assert_one_child_at_a_time(&[&a, &b]);
}

/// Found by CI (the contract's lease-deleted scene): a candidate judged its
/// place from a listing of the queue taken before it queued. Another that
/// queued between the two calls was ahead of it unseen: the one behind took
/// the free lease, the first in line found it taken and waited on the lease
/// node, and once that was deleted from outside it took the lease while the
/// other still worked (two children for 12 ms). Two gates put the calls in
/// that order: b's queue node is held back until a has queued, and a's
/// lease node until b has queued.
#[test]
fn a_candidate_that_queued_second_while_joining_never_leads_before_the_first() {
    let zk = ZooKeeper::start(1);
    let r = Rig::new("zk-joining", 2);
    let port = zk.servers[0].client_port;
    let b_gate = ZkGate::start(port, format!("{}/c-", r.key).as_bytes());
    let a_gate = ZkGate::start(port, format!("{}/leader", r.key).as_bytes());
    // Calls held at a gate are answered late, not lost: patience to match.
    let start = |i: usize, connect: &str| {
        let args = ["--zookeeper", connect, "--key", &r.key, "--ttl", "30s"];
        let timeout = ["--zookeeper-timeout", "9s", "--retry-interval", "300ms"];
        let child = support::exclusive_probe(&r.logs[i]);
        let child: Vec<&str> = child.iter().map(String::as_str).collect();
        Leaderd::run(&format!("c{i}"), &[&args[..], &timeout, &child].concat())
    };
    let b = start(1, &b_gate.connect());
    // b has listed the queue (empty) and sent its queue node: held back.
    b_gate.wait_held(PATIENCE);
    let a = start(0, &a_gate.connect());
    // a has queued (first) and sent the lease node: held back.
    a_gate.wait_held(PATIENCE);
    let nodes = [a, b];
    b_gate.open();
    let election = format!("/leaderd/{}", r.key);
    let queued = || {
        zk.children(&election)
            .iter()
            .filter(|n| n.starts_with("c-"))
            .count()
    };
    eventually(PATIENCE, "b to queue", || (queued() == 2).then_some(()));
    // b, second in line, waits; it must not take the free lease.
    let said = eventually(PATIENCE, "b to wait or lead", || {
        let log = nodes[1].log().join("\n");
        (log.contains("lease held by another candidate") || log.contains("lease acquired"))
            .then_some(log)
    });
    assert!(
        !said.contains("lease acquired"),
        "b took the lease while a was first in line:\n{said}"
    );
    a_gate.open();
    let (leader, _) = the_leader(&nodes, PATIENCE);
    assert_eq!(
        leader,
        0,
        "b led while a was first in line:\n{}",
        nodes[1].log().join("\n")
    );
    eventually(PATIENCE, "a's child", || r.child_running(0).then_some(()));
    // The lease node deleted from outside: a, first in line, stops its
    // work and takes the lease again; b, behind it, never starts.
    zk.delete(&format!("{election}/leader"));
    eventually(PATIENCE, "a to lead again with a new child", || {
        let starts = probe_events(&r.logs[0])
            .iter()
            .filter(|e| e.kind == "start")
            .count();
        (starts == 2 && r.child_running(0)).then_some(())
    });
    assert!(
        probe_events(&r.logs[1]).is_empty(),
        "b, second in line, started its child:\n{}",
        nodes[1].log().join("\n")
    );
    r.assert_one_child_at_a_time(&[&nodes[0], &nodes[1]]);
    // `check` shows the same from outside.
    let out = super::check(&zk, &r.key);
    assert!(
        out.contains("the lease is held by c0 (fencing token 0x")
            && out.contains("), first in line; in line: c0, c1"),
        "{out}"
    );
}

/// The leader checks its place at every renewal, not only that its queue
/// node stands: with a node ahead of it (put there by hand here; the join
/// race above did it by a bug) the first in line would take the lease the
/// moment it vanished, so the term ends, the lease node goes once the work
/// stopped, and nobody leads until the node ahead is gone.
#[test]
fn a_queue_node_put_ahead_of_the_leader_ends_its_term() {
    let zk = ZooKeeper::start(1);
    let r = Rig::new("zk-ahead", 1);
    let election = format!("/leaderd/{}", r.key);
    // The election made by hand, its sequence counter moved past 1, so a's
    // queue node is numbered 2 or more.
    zk.put("/leaderd", "");
    zk.put(&election, "");
    zk.put(&format!("{election}/warm-up"), "");
    zk.delete(&format!("{election}/warm-up"));
    let a = r.start(0, &zk.connect());
    a.wait_leading(PATIENCE);
    eventually(PATIENCE, "a's child", || r.child_running(0).then_some(()));
    let ahead = format!("{election}/c-by-hand-0000000001");
    zk.put(&ahead, r#"{"id":"by-hand"}"#);
    a.wait_log(PATIENCE, "a queue node stands ahead of ours");
    eventually(
        PATIENCE,
        "a's child to stop and its lease node to go",
        || {
            let lease = zk.children(&election).iter().any(|n| n == "leader");
            (!r.child_running(0) && !lease).then_some(())
        },
    );
    assert!(!a.is_leader(), "a leads behind another in line");
    // `check` names the line in order, and a holder that is not first.
    let check = || super::check(&zk, &r.key);
    let out = check();
    assert!(
        out.contains("the lease is free; in line: by-hand, c0"),
        "{out}"
    );
    let lease = format!("{election}/leader");
    zk.put_ephemeral(&lease, r#"{"id":"thief"}"#, support::backends::THIEF_TTL);
    let out = check();
    assert!(
        out.contains("the lease is held by thief (fencing token 0x")
            && out.contains("), not first in line (")
            && out.contains("in line: by-hand, c0"),
        "{out}"
    );
    zk.delete(&lease);
    zk.delete(&ahead);
    a.wait_leading(PATIENCE);
    eventually(PATIENCE, "a's next child", || {
        r.child_running(0).then_some(())
    });
}
