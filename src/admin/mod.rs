//! The local admin endpoint: a Unix socket (off unless `--admin-socket` is
//! set) over which `leaderd step-down` asks the leader to give the lease up
//! without stopping the process. Never on the HTTP listener: anyone who can
//! reach a GET could otherwise move leadership; the socket is created mode
//! 0600, so only its owner (and root) can.
//!
//! The protocol is one line each way: `step-down [DUR] [to ID]` → `ok: …`,
//! `not-leader: …`, `refused: …` (no such candidate to hand over to) or
//! `error: …`.

pub mod options;

pub use options::{AdminConfig, FEATURE};

use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// A step-down asked for over the socket, answered by the runner.
pub struct Request {
    /// How long to stay out of the election; `None`: the configured hold.
    pub hold: Option<Duration>,
    /// A targeted handover: the registered candidate to hand the lease to.
    pub to: Option<String>,
    pub reply: oneshot::Sender<Reply>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Stepping down: the work is being stopped and the lease released.
    SteppingDown { fencing_token: u64, hold: Duration },
    /// Handing over to `to`: announced in the registry, released once every
    /// candidate has read it (`after`).
    HandingOver {
        fencing_token: u64,
        to: String,
        after: Duration,
    },
    /// Nothing to do: this instance does not lead.
    NotLeader { state: &'static str },
    /// The handover cannot be done, and why (the leader keeps leading).
    Refused { why: String },
}

impl Reply {
    fn line(&self) -> String {
        match self {
            Reply::SteppingDown {
                fencing_token,
                hold,
            } => format!(
                "ok: stepping down from the term with fencing token {fencing_token}: stopping the work, releasing the lease, then no campaign for {}",
                crate::config::show_duration(*hold)
            ),
            Reply::HandingOver {
                fencing_token,
                to,
                after,
            } => format!(
                "ok: handing over to {to} from the term with fencing token {fencing_token}: the others are told now, the lease is released in {} (once every candidate has read the registry)",
                crate::config::show_duration(*after)
            ),
            Reply::NotLeader { state } => {
                format!("not-leader: this instance does not lead (state {state}); nothing to do")
            }
            Reply::Refused { why } => format!("refused: {why}; the leader keeps leading"),
        }
    }
}

/// Binds the socket (mode 0600) in a directory nobody else can swap files
/// in ([`crate::private::check_dir`]). A socket file left by a leaderd that
/// is gone is replaced; one that answers is another leaderd's, and refused.
pub async fn bind(path: &Path) -> Result<UnixListener, String> {
    // Another user who can swap files in the directory could put their own
    // socket in our place, and be told who steps down.
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    crate::private::check_dir(dir).map_err(|e| format!("admin.socket: {e}"))?;
    if path.exists() {
        if UnixStream::connect(path).await.is_ok() {
            return Err(format!(
                "admin.socket: {} is in use by another process (another leaderd?); give each leaderd its own --admin-socket",
                path.display()
            ));
        }
        std::fs::remove_file(path).map_err(|e| {
            format!(
                "admin.socket: cannot replace the stale {}: {e}",
                path.display()
            )
        })?;
    }
    // The umask applies at bind: tighten it around the call so the socket
    // is never reachable by others, not even for an instant.
    // SAFETY: umask only swaps the process's file-creation mask.
    let old = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(path);
    // SAFETY: as above, restoring the previous mask.
    unsafe { libc::umask(old) };
    bound.map_err(|e| {
        format!(
            "admin.socket: cannot listen on {}: {e}; check that its directory exists and is writable",
            path.display()
        )
    })
}

/// Serves step-down requests until `stop`, then removes the socket file.
pub async fn serve(
    listener: UnixListener,
    path: PathBuf,
    requests: mpsc::UnboundedSender<Request>,
    stop: CancellationToken,
) {
    loop {
        let stream = tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "admin socket: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let requests = requests.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(5), answer(stream, requests)).await;
        });
    }
    let _ = std::fs::remove_file(&path);
}

