//! etcd needs nothing installed to fence (#40): a term's token is its
//! leader key's mod revision (`PREFIX/KEY/leader`, written only at the
//! acquisition), so a worker's transaction that compares that revision with
//! `LEADERD_FENCING_TOKEN` commits only while that term stands: refused
//! after a handover, and after the term expired with no successor yet.
//! The child has the key as `LEADERD_ETCD_LEADER_KEY`, and `/leader` as
//! `fence.etcd_leader_key`.

use crate::support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;
use support::Leaderd;
use support::etcd::Etcd;

/// The suite's bound: what is awaited happens by itself, and a machine
/// under load may stall for seconds first.
const PATIENCE: Duration = support::WAIT;

/// A worker's fenced write, as `etcdctl txn` takes it on stdin: the put
/// only if the leader key is still at `token`. Whether it committed.
fn fenced_put(etcd: &Etcd, leader_key: &str, token: u64, value: &str) -> bool {
    let mut txn = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", &etcd.endpoints(), "txn"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("etcdctl runs");
    let script =
        format!("mod(\"{leader_key}\") = \"{token}\"\n\nput results/last \"{value}\"\n\n\n");
    txn.stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = txn.wait_with_output().expect("etcdctl ends");
    let text = String::from_utf8_lossy(&out.stdout);
    match text.lines().next() {
        Some("SUCCESS") => true,
        Some("FAILURE") => false,
        _ => panic!("etcdctl txn: {text}"),
    }
}

fn token(node: &Leaderd) -> u64 {
    node.leader().unwrap().1["fencing_token"].as_u64().unwrap()
}

#[test]
fn a_transaction_compared_with_the_leader_keys_revision_commits_only_in_its_term() {
    let etcd = Etcd::start(1);
    let key = support::key("fence-etcd");
    let leader_key = format!("leaderd/{key}/leader");
    let dir = support::Scratch::new("fence-etcd");
    let run = |id: &str| {
        let mut args = vec![
            "--key".to_string(),
            key.clone(),
            "--ttl".into(),
            "2s".into(),
        ];
        args.extend(etcd.args());
        // The child notes what it would fence its writes with.
        let note = dir.join(format!("{id}.env"));
        let script = format!(
            "echo \"$LEADERD_ETCD_LEADER_KEY $LEADERD_FENCING_TOKEN\" > {}; exec sleep 600",
            support::path_str(&note)
        );
        args.extend(["--", "sh", "-c", &script].map(String::from));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let http = format!("127.0.0.1:{}", support::free_port());
        let mut full = vec!["run", "--id", id, "--http", &http];
        full.extend(args);
        Leaderd::attach(id, &http, support::spawn(&full))
    };
    let mut a = run("a");
    a.wait_leading(PATIENCE);
    let t1 = token(&a);
    let (_, view) = a.leader().unwrap();
    assert_eq!(
        view["fence"]["etcd_leader_key"].as_str(),
        Some(leader_key.as_str()),
        "{view}"
    );
    let noted = support::eventually(PATIENCE, "the child's note", || {
        std::fs::read_to_string(dir.join("a.env"))
            .ok()
            .filter(|t| t.ends_with('\n'))
    });
    assert_eq!(noted.trim(), format!("{leader_key} {t1}"));
    assert!(
        fenced_put(&etcd, &leader_key, t1, "by a"),
        "the term's own write"
    );
    assert!(
        fenced_put(&etcd, &leader_key, t1, "by a again"),
        "the same term again"
    );

    // A handover: the old term's write is refused, the new one's commits.
    let mut b = run("b");
    support::eventually(PATIENCE, "b to stand by", || b.leader().map(drop));
    a.signal("TERM");
    a.wait_exit(PATIENCE);
    b.wait_leading(PATIENCE);
    let t2 = token(&b);
    assert!(t2 > t1);
    assert!(
        !fenced_put(&etcd, &leader_key, t1, "late by a"),
        "a deposed term wrote"
    );
    assert!(fenced_put(&etcd, &leader_key, t2, "by b"));

    // The term ends by expiry, nobody else campaigning: refused too.
    b.signal("KILL");
    b.wait_exit(PATIENCE);
    support::eventually(PATIENCE, "the leader key to expire", || {
        etcd.ctl(&["get", &leader_key, "--print-value-only"])
            .filter(String::is_empty)
    });
    assert!(
        !fenced_put(&etcd, &leader_key, t2, "late by b"),
        "an expired term wrote"
    );
    assert_eq!(
        etcd.ctl(&["get", "results/last", "--print-value-only"])
            .as_deref(),
        Some("by b")
    );
}
