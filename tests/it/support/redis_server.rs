//! A `redis-server` per test on a free loopback port, with no persistence:
//! started, paused, killed and restarted by the tests, and its own commands.

use super::process::Process;
use super::{free_port, path_str};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A `redis-server` on a free loopback port, with no persistence.
pub struct Redis {
    pub port: u16,
    process: Process,
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
            process: Process::new(redis_dir(port)),
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
            process: Process::new(redis_dir(port)),
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
        self.process.started(child);
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
        let dir = self.process.dir().clone();
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
        // One try can take longer than its 2 s on a loaded machine (found
        // with two CPU hogs beside the suite: EAGAIN, the handshake's read
        // timing out while the server forked for a replica's sync); the
        // server is up, so ask again, for as long as any test waits.
        let mut last = None;
        let began = std::time::Instant::now();
        while began.elapsed() < Duration::from_secs(30) {
            match client.get_connection_with_timeout(Duration::from_secs(2)) {
                Ok(conn) => return conn,
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("test Redis reachable: {last:?}")
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
        self.process.is_running()
    }

    pub fn pttl(&self, key: &str) -> i64 {
        redis::cmd("PTTL")
            .arg(key)
            .query(&mut self.conn())
            .expect("PTTL")
    }

    pub fn pause(&self) {
        self.process.pause();
    }

    pub fn resume(&self) {
        self.process.resume();
    }

    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Starts again on the same port, empty.
    pub fn restart(&mut self) {
        self.process.kill();
        self.launch();
    }
}

/// A server's working directory, by its port.
fn redis_dir(port: u16) -> PathBuf {
    std::env::temp_dir().join(format!("leaderd-test-redis-{port}"))
}
