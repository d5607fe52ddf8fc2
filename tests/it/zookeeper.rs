//! ZooKeeper against real servers on loopback (Debian's `zookeeper`): the
//! ensemble's leader killed, the server the leader is connected to frozen
//! past the TTL, a candidate partitioned through the proxy, leaderd itself
//! frozen past its session timeout, the whole ensemble restarted, twenty
//! handovers, a release that wakes exactly one waiter, and bad input.

mod queue;

use crate::support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::zookeeper::ZooKeeper;
use support::{Leaderd, born_beside_a_live_one, eventually, probe_events, run_to_end, the_leader};

/// How long to wait for what happens by itself: the suite's bound, which
/// holds on a loaded machine (10 s and 20 s fell short under two CPU hogs).
const PATIENCE: Duration = support::WAIT;
/// ttl 2 s: renew every 666 ms, renew deadline 1333 ms.
const TTL: Duration = Duration::from_secs(2);
const RENEW_DEADLINE: Duration = Duration::from_millis(1333);

fn candidate(connect: &str, key: &str, id: &str, log: Option<&Path>) -> Leaderd {
    let mut args = vec![
        "--zookeeper",
        connect,
        "--key",
        key,
        "--ttl",
        "2s",
        "--retry-interval",
        "300ms",
        "--zookeeper-timeout",
        "300ms",
    ];
    // The measure of overlap that sees a child killed with SIGKILL end.
    let child = log.map(support::exclusive_probe).unwrap_or_default();
    args.extend(child.iter().map(String::as_str));
    Leaderd::run(id, &args)
}

/// What a one-off command (`check`, `status`) is given when its subject is
/// its report, not its speed: the default request timeout (500 ms) is less
/// than a new ZooKeeper session beside two CPU hogs always takes (the
/// tenth, twenty-fifth and twenty-eighth loaded runs failed on it, the
/// last over TLS). 9 s fits in half the
/// renew interval of a 30 s TTL, as the timeout must.
const PATIENT: [&str; 4] = ["--ttl", "30s", "--zookeeper-timeout", "9s"];

/// `check`'s report on `key`, given time.
fn check(zk: &ZooKeeper, key: &str) -> String {
    let connect = zk.connect();
    let args = [
        &["check", "--zookeeper", &connect, "--key", key][..],
        &PATIENT,
    ]
    .concat();
    let (code, out, err) = run_to_end(&args);
    assert_eq!(code, 0, "{out}{err}");
    out
}

/// Candidates with a probe child each, their logs in a scratch directory.
struct Rig {
    key: String,
    _dir: support::Scratch,
    logs: Vec<PathBuf>,
}

impl Rig {
    fn new(name: &str, ids: usize) -> Rig {
        let dir = support::Scratch::new(&format!("{name}-{}", support::os::below(1 << 30)));
        let logs = (0..ids).map(|i| dir.join(format!("c{i}"))).collect();
        Rig {
            key: support::key(name),
            _dir: dir,
            logs,
        }
    }

    fn start(&self, i: usize, connect: &str) -> Leaderd {
        candidate(connect, &self.key, &format!("c{i}"), Some(&self.logs[i]))
    }

    fn child_running(&self, i: usize) -> bool {
        let events = probe_events(&self.logs[i]);
        let starts = events.iter().filter(|e| e.kind == "start").count();
        starts > events.iter().filter(|e| e.kind == "stop").count()
    }

    /// By the children's `--exclusive` lock, not their stop lines: a
    /// leaderd starved past its lease (two CPU hogs and a whole ensemble
    /// restarting) has its child SIGKILLed by the guard, which writes no
    /// stop line (the fifteenth loaded run).
    fn assert_one_child_at_a_time(&self, nodes: &[&Leaderd]) {
        if born_beside_a_live_one(&self.logs) > 0 {
            for node in nodes {
                eprintln!("{}", node.log().join("\n"));
            }
            panic!("two children ran at once");
        }
    }
}

