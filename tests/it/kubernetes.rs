//! The Kubernetes Lease against a real kube-apiserver and etcd 3.6 on
//! loopback (`support::kube`): RBAC mistakes and a bad token, each with its
//! exact message; the Lease deleted and overwritten under a working leader;
//! a 409 storm; an annotation written under the holder; the API server
//! killed and frozen; two API servers on one etcd; etcd members lost; a
//! candidate's wall clock an hour off; twenty handovers. RBAC in
//! `kubernetes/rbac.rs`, the control plane's faults in
//! `kubernetes/faults.rs`.

mod component;
mod deploy;
mod faults;
mod idle;
mod mixed;
mod outside;
mod rbac;
mod registry;
mod service;

use crate::support;

use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::backends::lease_name;
use support::kube::{CANDIDATE, Kube};
use support::{Leaderd, eventually, most_alive, probe_child, probe_events, run_to_end, the_leader};

const PATIENCE: Duration = Duration::from_secs(20);

/// A candidate as `user` through API server `server`.
struct Candidate<'a> {
    kube: &'a Kube,
    server: usize,
    user: &'a str,
    key: &'a str,
    ttl: &'a str,
}

impl<'a> Candidate<'a> {
    /// The candidate identity, through the first API server.
    fn on(kube: &'a Kube, key: &'a str, ttl: &'a str) -> Candidate<'a> {
        Candidate {
            kube,
            server: 0,
            user: CANDIDATE,
            key,
            ttl,
        }
    }

    fn args(&self, kubeconfig: &Path) -> Vec<String> {
        [
            "--kubernetes-lease",
            &lease_name(self.key),
            "--kubeconfig",
            support::path_str(kubeconfig),
            "--key",
            self.key,
            "--ttl",
            self.ttl,
            "--retry-interval",
            "300ms",
            "--kubernetes-timeout",
            "300ms",
        ]
        .map(String::from)
        .to_vec()
    }

    /// `leaderd run` running the probe child, which logs to `log`.
    fn run(&self, id: &str, log: &Path, env: &[(&str, &str)]) -> Leaderd {
        let log = [support::path_str(log).to_string()];
        self.run_with(id, &probe_child(), &log, env)
    }

    /// `leaderd run -- PROGRAM ARGS`.
    fn run_with(
        &self,
        id: &str,
        program: &str,
        program_args: &[String],
        env: &[(&str, &str)],
    ) -> Leaderd {
        let kubeconfig = self.kube.kubeconfig(self.user, self.server);
        self.run_through(&kubeconfig, id, program, program_args, env)
    }

    /// [`Candidate::run_with`] through another kubeconfig (a proxy's).
    fn run_through(
        &self,
        kubeconfig: &Path,
        id: &str,
        program: &str,
        program_args: &[String],
        env: &[(&str, &str)],
    ) -> Leaderd {
        let mut args = self.args(kubeconfig);
        args.extend(["--".to_string(), program.to_string()]);
        args.extend(program_args.iter().cloned());
        let http = format!("127.0.0.1:{}", support::free_port());
        let mut full: Vec<&str> = vec!["run", "--id", id, "--http", &http];
        full.extend(args.iter().map(String::as_str));
        Leaderd::attach(id, &http, support::spawn_with_env(&full, env))
    }

    /// `leaderd status --json`, once it answers.
    fn status_json(&self) -> serde_json::Value {
        let kubeconfig = self.kube.kubeconfig(self.user, self.server);
        let mut args = vec!["status".to_string(), "--json".to_string()];
        args.extend(self.args(&kubeconfig));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        eventually(PATIENCE, "status to answer", || {
            serde_json::from_str(run_to_end(&args).1.trim()).ok()
        })
    }

    /// `leaderd check`: its exit code and stdout + stderr.
    fn check(&self) -> (i32, String) {
        self.check_with(&self.kube.kubeconfig(self.user, self.server))
    }

    fn check_with(&self, kubeconfig: &Path) -> (i32, String) {
        let mut args = vec!["check".to_string()];
        args.extend(self.args(kubeconfig));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out, err) = run_to_end(&args);
        (code, format!("{out}{err}"))
    }
}

