//! The shipped alert rules and dashboard (`deploy/prometheus`,
//! `deploy/grafana`) against a real Prometheus scraping three leaderd
//! candidates on a real Redis: every dashboard query returns series, the
//! no-leader alert goes pending, fires and resolves around a killed leader
//! whose standbys cannot take over, and the two-leader alert fires while a
//! fourth candidate leads the same election name on another store.
//!
//! The rules are the shipped file with two `for` durations shortened (30s →
//! 3s, 5s → 1s) so the test takes seconds: the expressions are the shipped
//! ones, and `promtool test rules` checks the real durations.

use crate::support::prometheus::Prometheus;
use crate::support::{self, FAST, Leaderd, Redis, Scratch, WAIT, eventually, path_str};
use std::path::Path;
use std::time::Instant;

const RULES: &str = include_str!("../../deploy/prometheus/leaderd-alerts.yml");
const DASHBOARD: &str = include_str!("../../deploy/grafana/leaderd-dashboard.json");
const JOB: &str = "leaderd";

/// The rules with the test's shorter `for` durations.
fn scaled_rules() -> String {
    for shipped in ["for: 30s", "for: 5s"] {
        assert!(RULES.contains(shipped), "the rules changed: no `{shipped}`");
    }
    RULES
        .replace("for: 30s", "for: 3s")
        .replace("for: 5s", "for: 1s")
}

/// A candidate on `redis` whose worker is healthy while `ok` exists. Its
/// check is given a second, twice in a row, to fail: the subject is the
/// alerts, and a check (a shell started) allowed 200 ms once failed beside
/// two CPU hogs, so every worker was unhealthy before any fault (the
/// fourteenth loaded run).
fn candidate(redis: &Redis, key: &str, id: &str, ok: &Path, port: u16) -> Leaderd {
    let check = format!("test -e {}", path_str(ok));
    let url = redis.url();
    let args = [
        &["--redis", &url, "--key", key][..],
        FAST,
        &[
            "--health-command",
            &check,
            "--health-interval",
            "1s",
            "--health-timeout",
            "1s",
            "--health-failures",
            "2",
            "--",
            "sleep",
            "3600",
        ],
    ]
    .concat();
    Leaderd::run_on(id, port, &args)
}

/// Every `expr` of the dashboard's panels, with Grafana's variables as
/// Grafana would fill them with "All" selected and a 1s scrape interval.
fn dashboard_queries() -> Vec<(String, String)> {
    let dashboard: serde_json::Value = serde_json::from_str(DASHBOARD).expect("dashboard JSON");
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr");
            let filled = expr
                .replace("$job", ".*")
                .replace("$election", ".*")
                .replace("$__rate_interval", "10s");
            assert!(!filled.contains('$'), "an unknown variable in {expr}");
            queries.push((panel["title"].as_str().unwrap_or("").to_string(), filled));
        }
    }
    queries
}

/// Seconds since `t0`, for the timeline.
fn at(t0: Instant) -> String {
    format!("{:.1}s", t0.elapsed().as_secs_f64())
}

