//! Test fixtures: a real `redis-server` per test on a free loopback port, the
//! built `leaderd` binary as a child process, and a tiny HTTP client.
//! Everything is killed on drop. Waiting is done by polling a condition with
//! a deadline, never by sleeping a fixed time.

pub mod backends;
pub mod cluster;
pub mod etcd;
pub mod os;
pub mod postgres;
pub mod prometheus;
pub mod proxy;
pub mod redlock;
pub mod sentinel;
pub mod tls;
pub mod worker;
pub mod zk_gate;
pub mod zookeeper;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
pub fn eventually<T>(limit: Duration, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
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

/// A `redis-server` on a free loopback port, with no persistence.
pub struct Redis {
    pub port: u16,
    child: Option<Child>,
    /// Extra `redis-server` arguments, kept for restarts.
    extra: Vec<String>,
    /// For a TLS-only server: how the fixture's own commands connect.
    tls: Option<TlsClient>,
}

/// PEM material for the fixture's own TLS connections.
#[derive(Clone)]
pub struct TlsClient {
    pub ca: Vec<u8>,
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

impl Redis {
    pub fn start() -> Redis {
        Redis::start_with(&[])
    }

    /// With extra `redis-server` arguments (`--cluster-enabled yes`, ...).
    pub fn start_with(extra: &[&str]) -> Redis {
        Redis::start_on(free_port(), extra)
    }

    /// On `port`, with extra arguments.
    pub fn start_on(port: u16, extra: &[&str]) -> Redis {
        let mut redis = Redis {
            port,
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            tls: None,
        };
        redis.launch();
        redis
    }

    /// Listening only on a TLS port (`port`), with `extra` naming the
    /// certificates (see `tls::redis`).
    pub fn start_tls(extra: Vec<String>, client: TlsClient) -> Redis {
        let port = free_port();
        let mut args = vec![
            "--tls-port".to_string(),
            port.to_string(),
            "--port".into(),
            "0".into(),
        ];
        args.extend(extra);
        let mut redis = Redis {
            port,
            child: None,
            extra: args,
            tls: Some(client),
        };
        redis.launch();
        redis
    }

    fn launch(&mut self) {
        let mut child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(["--enable-debug-command", "local", "--loglevel", "notice"])
            // Replication writes an RDB even without persistence: keep it
            // out of the working directory.
            .args(["--dir", path_str(&self.dir())])
            .args(&self.extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (scripts/test installs it)");
        let out = child.stdout.take().expect("piped");
        let mut lines = BufReader::new(out).lines();
        let ready = lines
            .by_ref()
            .take(200)
            .any(|l| l.is_ok_and(|l| l.contains("Ready to accept connections")));
        assert!(
            ready,
            "redis-server on port {} did not become ready",
            self.port
        );
        // Keep draining its log so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        self.child = Some(child);
    }

    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// This server's working directory, made on first use.
    fn dir(&self) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("leaderd-test-redis-{}", self.port));
        std::fs::create_dir_all(&dir).expect("redis dir");
        dir
    }

    pub fn conn(&self) -> redis::Connection {
        let client = match &self.tls {
            None => redis::Client::open(self.url()).expect("valid URL"),
            Some(tls) => {
                let _ = rustls::crypto::ring::default_provider().install_default();
                let certificates = redis::TlsCertificates {
                    client_tls: Some(redis::ClientTlsConfig {
                        client_cert: tls.cert.clone(),
                        client_key: tls.key.clone(),
                    }),
                    root_cert: Some(tls.ca.clone()),
                };
                redis::Client::build_with_tls(self.url(), certificates).expect("TLS client")
            }
        };
        client
            .get_connection_with_timeout(Duration::from_secs(2))
            .expect("test Redis reachable")
    }

    pub fn cmd(&self, args: &[&str]) -> redis::Value {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut self.conn()).expect("redis command succeeds")
    }

    pub fn get(&self, key: &str) -> Option<String> {
        redis::cmd("GET")
            .arg(key)
            .query(&mut self.conn())
            .expect("GET")
    }

    /// A section of `INFO`, as text.
    pub fn info(&self, section: &str) -> String {
        redis::cmd("INFO")
            .arg(section)
            .query(&mut self.conn())
            .expect("INFO")
    }

    /// `CLUSTER INFO`, as text.
    pub fn info_cluster(&self) -> String {
        redis::cmd("CLUSTER")
            .arg("INFO")
            .query(&mut self.conn())
            .expect("CLUSTER INFO")
    }

    /// Not killed (a paused server still runs).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub fn pttl(&self, key: &str) -> i64 {
        redis::cmd("PTTL")
            .arg(key)
            .query(&mut self.conn())
            .expect("PTTL")
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn pause(&self) {
        send_signal(self.pid(), "STOP");
    }

    pub fn resume(&self) {
        send_signal(self.pid(), "CONT");
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            send_signal(child.id(), "CONT");
        }
        self.kill();
        let _ = std::fs::remove_dir_all(self.dir());
    }
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

