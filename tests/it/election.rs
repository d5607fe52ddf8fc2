//! Election against a real redis-server, what the contract suite does not
//! ask of every backend: the lease key's shape and each candidate's
//! `/leader`, a SIGTERM handover woken by the release announcement, the
//! states a lost key passes through, fencing tokens across a restart under
//! running candidates, and the waiters' wake-ups. (A SIGKILL takeover at
//! the lease's PTTL is the contract's, on Redis as on every backend.)

use crate::support;

use std::time::{Duration, Instant};
use support::{FAST, Leaderd, Redis, eventually, on_redis as start};

fn lease_key(key: &str) -> String {
    format!("leaderd:{{{key}}}:lease")
}

/// Waits until exactly one instance says leader and every other names it.
fn one_leader(nodes: &[&Leaderd], limit: Duration) -> (usize, u64) {
    eventually(limit, "exactly one leader, named by all", || {
        let views: Vec<_> = nodes
            .iter()
            .map(|n| n.leader())
            .collect::<Option<Vec<_>>>()?;
        let leaders: Vec<usize> = views
            .iter()
            .enumerate()
            .filter(|(_, (yes, _))| *yes)
            .map(|(i, _)| i)
            .collect();
        let [leader] = leaders[..] else { return None };
        let name = &nodes[leader].id;
        let token = views[leader].1["fencing_token"].as_u64()?;
        let all_agree = views
            .iter()
            .all(|(_, body)| body["leader"] == *name && body["fencing_token"] == token);
        all_agree.then_some((leader, token))
    })
}

#[test]
fn three_instances_elect_exactly_one_leader() {
    let redis = Redis::start();
    let key = support::key("three");
    let nodes: Vec<Leaderd> = (1..=3)
        .map(|i| start(&redis, &key, &format!("c{i}"), FAST))
        .collect();
    let refs: Vec<&Leaderd> = nodes.iter().collect();
    let (leader, _) = one_leader(&refs, support::WAIT);
    for (i, node) in nodes.iter().enumerate() {
        let (code, body) = node.get("/leader").expect("answers");
        assert_eq!(code, if i == leader { 200 } else { 503 }, "{body}");
        let states: &[&str] = if i == leader {
            &["working", "renewing"]
        } else {
            &["waiting", "acquiring"]
        };
        assert!(states.contains(&body["state"].as_str().unwrap()), "{body}");
        assert_eq!(body["id"], node.id.as_str());
        assert_eq!(node.get("/healthz").map(|r| r.0), Some(200));
        assert_eq!(node.get("/readyz").map(|r| r.0), Some(200));
    }
    let stored = redis.get(&lease_key(&key)).expect("lease key exists");
    let stored: serde_json::Value = serde_json::from_str(&stored).expect("lease is JSON");
    assert_eq!(
        stored["id"],
        nodes[leader].id.as_str(),
        "GET shows the holder"
    );
}

#[test]
fn sigterm_hands_over_long_before_the_ttl() {
    let redis = Redis::start();
    let key = support::key("sigterm");
    let slow_ttl = [
        "--ttl",
        "20s",
        "--redis-timeout",
        "200ms",
        "--retry-interval",
        "300ms",
        // The wake-up below is a routine transition.
        "--log-level",
        "debug",
    ];
    let mut nodes: Vec<Leaderd> = ["a", "b", "c"]
        .iter()
        .map(|id| start(&redis, &key, id, &slow_ttl))
        .collect();
    let (leader, token) = one_leader(&nodes.iter().collect::<Vec<_>>(), support::WAIT);
    let signalled = Instant::now();
    nodes[leader].signal("TERM");
    let status = nodes[leader].wait_exit(support::WAIT);
    assert_eq!(status.code(), Some(0), "clean exit after SIGTERM");
    nodes[leader].wait_log(support::WAIT, "lease released");
    let old = nodes.remove(leader);
    // The key no longer names the old leader: it deleted it on its way out.
    let holder = redis.get(&lease_key(&key));
    assert!(
        holder
            .as_deref()
            .is_none_or(|v| !v.contains(&format!("\"id\":\"{}\"", old.id))),
        "{holder:?}"
    );
    let (_, next_token) = one_leader(&nodes.iter().collect::<Vec<_>>(), support::WAIT);
    let took = signalled.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "handover took {took:?}, the TTL is 20s"
    );
    assert!(next_token > token);
    eprintln!("SIGTERM handover observed in {took:?}");
    // Woken by the release announcement, not by a timer.
    let woken = nodes
        .iter()
        .filter(|n| n.is_leader())
        .flat_map(|n| n.log())
        .any(|l| l.contains("to=\"acquiring\" reason=\"release notified\""));
    assert!(
        woken,
        "the new leader was woken by the release notification"
    );
}

