//! The built `leaderd` binary as a child process: started with a clean
//! environment, its stderr collected line by line, its `/leader` read, its
//! lines and exit awaited.

use super::{BIN, Redis, eventually, example, free_port, http_get, send_signal, within};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
        self.awaiting(limit, "to lead", || self.is_leader().then_some(()));
    }

    pub fn log(&self) -> Vec<String> {
        let lines = self.log.lock().expect("log lock");
        lines.iter().filter(|l| *l != END_OF_LOG).cloned().collect()
    }

    pub fn wait_log(&self, limit: Duration, needle: &str) -> String {
        self.awaiting(limit, &format!("to log {needle:?}"), || {
            self.log().into_iter().find(|l| l.contains(needle))
        })
    }

    /// `probe`'s first answer within `limit`; on a timeout, fails with the
    /// end of this instance's log: what it did instead.
    fn awaiting<T>(&self, limit: Duration, what: &str, probe: impl FnMut() -> Option<T>) -> T {
        within(limit, probe).unwrap_or_else(|| {
            panic!(
                "timed out after {limit:?} waiting for {} {what}; the end of its log:\n{}",
                self.id,
                self.tail()
            )
        })
    }

    /// The last 30 lines of its log, for a failure to say what it did.
    pub fn tail(&self) -> String {
        let log = self.log();
        log[log.len().saturating_sub(30)..].join("\n")
    }

    pub fn signal(&self, signal: &str) {
        send_signal(self.pid(), signal);
    }

    /// Waits for the process to exit and for its log to be read to the end.
    /// One that has not exited by `limit` fails with the end of its log:
    /// what it was doing instead.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let id = self.id.clone();
        let began = std::time::Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            if began.elapsed() > limit {
                panic!(
                    "{id} had not exited after {limit:?}; the end of its log:\n{}",
                    self.tail()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
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
    started(cmd)
}

/// `cmd` started, its stdout dropped and its stderr collected.
fn started(mut cmd: Command) -> (Child, Arc<Mutex<Vec<String>>>) {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn leaderd");
    let log = Arc::new(Mutex::new(Vec::new()));
    collect_lines(child.stderr.take().expect("piped"), &log);
    (child, log)
}

/// Like [`spawn_with_env`], with leaderd started by `wrapper` (a program
/// and its arguments that end by exec'ing the rest of the command line, so
/// the process is leaderd's own: signals reach it).
pub fn spawn_wrapped(
    wrapper: &[String],
    args: &[&str],
    env: &[(&str, &str)],
) -> (Child, Arc<Mutex<Vec<String>>>) {
    let plain = command(args);
    let mut cmd = Command::new(&wrapper[0]);
    cmd.args(&wrapper[1..])
        .arg(plain.get_program())
        .args(plain.get_args())
        .env_clear()
        .envs(plain.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .envs(env.iter().copied())
        .stdin(Stdio::null());
    started(cmd)
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
