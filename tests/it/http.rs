//! The HTTP API under pressure and over time: idle connections cannot
//! starve the probes, keep-alive connections that go quiet are closed, a
//! rebinding page cannot reach a loopback listener, and `/leader/events`
//! subscribers can resume and are let go cleanly at exit.

use crate::support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use support::{Leaderd, Scratch};

const PATIENCE: Duration = Duration::from_secs(10);

fn lock_file_node(dir: &Scratch, id: &str) -> Leaderd {
    let lock = dir.join("lease.lock");
    Leaderd::run(id, &["--lock-file", support::path_str(&lock)])
}

fn connect(node: &Leaderd) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", node.http_port)).expect("connect");
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream
}

/// `GET path` with `host`: the status line.
fn status_line(node: &Leaderd, path: &str, host: &str) -> String {
    let mut stream = connect(node);
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").unwrap();
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.lines().next().unwrap_or_default().to_string()
}

#[test]
fn probes_answer_while_300_idle_connections_are_open() {
    let dir = Scratch::new("crowd");
    let node = lock_file_node(&dir, "crowd");
    node.wait_leading(PATIENCE);
    let idle: Vec<TcpStream> = (0..300).map(|_| connect(&node)).collect();
    // Each of these has to wait for the accept loop to get to it.
    for path in ["/healthz", "/readyz", "/leader"] {
        let line = status_line(&node, path, "localhost");
        assert!(line.starts_with("HTTP/1.0 200"), "{path}: {line:?}");
    }
    drop(idle);
}

#[test]
fn a_quiet_keep_alive_connection_is_closed() {
    let dir = Scratch::new("keepalive");
    let node = lock_file_node(&dir, "ka");
    node.wait_leading(PATIENCE);
    let mut stream = connect(&node);
    write!(stream, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut buf = [0u8; 1024];
    let n = stream.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let after = Instant::now();
    let rest = stream.read(&mut buf).unwrap_or(0);
    let waited = after.elapsed();
    assert_eq!(rest, 0, "{:?}", String::from_utf8_lossy(&buf[..rest]));
    assert!(waited < Duration::from_secs(9), "kept {waited:?}");
}

#[test]
fn a_loopback_listener_serves_only_loopback_host_names() {
    let dir = Scratch::new("rebind");
    let node = lock_file_node(&dir, "rebind");
    node.wait_leading(PATIENCE);
    let port = node.http_port;
    for host in [
        "localhost".to_string(),
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        "app.localhost".to_string(),
    ] {
        let line = status_line(&node, "/leader", &host);
        assert!(line.contains(" 200"), "{host}: {line}");
    }
    for host in ["attacker.example", "attacker.example:4040", "10.0.0.1"] {
        let line = status_line(&node, "/leader", host);
        assert!(line.contains(" 421"), "{host}: {line}");
    }
}

/// Reads SSE events (name, id, data) until `n` have come or the stream ends.
pub(crate) fn read_events(
    lines: &mut impl Iterator<Item = String>,
    n: usize,
) -> Vec<(String, String, String)> {
    let mut events = Vec::new();
    let (mut name, mut id, mut data) = (String::new(), String::new(), String::new());
    for line in lines.by_ref() {
        if let Some(v) = line.strip_prefix("event: ") {
            name = v.to_string();
        } else if let Some(v) = line.strip_prefix("id: ") {
            id = v.to_string();
        } else if let Some(v) = line.strip_prefix("data: ") {
            data = v.to_string();
        } else if line.is_empty() && !data.is_empty() {
            events.push((
                std::mem::take(&mut name),
                std::mem::take(&mut id),
                std::mem::take(&mut data),
            ));
            if events.len() == n {
                break;
            }
        }
    }
    events
}

pub(crate) fn subscribe(
    node: &Leaderd,
    last_event_id: Option<&str>,
) -> impl Iterator<Item = String> + use<> {
    let mut stream = connect(node);
    let resume = last_event_id.map_or(String::new(), |id| format!("Last-Event-ID: {id}\r\n"));
    write!(
        stream,
        "GET /leader/events HTTP/1.0\r\nHost: localhost\r\n{resume}\r\n"
    )
    .unwrap();
    BufReader::new(stream).lines().map_while(Result::ok)
}

#[test]
fn events_carry_ids_resume_from_last_event_id_and_end_cleanly_at_exit() {
    let dir = Scratch::new("sse");
    let mut node = lock_file_node(&dir, "sse");
    node.wait_leading(PATIENCE);
    let mut lines = subscribe(&node, None);
    let _headers: Vec<String> = lines.by_ref().take_while(|l| !l.is_empty()).collect();
    let first: Vec<String> = lines.by_ref().take_while(|l| !l.is_empty()).collect();
    assert!(first.iter().any(|l| l == "retry: 1000"), "{first:#?}");
    // idle → acquiring → working: two transitions before we subscribed.
    assert!(first.iter().any(|l| l == "event: state"), "{first:#?}");
    assert!(first.iter().any(|l| l == "id: 2"), "{first:#?}");

    // Coming back after the first transition: the second one is replayed.
    let mut resumed = subscribe(&node, Some("1"));
    let replay = read_events(&mut resumed, 1);
    assert_eq!(
        (replay[0].0.as_str(), replay[0].1.as_str()),
        ("transition", "2")
    );
    assert!(replay[0].2.contains("\"state\":\"working\""), "{replay:?}");
    // An id nobody kept: the current state afresh.
    let mut afresh = subscribe(&node, Some("999"));
    assert_eq!(read_events(&mut afresh, 1)[0].0, "state");

    let signalled = Instant::now();
    node.signal("TERM");
    let rest = read_events(&mut lines, usize::MAX);
    let names: Vec<&str> = rest.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names.last(), Some(&"shutdown"), "{rest:#?}");
    let ids: Vec<u64> = rest[..rest.len() - 1]
        .iter()
        .map(|(_, id, _)| id.parse().unwrap())
        .collect();
    assert!(
        ids.windows(2).all(|w| w[1] == w[0] + 1) && ids[0] == 3,
        "{ids:?}"
    );
    // The stream ended (EOF above), and leaderd did not wait on its subscribers.
    assert!(node.wait_exit(PATIENCE).success());
    let took = signalled.elapsed();
    assert!(
        took < Duration::from_millis(900),
        "exit took {took:?} with subscribers"
    );
}