/// `leaderd run --redis URL --key KEY --id ID EXTRA...` against `redis`.
pub fn on_redis(redis: &Redis, key: &str, id: &str, extra: &[&str]) -> Leaderd {
    let url = redis.url();
    let mut args = vec!["--redis", url.as_str(), "--key", key];
    args.extend_from_slice(extra);
    Leaderd::run(id, &args)
}

/// A `leaderd` process with its stderr collected line by line.
pub struct Leaderd {
    pub id: String,
    pub http_port: u16,
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Leaderd {
    /// `leaderd run --id ID --http 127.0.0.1:PORT ARGS...`
    pub fn run(id: &str, args: &[&str]) -> Leaderd {
        Leaderd::run_on(id, free_port(), args)
    }

    /// Like [`Leaderd::run`], serving HTTP on `http_port` (a port handed
    /// out by [`free_port`] before, e.g. to name it as a scrape target).
    pub fn run_on(id: &str, http_port: u16, args: &[&str]) -> Leaderd {
        let http = format!("127.0.0.1:{http_port}");
        let mut full = vec!["run", "--id", id, "--http", &http];
        full.extend_from_slice(args);
        let (child, log) = spawn(&full);
        Leaderd {
            id: id.to_string(),
            http_port,
            child,
            log,
        }
    }

    /// Wraps a process started with [`spawn_with_env`] listening on `http`.
    pub fn attach(id: &str, http: &str, (child, log): (Child, Arc<Mutex<Vec<String>>>)) -> Leaderd {
        let http_port = http
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("IP:PORT");
        Leaderd {
            id: id.to_string(),
            http_port,
            child,
            log,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn get(&self, path: &str) -> Option<(u16, serde_json::Value)> {
        http_get(self.http_port, path)
    }

    /// `/leader`: (is this instance leader, the body).
    pub fn leader(&self) -> Option<(bool, serde_json::Value)> {
        self.get("/leader").map(|(code, body)| (code == 200, body))
    }

    pub fn is_leader(&self) -> bool {
        self.leader().is_some_and(|(yes, _)| yes)
    }

    /// Waits until `/leader` says this instance leads.
    pub fn wait_leading(&self, limit: Duration) {
        eventually(limit, &format!("{} to lead", self.id), || {
            self.is_leader().then_some(())
        });
    }

    pub fn log(&self) -> Vec<String> {
        let lines = self.log.lock().expect("log lock");
        lines.iter().filter(|l| *l != END_OF_LOG).cloned().collect()
    }

    pub fn wait_log(&self, limit: Duration, needle: &str) -> String {
        eventually(limit, &format!("{} to log {needle:?}", self.id), || {
            self.log().into_iter().find(|l| l.contains(needle))
        })
    }

    pub fn signal(&self, signal: &str) {
        send_signal(self.pid(), signal);
    }

    /// Waits for the process to exit and for its log to be read to the end.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let id = self.id.clone();
        let status = eventually(limit, &format!("{id} to exit"), || {
            self.child.try_wait().expect("try_wait")
        });
        let log = self.log.clone();
        eventually(limit, &format!("{id}'s log to end"), || {
            log.lock()
                .expect("log lock")
                .last()
                .filter(|l| *l == END_OF_LOG)
                .map(|_| ())
        });
        status
    }

    pub fn running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }
}

impl Drop for Leaderd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Pushed by the reader after the last line of a process's stderr.
const END_OF_LOG: &str = "\u{0}end of log";

/// Runs `leaderd ARGS...` in a clean environment and collects stderr lines.
pub fn spawn(args: &[&str]) -> (Child, Arc<Mutex<Vec<String>>>) {
    spawn_with_env(args, &[])
}

/// Like [`spawn`], with extra environment variables.
pub fn spawn_with_env(args: &[&str], env: &[(&str, &str)]) -> (Child, Arc<Mutex<Vec<String>>>) {
    let mut cmd = command(args);
    cmd.envs(env.iter().copied());
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn leaderd");
    let log = Arc::new(Mutex::new(Vec::new()));
    let err = child.stderr.take().expect("piped");
    collect_lines(err, &log);
    (child, log)
}

/// Reads `from` line by line into `into` on a thread, then marks the end.
fn collect_lines(from: impl std::io::Read + Send + 'static, into: &Arc<Mutex<Vec<String>>>) {
    let sink = into.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines().map_while(Result::ok) {
            sink.lock().expect("log lock").push(line);
        }
        sink.lock().expect("log lock").push(END_OF_LOG.to_string());
    });
}