#[test]
fn overwritten_key_is_noticed_at_the_next_renewal() {
    let redis = Redis::start();
    let key = support::key("overwrite");
    // DEBUG: the path below includes the routine working → renewing.
    let node = start(
        &redis,
        &key,
        "a",
        &[FAST, &["--log-level", "debug"]].concat(),
    );
    node.wait_leading(support::WAIT);
    redis.cmd(&[
        "SET",
        &lease_key(&key),
        "{\"id\":\"intruder\",\"fencing_token\":1,\"token\":\"x\"}",
        "PX",
        "60000",
    ]);
    node.wait_log(support::WAIT, "reason=\"lease lost to another token\"");
    node.wait_log(support::WAIT, "from=\"pausing\" to=\"waiting\"");
    let log = node.log();
    let path: Vec<&str> = log
        .iter()
        .filter(|l| l.contains("transition"))
        .map(|l| {
            l.split("to=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or("")
        })
        .collect();
    let tail = path.iter().rev().take(3).rev().copied().collect::<Vec<_>>();
    assert_eq!(tail, ["renewing", "pausing", "waiting"], "{log:#?}");
    let (code, body) = node.get("/leader").unwrap();
    assert_eq!((code, body["leader"].as_str()), (503, Some("intruder")));
}

#[test]
fn fencing_tokens_increase_across_handovers_and_a_redis_restart() {
    let mut redis = Redis::start();
    let key = support::key("fencing");
    let mut tokens = Vec::new();
    let mut nodes = [
        start(&redis, &key, "n0", FAST),
        start(&redis, &key, "n1", FAST),
    ];
    for round in 0..5 {
        let (leader, token) = one_leader(&nodes.iter().collect::<Vec<_>>(), support::WAIT);
        tokens.push(token);
        nodes[leader].signal("TERM");
        assert_eq!(nodes[leader].wait_exit(support::WAIT).code(), Some(0));
        nodes[leader] = start(&redis, &key, &format!("n{}", round + 2), FAST);
    }
    let (_, before_restart) = one_leader(&nodes.iter().collect::<Vec<_>>(), support::WAIT);
    tokens.push(before_restart);
    redis.restart();
    assert_eq!(
        redis.get(&format!("leaderd:{{{key}}}:fence")),
        None,
        "Redis came back empty"
    );
    let after = eventually(
        Duration::from_secs(10),
        "a leader after the restart",
        || {
            let (leader, token) =
                one_leader(&nodes.iter().collect::<Vec<_>>(), Duration::from_secs(10));
            let _ = leader;
            (token != before_restart).then_some(token)
        },
    );
    tokens.push(after);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens must strictly increase: {tokens:?}"
    );
}

#[test]
fn waiters_look_again_only_when_the_lease_would_expire() {
    let redis = Redis::start();
    let key = support::key("quiet");
    let leader = start(&redis, &key, "a", FAST);
    leader.wait_leading(support::WAIT);
    // DEBUG: every look is counted, not only the one that names the holder.
    let waiter = start(
        &redis,
        &key,
        "b",
        &[FAST, &["--log-level", "debug"]].concat(),
    );
    let refusals = || {
        waiter
            .log()
            .iter()
            .filter(|l| l.contains("reason=\"lease held by another candidate\""))
            .count()
    };
    eventually(support::WAIT, "a first refusal", || {
        (refusals() >= 1).then_some(())
    });
    let first = Instant::now();
    eventually(Duration::from_secs(15), "three more looks", || {
        (refusals() >= 4).then_some(())
    });
    // The renewed lease always has more than ttl − renew_interval (1.33s) left,
    // so three more looks take at least 4s; polling every 300ms would take 0.9s.
    let took = first.elapsed();
    assert!(
        took >= Duration::from_secs(4),
        "three looks in {took:?}: the waiter polls"
    );
}

/// How many clients are blocked in BLPOP right now.
fn blocked_in_blpop(redis: &Redis) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut redis.conn())
        .expect("CLIENT LIST");
    list.lines().filter(|l| l.contains("cmd=blpop")).count()
}

#[test]
fn a_release_wakes_a_few_waiters_and_is_announced_on_the_channel() {
    let redis = Redis::start();
    let key = support::key("wake");
    let wake_key = format!("leaderd:{{{key}}}:wake");
    let mut leader = start(&redis, &key, "releaser", &[]);
    leader.wait_leading(support::WAIT);
    // The leader's own wait is first in Redis's queue of blocked clients.
    eventually(support::WAIT, "the leader's BLPOP", || {
        (blocked_in_blpop(&redis) == 1).then_some(())
    });
    // Five stand-in waiters, blocked after it, and one channel subscriber.
    let (popped_tx, popped) = std::sync::mpsc::channel();
    for _ in 0..5 {
        let mut conn = redis.conn();
        let (tx, wake_key) = (popped_tx.clone(), wake_key.clone());
        std::thread::spawn(move || {
            let got: Option<(String, String)> = redis::cmd("BLPOP")
                .arg(&wake_key)
                .arg(30)
                .query(&mut conn)
                .expect("BLPOP");
            let _ = tx.send(got.map(|(_, id)| id));
        });
    }
    let mut subscriber = redis.conn();
    let mut pubsub = subscriber.as_pubsub();
    pubsub
        .subscribe(format!("leaderd:{{{key}}}:released"))
        .expect("SUBSCRIBE");
    eventually(support::WAIT, "all six BLPOPs", || {
        (blocked_in_blpop(&redis) == 6).then_some(())
    });

    leader.signal("TERM");
    assert!(leader.wait_exit(support::WAIT).success());
    let announced: String = pubsub
        .get_message()
        .expect("release announced")
        .get_payload()
        .expect("payload");
    assert_eq!(announced, "releaser");
    // Three entries: one to the releaser's own wait (ignored), two to the
    // next waiters in line; the other three stay blocked, not woken.
    for _ in 0..2 {
        let got = popped
            .recv_timeout(Duration::from_secs(5))
            .expect("a waiter woken");
        assert_eq!(got.as_deref(), Some("releaser"));
    }
    eventually(
        Duration::from_secs(5),
        "three waiters still blocked",
        || (blocked_in_blpop(&redis) == 3).then_some(()),
    );
    assert!(
        popped.try_recv().is_err(),
        "only two stand-in waiters were woken"
    );
}
