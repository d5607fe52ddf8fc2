//! ZooKeeper needs nothing installed to fence (#40): the leader's queue
//! node exists exactly while it is first in line, and a new leader's is
//! another node, so a worker's `multi(check(NODE, -1), write)` from a
//! session of its own commits only in that term: refused after a handover,
//! and after the term expired with no successor. The child has the node as
//! `LEADERD_ZOOKEEPER_FENCE_NODE`, and `/leader` (while leading) as
//! `fence.zookeeper_fence_node`.

use crate::support;

use std::time::Duration;
use support::Leaderd;
use support::zookeeper::ZooKeeper;

const PATIENCE: Duration = Duration::from_secs(30);

/// A worker's fenced write: `results` set to `value` only if `node` still
/// exists, in one transaction. Whether it committed.
fn fenced_write(zk: &ZooKeeper, node: &str, value: &str) -> bool {
    zk.with(async |c| {
        let mut txn = c.new_multi_writer();
        txn.add_check_version(node, -1).unwrap();
        txn.add_set_data("/results", value.as_bytes(), None)
            .unwrap();
        txn.commit().await.is_ok()
    })
}

fn node(leader: &Leaderd) -> String {
    let (_, view) = leader.leader().unwrap();
    view["fence"]["zookeeper_fence_node"]
        .as_str()
        .unwrap_or_else(|| panic!("no fence node in {view}"))
        .to_string()
}

#[test]
fn a_write_checked_against_the_leaders_queue_node_commits_only_in_its_term() {
    let zk = ZooKeeper::start(1);
    zk.put("/results", "none");
    let key = support::key("fence-zk");
    let dir = support::Scratch::new("fence-zk");
    let run = |id: &str| {
        let note = dir.join(format!("{id}.env"));
        let script = format!(
            "echo \"$LEADERD_ZOOKEEPER_FENCE_NODE $LEADERD_FENCING_TOKEN\" >> {}; exec sleep 600",
            support::path_str(&note)
        );
        let http = format!("127.0.0.1:{}", support::free_port());
        let connect = zk.connect();
        let args = [
            "run",
            "--id",
            id,
            "--http",
            &http,
            "--zookeeper",
            &connect,
            "--key",
            &key,
            "--ttl",
            "4s",
            "--",
            "sh",
            "-c",
            &script,
        ];
        Leaderd::attach(id, &http, support::spawn(&args))
    };
    let noted = |id: &str| {
        support::eventually(PATIENCE, "the child's note", || {
            std::fs::read_to_string(dir.join(format!("{id}.env")))
                .ok()
                .filter(|t| t.ends_with('\n'))
        })
    };
    let mut a = run("a");
    a.wait_leading(PATIENCE);
    let first = node(&a);
    assert!(first.starts_with(&format!("/leaderd/{key}/c-")), "{first}");
    assert_eq!(noted("a").split_whitespace().next(), Some(first.as_str()));
    assert!(fenced_write(&zk, &first, "by a"), "the term's own write");

    // A handover: the old term's write is refused, the new one's commits.
    let mut b = run("b");
    support::eventually(PATIENCE, "b to stand by", || b.leader().map(drop));
    // A standby shows no term's node.
    assert!(
        b.leader().unwrap().1["fence"]
            .get("zookeeper_fence_node")
            .is_none()
    );
    a.signal("TERM");
    a.wait_exit(PATIENCE);
    b.wait_leading(PATIENCE);
    let second = node(&b);
    assert_ne!(first, second);
    assert_eq!(noted("b").split_whitespace().next(), Some(second.as_str()));
    assert!(
        !fenced_write(&zk, &first, "late by a"),
        "a deposed term wrote"
    );
    assert!(fenced_write(&zk, &second, "by b"));

    // The term ends by expiry, nobody else campaigning: refused too.
    b.signal("KILL");
    b.wait_exit(PATIENCE);
    support::eventually(PATIENCE, "b's session to expire", || {
        zk.with(async |c| c.check_stat(&second).await.ok()?.is_none().then_some(()))
    });
    assert!(
        !fenced_write(&zk, &second, "late by b"),
        "an expired term wrote"
    );
    let last = zk.with(async |c| c.get_data("/results").await.unwrap().0);
    assert_eq!(String::from_utf8_lossy(&last), "by b");
}