/// Runs the example program `name` (see [`example`]) with `env`, collecting
/// its stdout and stderr lines; wrap it with [`Leaderd::attach`] to await them.
pub fn spawn_example(
    name: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Child, Arc<Mutex<Vec<String>>>) {
    let mut child = Command::new(example(name))
        .args(args)
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the example");
    let log = Arc::new(Mutex::new(Vec::new()));
    collect_lines(child.stdout.take().expect("piped"), &log);
    collect_lines(child.stderr.take().expect("piped"), &log);
    (child, log)
}

/// `leaderd ARGS...` with the environment cleared of anything that would
/// change its configuration. The HTTP API is off unless a test asks for it
/// (`--http` wins over the env): `check` binds the address as `run` would,
/// and tests run in parallel.
/// The binary under test: this build's, or `LEADERD_TEST_BIN` (the nemesis
/// runs an older build against the same fixtures).
pub fn bin() -> String {
    std::env::var("LEADERD_TEST_BIN").unwrap_or_else(|_| BIN.to_string())
}

pub fn command(args: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("LEADERD_HTTP", "off")
        .stdin(Stdio::null());
    cmd
}

/// Runs a one-shot `leaderd` command to completion: (exit code, stdout, stderr).
pub fn run_to_end(args: &[&str]) -> (i32, String, String) {
    let out = command(args).output().expect("run leaderd");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs a one-shot `leaderd` command with extra env: (exit code, stderr).
pub fn run_with_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let out = command(args)
        .envs(env.iter().copied())
        .output()
        .expect("run leaderd");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

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

/// One line of a probe log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeEvent {
    pub kind: String,
    pub pid: i32,
    pub ns: u128,
    pub rest: Vec<String>,
}

pub fn probe_events(log: &Path) -> Vec<ProbeEvent> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let kind = f.next()?.to_string();
            let pid = f.next()?.parse().ok()?;
            let ns = f.next().and_then(|n| n.parse().ok()).unwrap_or(0);
            Some(ProbeEvent {
                kind,
                pid,
                ns,
                rest: f.map(str::to_string).collect(),
            })
        })
        .collect()
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

