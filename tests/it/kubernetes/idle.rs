//! What idle standbys cost the API server (issue #47), counted by the API
//! server itself (`apiserver_request_total`): a standby on a live watch
//! reads the Lease nothing on a timer. The count is of Lease GETs, the
//! registry's object's included, so the baseline is the leader alone (it
//! reads the registry every renew interval) and the API server's own.
//! Shown to catch what it claims against a standby whose Role lacks
//! `watch`, which reads once per TTL and says so (`standby_reads:
//! fallback`).

use super::{Candidate, PATIENCE, logs};
use crate::support;
use serde_json::json;
use std::time::Duration;
use support::eventually;
use support::kube::{ADMIN, Kube};

const TTL: &str = "2s";
/// Several lease durations: a polling standby reads about eight times in
/// it.
const WINDOW: Duration = Duration::from_secs(16);

/// The Lease GETs the API server has served so far (its own identity
/// Lease's included: hence the baseline).
fn lease_gets(kube: &Kube) -> f64 {
    let (_, body) = kube.raw_on(0, ADMIN, "GET", "/metrics", None);
    body.lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(|l| l.contains("resource=\"leases\"") && l.contains("verb=\"GET\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Lease GETs over [`WINDOW`].
fn gets_over_window(kube: &Kube) -> f64 {
    let before = lease_gets(kube);
    std::thread::sleep(WINDOW); // the measurement window itself
    lease_gets(kube) - before
}

#[test]
fn a_standby_on_a_live_watch_reads_the_lease_nothing_on_a_timer() {
    let kube = Kube::start(1);
    let key = support::key("k8s-idle");
    let (_dir, logs) = logs("k8s-idle", 4);
    let c = Candidate::on(&kube, &key, TTL);
    let a = c.run("a", &logs[0], &[]);
    a.wait_leading(PATIENCE);
    // The leader alone (its renewals, its registry reads) and the API
    // server's own reads (its identity Lease).
    let baseline = gets_over_window(&kube);
    let standbys: Vec<_> = ["b", "c"]
        .iter()
        .zip(&logs[1..])
        .map(|(id, log)| c.run(id, log, &[]))
        .collect();
    let reads = |n: &support::Leaderd| Some(n.leader()?.1["standby_reads"].as_str()?.to_string());
    for n in &standbys {
        eventually(PATIENCE, "a standby on its watch", || {
            (reads(n)? == "watch").then_some(())
        });
    }
    // A new watch's catch-up look reads the registry once: at most one
    // per standby in the window, whatever the lease's pace.
    let idle = gets_over_window(&kube);
    assert!(
        idle <= baseline + 3.0,
        "{idle} Lease GETs in {WINDOW:?} with two standbys on live watches (baseline {baseline})"
    );

    // The planted violation: a standby whose Role lacks `watch` reads on
    // its timer, says so, and the same count sees it.
    let no_watch = [json!({
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "update", "patch", "create"],
    })];
    kube.role("no-watch", &json!(no_watch), "no-watch");
    let blind = Candidate {
        user: "no-watch",
        ..Candidate::on(&kube, &key, TTL)
    };
    let d = blind.run("d", &logs[3], &[]);
    eventually(PATIENCE, "the watch-less standby to say it polls", || {
        (reads(&d)? == "fallback").then_some(())
    });
    let polling = gets_over_window(&kube);
    assert!(
        polling >= baseline + 5.0,
        "a watch-less standby read the Lease only {polling} times in {WINDOW:?} (baseline {baseline})"
    );
}
