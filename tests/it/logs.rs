//! What leaderd prints at the default level: nothing while leadership is
//! steady, one line when it changes; slow retries against a backend that
//! refuses us; no release noise from a candidate that never led.

use crate::support;

use std::time::{Duration, Instant};
use support::{Leaderd, Redis, Scratch};

/// Lines logged in `window` once `node`'s log has been still for a moment.
fn lines_over(node: &Leaderd, window: Duration) -> Vec<String> {
    let before = node.log().len();
    std::thread::sleep(window);
    node.log()[before..].to_vec()
}

#[test]
fn a_steady_leader_and_standby_print_nothing_at_the_default_level() {
    let dir = Scratch::new("quiet");
    let lock = dir.join("lease.lock");
    let lock = support::path_str(&lock);
    // A short TTL: a renewal every 333 ms, a standby re-check every 200 ms.
    let args = ["--lock-file", lock, "--ttl", "1s", "--", "sleep", "100"];
    let leader = Leaderd::run("quiet-a", &args);
    leader.wait_leading(support::WAIT);
    let standby = Leaderd::run("quiet-b", &args);
    let named = standby.wait_log(support::WAIT, "lease held by another candidate");
    assert!(named.contains("holder=\"quiet-a\""), "{named}");
    // 4 s: about 12 renewals and 20 re-checks, each two transitions.
    let (led, stood) = std::thread::scope(|s| {
        let led = s.spawn(|| lines_over(&leader, Duration::from_secs(4)));
        let stood = s.spawn(|| lines_over(&standby, Duration::from_secs(4)));
        (led.join().unwrap(), stood.join().unwrap())
    });
    assert!(led.is_empty(), "the leader printed {led:#?}");
    assert!(stood.is_empty(), "the standby printed {stood:#?}");
    assert!(leader.is_leader(), "still leading");
}

#[test]
fn every_transition_is_still_there_at_debug() {
    let dir = Scratch::new("debug");
    let lock = dir.join("lease.lock");
    let args = [
        "--lock-file",
        support::path_str(&lock),
        "--ttl",
        "900ms",
        "--log-level",
        "debug",
    ];
    let leader = Leaderd::run("debug-a", &args);
    leader.wait_log(support::WAIT, "reason=\"renewal due\"");
    leader.wait_log(support::WAIT, "reason=\"lease renewed\"");
}

#[test]
fn a_refused_login_is_retried_slowly_and_a_standby_exits_quietly() {
    let redis = Redis::start_with(&["--requirepass", "right-password"]);
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let args = [
        "--redis",
        &url,
        "--key",
        "noauth",
        "--retry-interval",
        "200ms",
        "--log-level",
        "debug",
    ];
    let mut node = Leaderd::run("noauth-1", &args);
    node.wait_log(support::WAIT, "refused leaderd's credentials");
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(4));
    let attempts = node
        .log()
        .iter()
        .filter(|l| l.contains("to=\"acquiring\""))
        .count();
    // The first attempt, then nothing for max(5 × retry_interval, 10 s):
    // neither the 200 ms retry nor a wake-up from the reconnecting watcher.
    assert_eq!(attempts, 1, "{:#?}", node.log());
    assert!(
        !node.log().iter().any(|l| l.contains("release notified")),
        "{:#?}",
        node.log()
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    node.signal("TERM");
    assert!(node.wait_exit(support::WAIT).success());
    let noise: Vec<String> = node
        .log()
        .into_iter()
        .filter(|l| l.contains(" WARN ") || l.contains(" INFO "))
        .filter(|l| l.contains("release failed") || l.contains("nothing to release"))
        .collect();
    assert!(noise.is_empty(), "a candidate that never led: {noise:#?}");
}

#[test]
fn a_clean_shutdown_logs_no_warning() {
    let redis = Redis::start();
    let mut node = support::on_redis(&redis, "clean-exit", "a", support::FAST);
    node.wait_leading(support::WAIT);
    node.signal("TERM");
    assert!(node.wait_exit(support::WAIT).success());
    let warnings: Vec<String> = node
        .log()
        .into_iter()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect();
    assert!(warnings.is_empty(), "{warnings:#?}");
}
