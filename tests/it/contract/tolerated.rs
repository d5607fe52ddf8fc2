//! The contract's rule (c), strictly: a fault the store tolerates costs the
//! election nothing. One node frozen for three TTLs, or one node 300 ms
//! slow on the leader's own path, and the leader keeps its term: the same
//! fencing token throughout, its child never restarted, no other child.
//! (`one_node_frozen_past_the_ttl_leaves_a_leader_and_never_two` freezes
//! the node that matters most, which may need the store's own failover;
//! these freeze one that does not.) Issue #36: Redlock lost its term to
//! one frozen master.

use super::{PATIENCE, Scene, TTL, candidate_on, for_each_backend};
use crate::support::{self, Leaderd, probe_events, proxy::Proxy};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Three TTLs of the suite's 2 s.
const FAULT: Duration = Duration::from_secs(6);
/// Added to every chunk either way: 300 ms more for every round trip.
const ONE_WAY: Duration = Duration::from_millis(150);

/// `a` leads (its child started) before `b` starts, so the fault can be
/// aimed at the leader's path.
fn a_leads_then_b(scene: &dyn Scene, key: &str, a_args: &[String]) -> Scene2 {
    let dir = support::Scratch::new(&format!("tolerated-{key}-{}", support::os::below(1 << 30)));
    let logs: Vec<PathBuf> = ["a", "b"].iter().map(|id| dir.join(id)).collect();
    let a = candidate_on(a_args, "a", TTL, Some(&logs[0]));
    a.wait_leading(PATIENCE * 3);
    let b = candidate_on(&scene.args(key), "b", TTL, Some(&logs[1]));
    // b stands by: registered, and told who leads.
    support::eventually(PATIENCE, "b to stand by", || {
        let (leads, body) = b.leader()?;
        (!leads && body["leader"] == "a").then_some(())
    });
    let token = the_term(&a).expect("a leads");
    Scene2 {
        _dir: dir,
        logs,
        nodes: vec![a, b],
        token,
    }
}

struct Scene2 {
    _dir: support::Scratch,
    logs: Vec<PathBuf>,
    nodes: Vec<Leaderd>,
    token: u64,
}

/// The token of the term `node` leads in, if it leads.
fn the_term(node: &Leaderd) -> Option<u64> {
    let (leads, body) = node.leader()?;
    leads.then(|| body["fencing_token"].as_u64()).flatten()
}

impl Scene2 {
    /// Watches for `span`: `a` leads in its first term all along and `b`
    /// never does; panics with both logs at the first sight otherwise.
    fn same_term_for(&self, name: &str, fault: &str, span: Duration) {
        let until = Instant::now() + span;
        loop {
            let a = the_term(&self.nodes[0]);
            let b = self.nodes[1].is_leader();
            if a != Some(self.token) || b {
                self.fail(
                    name,
                    &format!("{fault}: a's term {a:?} (was {}), b leads: {b}", self.token),
                );
            }
            if Instant::now() >= until {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let starts = |log: &Path| {
            probe_events(log)
                .iter()
                .filter(|e| e.kind == "start")
                .count()
        };
        let stops = |log: &Path| {
            probe_events(log)
                .iter()
                .filter(|e| e.kind == "stop")
                .count()
        };
        if starts(&self.logs[0]) != 1 || stops(&self.logs[0]) != 0 || starts(&self.logs[1]) != 0 {
            self.fail(
                name,
                &format!("{fault}: a's child restarted, or b's started"),
            );
        }
    }

    fn fail(&self, name: &str, what: &str) -> ! {
        for node in &self.nodes {
            eprintln!("--- {}\n{}", node.id, node.log().join("\n"));
        }
        panic!("{name}: {what}");
    }
}

#[test]
fn one_node_frozen_for_three_ttls_keeps_the_leaders_term() {
    for_each_backend(|scene| {
        let name = scene.name();
        let key = support::key("tolerated-freeze");
        let run = a_leads_then_b(scene, &key, &scene.args(&key));
        if !scene.freeze_tolerated(&key) {
            eprintln!("{name}: one node; not applicable");
            return;
        }
        run.same_term_for(name, "one node frozen", FAULT);
        scene.thaw_tolerated();
        run.same_term_for(name, "after the thaw", Duration::from_secs(1));
    });
}

#[test]
fn one_node_slow_on_the_leaders_path_keeps_its_term() {
    for_each_backend(|scene| {
        let name = scene.name();
        let key = support::key("tolerated-slow");
        let Some(port) = scene.tolerated_port() else {
            eprintln!("{name}: no node to slow on one candidate's path; not applicable");
            return;
        };
        let proxy = Proxy::start(port);
        let (plain, proxied) = (
            format!("127.0.0.1:{port}"),
            format!("127.0.0.1:{}", proxy.port),
        );
        let a_args: Vec<String> = scene
            .args(&key)
            .iter()
            .map(|a| a.replace(&plain, &proxied))
            .collect();
        assert_ne!(
            a_args,
            scene.args(&key),
            "{name}: the node's port is in the args"
        );
        let run = a_leads_then_b(scene, &key, &a_args);
        proxy.slow(ONE_WAY);
        run.same_term_for(name, "one node 300 ms slow on a's path", FAULT);
        proxy.slow(Duration::ZERO);
        run.same_term_for(name, "after the latency", Duration::from_secs(1));
    });
}
