//! What scrapers and dashboards read: `/metrics` in the format asked for and
//! clean under `promtool check metrics`, the build and backend gauges, the
//! process metrics; `/leader` naming the holder from a standby at every
//! moment, the term's start, and a shared id.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use support::{FAST, Leaderd, Redis, eventually, on_redis, promtool};

const PATIENCE: Duration = Duration::from_secs(10);

/// `GET /metrics` with `accept`: (Content-Type, body).
fn scrape(node: &Leaderd, accept: Option<&str>) -> (String, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", node.http_port)).expect("connect");
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    write!(
        stream,
        "GET /metrics HTTP/1.0\r\nHost: localhost\r\n{accept}\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("a response");
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    let content_type = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type: ")
                .map(str::to_string)
        })
        .expect("Content-Type");
    (content_type, body.to_string())
}

fn sample(body: &str, prefix: &str) -> Option<f64> {
    body.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn metrics_are_negotiated_and_lint_clean_on_leader_and_standby() {
    let redis = Redis::start();
    let leader = on_redis(&redis, "scrape", "a", FAST);
    leader.wait_leading(PATIENCE);
    let standby = on_redis(&redis, "scrape", "b", FAST);
    standby.wait_log(PATIENCE, "lease held by another candidate");
    for node in [&leader, &standby] {
        let (content_type, text) = scrape(node, None);
        assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
        let (ok, said) = promtool(&text);
        assert!(ok, "{}: promtool: {said}\n{text}", node.id);
        assert!(!text.contains("# EOF"), "{text}");
        assert!(text.contains("# HELP leaderd_transitions_total "), "{text}");
        let version = format!(
            "leaderd_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        assert!(text.contains(&version), "{text}");
        assert_eq!(sample(&text, "leaderd_backend_up "), Some(1.0), "{text}");
        assert!(sample(&text, "process_resident_memory_bytes ").is_some_and(|b| b > 1e6));
        assert!(sample(&text, "process_open_fds ").is_some_and(|n| n >= 3.0));
        assert!(sample(&text, "process_cpu_seconds_total ").is_some());

        let prometheus =
            "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3";
        let (content_type, om) = scrape(node, Some(prometheus));
        assert!(
            content_type.starts_with("application/openmetrics-text"),
            "{content_type}"
        );
        assert!(om.ends_with("# EOF\n"), "{om}");
        assert!(om.contains("# TYPE leaderd_transitions counter"), "{om}");
    }
    // The backend gone: the gauge says so at the next operation.
    let mut redis = redis;
    redis.kill();
    eventually(PATIENCE, "leaderd_backend_up 0", || {
        let (_, text) = scrape(&standby, None);
        (sample(&text, "leaderd_backend_up ") == Some(0.0)).then_some(())
    });
}

#[test]
fn a_standby_names_the_holder_at_every_moment_and_the_term_start_holds() {
    let redis = Redis::start();
    // TTL 1 s: the standby looks again about every 700 ms.
    let args = ["--ttl", "1s", "--redis-timeout", "300ms"];
    let leader = on_redis(&redis, "named", "a", &args);
    leader.wait_leading(PATIENCE);
    let standby = on_redis(&redis, "named", "b", &args);
    standby.wait_log(PATIENCE, "lease held by another candidate");
    let (_, first) = leader.leader().unwrap();
    let since = first["leading_since"]
        .as_str()
        .expect("leading_since")
        .to_string();
    let until = Instant::now() + Duration::from_secs(4);
    let mut looks = 0;
    while Instant::now() < until {
        let (is_leader, body) = standby.leader().expect("/leader");
        assert!(!is_leader);
        assert_eq!(body["leader"].as_str(), Some("a"), "{body}");
        assert!(
            body["lease_remaining_ms"]
                .as_u64()
                .is_some_and(|ms| ms <= 1000),
            "{body}"
        );
        looks += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(looks > 50, "{looks}");
    // Renewals moved state_since, never the term's start.
    let (_, body) = leader.leader().unwrap();
    assert_eq!(
        body["leading_since"].as_str(),
        Some(since.as_str()),
        "{body}"
    );
    assert_ne!(body["state_since"], first["state_since"], "{body}");
    assert_eq!(body["duplicate_id"].as_bool(), Some(false));
}

#[test]
fn two_candidates_with_one_id_are_told_apart() {
    let redis = Redis::start();
    let first = on_redis(&redis, "same-id", "web-0", FAST);
    first.wait_leading(PATIENCE);
    let second = on_redis(&redis, "same-id", "web-0", FAST);
    second.wait_log(
        PATIENCE,
        "under this instance's id: give every candidate a unique --id",
    );
    let (is_leader, body) = second.leader().unwrap();
    assert!(!is_leader);
    assert_eq!(body["duplicate_id"].as_bool(), Some(true), "{body}");
    let (_, text) = scrape(&second, None);
    assert_eq!(sample(&text, "leaderd_duplicate_id "), Some(1.0), "{text}");
    let warnings = second
        .log()
        .iter()
        .filter(|l| l.contains("holds the lease under this instance's id"))
        .count();
    // Once per change, not at every look.
    std::thread::sleep(Duration::from_secs(3));
    let later = second
        .log()
        .iter()
        .filter(|l| l.contains("holds the lease under this instance's id"))
        .count();
    assert_eq!((warnings, later), (1, 1));
}
