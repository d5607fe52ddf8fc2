//! What operators see: metrics after a handover, the leader-elector
//! compatible endpoints, the event stream, HTTP hardening, secrets kept out
//! of every output, and `check` against real ACL users.

use crate::support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant, SystemTime};
use support::{FAST, Leaderd, Redis, eventually, on_redis, run_to_end};

fn scrape(node: &Leaderd) -> Vec<prometheus_parse::Sample> {
    let (code, body) = node.get("/metrics").expect("/metrics answers");
    assert_eq!(code, 200);
    let text = body.as_str().expect("metrics are text").to_string();
    let lines = text.lines().map(|l| Ok(l.to_string()));
    prometheus_parse::Scrape::parse(lines)
        .expect("valid Prometheus text")
        .samples
}

fn value(samples: &[prometheus_parse::Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map_or(0.0, |s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => f64::NAN,
        })
}

#[test]
fn metrics_after_a_handover_agree_with_leader() {
    let redis = Redis::start();
    let mut nodes: Vec<Leaderd> = ["a", "b", "c"]
        .iter()
        .map(|id| on_redis(&redis, "metrics", id, FAST))
        .collect();
    let first = eventually(support::WAIT, "a leader", || {
        nodes.iter().position(|n| n.is_leader())
    });
    // Every standby has been refused once, so the next leader's metrics
    // have an `acquire`/`held` to show.
    for (i, node) in nodes.iter().enumerate() {
        if i != first {
            node.wait_log(support::WAIT, "lease held by another candidate");
        }
    }
    nodes[first].signal("TERM");
    nodes[first].wait_exit(support::WAIT);
    nodes.remove(first);
    let leader = eventually(
        Duration::from_secs(5),
        "the next leader, named by the other",
        || {
            let leader = nodes.iter().position(|n| n.is_leader())?;
            let (_, standby) = nodes[1 - leader].leader()?;
            (standby["leader"] == nodes[leader].id.as_str()).then_some(leader)
        },
    );
    let mut leaders = 0.0;
    for (i, node) in nodes.iter().enumerate() {
        let samples = scrape(node);
        let (_, view) = node.leader().unwrap();
        let is_leader = value(&samples, "leaderd_is_leader", &[]);
        leaders += is_leader;
        assert_eq!(is_leader, if i == leader { 1.0 } else { 0.0 }, "{view}");
        assert_eq!(
            value(
                &samples,
                "leader_election_master_status",
                &[("name", "metrics")]
            ),
            is_leader
        );
        assert_eq!(
            value(&samples, "leaderd_fencing_token", &[]),
            view["fencing_token"].as_f64().unwrap(),
            "node {i}"
        );
        let state = view["state"].as_str().unwrap();
        assert_eq!(
            value(&samples, "leaderd_state", &[("state", state)]),
            1.0,
            "{view}"
        );
    }
    assert_eq!(leaders, 1.0, "exactly one instance reports leader");
    let new = scrape(&nodes[leader]);
    assert_eq!(
        value(
            &new,
            "leaderd_transitions_total",
            &[("from", "acquiring"), ("to", "working")]
        ),
        1.0
    );
    assert_eq!(value(&new, "leaderd_leadership_changes_total", &[]), 1.0);
    assert!(
        value(
            &new,
            "leaderd_lease_operations_total",
            &[("op", "acquire"), ("result", "held")]
        ) >= 1.0
    );
    assert!(
        value(
            &new,
            "leaderd_lease_operations_total",
            &[("op", "acquire"), ("result", "ok")]
        ) >= 1.0
    );
}

#[test]
fn leader_elector_endpoints_on_leader_and_standby() {
    let redis = Redis::start();
    let a = on_redis(&redis, "compat", "a", FAST);
    a.wait_leading(support::WAIT);
    let b = on_redis(&redis, "compat", "b", FAST);
    b.wait_log(support::WAIT, "lease held by another candidate");
    for node in [&a, &b] {
        assert_eq!(node.get("/"), Some((200, serde_json::json!({"name": "a"}))));
        assert_eq!(
            node.get("/isLeader"),
            Some((200, serde_json::json!({"isLeader": node.id == "a"})))
        );
    }
}

