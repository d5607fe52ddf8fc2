//! The Service that follows the leader and the Events of each term (issue
//! #48), on the real API server: three candidates with
//! `--kubernetes-service`; the EndpointSlice names the leader after a
//! SIGTERM (a handover) and after a SIGKILL (at expiry); a leader frozen
//! until it was deposed tries to empty the slice on waking and is refused,
//! the slice keeping the new leader; sampled all along, the slice never
//! holds two addresses. The Events on the Lease tell each term's start and
//! end in order with its token; a flapping health check records a bounded
//! number of them. Both checkers are shown to fail on a planted violation.

use super::{Candidate, PATIENCE, logs};
use crate::support;
use serde_json::{Value, json};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use support::backends::lease_name;
use support::kube::{ADMIN, CANDIDATE, Kube, NAMESPACE};
use support::{Leaderd, eventually, the_leader};

const SERVICE: &str = "jobs-leader";
const SLICE: &str = "jobs-leader-leaderd";
const TTL: &str = "4s";

/// The rights the Service and the Events need, beside the Lease's.
fn grant(kube: &Kube) {
    let rules = json!([
        {
            "apiGroups": ["discovery.k8s.io"],
            "resources": ["endpointslices"],
            "verbs": ["get", "update", "create"],
        },
        { "apiGroups": [""], "resources": ["events"], "verbs": ["create"] },
        { "apiGroups": [""], "resources": ["services"], "verbs": ["get"] },
    ]);
    kube.role("leaderd-announce", &rules, CANDIDATE);
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": SERVICE },
        "spec": { "ports": [{ "name": "http", "port": 80, "targetPort": 8080 }] },
    });
    kube.ok(
        "POST",
        &format!("/api/v1/namespaces/{NAMESPACE}/services"),
        Some(&service),
    );
}

/// The slice: the writing term's token and the addresses (`None`: absent,
/// or the server did not answer).
fn slice(kube: &Kube) -> Option<(u64, Vec<String>)> {
    let path = format!("/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices/{SLICE}");
    let (code, body) = kube.raw_on(0, ADMIN, "GET", &path, None);
    if code != 200 {
        return None;
    }
    let s: Value = serde_json::from_str(&body).ok()?;
    let token = s["metadata"]["annotations"]["leaderd.io/fencing-token"]
        .as_str()?
        .parse()
        .ok()?;
    let addresses = s["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str().map(String::from))
        .collect();
    Some((token, addresses))
}

/// The checker of "never two addresses": every sample has at most one.
fn at_most_one_address(samples: &[(u64, Vec<String>)]) -> Result<(), String> {
    match samples.iter().find(|(_, a)| a.len() > 1) {
        Some((token, a)) => Err(format!("the slice named {a:?} at once (token {token})")),
        None => Ok(()),
    }
}

/// Stops the sampler when the scenario ends, panicking or not.
struct Halt<'a>(&'a AtomicBool);

impl Drop for Halt<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Runs `scenario` while a thread samples the slice; the samples.
fn sampled(kube: &Kube, scenario: impl FnOnce()) -> Vec<(u64, Vec<String>)> {
    let stop = AtomicBool::new(false);
    let samples = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::SeqCst) {
                if let Some(seen) = slice(kube) {
                    samples.lock().unwrap().push(seen);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let _halt = Halt(&stop);
        scenario();
    });
    samples.into_inner().unwrap()
}

/// The address candidate `n` announces: data only, never dialled (no
/// kube-proxy runs here), from TEST-NET-1 (RFC 5737), since the API server
/// refuses loopback addresses in an EndpointSlice.
fn address(n: usize) -> String {
    format!("192.0.2.{}", n + 1)
}

/// Candidate `n` of the Service.
fn candidate(c: &Candidate<'_>, n: usize, log: &std::path::Path) -> Leaderd {
    let id = ["a", "b", "c", "d", "e"][n];
    let address = address(n);
    let env = [
        ("LEADERD_KUBERNETES_SERVICE", SERVICE),
        ("LEADERD_KUBERNETES_SERVICE_PORTS", "http:8080"),
        ("LEADERD_KUBERNETES_SERVICE_ADDRESS", address.as_str()),
    ];
    c.run(id, log, &env)
}

/// The leader after `old` (signalled), with a larger token than `token`.
fn next_leader(nodes: &[Leaderd], old: usize, token: u64, limit: Duration) -> (usize, u64) {
    eventually(limit, "the next leader", || {
        nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != old)
            .find_map(|(i, n)| {
                let (leads, body) = n.leader()?;
                let t = body["fencing_token"].as_u64()?;
                (leads && t > token).then_some((i, t))
            })
    })
}

/// Waits until the slice names exactly `address` for the term `token`;
/// how long that took from `since`.
fn names(kube: &Kube, token: u64, address: &str, since: Instant) -> Duration {
    let want = (token, vec![address.to_string()]);
    eventually(
        PATIENCE,
        &format!("the slice to name {address} (token {token})"),
        || (slice(kube)? == want).then_some(()),
    );
    since.elapsed()
}

