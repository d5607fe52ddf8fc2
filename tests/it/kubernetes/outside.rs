//! The Lease changed by someone else (issue #46), as an operator, a restore
//! or a client-go peer would: deleted, its holder cleared, re-pointed at
//! another live candidate, its duration shortened, an old copy put back.
//! Each scene: a holder with a watch and a child that takes 2 s to stop,
//! a standby that learns of changes only on its timer (its Role lacks
//! `watch`) and one with a watch. The holder's term ends, no child starts
//! while another may still run, and someone leads again.

use super::{Candidate, PATIENCE, logs};
use crate::support;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::backends::lease_name;
use support::kube::{Kube, Outside};
use support::{Leaderd, eventually, most_alive, probe_child, probe_events};

/// ttl 4 s: renewals every 1.33 s; the child's 2 s stop fits in the kill
/// deadline, so every stop is logged.
const TTL: &str = "4s";

/// A candidate running the probe child, 2 s to stop on SIGTERM; `env`
/// sets its options.
fn slow(c: &Candidate, id: &str, log: &Path, env: &[(&str, &str)]) -> Leaderd {
    let args = [
        support::path_str(log).to_string(),
        "--term-delay".into(),
        "2000".into(),
    ];
    c.run_with(id, &probe_child(), &args, env)
}

fn the_lease(kube: &Kube, name: &str) -> Value {
    kube.lease(name).expect("the lease")
}

/// What is done to the Lease: deleted, or written from outside.
#[derive(Clone, Copy, Debug)]
enum Fault {
    Delete,
    Clear,
    Repoint,
    Shorten,
    Restore,
}

/// `fault` done to the Lease `name`; `saved`: a copy of it from earlier.
fn apply(kube: &Kube, name: &str, fault: Fault, saved: &Value) {
    let write = match fault {
        Fault::Delete => return kube.delete_lease(name),
        Fault::Clear => Outside::Clear,
        Fault::Repoint => Outside::Repoint("b".into()),
        Fault::Shorten => Outside::Shorten,
        Fault::Restore => Outside::Restore(saved.clone()),
    };
    assert!(kube.outside(name, &write), "{fault:?} written");
}

/// Who leads among `nodes`, by id.
fn leading(nodes: &[&Leaderd]) -> Vec<String> {
    nodes
        .iter()
        .filter(|n| n.is_leader())
        .map(|n| n.id.clone())
        .collect()
}

fn dump(logs: &[PathBuf], nodes: &[&Leaderd]) -> String {
    let mut out = String::new();
    for log in logs {
        out += &std::fs::read_to_string(log).unwrap_or_default();
    }
    for node in nodes {
        out += &node.log().join("\n");
    }
    out
}

#[test]
fn a_lease_changed_from_outside_ends_its_holders_term_and_starts_nobodys_early() {
    let kube = Kube::start(1);
    let no_watch = [json!({
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "update", "patch", "create"],
    })];
    kube.role("no-watch", &json!(no_watch), "no-watch");
    for fault in [
        Fault::Delete,
        Fault::Clear,
        Fault::Shorten,
        Fault::Repoint,
        Fault::Restore,
    ] {
        let key = support::key(&format!("k8s-outside-{fault:?}").to_lowercase());
        let name = lease_name(&key);
        let (_dir, logs) = logs("k8s-outside", 3);
        let watching = Candidate::on(&kube, &key, TTL);
        let blind = Candidate {
            user: "no-watch",
            ..Candidate::on(&kube, &key, TTL)
        };
        let socket = logs[0].with_extension("sock");
        let socket = support::path_str(&socket).to_string();
        let admin = [
            ("LEADERD_ADMIN_SOCKET", socket.as_str()),
            ("LEADERD_STEP_DOWN_HOLD", "300ms"),
        ];
        let a = slow(&watching, "a", &logs[0], &admin);
        a.wait_leading(PATIENCE);
        let mut saved = the_lease(&kube, &name);
        let b = slow(&blind, "b", &logs[1], &[]);
        let c = slow(&watching, "c", &logs[2], &[]);
        let nodes = [&a, &b, &c];
        if let Fault::Restore = fault {
            // a's term saved, then a steps down and another takes over:
            // the copy put back names a, with a's own annotations.
            saved = the_lease(&kube, &name);
            let (code, out, err) = support::run_to_end(&["step-down", "--admin-socket", &socket]);
            assert_eq!(code, 0, "{out}{err}");
            eventually(PATIENCE, "another leader", || {
                let now = leading(&nodes);
                (now.len() == 1 && now[0] != "a").then_some(())
            });
        }
        // Both standbys have looked more than once, and the blind one's
        // next timed look is due soon after the fault.
        std::thread::sleep(Duration::from_millis(4500));
        let holder = leading(&nodes);
        assert_eq!(holder.len(), 1, "{fault:?}: {holder:?}");
        let holder_log = &logs[["a", "b", "c"]
            .iter()
            .position(|i| *i == holder[0])
            .unwrap()];
        let child = eventually(PATIENCE, "the holder's child", || {
            probe_events(holder_log)
                .into_iter()
                .rfind(|e| e.kind == "start")
        });
        apply(&kube, &name, fault, &saved);
        // The holder's term ends, its child stops.
        eventually(PATIENCE, "the holder's child to stop", || {
            probe_events(holder_log)
                .into_iter()
                .find(|e| e.kind == "stop" && e.pid == child.pid)
        });
        // Someone leads again, with its child running.
        eventually(PATIENCE * 2, "a leader again", || {
            (leading(&nodes).len() == 1).then_some(())
        });
        assert!(
            most_alive(&logs) <= 1,
            "{fault:?}: two children at once\n{}",
            dump(&logs, &nodes)
        );
        eprintln!("{fault:?}: no overlap; {:?} leads", leading(&nodes));
    }
}

