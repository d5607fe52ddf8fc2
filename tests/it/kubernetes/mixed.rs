//! A mixed fleet on one Lease (#39): leaderd candidates and client-go
//! electors (`tests/k8s/elector`, built by `scripts/lib/ensure-kube.sh`)
//! honour each other's terms: a takeover comes at once after a release,
//! and after a crash only once `leaseDurationSeconds` passed on the
//! taker's clock; a standby of either kind never takes a Lease the other
//! renews; leaderd's tokens keep growing across a client-go term between
//! two of its own; and no two children, whoever ran them, ever overlap
//! (each takes one `flock` at birth: `--exclusive`).

use super::{Candidate, PATIENCE};
use crate::support;

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};
use support::backends::lease_name;
use support::kube::Kube;
use support::{Leaderd, eventually, probe_child, probe_events};

/// client-go's timing here: the lease as long as leaderd's TTL, a renew
/// deadline and retry period in client-go's own proportions (15/10/2).
const DURATION: Duration = Duration::from_secs(4);

/// A client-go elector running the probe child.
pub(super) struct Elector {
    child: Child,
    events: PathBuf,
}

impl Elector {
    pub(super) fn start(kube: &Kube, key: &str, id: &str, dir: &Path, probe: &[&str]) -> Elector {
        Elector::with_timing(kube, key, id, dir, probe, ["4s", "3s", "1s"])
    }

    /// With `[lease duration, renew deadline, retry period]`.
    pub(super) fn with_timing(
        kube: &Kube,
        key: &str,
        id: &str,
        dir: &Path,
        probe: &[&str],
        [duration, deadline, retry]: [&str; 3],
    ) -> Elector {
        let events = dir.join(format!("{id}.elector"));
        let flags = [
            "--lease-duration",
            duration,
            "--renew-deadline",
            deadline,
            "--retry-period",
            retry,
            "--log",
            support::path_str(&events),
        ];
        let child = kube
            .elector(&lease_name(key), id, &flags, probe)
            .spawn()
            .expect("the elector starts");
        Elector { child, events }
    }

    /// When (CLOCK_MONOTONIC, ns) it last began to lead, if it did.
    pub(super) fn leading_since(&self) -> Option<u128> {
        std::fs::read_to_string(&self.events)
            .unwrap_or_default()
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("leading ")?.parse().ok())
    }

    pub(super) fn signal(&self, signal: i32) {
        support::os::kill(self.child.id(), signal);
    }

    pub(super) fn wait_exit(&mut self) {
        eventually(PATIENCE, "the elector to exit", || {
            self.child.try_wait().ok().flatten()
        });
    }
}

impl Drop for Elector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Lease's holder, as the API server has it.
fn holder(kube: &Kube, key: &str) -> Option<String> {
    kube.lease(&lease_name(key))?["spec"]["holderIdentity"]
        .as_str()
        .filter(|h| !h.is_empty())
        .map(str::to_string)
}

/// Over `hold`, the Lease stays `id`'s and `standby` never leads.
fn holds(kube: &Kube, key: &str, id: &str, standby: &dyn Fn() -> bool, hold: Duration) {
    let end = Instant::now() + hold;
    while Instant::now() < end {
        assert_eq!(
            holder(kube, key).as_deref(),
            Some(id),
            "the Lease changed hands"
        );
        assert!(!standby(), "a standby led beside {id}");
        std::thread::sleep(Duration::from_millis(200)); // the sampling period
    }
}