/// An Event of a term: its reason, the candidate and the token.
#[derive(Debug, Clone, PartialEq)]
struct TermEvent {
    reason: String,
    id: String,
    token: u64,
}

/// The Lease's Events, in the order the API server lists them, as `kubectl
/// get events` shows them: by name, which holds the moment each was told
/// (an Event written late, by a leader paused mid-write, still sorts where
/// its news happened).
fn events(kube: &Kube, lease: &str) -> Vec<TermEvent> {
    let path = format!(
        "/api/v1/namespaces/{NAMESPACE}/events?fieldSelector=involvedObject.name%3D{lease}"
    );
    let list = kube.ok("GET", &path, None);
    let mut items: Vec<&Value> = list["items"].as_array().into_iter().flatten().collect();
    // Sorted here too, so the story does not rest on how the server pages.
    items.sort_by_key(|e| e["metadata"]["name"].as_str().map(String::from));
    items
        .into_iter()
        .filter_map(|e| {
            let message = e["message"].as_str()?;
            let token = message.split("fencing token ").nth(1)?;
            let token = token.split(')').next()?.parse().ok()?;
            Some(TermEvent {
                reason: e["reason"].as_str()?.to_string(),
                id: e["reportingInstance"].as_str()?.to_string(),
                token,
            })
        })
        .collect()
}

/// The checker of the Events' story: terms begin with strictly growing
/// tokens, and each ends at most once, after it began, by its candidate.
fn terms_in_order(events: &[TermEvent]) -> Result<(), String> {
    let mut begun: Vec<&TermEvent> = Vec::new();
    let mut ended: Vec<u64> = Vec::new();
    for e in events {
        if e.reason == "LeaderElected" {
            if let Some(last) = begun.last().filter(|l| l.token >= e.token) {
                return Err(format!("{e:?} began after {last:?}"));
            }
            begun.push(e);
        } else {
            if !begun.iter().any(|b| b.token == e.token && b.id == e.id) {
                return Err(format!("{e:?} ended a term it never began"));
            }
            if ended.contains(&e.token) {
                return Err(format!("{e:?} ended its term twice"));
            }
            ended.push(e.token);
        }
    }
    Ok(())
}