fn token(node: &Leaderd) -> u64 {
    node.leader().expect("answers").1["fencing_token"]
        .as_u64()
        .expect("a token")
}

#[test]
fn killing_the_ensembles_leader_keeps_one_leader() {
    let mut zk = ZooKeeper::start(3);
    let r = Rig::new("zk-kill", 2);
    let nodes: Vec<Leaderd> = (0..2).map(|i| r.start(i, &zk.connect())).collect();
    let (_, before) = the_leader(&nodes, PATIENCE);
    let leader = zk.leader().expect("a ZooKeeper leader");
    zk.servers[leader].kill();
    // Longer than a TTL: renewals go to the servers left, which elect.
    std::thread::sleep(TTL + Duration::from_secs(1));
    let (_, after) = the_leader(&nodes, PATIENCE);
    assert!(after >= before, "{after} ≥ {before}");
    zk.servers[leader].restart();
    r.assert_one_child_at_a_time(&nodes.iter().collect::<Vec<_>>());
}

/// The leader reaches one server only, which is frozen past the TTL: its
/// child stops by the renew deadline, the other candidate leads only once
/// the frozen session expired, never two children.
#[test]
fn freezing_the_leaders_server_past_the_ttl_hands_over_after_its_session_expired() {
    let zk = ZooKeeper::start(3);
    let r = Rig::new("zk-freeze", 2);
    let only = format!("127.0.0.1:{}", zk.servers[0].client_port);
    let a = r.start(0, &only);
    a.wait_leading(PATIENCE);
    eventually(PATIENCE, "a's child", || r.child_running(0).then_some(()));
    let b = r.start(1, &zk.connect());
    eventually(PATIENCE, "b to queue", || {
        (zk.children(&format!("/leaderd/{}", r.key)).len() == 3).then_some(())
    });
    let frozen = Instant::now();
    zk.servers[0].pause();
    eventually(
        RENEW_DEADLINE + Duration::from_secs(2),
        "a's child to stop",
        || (!r.child_running(0)).then_some(()),
    );
    let stopped = frozen.elapsed();
    b.wait_leading(PATIENCE);
    let took = frozen.elapsed();
    zk.servers[0].resume();
    eprintln!("child stopped {stopped:?} and b led {took:?} after the freeze");
    // The session outlives the last time a server heard from it by the
    // TTL; a renewal came at most a renew interval before the freeze.
    assert!(took >= TTL - TTL / 3, "b led {took:?} after the freeze");
    r.assert_one_child_at_a_time(&[&a, &b]);
}

/// A candidate cut off through the proxy: the same, and it comes back as
/// a waiter behind the new leader.
#[test]
fn a_leader_partitioned_from_the_ensemble_steps_down_and_rejoins() {
    let zk = ZooKeeper::start(3);
    let r = Rig::new("zk-cut", 2);
    let proxy = support::proxy::Proxy::start(zk.servers[1].client_port);
    let a = r.start(0, &format!("127.0.0.1:{}", proxy.port));
    a.wait_leading(PATIENCE);
    let b = r.start(1, &zk.connect());
    eventually(PATIENCE, "b to queue", || {
        (zk.children(&format!("/leaderd/{}", r.key)).len() == 3).then_some(())
    });
    let before = token(&a);
    let cut = Instant::now();
    proxy.freeze();
    b.wait_leading(PATIENCE);
    eprintln!("b led {:?} after the cut", cut.elapsed());
    assert!(!a.is_leader(), "a still answers as leader");
    proxy.thaw();
    proxy.reset();
    // a's session expired while it was cut off: it queues anew.
    eventually(PATIENCE, "a back in the queue", || {
        (zk.children(&format!("/leaderd/{}", r.key)).len() == 3).then_some(())
    });
    b.signal("TERM");
    a.wait_leading(PATIENCE);
    assert!(token(&a) > before, "a new term, a larger token");
    r.assert_one_child_at_a_time(&[&a, &b]);
}