#[test]
fn leaderd_and_client_go_candidates_honour_each_others_terms() {
    let kube = Kube::start(1);
    let key = support::key("k8s-mixed");
    let c = Candidate::on(&kube, &key, "4s");
    let dir = support::Scratch::new(&format!("k8s-mixed-{}", support::os::below(1 << 30)));
    let lock = dir.join("exclusive");
    let probe = probe_child();
    let log = |name: &str| dir.join(format!("{name}.probe"));
    let probe_of = |name: &str| -> Vec<String> {
        vec![
            probe.clone(),
            support::path_str(&log(name)).to_string(),
            "--exclusive".into(),
            support::path_str(&lock).to_string(),
        ]
    };
    let leaderd = |id: &str| -> Leaderd {
        let p = probe_of(id);
        c.run_with(id, &p[0], &p[1..], &[])
    };
    let elector = |id: &str| {
        let p = probe_of(id);
        let p: Vec<&str> = p.iter().map(String::as_str).collect();
        Elector::start(&kube, &key, id, &dir, &p)
    };

    // leaderd leads; a client-go standby waits.
    let mut l1 = leaderd("rs-1");
    l1.wait_leading(PATIENCE);
    let t1 = l1.leader().unwrap().1["fencing_token"].as_u64().unwrap();
    let mut g1 = elector("go-1");
    holds(
        &kube,
        &key,
        "rs-1",
        &|| g1.leading_since().is_some(),
        DURATION * 3,
    );

    // leaderd released: client-go takes over at its next retry (it polls).
    l1.signal("TERM");
    let released = Instant::now();
    l1.wait_exit(PATIENCE);
    eventually(PATIENCE, "go-1 to lead", || g1.leading_since());
    let after_release = released.elapsed();
    assert!(
        after_release < DURATION,
        "client-go took {after_release:?} after a release, as long as an expiry"
    );

    // A leaderd standby never takes the client-go elector's Lease.
    let l2 = leaderd("rs-2");
    holds(&kube, &key, "go-1", &|| l2.is_leader(), DURATION * 3);

    // client-go crashes: leaderd waits out leaseDurationSeconds from the
    // last renewal it saw (at most a retry period before the kill).
    g1.signal(libc::SIGKILL);
    let killed = Instant::now();
    g1.wait_exit();
    l2.wait_leading(PATIENCE);
    let after_crash = killed.elapsed();
    let t2 = l2.leader().unwrap().1["fencing_token"].as_u64().unwrap();
    assert!(
        after_crash >= DURATION - Duration::from_secs(1),
        "leaderd took the Lease {after_crash:?} after the client-go holder's kill (lease {DURATION:?})"
    );
    assert!(t2 > t1, "a client-go term between: {t1} then {t2}");

    // A client-go standby never takes leaderd's Lease; then leaderd stops
    // and client-go takes over; then client-go stops and leaderd leads with
    // a larger token again.
    let mut g2 = elector("go-2");
    holds(
        &kube,
        &key,
        "rs-2",
        &|| g2.leading_since().is_some(),
        DURATION * 3,
    );
    let mut l2 = l2;
    l2.signal("TERM");
    l2.wait_exit(PATIENCE);
    eventually(PATIENCE, "go-2 to lead", || g2.leading_since());
    let l3 = leaderd("rs-3");
    holds(&kube, &key, "go-2", &|| l3.is_leader(), DURATION * 2);
    g2.signal(libc::SIGTERM);
    g2.wait_exit();
    l3.wait_leading(PATIENCE);
    let t3 = l3.leader().unwrap().1["fencing_token"].as_u64().unwrap();
    assert!(t3 > t2, "tokens {t1}, {t2}, {t3}");

    // leaderd crashes under a client-go standby: client-go waits out the
    // lease too, and the annotations the crashed term left (client-go keeps
    // what it finds) show no token for the new holder.
    let g3 = elector("go-3");
    holds(
        &kube,
        &key,
        "rs-3",
        &|| g3.leading_since().is_some(),
        DURATION * 2,
    );
    let mut l3 = l3;
    l3.signal("KILL");
    let crashed = Instant::now();
    l3.wait_exit(PATIENCE);
    eventually(PATIENCE, "go-3 to lead", || g3.leading_since());
    let leaderd_crash = crashed.elapsed();
    assert!(
        leaderd_crash >= DURATION - Duration::from_secs(2),
        "client-go took the Lease {leaderd_crash:?} after leaderd's kill (lease {DURATION:?})"
    );
    let lease = kube.lease(&lease_name(&key)).unwrap();
    let notes = &lease["metadata"]["annotations"];
    assert_eq!(
        notes["leaderd.io/fencing-token"].as_str(),
        Some(t3.to_string().as_str())
    );
    let status = c.status_json();
    assert_eq!(status["leader"].as_str(), Some("go-3"), "{status}");
    assert!(
        status["fencing_token"].is_null(),
        "a stale token shown: {status}"
    );
    eprintln!(
        "release → client-go in {after_release:?}; client-go killed → leaderd in {after_crash:?} \
         (lease {DURATION:?}); leaderd killed → client-go in {leaderd_crash:?}; \
         leaderd tokens {t1}, {t2}, {t3}"
    );

    // Never two children alive, whoever ran them: every probe found the
    // lock free at birth.
    let names = ["rs-1", "go-1", "rs-2", "go-2", "rs-3", "go-3"];
    let events: Vec<_> = names.iter().flat_map(|n| probe_events(&log(n))).collect();
    let births: Vec<_> = events.iter().filter(|e| e.kind == "exclusive").collect();
    assert_eq!(births.len(), names.len(), "one child per term: {events:#?}");
    assert!(
        births
            .iter()
            .all(|e| e.rest.first().map(String::as_str) == Some("free")),
        "two children alive at once: {births:#?}"
    );
}
