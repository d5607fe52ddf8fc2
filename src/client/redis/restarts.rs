//! When a Redis server started, read on every new connection (Redlock's:
//! a master that restarted less than a TTL ago may have lost a lease that
//! still stands, and must not vote a new holder in until a TTL has passed).

use redis::aio::MultiplexedConnection;
use std::time::Duration;
use tokio::time::Instant;

/// When the server behind a connection started, and which run it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Started {
    pub(crate) run_id: String,
    pub(crate) at: Instant,
}

/// What `INFO server` says of the server's run: its id and uptime, read
/// at `read`.
#[derive(Debug, Clone)]
pub(crate) struct Uptime {
    run_id: String,
    uptime: Duration,
    read: Instant,
}

/// Reads `INFO server`'s `run_id` and `uptime_in_seconds`; `None` without
/// an answer (no `+info` in the ACL, or none by `deadline`).
pub(crate) async fn read_start(
    url: &str,
    conn: &mut MultiplexedConnection,
    deadline: Instant,
) -> Option<Uptime> {
    let mut cmd = redis::cmd("INFO");
    cmd.arg("server");
    let info = cmd.query_async::<String>(conn);
    let text = match tokio::time::timeout_at(deadline, info).await {
        Ok(Ok(text)) => text,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, server = %url, "cannot read INFO server; a restart of this master goes unseen");
            return None;
        }
        Err(_) => return None,
    };
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let run_id = field("run_id")?.to_string();
    let uptime = field("uptime_in_seconds")?.parse::<u64>().ok()?;
    Some(Uptime {
        run_id,
        uptime: Duration::from_secs(uptime),
        read: Instant::now(),
    })
}

/// Updates what is known of the server's start. A run id other than the
/// last one seen counts as a restart when it was read, whatever the uptime
/// says; without an answer the last knowledge stays.
pub(crate) fn note(started: &mut Option<Started>, seen: Uptime) {
    let at = match started.as_ref() {
        // The same run: keep the first estimate.
        Some(s) if s.run_id == seen.run_id => return,
        Some(_) => seen.read,
        None => seen.read.checked_sub(seen.uptime).unwrap_or(seen.read),
    };
    *started = Some(Started {
        run_id: seen.run_id,
        at,
    });
}