async fn answer(stream: UnixStream, requests: mpsc::UnboundedSender<Request>) {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    let mut reader = BufReader::new(read.take(1024));
    if reader.read_line(&mut line).await.is_err() {
        return;
    }
    let answer = match parse(&line) {
        Ok((hold, to)) => {
            let (reply, answered) = oneshot::channel();
            if requests.send(Request { hold, to, reply }).is_err() {
                "error: leaderd is shutting down".to_string()
            } else {
                match answered.await {
                    Ok(reply) => reply.line(),
                    Err(_) => "error: leaderd is shutting down".to_string(),
                }
            }
        }
        Err(e) => format!("error: {e}"),
    };
    let _ = write.write_all(format!("{answer}\n").as_bytes()).await;
}

/// `step-down [DUR] [to ID]`.
fn parse(line: &str) -> Result<(Option<Duration>, Option<String>), String> {
    let unknown = || {
        format!(
            "unknown request {:?}; the admin socket understands `step-down [DUR] [to ID]`",
            line.trim()
        )
    };
    let mut words = line.split_whitespace();
    if words.next() != Some("step-down") {
        return Err(unknown());
    }
    let (mut hold, mut to) = (None, None);
    while let Some(word) = words.next() {
        match word {
            "to" if to.is_none() => to = Some(words.next().ok_or_else(unknown)?.to_string()),
            _ if hold.is_none() && to.is_none() => {
                hold = Some(crate::config::parse_duration(word)?)
            }
            _ => return Err(unknown()),
        }
    }
    Ok((hold, to))
}

/// `leaderd step-down`: sends the request, prints the answer. Exit 0 when
/// the leader is stepping down, 3 when this instance does not lead, 1 when
/// the socket cannot be reached.
pub fn step_down(
    path: &Path,
    hold: Option<Duration>,
    to: Option<&str>,
) -> Result<(Option<bool>, String), String> {
    use std::io::{BufRead, Write};
    let mut stream = std::os::unix::net::UnixStream::connect(path).map_err(|e| {
        format!(
            "cannot reach the admin socket {}: {e}; is leaderd running with --admin-socket {}?",
            path.display(),
            path.display()
        )
    })?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let mut request = "step-down".to_string();
    if let Some(hold) = hold {
        request.push_str(&format!(" {}ms", hold.as_millis()));
    }
    if let Some(to) = to {
        request.push_str(&format!(" to {to}"));
    }
    request.push('\n');
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("admin socket {}: {e}", path.display()))?;
    let mut answer = String::new();
    std::io::BufReader::new(stream)
        .read_line(&mut answer)
        .map_err(|e| format!("admin socket {}: no answer: {e}", path.display()))?;
    let answer = answer.trim().to_string();
    match answer.split_once(':').map(|(kind, _)| kind) {
        Some("ok") => Ok((Some(true), answer)),
        Some("not-leader") => Ok((Some(false), answer)),
        Some("refused") => Ok((None, answer)),
        _ => Err(answer
            .strip_prefix("error: ")
            .unwrap_or(&answer)
            .to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_or_are_refused_by_name() {
        assert_eq!(parse("step-down\n"), Ok((None, None)));
        assert_eq!(
            parse("step-down 45s\n"),
            Ok((Some(Duration::from_secs(45)), None))
        );
        assert_eq!(
            parse("step-down 45s to c2\n"),
            Ok((Some(Duration::from_secs(45)), Some("c2".into())))
        );
        assert_eq!(parse("step-down to c2"), Ok((None, Some("c2".into()))));
        assert!(parse("step-down 45").unwrap_err().contains("unit"));
        assert!(
            parse("reboot")
                .unwrap_err()
                .contains("step-down [DUR] [to ID]")
        );
        assert!(parse("step-down 1s extra").is_err());
        assert!(parse("step-down to").is_err());
        assert!(parse("step-down to a to b").is_err());
    }
}