#[test]
fn the_service_follows_the_leader_and_a_deposed_leader_never_rewrites_it() {
    let kube = Kube::start(1);
    grant(&kube);
    let key = support::key("k8s-service");
    let lease = lease_name(&key);
    let c = Candidate::on(&kube, &key, TTL);
    let (_dir, logs) = logs("k8s-service", 5);
    // `check` asks for each right, and looks at the Service.
    let check = |service: &str| {
        let mut args = vec!["check".to_string()];
        args.extend(c.args(&kube.kubeconfig(CANDIDATE, 0)));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let env = [
            ("LEADERD_KUBERNETES_SERVICE", service),
            ("LEADERD_KUBERNETES_SERVICE_PORTS", "http:8080"),
            ("LEADERD_KUBERNETES_SERVICE_ADDRESS", "192.0.2.1"),
        ];
        let out = support::command(&args)
            .envs(env)
            .output()
            .expect("run leaderd check");
        let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        (out.status.code().unwrap_or(-1), text.into_owned())
    };
    let (code, out) = check(SERVICE);
    assert_eq!(code, 0, "{out}");
    for line in [
        "has no selector and its ports' names match",
        "create on events is allowed",
    ] {
        assert!(out.contains(line), "{out}");
    }
    let (code, out) = check("nope");
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("the Service default/nope: it does not exist"),
        "{out}"
    );
    let mut story = Vec::new();
    let samples = sampled(&kube, || {
        let mut nodes: Vec<Leaderd> = (0..3).map(|n| candidate(&c, n, &logs[n])).collect();
        let (first, token) = the_leader(&nodes, PATIENCE);
        names(&kube, token, &address(first), Instant::now());
        story.push(("LeaderElected", first, token));

        // SIGTERM: the slice follows within the handover.
        let at = Instant::now();
        nodes[first].signal("TERM");
        let (second, token) = next_leader(&nodes, first, token, PATIENCE);
        let took = names(&kube, token, &address(second), at);
        eprintln!("SIGTERM to the slice naming the next leader: {took:?}");
        // A release, not an expiry, moved it.
        assert!(
            took < Duration::from_secs(4),
            "the slice followed after {took:?}"
        );
        nodes[first].wait_exit(PATIENCE);
        story.push(("LeaseReleased", first, story[0].2));
        story.push(("LeaderElected", second, token));

        // SIGKILL: at expiry.
        let at = Instant::now();
        nodes[second].signal("KILL");
        let (third, token) = next_leader(&nodes, second, token, Duration::from_secs(4) + PATIENCE);
        let took = names(&kube, token, &address(third), at);
        eprintln!("SIGKILL to the slice naming the next leader: {took:?}");
        story.push(("LeaderElected", third, token));

        // Frozen past its term: the others take over; thawed, it is refused.
        nodes.push(candidate(&c, 3, &logs[3]));
        nodes.push(candidate(&c, 4, &logs[4]));
        let frozen = third;
        nodes[frozen].signal("STOP");
        let (fourth, token) = the_leader(&nodes[3..], Duration::from_secs(4) + PATIENCE);
        let fourth = fourth + 3;
        names(&kube, token, &address(fourth), Instant::now());
        nodes[frozen].signal("CONT");
        nodes[frozen].wait_log(PATIENCE, "written by a newer term");
        // Counted too: its slice written once, then refused.
        let (_, metrics) = nodes[frozen].get("/metrics").expect("metrics");
        let metrics = metrics.as_str().unwrap_or_default().to_string();
        for line in [
            "leaderd_announcements_total{target=\"endpointslice\",result=\"written\"} 1",
            "leaderd_announcements_total{target=\"endpointslice\",result=\"refused\"} 1",
            "leaderd_announcements_total{target=\"event\",result=\"written\"}",
        ] {
            assert!(metrics.contains(line), "{line} missing from {metrics}");
        }
        assert_eq!(
            slice(&kube),
            Some((token, vec![address(fourth)])),
            "the deposed leader changed the slice"
        );
        story.push(("LeaderLost", frozen, story[3].2));
        story.push(("LeaderElected", fourth, token));

        // No leader: an empty slice, the last term's token kept.
        // The standbys first, so that none takes over.
        for (i, node) in nodes.iter_mut().enumerate() {
            if i != fourth && node.running() {
                node.signal("TERM");
            }
        }
        for (i, node) in nodes.iter_mut().enumerate() {
            if i != fourth {
                node.wait_exit(PATIENCE);
            }
        }
        nodes[fourth].signal("TERM");
        nodes[fourth].wait_exit(PATIENCE);
        assert_eq!(
            slice(&kube),
            Some((token, Vec::new())),
            "no leader, yet an address"
        );
        story.push(("LeaseReleased", fourth, token));
    });
    at_most_one_address(&samples).unwrap();
    assert!(samples.len() > 50, "only {} samples", samples.len());

    let ids = ["a", "b", "c", "d", "e"];
    let want: Vec<TermEvent> = story
        .iter()
        .map(|(reason, n, token)| TermEvent {
            reason: reason.to_string(),
            id: ids[*n].to_string(),
            token: *token,
        })
        .collect();
    let began = Instant::now();
    let got = loop {
        let got = events(&kube, &lease);
        if want.iter().all(|w| got.contains(w)) {
            break got;
        }
        assert!(
            began.elapsed() < PATIENCE,
            "the Events {:?} are missing from {got:?}",
            want.iter().filter(|w| !got.contains(w)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    terms_in_order(&got).unwrap();

    // The checkers catch what they claim: two addresses, a term begun out
    // of order, a term ended twice.
    let mut planted = samples.clone();
    planted.push((9, vec![address(0), address(1)]));
    assert!(at_most_one_address(&planted).is_err());
    let mut reordered = got.clone();
    reordered.swap(
        0,
        got.iter()
            .rposition(|e| e.reason == "LeaderElected")
            .unwrap(),
    );
    assert!(terms_in_order(&reordered).is_err());
    let mut twice = got.clone();
    twice.push(want[1].clone());
    assert!(terms_in_order(&twice).is_err());
}

#[test]
fn a_flapping_health_check_records_a_bounded_number_of_events() {
    let kube = Kube::start(1);
    grant(&kube);
    let key = support::key("k8s-flap");
    let lease = lease_name(&key);
    let c = Candidate::on(&kube, &key, TTL);
    let (dir, logs) = logs("k8s-flap", 1);
    let healthy = dir.join("healthy");
    std::fs::write(&healthy, "").unwrap();
    let check = format!("test -e {}", support::path_str(&healthy));
    let env = [
        ("LEADERD_HEALTH_COMMAND", check.as_str()),
        ("LEADERD_HEALTH_INTERVAL", "100ms"),
        ("LEADERD_HEALTH_FAILURES", "1"),
    ];
    let mut node = c.run("a", &logs[0], &env);
    node.wait_leading(PATIENCE);
    // Each flip ends or begins a term: twelve terms, two Events each
    // unless the rate limit holds them.
    let started = Instant::now();
    let mut terms = 1;
    for _ in 0..11 {
        std::fs::remove_file(&healthy).unwrap();
        eventually(PATIENCE, "the leader to step down", || {
            (!node.is_leader()).then_some(())
        });
        std::fs::write(&healthy, "").unwrap();
        node.wait_leading(PATIENCE);
        terms += 1;
    }
    // Once it exited, every Event it would send was sent: it finishes
    // what its herald was told before it exits.
    node.signal("TERM");
    node.wait_exit(PATIENCE);
    let window = started.elapsed();
    let recorded = events(&kube, &lease).len() as u64;
    // The budget: 10 at once, one more per 30 s.
    let bound = 10 + window.as_secs() / 30;
    assert!(
        recorded <= bound,
        "{recorded} Events for {terms} terms in {window:?}; the budget allows {bound}"
    );
    assert!(recorded >= 10, "only {recorded} Events for {terms} terms");
    terms_in_order(&events(&kube, &lease)).unwrap();
}
