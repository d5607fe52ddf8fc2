//! A master whose start a candidate cannot read on a new connection: the
//! connection is not used, so a master that restarted empty never counts
//! as warm for want of an answer.

use super::{PATIENCE, leads};
use crate::support;
use std::time::Duration;
use support::proxy::Proxy;
use support::redlock::Masters;
use support::{Leaderd, eventually};

/// `INFO server`, as a client sends it.
const INFO: &[u8] = b"INFO\r\n$6\r\nserver";

fn candidate(urls: &[String], key: &str, id: &str, log: &std::path::Path) -> Leaderd {
    let mut args = Masters::args_for(urls, key);
    // A TTL long enough that a's guard is still far from its kill when b,
    // as it once did, wins at once on the two restarted masters.
    args.extend(["--ttl", "10s"].map(String::from));
    args.extend(support::exclusive_probe(log));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Leaderd::run(id, &args)
}

/// Two masters of three restarted empty while a frozen holder's lease
/// stands; a new candidate reaches them through proxies that hold `INFO
/// server` back past its connect timeout (500 ms). It used to take such a
/// connection with the masters' start unknown, count them warm, and win on
/// them beside the holder; now it connects again until it can read the
/// start, and the restarted masters vote it in only a TTL after their
/// restart.
#[test]
fn a_master_whose_start_is_not_read_in_time_votes_no_one_in() {
    let mut masters = Masters::start(3);
    let key = support::key("redlock-unread");
    let dir = support::Scratch::new(&format!("redlock-unread-{}", support::os::below(1 << 30)));
    let logs = [dir.join("a"), dir.join("b")];
    let direct: Vec<String> = masters.nodes.iter().map(|n| n.url()).collect();
    let a = candidate(&direct, &key, "a", &logs[0]);
    let t = leads(&a);
    let gates: Vec<Proxy> = masters.nodes[..2]
        .iter()
        .map(|n| Proxy::start(n.port))
        .collect();
    for gate in &gates {
        gate.hold_requests_with(Some((INFO, Duration::from_secs(2))));
    }
    a.signal("STOP");
    masters.nodes[0].restart();
    masters.nodes[1].restart();
    let urls = [
        gates[0].redis_url(),
        gates[1].redis_url(),
        direct[2].clone(),
    ];
    let b = candidate(&urls, &key, "b", &logs[1]);
    // b has made connections to both restarted masters, read no start on
    // them, and so not used them; or (as it once did) won on them.
    let refused = |gate: &Proxy| {
        let needle = format!("127.0.0.1:{}", gate.port);
        b.log()
            .iter()
            .any(|l| l.contains("could not read when the master started") && l.contains(&needle))
    };
    eventually(PATIENCE, "b to lead, or to refuse both connections", || {
        (b.is_leader() || gates.iter().all(refused)).then_some(())
    });
    assert!(
        !b.is_leader(),
        "b won on masters whose start it never read; children born beside a live one: {}",
        support::born_beside_a_live_one(&logs)
    );
    for gate in &gates {
        gate.hold_requests_with(None);
    }
    let t2 = leads(&b);
    assert!(t2 > t, "tokens still grow: {t2} > {t}");
    a.signal("CONT");
    eventually(PATIENCE, "a to know it no longer leads", || {
        (!a.is_leader()).then_some(())
    });
    assert_eq!(
        support::born_beside_a_live_one(&logs),
        0,
        "b's child started while a's still ran:\n{}",
        support::tails(&[a, b])
    );
}