#[test]
fn the_dashboard_answers_and_the_alerts_fire_and_resolve_on_a_real_prometheus() {
    let redis = Redis::start();
    let key = support::key("prometheus");
    let dir = Scratch::new("prometheus-e2e");
    let ports: Vec<u16> = (0..4).map(|_| support::free_port()).collect();
    let targets: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let oks: Vec<_> = (0..3).map(|i| dir.join(format!("ok-{i}"))).collect();
    for ok in &oks {
        std::fs::write(ok, "").unwrap();
    }
    let mut nodes: Vec<Leaderd> = (0..3)
        .map(|i| candidate(&redis, &key, &format!("c{i}"), &oks[i], ports[i]))
        .collect();
    // Scraped (and evaluated) every second, each scrape allowed a second:
    // a failed scrape makes its series stale at once, which restarts an
    // alert's `for`, and scrapes allowed 500 ms failed beside two CPU hogs
    // often enough that LeaderdMoreThanOneLeader did not fire within 30 s
    // (the twenty-sixth loaded run).
    let prometheus = Prometheus::start(JOB, &targets, &scaled_rules(), "1s");
    let (leader, _) = support::the_leader(&nodes, WAIT);
    for target in &targets[..3] {
        eventually(WAIT, &format!("Prometheus to scrape {target}"), || {
            prometheus.scraped(target).then_some(())
        });
    }

    // Every dashboard query returns series (rates need two scrapes).
    for (title, expr) in dashboard_queries() {
        eventually(
            WAIT,
            &format!("the panel {title:?} to have series: {expr}"),
            || (!prometheus.query(&expr).is_empty()).then_some(()),
        );
    }
    // The dashboard's variables, as Grafana's label_values() would ask.
    let jobs = prometheus.api("label/job/values", &[("match[]", "leaderd_build_info")]);
    assert_eq!(jobs, Some(serde_json::json!([JOB])));
    let names = prometheus.api(
        "label/name/values",
        &[("match[]", "leader_election_master_status")],
    );
    assert_eq!(names, Some(serde_json::json!([key])));
    // None fires before any fault. One may be pending: beside two CPU hogs
    // a scrape of the leader can fail, and the standbys alone sum to 0 for
    // an evaluation (the twenty-second loaded run); `for` is there so that
    // such a moment never fires.
    let alerts = prometheus.alerts();
    assert!(
        alerts.iter().all(|a| a.state != "firing"),
        "an alert fires before any fault: {alerts:?}"
    );
    if !alerts.is_empty() {
        eprintln!("pending before any fault: {alerts:?}");
    }

    // No leader: the standbys' workers fail, then the leader is killed.
    for (i, ok) in oks.iter().enumerate() {
        if i != leader {
            std::fs::remove_file(ok).unwrap();
            nodes[i].wait_log(WAIT, "worker unhealthy");
        }
    }
    let t0 = Instant::now();
    nodes[leader].signal("KILL");
    // Pending, then firing: that the rule has its `for` is promtool's to
    // prove (`scripts/check-deploy` runs `leaderd-alerts.test.yml`); here
    // the pending moment is printed when seen. A poll of Prometheus's API
    // beside two CPU hogs can take longer than the 3 s it lasts (the
    // twenty-ninth loaded run).
    let seen = prometheus.wait_alert("LeaderdNoLeader", "to be pending", WAIT, |s| s.is_some());
    let pending = match seen.as_deref() {
        Some("pending") => at(t0),
        _ => "not seen".to_string(),
    };
    prometheus.wait_alert("LeaderdNoLeader", "to fire", WAIT, |s| s == Some("firing"));
    let firing = at(t0);
    let alert = prometheus
        .alerts()
        .into_iter()
        .find(|a| a.name == "LeaderdNoLeader")
        .expect("firing");
    assert_eq!(alert.labels["name"], key.as_str());
    assert_eq!(alert.labels["severity"], "critical");
    // A worker recovers: its candidate leads and the alert resolves.
    let back = (leader + 1) % 3;
    std::fs::write(&oks[back], "").unwrap();
    nodes[back].wait_leading(WAIT);
    let led = at(t0);
    prometheus.wait_alert("LeaderdNoLeader", "to resolve", WAIT, |s| s.is_none());
    let resolved = at(t0);
    eprintln!(
        "LeaderdNoLeader (for 3s, scrapes every 1s): leader killed at 0s → pending {pending} → firing {firing} → {} leads {led} → resolved {resolved}",
        nodes[back].id
    );
    assert_eq!(prometheus.alert_state("LeaderdMoreThanOneLeader"), None);

    // Two leaders: a fourth candidate with the same election name leads its
    // own lock file.
    let lock = dir.join("other.lock");
    let t1 = Instant::now();
    let mut stray = Leaderd::run_on(
        "stray",
        ports[3],
        &[
            "--lock-file",
            path_str(&lock),
            "--key",
            &key,
            "--",
            "sleep",
            "3600",
        ],
    );
    stray.wait_leading(WAIT);
    let led = at(t1);
    let fires = |s: Option<&str>| s == Some("firing");
    prometheus.wait_alert("LeaderdMoreThanOneLeader", "to fire", WAIT, fires);
    let firing = at(t1);
    stray.signal("TERM");
    stray.wait_exit(WAIT);
    let stopped = at(t1);
    prometheus.wait_alert("LeaderdMoreThanOneLeader", "to resolve", WAIT, |s| {
        s.is_none()
    });
    let resolved = at(t1);
    eprintln!(
        "LeaderdMoreThanOneLeader (for 1s): a second leader started at 0s, leads {led} → firing {firing} → stopped {stopped} → resolved {resolved}"
    );
    nodes.retain_mut(|n| n.running());
}

#[test]
fn every_alert_has_a_runbook_section_in_the_operations_guide() {
    let operations = include_str!("../../docs/operations.md");
    let headings: Vec<String> = operations
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .map(|h| h.trim().to_lowercase())
        .collect();
    let mut alerts = 0;
    for line in RULES.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("- alert: ") {
            alerts += 1;
            let anchor = format!("docs/operations.md#{}", name.to_lowercase());
            assert!(
                RULES.contains(&format!("runbook_url: \"{anchor}\"")),
                "{name} has no runbook_url {anchor}"
            );
            assert!(
                headings.contains(&name.to_lowercase()),
                "docs/operations.md has no `### {name}` section"
            );
        }
    }
    assert_eq!(
        alerts, 10,
        "an alert was added or removed: update docs/metrics.md"
    );
}