/// The probe logs of `n` candidates in a scratch directory.
fn logs(name: &str, n: usize) -> (support::Scratch, Vec<PathBuf>) {
    let dir = support::Scratch::new(&format!("{name}-{}", support::os::below(1 << 30)));
    let logs = (0..n).map(|i| dir.join(format!("c{i}"))).collect();
    (dir, logs)
}

/// Every child start over `logs`.
fn starts(logs: &[PathBuf]) -> usize {
    logs.iter()
        .flat_map(|l| probe_events(l))
        .filter(|e| e.kind == "start")
        .count()
}

#[test]
fn the_lease_deleted_or_overwritten_under_a_working_leader_stops_it_at_once() {
    let kube = Kube::start(1);
    let key = support::key("k8s-outside");
    let name = lease_name(&key);
    // ttl 30 s: renewals every 10 s; a stop within 3 s is the watch's doing.
    let c = Candidate::on(&kube, &key, "30s");
    let (_dir, logs) = logs("k8s-outside", 1);
    let node = c.run("a", &logs[0], &[]);
    node.wait_leading(PATIENCE);
    for (round, act) in ["delete", "overwrite"].iter().enumerate() {
        let child = eventually(PATIENCE, "the child", || {
            probe_events(&logs[0])
                .into_iter()
                .filter(|e| e.kind == "start")
                .nth(round)
        });
        let at = support::os::mono_ns();
        if *act == "delete" {
            kube.delete_lease(&name);
        } else {
            let patch = json!({ "spec": { "holderIdentity": "kubectl-user" } });
            kube.patch_lease(&name, &patch);
        }
        let stopped = eventually(PATIENCE, "the child to stop", || {
            probe_events(&logs[0])
                .into_iter()
                .find(|e| e.kind == "stop" && e.pid == child.pid)
        });
        let took = Duration::from_nanos((stopped.ns - at) as u64);
        assert!(
            took < Duration::from_secs(3),
            "{act}: stopped after {took:?}"
        );
        if *act == "delete" {
            // Its own term was the one deleted: it leads again (a new term).
            node.wait_leading(Duration::from_secs(30) + PATIENCE);
        }
    }
    // The overwriter holds it for 30 s by everyone's clock: nobody leads.
    std::thread::sleep(Duration::from_secs(3));
    assert!(!node.is_leader(), "took over a Lease someone else holds");
}

#[test]
fn an_annotation_written_under_the_holder_keeps_its_term() {
    let kube = Kube::start(1);
    let key = support::key("k8s-annotate");
    let name = lease_name(&key);
    let c = Candidate::on(&kube, &key, "3s");
    let (_dir, logs) = logs("k8s-annotate", 1);
    let node = c.run("a", &logs[0], &[]);
    let (_, token) = the_leader(std::slice::from_ref(&node), PATIENCE);
    let patch = json!({ "metadata": { "annotations": { "example.com/owner-team": "billing" } } });
    kube.patch_lease(&name, &patch);
    let renewed_at = |l: &serde_json::Value| l["spec"]["renewTime"].as_str().map(str::to_string);
    let before = renewed_at(&kube.lease(&name).expect("the lease"));
    // Two renewals after the write (every second at ttl 3 s).
    for _ in 0..2 {
        let last = renewed_at(&kube.lease(&name).expect("the lease"));
        eventually(PATIENCE, "a renewal", || {
            let now = renewed_at(&kube.lease(&name)?);
            (now != last).then_some(())
        });
    }
    let lease = kube.lease(&name).expect("the lease");
    assert_ne!(renewed_at(&lease), before);
    assert_eq!(
        lease["metadata"]["annotations"]["example.com/owner-team"],
        "billing"
    );
    let (_, now) = the_leader(std::slice::from_ref(&node), PATIENCE);
    assert_eq!(now, token, "the term changed");
    assert_eq!(starts(&logs), 1, "the child was restarted");
}

