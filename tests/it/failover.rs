//! Issue #11: connections that follow a failover. A managed Redis fails over
//! by moving its address to a new primary; the connections leaderd already
//! has still reach the old node, now a replica that answers `READONLY`.

use crate::support;

use std::time::{Duration, Instant};
use support::proxy::Proxy;
use support::{FAST, Leaderd, Redis, eventually, run_to_end};

/// The suite's bound: what is awaited happens by itself, and a machine
/// under load may stall for seconds first.
const PATIENCE: Duration = support::WAIT;

fn replicating(replica: &Redis, primary: &Redis) {
    replica.cmd(&["REPLICAOF", "127.0.0.1", &primary.port.to_string()]);
    eventually(PATIENCE, "the replica to sync", || {
        replica
            .info("replication")
            .contains("master_link_status:up")
            .then_some(())
    });
}

fn through(proxy: &Proxy, key: &str, id: &str) -> Leaderd {
    let url = proxy.redis_url();
    let mut args = vec!["--redis", url.as_str(), "--key", key];
    args.extend_from_slice(FAST);
    Leaderd::run(id, &args)
}

#[test]
fn leader_and_standby_follow_an_address_that_moves_to_a_new_primary() {
    let (old, new) = (Redis::start(), Redis::start());
    replicating(&new, &old);
    let proxy = Proxy::start(old.port);
    let key = support::key("failover");
    let lease = format!("leaderd:{{{key}}}:lease");
    let mut nodes = [through(&proxy, &key, "a"), through(&proxy, &key, "b")];
    let leader = eventually(PATIENCE, "a leader", || {
        nodes.iter().position(Leaderd::is_leader)
    });
    let standby = 1 - leader;
    nodes[standby].wait_log(PATIENCE, "lease held by another candidate");
    eventually(PATIENCE, "the lease on the replica", || new.get(&lease));
    // The failover: promote the replica, demote the old primary under it,
    // move the address.
    new.cmd(&["REPLICAOF", "NO", "ONE"]);
    replicating(&old, &new);
    proxy.retarget(new.port);
    let moved = Instant::now();
    nodes[leader].wait_log(PATIENCE, "reconnecting to follow a failover");
    eventually(PATIENCE, "a leader renewing on the new primary", || {
        let holder: serde_json::Value = serde_json::from_str(&new.get(&lease)?).ok()?;
        let id = holder["id"].as_str()?;
        let leading = nodes.iter().find(|n| n.id == id)?.is_leader();
        (leading && new.pttl(&lease) > 1000).then_some(())
    });
    eprintln!(
        "leading on the new primary {:?} after the move",
        moved.elapsed()
    );
    // The standby, waiting all along, takes over on the new primary.
    let handover = Instant::now();
    nodes[leader].signal("TERM");
    assert_eq!(nodes[leader].wait_exit(PATIENCE).code(), Some(0));
    nodes[standby].wait_leading(PATIENCE);
    eprintln!("the standby took over in {:?}", handover.elapsed());
    let holder: serde_json::Value = serde_json::from_str(&new.get(&lease).unwrap()).unwrap();
    assert_eq!(holder["id"], nodes[standby].id.as_str());
}

#[test]
fn a_redis_cluster_node_is_named_as_such() {
    let dir = support::Scratch::new("cluster");
    let node = |name: &str| {
        let conf = dir.join(name);
        // The cluster bus listens on port + 10000: both must be free.
        Redis::start_on(
            support::free_cluster_port(),
            &[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                support::path_str(&conf),
            ],
        )
    };
    let redis = node("a.conf");
    // Every slot on this one node except the lease key's: the script gets MOVED.
    redis.cmd(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]);
    let key = support::key("cluster");
    let slot = redis.cmd(&["CLUSTER", "KEYSLOT", &format!("leaderd:{{{key}}}:lease")]);
    let redis::Value::Int(slot) = slot else {
        panic!("{slot:?}")
    };
    redis.cmd(&["CLUSTER", "DELSLOTS", &slot.to_string()]);
    let other = node("b.conf");
    other.cmd(&["CLUSTER", "ADDSLOTS", &slot.to_string()]);
    redis.cmd(&["CLUSTER", "MEET", "127.0.0.1", &other.port.to_string()]);
    eventually(PATIENCE, "the nodes to know each other", || {
        let slots = redis.cmd(&["CLUSTER", "SLOTS"]);
        matches!(&slots, redis::Value::Array(a) if a.len() >= 2).then_some(())
    });
    let (code, out, err) = run_to_end(&["check", "--redis", &redis.url(), "--key", &key]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("Redis Cluster") && err.contains("redis+cluster://"),
        "{err}"
    );
}
