//! The fixtures' own behaviour, where a test or the nemesis relies on it.

use crate::support::{self, proxy::Proxy};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;
use std::time::Instant;

/// An echo server on loopback, and a connection to it through a proxy.
fn echoed() -> (Proxy, TcpStream) {
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in server.incoming().flatten() {
            std::thread::spawn(move || {
                let mut out = conn.try_clone().unwrap();
                let _ = std::io::copy(&mut &conn, &mut out);
            });
        }
    });
    let proxy = Proxy::start(port);
    let client = TcpStream::connect(("127.0.0.1", proxy.port)).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    (proxy, client)
}

fn round_trip(client: &mut TcpStream) -> std::io::Result<usize> {
    client.write_all(b"x")?;
    client.read(&mut [0u8; 8])
}

/// The nemesis's latency and connection resets (tests/nemesis/links.rs)
/// do what they say: a slowed proxy holds each chunk back, either way,
/// and a reset closes what it carried while new connections work.
#[test]
fn the_proxy_slows_and_resets() {
    let (proxy, mut client) = echoed();
    assert_eq!(round_trip(&mut client).unwrap(), 1);
    proxy.slow(Duration::from_millis(200));
    let sent = Instant::now();
    assert_eq!(round_trip(&mut client).unwrap(), 1);
    assert!(sent.elapsed() >= Duration::from_millis(400), "both ways");
    proxy.slow(Duration::ZERO);
    proxy.reset();
    assert!(
        !matches!(round_trip(&mut client), Ok(1)),
        "a reset connection still carried data"
    );
    let mut again = TcpStream::connect(("127.0.0.1", proxy.port)).unwrap();
    assert_eq!(round_trip(&mut again).unwrap(), 1);
}

/// The lock-based overlap checker (`support::born_beside_a_live_one`) fails
/// on a planted overlap, and, where the stop-line count (`most_alive`)
/// takes a child killed with SIGKILL for alive to the end, sees it end.
#[test]
fn the_exclusive_lock_finds_a_planted_overlap_and_sees_a_sigkill() {
    let dir = support::Scratch::new(&format!("exclusive-{}", support::os::below(1 << 30)));
    let lock = dir.join("exclusive");
    let logs: Vec<PathBuf> = ["a", "b", "c"].iter().map(|n| dir.join(n)).collect();
    let spawn = |log: &Path| {
        let child = Command::new(support::probe_child())
            .arg(log)
            .arg("--exclusive")
            .arg(&lock)
            .spawn()
            .expect("probe child");
        support::eventually(support::WAIT, "the probe's start line", || {
            support::probe_events(log)
                .iter()
                .any(|e| e.kind == "exclusive")
                .then_some(())
        });
        child
    };
    let reap = |mut child: Child| {
        child.kill().unwrap();
        child.wait().unwrap();
    };
    // Planted: b is born while a still runs.
    let (a, b) = (spawn(&logs[0]), spawn(&logs[1]));
    assert_eq!(support::born_beside_a_live_one(&logs[..2]), 1);
    // Both killed with SIGKILL, so neither wrote a stop line; c comes after.
    reap(a);
    reap(b);
    let c = spawn(&logs[2]);
    assert_eq!(support::most_alive(&logs[2..]), 1);
    assert!(
        support::most_alive(&logs) > 1,
        "stop lines alone see overlap"
    );
    assert_eq!(
        support::born_beside_a_live_one(&logs),
        1,
        "c was born after a and b had died"
    );
    reap(c);
}
