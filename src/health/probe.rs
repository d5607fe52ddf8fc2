//! One health check: an HTTP GET (2xx passes) or a command (exit 0 passes),
//! each bounded by the timeout. A command runs without a shell in its own
//! process group, which is killed whole when it overruns, so a hung check
//! leaves nothing behind; its stdout goes to /dev/null and only the first
//! bytes of its stderr are kept (the rest is read and dropped), so a command
//! that prints megabytes never blocks on a full pipe.

use super::Probe;
use crate::config::redact_url;
use crate::work::reap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::time::Instant;

/// What one check found: passed or not, and why, in words for the logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub passed: bool,
    pub reason: String,
}

/// How much of a failing command's stderr is quoted in its reason.
const STDERR_KEPT: usize = 200;

/// A probe ready to run: the HTTP client built, the program found.
pub enum Prober {
    Http {
        client: reqwest::Client,
        url: reqwest::Url,
    },
    Command {
        program: PathBuf,
        args: Vec<String>,
        shown: String,
        /// Environment variables it does not inherit (as the child).
        scrub: Vec<&'static str>,
    },
}

impl Prober {
    /// Builds the probe; a command's program is looked up now, so a typo is
    /// an error at start-up (exit 2), not a worker that is never healthy.
    /// A command does not inherit the variables in `scrub` (the store's
    /// credentials), as the child does not.
    pub fn new(probe: &Probe, timeout: Duration, scrub: &[&'static str]) -> Result<Prober, String> {
        match probe {
            Probe::Http(url) => {
                let _ = rustls::crypto::ring::default_provider().install_default();
                let client = reqwest::Client::builder()
                    .timeout(timeout)
                    .connect_timeout(timeout)
                    .redirect(reqwest::redirect::Policy::none())
                    .no_proxy()
                    .user_agent(concat!("leaderd/", env!("CARGO_PKG_VERSION"), " health"))
                    .build()
                    .map_err(|e| format!("cannot build the health check's HTTP client: {e}"))?;
                Ok(Prober::Http {
                    client,
                    url: url.clone(),
                })
            }
            Probe::Command(words) => {
                let (program, args) = words.split_first().expect("resolved as non-empty");
                let program = crate::work::process::resolve(program, std::env::var_os("PATH"))
                    .map_err(|e| format!("health command: {e}"))?;
                Ok(Prober::Command {
                    program,
                    args: args.to_vec(),
                    shown: shell_words::join(words),
                    scrub: scrub.to_vec(),
                })
            }
        }
    }

    /// What is checked, for logs and `check` (a URL's password redacted).
    pub fn describe(&self) -> String {
        match self {
            Prober::Http { url, .. } => format!("GET {}", redact_url(url.as_str())),
            Prober::Command { shown, .. } => format!("`{shown}`"),
        }
    }

    /// Runs one check, never longer than `timeout` (plus the moment it
    /// takes to kill an overrunning command).
    pub async fn check(&self, timeout: Duration) -> Finding {
        let started = Instant::now();
        let mut finding = match self {
            Prober::Http { client, url } => http(client, url, timeout).await,
            Prober::Command {
                program,
                args,
                scrub,
                ..
            } => command(program, args, scrub, timeout).await,
        };
        let took = started.elapsed().as_millis();
        finding.reason = format!("{} ({}, {took} ms)", finding.reason, self.describe());
        finding
    }
}

async fn http(client: &reqwest::Client, url: &reqwest::Url, timeout: Duration) -> Finding {
    let request = client.get(url.clone()).send();
    match tokio::time::timeout(timeout, request).await {
        Err(_) => fail(format!("no answer within {timeout:?}")),
        Ok(Err(e)) if e.is_timeout() => fail(format!("no answer within {timeout:?}")),
        Ok(Err(e)) if e.is_connect() => fail("connection refused or unreachable".to_string()),
        Ok(Err(e)) => fail(format!(
            "request failed: {}",
            redact_url(&e.without_url().to_string())
        )),
        Ok(Ok(response)) => {
            let status = response.status();
            Finding {
                passed: status.is_success(),
                reason: format!("HTTP {}", status.as_u16()),
            }
        }
    }
}

async fn command(
    program: &PathBuf,
    args: &[String],
    scrub: &[&'static str],
    timeout: Duration,
) -> Finding {
    let mut cmd = tokio::process::Command::new(program);
    for name in scrub {
        cmd.env_remove(name);
    }
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    // Claimed until this function returns, after its status is read: the
    // child supervisor, which reaps leaderd's other children, leaves it be.
    let (mut child, _claim) = match reap::spawn_claimed(|| cmd.spawn(), |c| c.id()) {
        Ok(spawned) => spawned,
        Err(e) => return fail(format!("cannot run it: {e}")),
    };
    let pid = child.id();
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let run = async {
        let mut kept = Vec::new();
        let mut chunk = [0u8; 8192];
        // Read to the end, keeping only the head: the pipe never fills.
        while let Ok(n) = stderr.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            let room = STDERR_KEPT.saturating_sub(kept.len());
            kept.extend_from_slice(&chunk[..n.min(room)]);
        }
        (child.wait().await, kept)
    };
    match tokio::time::timeout(timeout, run).await {
        Err(_) => {
            kill_group(pid);
            fail(format!("did not finish within {timeout:?}; killed"))
        }
        Ok((Err(e), _)) => fail(format!("cannot wait for it: {e}")),
        Ok((Ok(status), _)) if status.success() => Finding {
            passed: true,
            reason: "exit 0".into(),
        },
        Ok((Ok(status), kept)) => {
            let how = match status.code() {
                Some(code) => format!("exit {code}"),
                None => "killed by a signal".to_string(),
            };
            let text = String::from_utf8_lossy(&kept);
            let first = text
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim();
            kill_group(pid); // anything it left running in its group
            if first.is_empty() {
                fail(how)
            } else {
                fail(format!("{how}: {first}"))
            }
        }
    }
}

/// SIGKILL to the check's process group (its pid is the group's id).
fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        // SAFETY: kill(2) with a negative pid signals that process group; no memory is involved.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
}

fn fail(reason: String) -> Finding {
    Finding {
        passed: false,
        reason,
    }
}
