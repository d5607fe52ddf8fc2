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

/// Reads when the server started (`INFO server`: `run_id`,
/// `uptime_in_seconds`). A run id other than the last one seen counts
/// as a restart now, whatever the uptime says. Without an answer (no
/// `+info` in the ACL) the last knowledge stays.
pub(super) async fn note_start(
    started: &mut Option<Started>,
    url: &str,
    conn: &mut MultiplexedConnection,
    deadline: Instant,
) {
    let mut cmd = redis::cmd("INFO");
    cmd.arg("server");
    let info = cmd.query_async::<String>(conn);
    let text = match tokio::time::timeout_at(deadline, info).await {
        Ok(Ok(text)) => text,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, server = %url, "cannot read INFO server; a restart of this master goes unseen");
            return;
        }
        Err(_) => return,
    };
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let (Some(run_id), Some(uptime)) = (
        field("run_id"),
        field("uptime_in_seconds").and_then(|u| u.parse::<u64>().ok()),
    ) else {
        return;
    };
    let now = Instant::now();
    let at = match started.as_ref() {
        // The same run: keep the first estimate.
        Some(s) if s.run_id == run_id => return,
        Some(_) => now,
        None => now.checked_sub(Duration::from_secs(uptime)).unwrap_or(now),
    };
    *started = Some(Started {
        run_id: run_id.to_string(),
        at,
    });
}