/// leaderd frozen past its session timeout: its guard kills the child; on
/// SIGCONT it learns the session expired and campaigns as a new term.
#[test]
fn leaderd_frozen_past_its_session_comes_back_as_a_new_term() {
    let zk = ZooKeeper::start(1);
    let r = Rig::new("zk-stop", 2);
    let a = r.start(0, &zk.connect());
    a.wait_leading(PATIENCE);
    let first = token(&a);
    let child = eventually(PATIENCE, "a's child", || {
        probe_events(&r.logs[0])
            .into_iter()
            .find(|e| e.kind == "start")
    });
    let b = r.start(1, &zk.connect());
    a.signal("STOP");
    // a's child, killed by the guard, writes no stop line: its pid is
    // looked at the moment b's child starts.
    assert!(
        !support::started_beside(&r.logs[0], &r.logs[1], PATIENCE * 2),
        "b's child started while a's still ran"
    );
    b.wait_leading(PATIENCE);
    assert!(!support::alive(child.pid), "the guard killed a's child");
    let second = token(&b);
    a.signal("CONT");
    eventually(PATIENCE, "a to queue again", || {
        a.log()
            .iter()
            .any(|l| l.contains("lease lost") || l.contains("to=\"pausing\""))
            .then_some(())
    });
    b.signal("TERM");
    a.wait_leading(PATIENCE);
    let third = token(&a);
    assert!(first < second && second < third, "{first} {second} {third}");
}

#[test]
fn the_whole_ensemble_restarted_elects_again_with_a_larger_token() {
    let mut zk = ZooKeeper::start(3);
    let r = Rig::new("zk-restart", 2);
    let nodes: Vec<Leaderd> = (0..2).map(|i| r.start(i, &zk.connect())).collect();
    let (_, before) = the_leader(&nodes, PATIENCE);
    for s in &mut zk.servers {
        s.kill();
    }
    eventually(PATIENCE, "the leader to step down", || {
        nodes.iter().all(|n| !n.is_leader()).then_some(())
    });
    for s in &mut zk.servers {
        s.restart();
    }
    zk.wait_serving();
    let (_, after) = the_leader(&nodes, PATIENCE * 2);
    assert!(after > before, "{after} > {before}");
    r.assert_one_child_at_a_time(&nodes.iter().collect::<Vec<_>>());
}

