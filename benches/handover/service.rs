//! How soon a Service reaches the next leader after a SIGTERM (issue #48),
//! two ways, over the same twenty handovers on one kube-apiserver (three
//! candidates, lease 15 s): the Service leaderd keeps (`--kubernetes-
//! service`: the time until its EndpointSlice names the next leader, read
//! from the API server every 5 ms), and the readiness-probe way
//! (`deploy/kubernetes/leader-service-readiness`: the time until the next
//! leader's /leader answers 200 to a prober of period 1 s, as the kubelet's
//! readiness probe of that overlay asks it, each pod's at its own phase).
//! No kubelet or endpoints controller runs here, so the readiness figure
//! leaves out the time from Ready to the Service's endpoints: a bound in
//! that way's favour. `BENCH_ONLY=service`.

use super::support::{self, Leaderd, eventually};
use super::{Stats, mono_ns, ms, stats};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::kube::{ADMIN, CANDIDATE, Kube, NAMESPACE};

const SERVICE: &str = "bench-leader";
const SLICE: &str = "bench-leader-leaderd";
const ROUNDS: usize = 20;
/// The readiness overlay's probe period.
const PROBE_PERIOD: Duration = Duration::from_secs(1);

/// Every 200 a prober saw: (candidate address, CLOCK_MONOTONIC ns).
type Seen = Arc<Mutex<Vec<(String, u64)>>>;

/// A candidate, its address, and its prober's stop switch.
struct Pod {
    node: Leaderd,
    address: String,
    stop: Arc<AtomicBool>,
}

impl Drop for Pod {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn start(kubeconfig: &str, n: usize, seen: &Seen) -> Pod {
    let address = format!("192.0.2.{}", n % 250 + 1);
    let id = format!("rs-{n}");
    let args = [
        "--kubernetes-lease",
        "bench-service",
        "--kubeconfig",
        kubeconfig,
        "--key",
        "bench-service",
        "--ttl",
        "15s",
        "--log-level",
        "warn",
        "--kubernetes-service",
        SERVICE,
        "--kubernetes-service-ports",
        "http:8080",
        "--kubernetes-service-address",
        &address,
    ];
    let node = Leaderd::run(&id, &args);
    let stop = Arc::new(AtomicBool::new(false));
    let (port, halt, seen, who) = (node.http_port, stop.clone(), seen.clone(), address.clone());
    // The kubelet's prober: its own phase, then once a period.
    let phase = Duration::from_millis(support::os::below(1000));
    std::thread::spawn(move || {
        std::thread::sleep(phase);
        while !halt.load(Ordering::SeqCst) {
            let asked = mono_ns();
            if support::http_get(port, "/leader").is_some_and(|(code, _)| code == 200) {
                seen.lock().unwrap().push((who.clone(), asked));
            }
            let next = Duration::from_nanos(asked) + PROBE_PERIOD;
            std::thread::sleep(next.saturating_sub(Duration::from_nanos(mono_ns())));
        }
    });
    Pod {
        node,
        address,
        stop,
    }
}

/// The address the slice names, if exactly one.
fn named(kube: &Kube) -> Option<String> {
    let path = format!("/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices/{SLICE}");
    let (code, body) = kube.raw_on(0, ADMIN, "GET", &path, None);
    if code != 200 {
        return None;
    }
    let slice: serde_json::Value = serde_json::from_str(&body).ok()?;
    let endpoints = slice["endpoints"].as_array()?;
    let [one] = &endpoints[..] else { return None };
    one["addresses"][0].as_str().map(String::from)
}

pub(super) fn rows(_exe: &str, _dir: &std::path::Path) {
    let kube = Kube::start(1);
    let rules = json!([
        { "apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "update", "create"] },
        { "apiGroups": [""], "resources": ["events"], "verbs": ["create"] },
    ]);
    kube.role("bench-announce", &rules, CANDIDATE);
    let service = json!({
        "apiVersion": "v1", "kind": "Service", "metadata": { "name": SERVICE },
        "spec": { "ports": [{ "name": "http", "port": 80 }] },
    });
    kube.ok(
        "POST",
        &format!("/api/v1/namespaces/{NAMESPACE}/services"),
        Some(&service),
    );
    let kubeconfig = kube.kubeconfig(CANDIDATE, 0);
    let kubeconfig = kubeconfig.to_str().expect("utf-8");
    let seen: Seen = Arc::default();
    let mut next = 0;
    let mut pods: Vec<Pod> = (0..3)
        .map(|_| {
            next += 1;
            start(kubeconfig, next, &seen)
        })
        .collect();
    let (mut slice_ms, mut probe_ms) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let leader = eventually(Duration::from_secs(60), "the slice naming a leader", || {
            let address = named(&kube)?;
            let i = pods.iter().position(|p| p.address == address)?;
            pods[i].node.is_leader().then_some(i)
        });
        // The standbys settle into waiting.
        std::thread::sleep(Duration::from_millis(500));
        let t0 = mono_ns();
        pods[leader].node.signal("TERM");
        let (address, at) = eventually(Duration::from_secs(60), "the slice to follow", || {
            let address = named(&kube).filter(|a| *a != pods[leader].address)?;
            Some((address, mono_ns()))
        });
        slice_ms.push(ms(at - t0));
        let ready = eventually(Duration::from_secs(60), "the next leader's probe", || {
            let seen = seen.lock().unwrap();
            seen.iter()
                .filter(|(who, t)| *who == address && *t > t0)
                .map(|(_, t)| *t)
                .min()
        });
        probe_ms.push(ms(ready - t0));
        pods[leader].node.wait_exit(Duration::from_secs(60));
        next += 1;
        pods[leader] = start(kubeconfig, next, &seen);
    }
    let (slice, probe): (Stats, Stats) = (stats(slice_ms), stats(probe_ms));
    println!(
        "# SIGTERM to the leader → the Service reaches the next leader, one kube-apiserver, 3 candidates, lease 15s, {ROUNDS} handovers ({} cores)",
        super::num_cpus()
    );
    println!();
    println!("| way | median (ms) | max (ms) | n |");
    println!("|---|---|---|---|");
    println!(
        "| leaderd keeps the Service's EndpointSlice (deploy/kubernetes/leader-service) | {:.1} | {:.1} | {} |",
        slice.median, slice.max, slice.n
    );
    println!(
        "| readiness probe on /leader, period 1 s (deploy/kubernetes/leader-service-readiness), to Ready only | {:.1} | {:.1} | {} |",
        probe.median, probe.max, probe.n
    );
}