/// Each transition is pushed as it happens: nothing polls or batches the
/// stream. Unloaded a transition arrives within a few milliseconds; the
/// bound below leaves a loaded machine room and still fails a stream that
/// waits for a timer (the 1 s `retry:`, say) before it sends.
#[test]
fn events_stream_delivers_each_transition_as_it_happens() {
    let redis = Redis::start();
    let a = on_redis(&redis, "events", "a", FAST);
    a.wait_leading(support::WAIT);
    let b = on_redis(&redis, "events", "b", FAST);
    b.wait_log(support::WAIT, "lease held by another candidate");
    let mut stream = TcpStream::connect(("127.0.0.1", b.http_port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET /leader/events HTTP/1.0\r\nHost: localhost\r\n\r\n"
    )
    .unwrap();
    let mut lines = BufReader::new(stream).lines();
    lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.starts_with("event: state"))
        .expect("initial state event");
    lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.starts_with("data: "))
        .expect("initial state data");
    a.signal("TERM");
    let mut delays = Vec::new();
    let mut event = String::new();
    for line in lines.map_while(Result::ok) {
        if let Some(name) = line.strip_prefix("event: ") {
            event = name.to_string();
        } else if let Some(data) = line.strip_prefix("data: ") {
            let received = SystemTime::now();
            let change: serde_json::Value = serde_json::from_str(data).unwrap();
            let at = humantime::parse_rfc3339(change["at"].as_str().unwrap()).unwrap();
            delays.push(received.duration_since(at).unwrap_or_default());
            assert_eq!(event, "transition", "{change}");
            if change["state"] == "working" {
                assert_eq!(
                    (change["is_leader"].as_bool(), change["leader"].as_str()),
                    (Some(true), Some("b"))
                );
                break;
            }
        }
    }
    assert!(!delays.is_empty());
    assert!(
        delays.iter().all(|d| *d < Duration::from_millis(500)),
        "{delays:?}"
    );
}

fn raw(port: u16, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let _ = stream.write_all(request);
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response
}