#[test]
fn twenty_handovers_give_strictly_increasing_tokens() {
    let zk = ZooKeeper::start(1);
    let r = Rig::new("zk-twenty", 21);
    let mut nodes: Vec<Leaderd> = vec![r.start(0, &zk.connect()), r.start(1, &zk.connect())];
    let mut tokens = Vec::new();
    for next in 2..=21 {
        let (leader, token) = the_leader(&nodes, PATIENCE);
        tokens.push(token);
        nodes[leader].signal("TERM");
        nodes[leader].wait_exit(PATIENCE);
        nodes.remove(leader);
        if next < 21 {
            nodes.push(r.start(next, &zk.connect()));
        }
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert_eq!(tokens.len(), 20);
    r.assert_one_child_at_a_time(&nodes.iter().collect::<Vec<_>>());
}

/// Each waiter watches only the node before it: a release wakes one. A
/// long TTL keeps the waiters' timers (a TTL) out of the window watched.
#[test]
fn a_release_wakes_exactly_one_waiter() {
    let zk = ZooKeeper::start(1);
    let key = support::key("zk-herd");
    let mut nodes = Vec::new();
    for id in ["a", "b", "c", "d"] {
        let args = ["--zookeeper", &zk.connect(), "--key", &key, "--ttl", "20s"];
        nodes.push(Leaderd::run(id, &args));
        // Queued in this order.
        eventually(PATIENCE, "the candidate to queue", || {
            (zk.children(&format!("/leaderd/{key}")).len() > nodes.len()).then_some(())
        });
    }
    let (leader, _) = the_leader(&nodes, PATIENCE);
    // The registry lists them, the holder first, then in the order they
    // started (equal priorities), once each has registered: queueing does
    // not wait for the registry write, which a loaded machine can delay.
    let listed = |out: &str| -> Vec<String> {
        out.lines()
            .skip_while(|l| !l.contains("in the order they would lead"))
            .skip(1)
            .filter_map(|l| Some(l.split_whitespace().next()?.to_string()))
            .collect()
    };
    let out = eventually(PATIENCE, "status to list all four", || {
        let connect = zk.connect();
        let args = [
            &["status", "--zookeeper", &connect, "--key", &key][..],
            &PATIENT,
        ]
        .concat();
        let (code, out, err) = run_to_end(&args);
        assert_eq!(code, 0, "{out}{err}");
        (listed(&out).len() == 4).then_some(out)
    });
    assert!(out.contains("held by a"), "{out}");
    assert_eq!(listed(&out), ["a", "b", "c", "d"], "{out}");
    let mut old = nodes.remove(leader);
    let acquires = |nodes: &[Leaderd]| -> Vec<u64> {
        nodes
            .iter()
            .map(|n| {
                let (_, body) = support::http_get(n.http_port, "/metrics").expect("metrics");
                body.as_str()
                    .unwrap_or("")
                    .lines()
                    .filter(|l| {
                        l.starts_with("leaderd_lease_operations_total{")
                            && l.contains("op=\"acquire\"")
                    })
                    .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                    .sum::<f64>() as u64
            })
            .collect()
    };
    let before = acquires(&nodes);
    old.signal("TERM");
    old.wait_exit(PATIENCE);
    the_leader(&nodes, PATIENCE);
    // Room for any other wake-up to show.
    std::thread::sleep(Duration::from_millis(500));
    let after = acquires(&nodes);
    let woken = before.iter().zip(&after).filter(|(b, a)| a > b).count();
    assert_eq!(
        woken, 1,
        "one waiter woken, not every one: {before:?} → {after:?}"
    );
}

/// Digest authentication: the nodes leaderd creates are the user's; the
/// same user with a wrong password may not queue (exit 2, never echoed).
#[test]
fn digest_users_own_their_nodes_and_a_wrong_password_is_refused() {
    let zk = ZooKeeper::start(1);
    let connect = zk.connect();
    let check = |password: &str| {
        let args = ["check", "--key", "auth", "--zookeeper", &connect];
        let out = support::command(&[&args[..], &["--zookeeper-user", "app"], &PATIENT].concat())
            .env("LEADERD_ZOOKEEPER_PASSWORD", password)
            .output()
            .expect("run leaderd");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code().unwrap_or(-1), said)
    };
    let (code, said) = check("good-pw-x1");
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("signed in as app"), "{said}");
    assert!(said.contains("ACL on /leaderd/auth: digest:app:"), "{said}");
    assert!(!said.contains("good-pw-x1"), "{said}");
    let (code, said) = check("wrong-pw-x2");
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("no permission"), "{said}");
    assert!(!said.contains("wrong-pw-x2"), "{said}");
}

/// Mistakes a person must fix: exit 2 from `check` and from `run`, saying
/// what and how, never echoing a password.
#[test]
fn bad_input_is_a_clear_exit_2() {
    let zk = ZooKeeper::start(1);
    let port = zk.servers[0].client_port;
    // A chroot nobody may create in.
    zk.with(async |c| {
        let read_only = zookeeper_client::CreateMode::Persistent
            .with_acls(zookeeper_client::Acls::anyone_read());
        c.create("/locked", b"", &read_only).await.expect("created");
    });
    let at = |rest: &str| format!("127.0.0.1:{port}{rest}");
    // Each with a TTL whose renew interval leaves room for a patient
    // request timeout, so that the refusal, not a slow session, answers.
    let patient = |rest: &str, ttl: &str| {
        let timeout = ["--zookeeper-timeout", "9s", "--ttl", ttl];
        [&["--zookeeper", &at(rest)][..], &timeout]
            .concat()
            .iter()
            .map(|a| a.to_string())
            .collect()
    };
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--zookeeper".into(), "127.0.0.1".into()],
            "has no port",
        ),
        (vec!["--zookeeper".into(), at("/")], "`/` is empty"),
        (patient("", "90s"), "negotiated a session timeout"),
        (patient("/missing", "30s"), "does not exist"),
        (patient("/locked", "30s"), "no permission"),
    ];
    for (args, says) in cases {
        for cmd in ["check", "run"] {
            let mut full = vec![cmd, "--key", "bad"];
            full.extend(args.iter().map(String::as_str));
            let (code, out, err) = run_to_end(&full);
            assert_eq!(code, 2, "{full:?}: {out}{err}");
            assert!(format!("{out}{err}").contains(says), "{full:?}: {out}{err}");
        }
    }
}