/// One id, two processes: a leaderd holder and a client-go elector started
/// with its id (the default id is the pod name, as in client-go's
/// examples). client-go takes a record naming its id as its own and renews
/// it; leaderd's next renewal finds a record it did not write, ends its
/// term (its child stopped) and says why, and from then on reports the
/// Lease held under its own id by another process. Never two leaders in
/// silence: leaderd stops leading within a TTL, and says so.
#[test]
fn a_client_go_elector_with_leaderds_id_ends_leaderds_term_and_is_reported() {
    let kube = Kube::start(1);
    let key = support::key("k8s-same-id");
    let (dir, logs) = logs("k8s-same-id", 2);
    let c = Candidate::on(&kube, &key, TTL);
    let node = c.run("pod-0", &logs[0], &[]);
    node.wait_leading(PATIENCE);
    let child = eventually(PATIENCE, "leaderd's child", || {
        probe_events(&logs[0])
            .into_iter()
            .find(|e| e.kind == "start")
    });
    let probe = probe_child();
    let elector = super::mixed::Elector::start(
        &kube,
        &key,
        "pod-0",
        &dir,
        &[&probe, support::path_str(&logs[1])],
    );
    let go_leads = eventually(PATIENCE, "the elector to lead", || elector.leading_since());
    // leaderd's term ends at its next renewal (every 1.33 s), its child
    // stopped, and it says why.
    let stopped = eventually(PATIENCE, "leaderd's child to stop", || {
        probe_events(&logs[0])
            .into_iter()
            .find(|e| e.kind == "stop" && e.pid == child.pid)
    });
    let overlap = Duration::from_nanos(stopped.ns.saturating_sub(go_leads) as u64);
    assert!(
        overlap < Duration::from_secs(4),
        "leaderd worked on for {overlap:?} beside the elector"
    );
    let said = node.wait_log(
        PATIENCE,
        "written under this candidate's id by another process",
    );
    assert!(said.contains("ERROR"), "{said}");
    node.wait_log(
        PATIENCE,
        "another candidate holds the lease under this instance's id",
    );
    // It does not lead again while the elector renews, and /leader names
    // the holder it sees under its own id.
    std::thread::sleep(Duration::from_secs(5));
    assert!(!node.is_leader(), "leaderd took the Lease back");
    let (_, body) = node.leader().expect("/leader answers");
    assert_eq!(body["leader"].as_str(), Some("pod-0"), "{body}");
    assert_eq!(body["duplicate_id"], true, "{body}");
    assert_eq!(
        probe_events(&logs[0])
            .iter()
            .filter(|e| e.kind == "start")
            .count(),
        1,
        "leaderd's child started again"
    );
}