#[test]
fn http_refuses_other_methods_oversized_requests_and_silent_clients() {
    let dir = support::Scratch::new("hardening");
    let node = Leaderd::run("h", &["--lock-file", support::path_str(&dir.join("l"))]);
    node.wait_leading(support::WAIT);
    for method in ["POST", "PUT", "DELETE"] {
        let response = raw(
            node.http_port,
            format!("{method} /leader HTTP/1.0\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n")
                .as_bytes(),
        );
        assert!(response.starts_with("HTTP/1.0 405"), "{method}: {response}");
        assert!(
            response.to_ascii_lowercase().contains("allow: get,head"),
            "{response}"
        );
    }
    let huge = format!(
        "GET /leader HTTP/1.0\r\nHost: localhost\r\nX-Padding: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    let response = raw(node.http_port, huge.as_bytes());
    assert!(
        response.is_empty() || response.starts_with("HTTP/1.1 431"),
        "oversized request accepted: {response:.80}"
    );
    let silent = TcpStream::connect(("127.0.0.1", node.http_port)).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let opened = Instant::now();
    let mut buf = [0u8; 64];
    let n = (&silent).read(&mut buf).unwrap_or(0);
    let waited = opened.elapsed();
    assert!(
        waited < Duration::from_secs(10),
        "a silent client was kept for {waited:?}"
    );
    assert!(
        n == 0 || String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 408"),
        "{:?}",
        &buf[..n]
    );
    assert!(node.is_leader(), "still serving");
}

const APP_USER: &[&str] = &[
    "ACL",
    "SETUSER",
    "app",
    "on",
    ">s3cr3t-pass",
    "~leaderd:*",
    "&leaderd:*",
    "+evalsha",
    "+eval",
    "+script|load",
    "+get",
    "+set",
    "+pexpire",
    "+pttl",
    "+del",
    "+time",
    "+publish",
    "+rpush",
    "+blpop",
    "+subscribe",
    "+ping",
];

#[test]
fn secrets_appear_in_no_output() {
    let redis = Redis::start();
    redis.cmd(APP_USER);
    let url = format!("redis://app:s3cr3t-pass@127.0.0.1:{}", redis.port);
    let mut node = Leaderd::run(
        "s",
        &["--redis", &url, "--key", "sec", "--log-format", "json"],
    );
    node.wait_leading(support::WAIT);
    let stored: serde_json::Value =
        serde_json::from_str(&redis.get("leaderd:{sec}:lease").unwrap()).unwrap();
    assert!(
        stored.get("token").is_none(),
        "no ownership token in Redis: {stored}"
    );
    let token = stored["owner"].as_str().unwrap().to_string();
    let (_, leader) = node.get("/leader").unwrap();
    let (_, metrics) = node.get("/metrics").unwrap();
    let (check_code, check_out, check_err) =
        run_to_end(&["check", "--redis", &url, "--key", "sec"]);
    let (_, status_out, status_err) =
        run_to_end(&["status", "--redis", &url, "--key", "sec", "--json"]);
    node.signal("TERM");
    node.wait_exit(support::WAIT);
    let outputs = [
        leader.to_string(),
        metrics.to_string(),
        check_out,
        check_err,
        status_out,
        status_err,
        node.log().join("\n"),
    ];
    assert_eq!(check_code, 0, "{outputs:?}");
    for (i, text) in outputs.iter().enumerate() {
        assert!(
            !text.contains("s3cr3t-pass"),
            "password in output {i}: {text}"
        );
        assert!(
            !text.contains(&token),
            "the ownership token's hash in output {i}: {text}"
        );
    }
    assert!(
        outputs[2].contains("redis://app:***@127.0.0.1"),
        "{}",
        outputs[2]
    );
}

#[test]
fn check_passes_for_a_permitted_user_and_names_a_missing_permission() {
    let redis = Redis::start();
    redis.cmd(APP_USER);
    let ok = format!("redis://app:s3cr3t-pass@127.0.0.1:{}", redis.port);
    let (code, out, err) = run_to_end(&["check", "--redis", &ok, "--key", "acl"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(
            "# ok: acquire, renew, release and the wait for wake-ups run as the configured user"
        ),
        "{out}"
    );

    redis.cmd(&[
        "ACL",
        "SETUSER",
        "readonly",
        "on",
        ">ro-pass",
        "~leaderd:*",
        "&leaderd:*",
        "+evalsha",
        "+eval",
        "+script|load",
        "+get",
        "+pttl",
    ]);
    let limited = format!("redis://readonly:ro-pass@127.0.0.1:{}", redis.port);
    let (code, out, err) = run_to_end(&["check", "--redis", &limited, "--key", "acl"]);
    assert_eq!(
        code, 2,
        "a missing permission is a configuration error: {out}{err}"
    );
    assert!(
        err.contains("refused leaderd's credentials or permissions")
            && err.contains("can't run this command"),
        "{err}"
    );
    assert!(!err.contains("ro-pass"));

    // Everything but the wait for wake-ups: waiters would still work, only
    // slower, so `check` is where this shows.
    let without_blpop: Vec<&str> = APP_USER
        .iter()
        .map(|a| match *a {
            "app" => "noblpop",
            "+blpop" => "-blpop",
            other => other,
        })
        .collect();
    redis.cmd(&without_blpop);
    let url = format!("redis://noblpop:s3cr3t-pass@127.0.0.1:{}", redis.port);
    let (code, out, err) = run_to_end(&["check", "--redis", &url, "--key", "acl"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("refused leaderd's credentials or permissions") && err.contains("blpop"),
        "{err}"
    );
}
