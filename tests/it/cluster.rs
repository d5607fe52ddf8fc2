//! Redis Cluster for real (issue #13): six nodes (three primaries, a
//! replica each); the primary that owns the election's slot is failed over
//! by its replica, then killed, with three candidates renewing throughout
//! and `/leader` polled every 10 ms on all of them.

use crate::support;

use std::time::{Duration, Instant};
use support::cluster::ClusterRig;
use support::{Leaderd, eventually, http_get};

const PATIENCE: Duration = Duration::from_secs(30);

fn candidates(rig: &ClusterRig, key: &str) -> Vec<Leaderd> {
    candidates_on(&rig.url(), key)
}

fn candidates_on(url: &str, key: &str) -> Vec<Leaderd> {
    ["a", "b", "c"]
        .iter()
        .map(|id| {
            Leaderd::run(
                id,
                &[
                    "--redis",
                    url,
                    "--key",
                    key,
                    "--ttl",
                    "3s",
                    "--redis-timeout",
                    "300ms",
                    "--retry-interval",
                    "300ms",
                ],
            )
        })
        .collect()
}

/// Polls every candidate's `/leader` every 10 ms until `done` says so:
/// the most that said "leader" at once, and the fencing tokens seen in order.
fn watch_until(nodes: &[Leaderd], mut done: impl FnMut() -> bool) -> (usize, Vec<u64>) {
    let (mut most, mut tokens) = (0, Vec::<u64>::new());
    let until = Instant::now() + PATIENCE;
    while Instant::now() < until {
        let leaders: Vec<u64> = nodes
            .iter()
            .filter_map(|n| match http_get(n.http_port, "/leader") {
                Some((200, body)) => body["fencing_token"].as_u64(),
                _ => None,
            })
            .collect();
        most = most.max(leaders.len());
        for token in leaders {
            if tokens.last() != Some(&token) {
                tokens.push(token);
            }
        }
        if done() {
            return (most, tokens);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("not done within {PATIENCE:?}; leaders seen at once: {most}, tokens {tokens:?}");
}

fn a_leader_on(rig: &ClusterRig, nodes: &[Leaderd], lease: &str, port: u16) -> bool {
    let Some(node) = rig.nodes.iter().find(|n| n.port == port && n.is_running()) else {
        return false;
    };
    let Some(stored) = node.get(lease) else {
        return false;
    };
    nodes
        .iter()
        .any(|n| n.is_leader() && stored.contains(&format!("\"id\":\"{}\"", n.id)))
}

#[test]
fn the_slot_owner_failed_over_then_killed_never_makes_two_leaders() {
    let mut rig = ClusterRig::start(3, 1);
    let key = support::key("cluster-failover");
    let lease = format!("leaderd:{{{key}}}:lease");
    let nodes = candidates(&rig, &key);
    let first = rig.owner_port(&lease).expect("an owner");
    eventually(PATIENCE, "a leader on the slot's owner", || {
        a_leader_on(&rig, &nodes, &lease, first).then_some(())
    });

    // CLUSTER FAILOVER by the owner's replica: the old owner is demoted.
    let replica = rig.replica_of(first).port;
    rig.nodes
        .iter()
        .find(|n| n.port == replica)
        .expect("known")
        .cmd(&["CLUSTER", "FAILOVER"]);
    let asked = Instant::now();
    let (most, mut tokens) = watch_until(&nodes, || {
        rig.owner_port(&lease) == Some(replica) && a_leader_on(&rig, &nodes, &lease, replica)
    });
    eprintln!(
        "CLUSTER FAILOVER: a leader on the new owner {:?} after asking",
        asked.elapsed()
    );
    assert_eq!(most, 1, "two leaders at once: {tokens:?}");

    // kill -9 of the (new) owner: its replica, the old owner, takes over.
    let index = rig
        .nodes
        .iter()
        .position(|n| n.port == replica)
        .expect("known");
    let killed = Instant::now();
    rig.nodes[index].kill();
    let (most, more) = watch_until(&nodes, || {
        rig.owner_port(&lease) == Some(first) && a_leader_on(&rig, &nodes, &lease, first)
    });
    eprintln!(
        "kill -9 of the slot owner: a leader on the promoted replica {:?} after the kill",
        killed.elapsed()
    );
    assert_eq!(most, 1, "two leaders at once: {more:?}");
    tokens.extend(more);
    assert!(
        tokens.windows(2).all(|w| w[0] <= w[1]),
        "fencing tokens went back: {tokens:?}"
    );
}

#[test]
fn check_names_the_slot_owner_and_the_cluster_state() {
    let rig = ClusterRig::start(3, 0);
    let url = rig.url();
    let (code, out, err) = support::run_to_end(&["check", "--redis", &url, "--key", "chk"]);
    assert_eq!(code, 0, "{out}{err}");
    let owner = rig
        .owner_port("leaderd:{chk.check}:lease")
        .expect("an owner");
    assert!(
        out.contains(&format!("(slot owner 127.0.0.1:{owner}): ROLE master")),
        "{out}"
    );
    assert!(out.contains("the cluster's state is ok"), "{out}");
    let (code, _, err) = support::run_to_end(&["check", "--redis", &format!("{url}/3")]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("only database 0"), "{err}");
}

/// Issue #23, case 7: the slot's owner frozen (SIGSTOP), listed first in
/// the URL: the cluster promotes its replica, and a candidate leads on it
/// while the old owner is still frozen, never two at once. leaderd used to
/// keep retrying the frozen owner, asking the seeds one after another.
#[test]
fn a_frozen_slot_owner_listed_first_is_replaced_by_its_replica() {
    let rig = ClusterRig::start(3, 1);
    let key = support::key("cluster-frozen");
    let lease = format!("leaderd:{{{key}}}:lease");
    let owner = rig.owner_port(&lease).expect("an owner");
    let replica = rig.replica_of(owner).port;
    let mut seeds = vec![format!("127.0.0.1:{owner}")];
    seeds.extend(
        rig.nodes
            .iter()
            .filter(|n| n.port != owner)
            .map(|n| format!("127.0.0.1:{}", n.port)),
    );
    let url = format!("redis+cluster://{}", seeds.join(","));
    let nodes = candidates_on(&url, &key);
    eventually(PATIENCE, "a leader on the slot's owner", || {
        a_leader_on(&rig, &nodes, &lease, owner).then_some(())
    });
    let frozen = rig.nodes.iter().find(|n| n.port == owner).expect("known");
    frozen.pause();
    let paused = Instant::now();
    let promoted = rig.nodes.iter().find(|n| n.port == replica).expect("known");
    let (most, tokens) = watch_until(&nodes, || {
        promoted.info("replication").contains("role:master")
            && a_leader_on(&rig, &nodes, &lease, replica)
    });
    eprintln!(
        "the slot owner frozen: a leader on its promoted replica {:?} later",
        paused.elapsed()
    );
    frozen.resume();
    assert_eq!(most, 1, "two leaders at once: {tokens:?}");
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens went back: {tokens:?}"
    );
}