/// A half-open watch: the standby's connections to the API server lose
/// everything from one moment on and stay open (a NAT or firewall that
/// forgot them). Its watch is taken for dead when the held Lease's
/// renewals stop arriving, and replaced; a SIGTERM handover after that is
/// still a wake-up, not a wait for the standby's timer (a lease duration).
#[test]
fn a_half_open_watch_is_replaced_and_a_handover_after_it_is_still_fast() {
    let kube = Kube::start(1);
    let key = support::key("k8s-half-open");
    let (_dir, logs) = logs("k8s-half-open", 2);
    // ttl 6 s: without its watch the standby would take over up to 6 s
    // after the release; renewals every 2 s, silence taken for a dead
    // watch after 5 s.
    let c = Candidate::on(&kube, &key, "6s");
    let mut a = c.run("a", &logs[0], &[]);
    a.wait_leading(PATIENCE);
    let proxy = support::proxy::Proxy::start(kube.servers[0].port);
    let direct = kube.kubeconfig(support::kube::CANDIDATE, 0);
    let text = std::fs::read_to_string(&direct).expect("the kubeconfig");
    let via = direct.with_extension("proxied");
    let server = format!("127.0.0.1:{}", kube.servers[0].port);
    std::fs::write(
        &via,
        text.replace(&server, &format!("127.0.0.1:{}", proxy.port)),
    )
    .expect("write the kubeconfig");
    let log = [support::path_str(&logs[1]).to_string()];
    let debug = [("RUST_LOG", "debug")];
    let b = c.run_through(&via, "b", &probe_child(), &log, &debug);
    b.wait_log(PATIENCE, "lease held by another candidate");
    // Cut once the watch is following: cut while it opens, it would fail
    // its request and be opened again, not go quiet (the eighth loaded run).
    b.wait_log(PATIENCE, "the Lease's watch is following it");
    proxy.blackhole();
    b.wait_log(PATIENCE, "the Lease's watch went quiet");
    // The new watch is on a new connection, which the proxy carries.
    std::thread::sleep(Duration::from_millis(500));
    let released = std::time::Instant::now();
    a.signal("TERM");
    b.wait_leading(PATIENCE);
    let took = released.elapsed();
    assert!(a.wait_exit(PATIENCE).success());
    assert!(
        took < Duration::from_secs(3),
        "the standby took over {took:?} after the release: its watch was not replaced"
    );
    assert!(most_alive(&logs) <= 1, "two children at once");
}

/// A holder killed (SIGKILL): a standby on a watch has seen every renewal
/// as it came, so it takes over a lease duration after the holder's last
/// renewal (by the renewal's `renewTime` and the taker's `acquireTime`, both
/// written on this host's clock), never before it, and not a duration after
/// its own last timed read (up to two durations, before #46). Printed for
/// the closing figures; asserted with room for a loaded machine.
#[test]
fn a_crashed_holder_is_taken_over_a_duration_after_its_last_renewal() {
    let kube = Kube::start(1);
    let key = support::key("k8s-crash");
    let name = lease_name(&key);
    let (_dir, logs) = logs("k8s-crash", 4);
    let c = Candidate::on(&kube, &key, TTL);
    let time = |l: &Value, field: &str| {
        humantime::parse_rfc3339(l["spec"][field].as_str().expect(field)).expect("RFC 3339")
    };
    let mut nodes: Vec<Leaderd> = (0..2)
        .map(|i| c.run(&format!("k{i}"), &logs[i], &[]))
        .collect();
    let mut took = Vec::new();
    for next in 2..5 {
        let (leader, _) = support::the_leader(&nodes, PATIENCE);
        // Let the standby see a few renewals.
        std::thread::sleep(Duration::from_millis(2500));
        nodes[leader].signal("KILL");
        nodes[leader].wait_exit(PATIENCE);
        let dead = nodes.remove(leader);
        let last = time(&the_lease(&kube, &name), "renewTime");
        nodes[0].wait_leading(PATIENCE);
        let taken = the_lease(&kube, &name);
        assert_ne!(taken["spec"]["holderIdentity"], dead.id.as_str());
        let after = time(&taken, "acquireTime")
            .duration_since(last)
            .expect("taken after the last renewal");
        eprintln!("crash takeover {after:?} after the last renewal (lease 4 s)");
        assert!(
            after >= Duration::from_secs(4),
            "taken over early: {after:?}"
        );
        // 1.5 s of room for a loaded machine; a standby that dated the
        // record at its own timed read took 6.7 s here before #46.
        assert!(
            after < Duration::from_millis(5500),
            "taken over late: {after:?}"
        );
        took.push(after);
        nodes.push(c.run(&format!("k{next}"), &logs[next % 4], &[]));
    }
    eprintln!("crash takeovers after the last renewal: {took:?}");
}