/// A lease node no session owns never expires: nobody leads, every
/// candidate says why and how to clear it, and once it is gone one leads.
#[test]
fn a_persistent_lease_node_is_never_taken_over() {
    let zk = ZooKeeper::start(1);
    let key = support::key("zk-blocked");
    let path = format!("/leaderd/{key}/leader");
    zk.put("/leaderd", "");
    zk.put(&format!("/leaderd/{key}"), "");
    zk.put(&path, r#"{"id":"someone"}"#);
    let node = candidate(&zk.connect(), &key, "a", None);
    let said = node.wait_log(PATIENCE, "cannot be taken");
    assert!(said.contains(&format!("delete {path}")), "{said}");
    assert!(!node.is_leader());
    zk.delete(&path);
    node.wait_leading(PATIENCE);
}

/// TLS to the secure client port: the server verified against the CA
/// given, a client certificate where the server asks for one, and each
/// mistake an exit 2 that says what to fix.
#[test]
fn tls_verifies_the_server_and_presents_a_client_certificate() {
    let pki = support::tls::Pki::new(&format!("zk-tls-{}", support::os::below(1 << 30)));
    let (cert, key) = pki.leaf("server", &["127.0.0.1", "localhost"], false);
    let client = pki.leaf("client", &["leaderd"], false);
    let zk = ZooKeeper::start_tls(&support::zookeeper::Tls {
        cert,
        key,
        ca: pki.ca(),
        clients_need_certs: true,
    });
    let other = support::tls::Pki::new(&format!("zk-other-{}", support::os::below(1 << 30)));
    let connect = zk.secure_connect();
    let check = |extra: &[&str]| {
        let mut args = vec!["check", "--key", "tls", "--zookeeper", &connect];
        args.extend_from_slice(&PATIENT);
        args.extend_from_slice(extra);
        let (code, out, err) = run_to_end(&args);
        (code, format!("{out}{err}"))
    };
    let (ca, other_ca) = (pki.ca(), other.ca());
    let (ca, other_ca) = (support::path_str(&ca), support::path_str(&other_ca));
    let (cert, key) = (support::path_str(&client.0), support::path_str(&client.1));
    // Another CA: the server's certificate is not trusted.
    let (code, said) = check(&[
        "--zookeeper-tls-ca",
        other_ca,
        "--zookeeper-tls-cert",
        cert,
        "--zookeeper-tls-key",
        key,
    ]);
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("TLS"), "{said}");
    // The right CA, but no client certificate where one is required.
    let (code, said) = check(&["--zookeeper-tls-ca", ca]);
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("--zookeeper-tls-cert"), "{said}");
    eprintln!("{said}");
    // Both.
    let (code, said) = check(&[
        "--zookeeper-tls-ca",
        ca,
        "--zookeeper-tls-cert",
        cert,
        "--zookeeper-tls-key",
        key,
    ]);
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("create, renew and delete work"), "{said}");
    // And a leader over TLS.
    let node = Leaderd::run(
        "a",
        &[
            "--zookeeper",
            &connect,
            "--key",
            "tls",
            "--zookeeper-tls-ca",
            ca,
            "--zookeeper-tls-cert",
            cert,
            "--zookeeper-tls-key",
            key,
        ],
    );
    node.wait_leading(PATIENCE);
}
