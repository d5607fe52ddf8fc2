//! Test fixtures: real servers on free loopback ports (`redis-server` here,
//! the other stores in modules of their own), the built `leaderd` binary as
//! a child process, and a tiny HTTP client. Everything is killed on drop. Waiting is done by polling a condition with
//! a deadline, never by sleeping a fixed time.

pub mod backends;
pub mod cluster;
pub mod etcd;
pub mod kube;
mod leaderd;
pub mod os;
pub mod outside;
pub mod postgres;
mod probe;
mod process;
pub mod prometheus;
pub mod proxy;
mod receiver;
mod redis_server;
pub mod redlock;
pub mod sentinel;
pub mod serviceaccount;
pub mod tls;
pub mod worker;
pub mod zk_gate;
pub mod zookeeper;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub use leaderd::*;
pub use probe::*;
pub use receiver::*;
pub use redis_server::*;

pub const BIN: &str = env!("CARGO_BIN_EXE_leaderd");

/// A free loopback port, never one this process handed out before: the
/// kernel may offer a port again as soon as its probe listener closes, and
/// with every test in one process two fixtures could get the same port
/// (CI once started a Sentinel rig with two sentinels on one port).
pub fn free_port() -> u16 {
    static GIVEN: Mutex<std::collections::BTreeSet<u16>> =
        Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        if GIVEN.lock().unwrap().insert(port) {
            return port;
        }
    }
}

/// A free port whose Redis Cluster bus port (port + 10000) is free too.
pub fn free_cluster_port() -> u16 {
    loop {
        let port = free_port();
        if port < 55000 && TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            return port;
        }
    }
}

/// Polls `probe` until it returns `Some`, or panics with `what` after `limit`.
pub fn eventually<T>(limit: Duration, what: &str, probe: impl FnMut() -> Option<T>) -> T {
    within(limit, probe).unwrap_or_else(|| panic!("timed out after {limit:?} waiting for {what}"))
}

/// What `probe` answers first within `limit`, polled every 10 ms; `None`
/// when it never answered: for a caller that says more than `eventually`
/// on a timeout.
pub fn within<T>(limit: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = probe() {
            return Some(v);
        }
        if start.elapsed() >= limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn send_signal(pid: u32, signal: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -{signal} {pid} failed");
}

/// Short timing for tests: ttl 2s → renew every 666ms, renew deadline 1333ms.
/// How long a test waits for something that happens by itself (a leader
/// elected, a child started, a line logged): generous, for a loaded 2-core
/// machine running other tests' servers beside it. Never a claim about
/// speed; a test that claims one states its own bound.
pub const WAIT: Duration = Duration::from_secs(30);

pub const FAST: &[&str] = &[
    "--ttl",
    "2s",
    "--redis-timeout",
    "200ms",
    "--retry-interval",
    "300ms",
];

/// A minimal HTTP/1.0 GET: (status code, JSON body or the text as a JSON string).
pub fn http_get(port: u16, path: &str) -> Option<(u16, serde_json::Value)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let json =
        serde_json::from_str(body).unwrap_or_else(|_| serde_json::Value::String(body.to_string()));
    Some((code, json))
}

/// A fresh directory for a fixture (or the bench) that removes it itself; a
/// test takes a [`Scratch`], so that nothing it writes outlives it.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("leaderd-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A [`temp_dir`] removed when dropped: what a test writes there (probe
/// logs, lock files, secret files) does not outlive it.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        Scratch(temp_dir(name))
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// A key unique to the calling test.
pub fn key(name: &str) -> String {
    format!("t-{name}")
}

/// The probe child (`examples/probe_child.rs`).
pub fn probe_child() -> String {
    example("probe_child")
}

/// An example program, built by `scripts/test` with `cargo build --examples`
/// into `target/<profile>/examples/`.
pub fn example(name: &str) -> String {
    let exe = std::env::current_exe().expect("test binary path");
    let debug = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let path = debug.join("examples").join(name);
    assert!(
        path.exists(),
        "{} missing: run the tests with scripts/test, or `cargo build --examples` first",
        path.display()
    );
    path.to_str().expect("utf-8 path").to_string()
}

/// Is `pid` a live (not zombie, not gone) process?
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 2..].starts_with('Z')))
        .is_some_and(|zombie| !zombie)
}

/// `(state, ppid, pgrp)` of `pid`, from `/proc/PID/stat`.
pub fn proc_stat(pid: i32) -> Option<(String, i32, i32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: parse after the last ')'.
    let mut f = s[s.rfind(')')? + 2..].split_whitespace();
    let state = f.next()?.to_string();
    Some((state, f.next()?.parse().ok()?, f.next()?.parse().ok()?))
}

/// Live (not zombie) processes for which `pick(ppid, pgrp)` holds.
pub fn live_processes(pick: impl Fn(i32, i32) -> bool) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            proc_stat(*pid).is_some_and(|(state, ppid, pgrp)| state != "Z" && pick(ppid, pgrp))
        })
        .collect()
}

/// Live processes in process group `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    live_processes(|_, pgrp| pgrp == pgid)
}

pub fn pgid_of(pid: i32) -> i32 {
    proc_stat(pid).expect("process exists").2
}

/// `leaderd run` on `redis` with the FAST timing and the probe child
/// recording to `log`.
pub fn with_probe(redis: &Redis, key: &str, id: &str, log: &Path) -> Leaderd {
    let (probe, url) = (probe_child(), redis.url());
    let args = [
        &["--redis", &url, "--key", key][..],
        FAST,
        &["--", &probe, path_str(log)],
    ]
    .concat();
    Leaderd::run(id, &args)
}

/// `promtool check metrics` on `body`: (passed, what it said).
pub fn promtool(body: &str) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool is installed (scripts/test installs Debian's prometheus)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), said)
}
