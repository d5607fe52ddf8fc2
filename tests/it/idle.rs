//! What idle standbys cost the store (issue #47), counted by the store
//! itself: a standby whose subscription is live sends nothing on a timer,
//! an outranked one (which looks before it defers) included.
//! Redis here, by `MONITOR` (which names each script call's keys, so an
//! acquire is told from a renewal); Kubernetes in `kubernetes::idle`. Each
//! count is shown to catch what it claims against standbys that cannot
//! subscribe (an ACL without `+subscribe`), which ask once per TTL.

use crate::support::{self, Leaderd, Redis, eventually};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TTL: &str = "2s";
/// Several lease durations: a polling standby asks about six times in it.
const WINDOW: Duration = Duration::from_secs(12);

/// Script calls Redis ran for election `key` over [`WINDOW`], seen by
/// `MONITOR`: (acquires and looks, renewals). An acquire names four keys,
/// the lease and fence first; a look (a peek) four, the lease and the term
/// record first; a renewal two, the lease and the term record.
fn calls(redis: &Redis, key: &str) -> (usize, usize) {
    let mut monitor = Command::new("redis-cli")
        .args(["-p", &redis.port.to_string(), "MONITOR"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-cli runs");
    let out = monitor.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        BufReader::new(out)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });
    std::thread::sleep(WINDOW); // the measurement window itself
    let _ = monitor.kill();
    let _ = monitor.wait();
    let lines = reader.join().expect("the reader ends with the pipe");
    let acquire = format!("\"4\" \"leaderd:{{{key}}}:lease\" \"leaderd:{{{key}}}:fence\"");
    let look = format!("\"4\" \"leaderd:{{{key}}}:lease\" \"leaderd:{{{key}}}:term\"");
    let renew = format!("\"2\" \"leaderd:{{{key}}}:lease\" \"leaderd:{{{key}}}:term\"");
    let count = |what: &str| lines.iter().filter(|l| l.contains(what)).count();
    (count(&acquire) + count(&look), count(&renew))
}

/// Three candidates on `key` as `url`'s user, the third of a lower
/// priority than the others, started once one of them leads (so it is an
/// outranked standby, which looks at the lease before it defers); waits
/// until both standbys report that they learn of the holder by `want`
/// (`watch`: their subscription is live, which on a loaded machine may
/// take a moment after they first report; `fallback`: they ask on a
/// timer), and returns the candidates.
fn three(url: &str, key: &str, want: &str) -> Vec<Leaderd> {
    let run = |id: &str, priority: &str| {
        let args = ["--redis", url, "--key", key, "--ttl", TTL];
        Leaderd::run(id, &[&args[..], &["--priority", priority]].concat())
    };
    let mut nodes = vec![run("a", "2"), run("b", "2")];
    support::the_leader(&nodes, support::WAIT);
    nodes.push(run("c", "1"));
    let (leader, _) = support::the_leader(&nodes, support::WAIT);
    eventually(
        support::WAIT,
        &format!("both standbys to report standby_reads {want:?}"),
        || {
            let reads = nodes
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != leader)
                .map(|(_, n)| Some(n.leader()?.1["standby_reads"].as_str()?.to_string()))
                .collect::<Option<Vec<String>>>()?;
            (reads == [want, want]).then_some(())
        },
    );
    nodes
}

#[test]
fn a_standby_on_a_live_subscription_sends_redis_nothing_on_a_timer() {
    let redis = Redis::start();
    let key = support::key("idle-redis");
    let _nodes = three(&redis.url(), &key, "watch");
    // Past start-up: the first looks are done.
    std::thread::sleep(Duration::from_secs(1));
    let started = Instant::now();
    let (acquires, renewals) = calls(&redis, &key);
    // The leader renewed all along (every ttl/3), so the count works...
    assert!(
        renewals >= 6,
        "{renewals} renewals in {:?}",
        started.elapsed()
    );
    // ... and the two standbys asked nothing: a loaded machine may delay a
    // renewal notice past a standby's timer once, not routinely.
    assert!(
        acquires <= 2,
        "{acquires} acquires and looks by idle standbys in {:?}",
        started.elapsed()
    );

    // The planted violation: standbys that cannot subscribe fall back to
    // asking on their timers, and the same count sees it.
    let key = support::key("idle-redis-polling");
    let mut acl: Vec<&str> = vec!["ACL", "SETUSER", "nosub", "on", ">pw", "~leaderd:*"];
    acl.extend(["&leaderd:*", "+evalsha", "+eval", "+script|load", "+get"]);
    acl.extend(["+set", "+pexpire", "+pttl", "+del", "+time", "+publish"]);
    acl.extend(["+rpush", "+blpop", "+ping", "-subscribe"]);
    redis.cmd(&acl);
    let url = format!("redis://nosub:pw@127.0.0.1:{}", redis.port);
    let _polling = three(&url, &key, "fallback");
    let (acquires, _) = calls(&redis, &key);
    assert!(
        acquires >= 6,
        "standbys without a subscription asked only {acquires} times in {WINDOW:?} at a {TTL} TTL"
    );
}
