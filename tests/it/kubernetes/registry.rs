//! The registry's Lease (`NAME-candidates`): one annotation per candidate
//! process (`leaderd.io/candidate.ID.INSTANCE`),
//! and a dead candidate's dropped from the object — not only from the
//! listing — once it has lapsed by more than a TTL, by a live candidate's
//! conditional patch.

use super::{Candidate, PATIENCE, logs};
use crate::support;
use std::time::Duration;
use support::backends::lease_name;
use support::eventually;
use support::kube::Kube;

/// The candidates' annotations on the registry's Lease.
fn annotated(kube: &Kube, key: &str) -> Vec<String> {
    let registry = format!("{}-candidates", lease_name(key));
    let Some(lease) = kube.lease(&registry) else {
        return Vec::new();
    };
    let mut names: Vec<String> = lease["metadata"]["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, _)| k.strip_prefix("leaderd.io/candidate."))
        // ID.INSTANCE: the id, without the process's instance.
        .map(|k| k.rsplit_once('.').map_or(k, |(id, _)| id).to_string())
        .collect();
    names.sort();
    names
}

#[test]
fn a_dead_candidates_annotation_is_pruned_from_the_registry_object() {
    let kube = Kube::start(1);
    let key = support::key("k8s-prune");
    let (_dir, logs) = logs("k8s-prune", 2);
    let c = Candidate::on(&kube, &key, "2s");
    // A 1 s registry heartbeat: a record then lapses at the TTL (2 s),
    // not the default's four minutes.
    let fast = [("LEADERD_REGISTRY_HEARTBEAT", "1s")];
    let a = c.run("a", &logs[0], &fast);
    let mut b = c.run("b", &logs[1], &fast);
    eventually(PATIENCE, "both candidates annotated", || {
        (annotated(&kube, &key) == ["a", "b"]).then_some(())
    });
    // b dies, leader or not: a lives on and keeps registering.
    b.signal("KILL");
    b.wait_exit(PATIENCE);
    // Its entry lapses two heartbeats (at least a TTL) after its last
    // write and is dropped a lapse later, at a live candidate's next
    // registration: about 4 s here.
    let gone = eventually(Duration::from_secs(30), "b's annotation pruned", || {
        let names = annotated(&kube, &key);
        (names == ["a"]).then_some(names)
    });
    assert_eq!(gone, ["a"]);
    a.wait_leading(PATIENCE);
    assert_eq!(annotated(&kube, &key), ["a"], "a's own entry is kept");
}