#[test]
fn ten_candidates_released_at_once_make_one_term() {
    let kube = Kube::start(1);
    let key = support::key("k8s-storm");
    let c = Candidate::on(&kube, &key, "4s");
    let (_dir, logs) = logs("k8s-storm", 11);
    let first = c.run("first", &logs[10], &[]);
    first.wait_leading(PATIENCE);
    let nodes: Vec<Leaderd> = (0..10)
        .map(|i| c.run(&format!("c{i}"), &logs[i], &[]))
        .collect();
    eventually(PATIENCE, "ten standbys", || {
        nodes
            .iter()
            .all(|n| n.leader().is_some_and(|(leads, _)| !leads))
            .then_some(())
    });
    first.signal("TERM"); // releases: ten watchers wake at once
    let (leader, _) = the_leader(&nodes, PATIENCE);
    std::thread::sleep(Duration::from_secs(2));
    let (again, _) = the_leader(&nodes, PATIENCE);
    assert_eq!(leader, again);
    assert_eq!(
        starts(&logs[..10]),
        1,
        "more than one term after the release"
    );
    assert!(most_alive(&logs) <= 1, "two children ran at once");
}

#[test]
fn a_wall_clock_an_hour_off_never_takes_over_early() {
    let kube = Kube::start(1);
    let key = support::key("k8s-skew");
    let c = Candidate::on(&kube, &key, "6s");
    let (_dir, logs) = logs("k8s-skew", 3);
    let leader = c.run("a", &logs[0], &[]);
    leader.wait_leading(PATIENCE);
    let preload = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
    let skewed: Vec<Leaderd> = ["+1h", "-1h"]
        .iter()
        .enumerate()
        .map(|(i, offset)| {
            let env = [("LD_PRELOAD", preload), ("FAKETIME", *offset)];
            c.run(&format!("skew{i}"), &logs[i + 1], &env)
        })
        .collect();
    eventually(PATIENCE, "the skewed candidates to stand by", || {
        skewed
            .iter()
            .all(|n| n.leader().is_some_and(|(leads, _)| !leads))
            .then_some(())
    });
    // Three TTLs: the holder renews, and neither skewed clock takes over.
    let (_, token) = the_leader(std::slice::from_ref(&leader), PATIENCE);
    for _ in 0..18 {
        std::thread::sleep(Duration::from_secs(1));
        assert!(
            leader.is_leader(),
            "the holder lost its lease: {:#?}\n{:#?}\n{:#?}",
            leader.log(),
            skewed[0].log(),
            skewed[1].log()
        );
        assert!(skewed.iter().all(|n| !n.is_leader()), "an early takeover");
    }
    let (_, now) = the_leader(std::slice::from_ref(&leader), PATIENCE);
    assert_eq!(now, token, "the holder's term changed");
    assert!(most_alive(&logs) <= 1, "two children ran at once");
}

#[test]
fn twenty_handovers_with_tokens_strictly_increasing() {
    let kube = Kube::start(1);
    let key = support::key("k8s-handovers");
    let c = Candidate::on(&kube, &key, "4s");
    let (_dir, logs) = logs("k8s-handovers", 2);
    let mut nodes = vec![c.run("a", &logs[0], &[]), c.run("b", &logs[1], &[])];
    let mut tokens = Vec::new();
    for round in 0..20 {
        let (leader, token) = the_leader(&nodes, PATIENCE);
        tokens.push(token);
        let other = 1 - leader;
        eventually(PATIENCE, "the standby", || nodes[other].leader().map(drop));
        nodes[leader].signal("TERM");
        nodes[leader].wait_exit(PATIENCE);
        let id = ["a", "b"][leader];
        let _ = round;
        nodes[leader] = c.run(id, &logs[leader], &[]);
    }
    let (_, last) = the_leader(&nodes, PATIENCE);
    tokens.push(last);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens not strictly increasing: {tokens:?}"
    );
    assert!(most_alive(&logs) <= 1, "two children ran at once");
}