/// One request a [`Receiver`] got.
#[derive(Debug, Clone)]
pub struct Received {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// How a [`Receiver`] answers its n-th request (0-based).
#[derive(Debug, Clone, Copy)]
pub enum Answer {
    Status(u16),
    Hang,
}

/// A real HTTP server on a free loopback port that records what it receives.
pub struct Receiver {
    pub port: u16,
    pub received: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    pub fn start(answer: fn(usize) -> Answer) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind receiver");
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let sink = received.clone();
        std::thread::spawn(move || {
            for (n, stream) in listener.incoming().enumerate() {
                let Ok(stream) = stream else { continue };
                let sink = sink.clone();
                std::thread::spawn(move || serve_one(stream, n, answer, sink));
            }
        });
        Receiver { port, received }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    pub fn requests(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

fn serve_one(
    mut stream: TcpStream,
    n: usize,
    answer: fn(usize) -> Answer,
    sink: Arc<Mutex<Vec<Received>>>,
) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone stream"));
    let mut headers = Vec::new();
    let mut line = String::new();
    let _ = reader.read_line(&mut line); // request line
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.trim_end().split_once(':') {
            headers.push((name.trim().to_string(), value.trim().to_string()));
        }
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    sink.lock().unwrap().push(Received { headers, body });
    match answer(n) {
        Answer::Status(code) => {
            let _ = write!(
                stream,
                "HTTP/1.1 {code} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
        }
        Answer::Hang => std::thread::sleep(Duration::from_secs(60)),
    }
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

/// The one candidate that leads, once exactly one does, and its token.
pub fn the_leader(nodes: &[Leaderd], limit: Duration) -> (usize, u64) {
    eventually(limit, "exactly one leader", || {
        let leading: Vec<usize> = (0..nodes.len()).filter(|&i| nodes[i].is_leader()).collect();
        let [one] = leading[..] else { return None };
        let (_, body) = nodes[one].leader()?;
        Some((one, body["fencing_token"].as_u64()?))
    })
}

/// Whether the next child (the first `start` in `next`) began while the
/// child last started in `old` was still alive: checked the moment the
/// start line appears (10 ms apart), by the old child's own stop line or,
/// when it has none (killed with SIGKILL), by its pid in `/proc`.
pub fn started_beside(old: &Path, next: &Path, limit: Duration) -> bool {
    let old_child = probe_events(old)
        .into_iter()
        .rev()
        .find(|e| e.kind == "start")
        .expect("the old child started");
    // The start line first, then the old pid: alive after the new start
    // was written is alive beside it.
    let start = eventually(limit, "the next child to start", || {
        let start = probe_events(next).into_iter().find(|e| e.kind == "start")?;
        Some((start.ns, alive(old_child.pid)))
    });
    let stopped = probe_events(old)
        .into_iter()
        .find(|e| e.kind == "stop" && e.pid == old_child.pid);
    match stopped {
        Some(stop) => stop.ns > start.0,
        None => start.1,
    }
}

/// The most children alive at once, over every candidate's probe log, by
/// their `start` and `stop` lines (other lines, such as `inherited`, say
/// nothing of life: counting them as stops made this blind). A child with
/// no stop line (killed with SIGKILL) counts as alive to the end: a test
/// whose children are killed so checks their pids instead.
pub fn most_alive(logs: &[PathBuf]) -> usize {
    let mut events: Vec<(u128, i32)> = logs
        .iter()
        .flat_map(|l| probe_events(l))
        .filter_map(|e| match e.kind.as_str() {
            "start" => Some((e.ns, 1)),
            "stop" => Some((e.ns, -1)),
            _ => None,
        })
        .collect();
    events.sort();
    let (mut alive, mut most) = (0i32, 0i32);
    for (_, change) in events {
        alive += change;
        most = most.max(alive);
    }
    most as usize
}
