//! Faults injected for real: Redis killed and restarted, unreachable at
//! start; signals while Redis is gone. (Redis paused past the renew
//! deadline is the contract's `an_unreachable_backend_…`, where a cut Redis
//! is a paused one.)

use crate::support;

use std::time::{Duration, Instant};
use support::{FAST, Leaderd, Redis, eventually, on_redis};

fn start(redis: &Redis, key: &str, id: &str) -> Leaderd {
    on_redis(redis, key, id, FAST)
}

// ttl 2s → renew every 666ms, renew deadline 1333ms.
const RENEW_DEADLINE: Duration = Duration::from_millis(1333);

fn leaders(nodes: &[Leaderd]) -> usize {
    nodes.iter().filter(|n| n.is_leader()).count()
}

/// Once Redis is back: exactly one leader, and it stays exactly one for a
/// few renewal rounds.
fn exactly_one_leader_again(nodes: &[Leaderd]) {
    eventually(
        Duration::from_secs(10),
        "one leader after Redis returned",
        || (leaders(nodes) == 1).then_some(()),
    );
    for _ in 0..20 {
        assert!(leaders(nodes) <= 1, "two leaders at once");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn killed_redis_then_restarted_gives_exactly_one_leader_again() {
    let mut redis = Redis::start();
    let key = support::key("redis-killed");
    let nodes = vec![
        start(&redis, &key, "a"),
        start(&redis, &key, "b"),
        start(&redis, &key, "c"),
    ];
    eventually(support::WAIT, "a leader", || {
        (leaders(&nodes) == 1).then_some(())
    });
    let leader = nodes.iter().position(|n| n.is_leader()).unwrap();
    redis.kill();
    let killed = Instant::now();
    eventually(support::WAIT, "the leader to report not-leader", || {
        (!nodes[leader].is_leader()).then_some(())
    });
    // By the renew deadline unloaded; printed, not asserted, since a
    // loaded machine stalls for seconds.
    eprintln!(
        "stepped down {:?} after the kill (renew deadline {RENEW_DEADLINE:?})",
        killed.elapsed()
    );
    redis.restart();
    exactly_one_leader_again(&nodes);
}

#[test]
fn redis_unreachable_at_start_keeps_trying_and_shuts_down_cleanly() {
    let port = support::free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let mut args = vec!["--redis", url.as_str(), "--key", "unreachable"];
    args.extend_from_slice(FAST);
    let mut node = Leaderd::run("lonely", &args);
    node.wait_log(support::WAIT, "backend error");
    let (code, body) = eventually(support::WAIT, "/leader to answer", || node.get("/leader"));
    assert_eq!(code, 503, "{body}");
    assert!(node.running(), "does not exit while Redis is unreachable");
    assert_eq!(node.get("/healthz").map(|r| r.0), Some(200));
    node.signal("TERM");
    assert_eq!(node.wait_exit(support::WAIT).code(), Some(0));
    let log = node.log().join("\n");
    assert!(
        log.contains("from=\"waiting\" to=\"releasing\" reason=\"shutdown requested\""),
        "{log}"
    );
}

#[test]
fn sigterm_while_acquiring_against_a_paused_redis_exits_cleanly() {
    let redis = Redis::start();
    let key = support::key("term-paused");
    let holder = start(&redis, &key, "holder");
    holder.wait_leading(support::WAIT);
    let mut waiter = start(&redis, &key, "waiter");
    waiter.wait_log(support::WAIT, "lease held by another candidate");
    redis.pause();
    waiter.signal("TERM");
    let status = waiter.wait_exit(support::WAIT);
    redis.resume();
    assert_eq!(status.code(), Some(0));
}

#[test]
fn a_timed_out_acquire_that_won_is_recognised_by_its_token() {
    let redis = Redis::start();
    let key = support::key("ambiguous");
    // Writes (and scripts) wait until the test ends the pause: the first
    // acquire times out on the client after 200ms but runs on the server
    // then. (A pause of 1.5 s could end before a leaderd started beside
    // two CPU hogs had tried.)
    redis.cmd(&["CLIENT", "PAUSE", "600000", "WRITE"]);
    let url = redis.url();
    let node = Leaderd::run(
        "a",
        &[
            "--redis",
            &url,
            "--key",
            &key,
            "--ttl",
            "8s",
            "--redis-timeout",
            "200ms",
            "--retry-interval",
            "300ms",
        ],
    );
    node.wait_log(support::WAIT, "did not answer within");
    redis.cmd(&["CLIENT", "UNPAUSE"]);
    let lease_key = format!("leaderd:{{{key}}}:lease");
    let won = eventually(support::WAIT, "the timed-out acquire to run", || {
        let stored: serde_json::Value = serde_json::from_str(&redis.get(&lease_key)?).ok()?;
        stored["fencing_token"].as_u64()
    });
    // Had the token been forgotten, the next attempt would be refused by our
    // own stale lease, wait out its 8s TTL and win again with a larger
    // fencing token.
    node.wait_leading(support::WAIT);
    let (_, body) = node.leader().unwrap();
    assert_eq!(
        body["fencing_token"].as_u64(),
        Some(won),
        "a leads on the lease its timed-out attempt won"
    );
    // The log line comes through leaderd's log thread, which may trail
    // `/leader` on a loaded machine (CI once counted 0 here).
    node.wait_log(support::WAIT, "reason=\"lease acquired\"");
    let acquisitions = node
        .log()
        .iter()
        .filter(|l| l.contains("reason=\"lease acquired\""))
        .count();
    assert_eq!(acquisitions, 1);
}

/// A leader that stepped down while Redis was frozen could not release;
/// when Redis comes back its old lease may still stand. It leads again only
/// as a new term, with a larger token: the child it starts must not share a
/// token with the one it stopped.
#[test]
fn a_candidate_taking_its_own_lease_again_gets_a_larger_token() {
    let redis = Redis::start();
    let key = support::key("own-again");
    let url = redis.url();
    let node = Leaderd::run(
        "a",
        &[
            "--redis",
            &url,
            "--key",
            &key,
            "--ttl",
            "4s",
            "--redis-timeout",
            "200ms",
            "--retry-interval",
            "300ms",
        ],
    );
    node.wait_leading(support::WAIT);
    let token = |n: &Leaderd| n.leader().unwrap().1["fencing_token"].as_u64().unwrap();
    let first = token(&node);
    redis.pause();
    // The renew deadline (2.67 s) comes before the lease's expiry (4 s);
    // what is awaited here is the step-down, not its speed.
    eventually(support::WAIT, "a to step down", || {
        (!node.is_leader()).then_some(())
    });
    redis.resume();
    node.wait_leading(support::WAIT);
    let second = token(&node);
    assert!(second > first, "{second} > {first}");
}
