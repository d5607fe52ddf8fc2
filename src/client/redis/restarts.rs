//! When a Redis server started, read on every new connection (Redlock's:
//! a master that restarted less than a TTL ago may have lost a lease that
//! still stands, and must not vote a new holder in until a TTL has passed).

use super::classify::has_code;
use crate::client::Error;
use redis::aio::MultiplexedConnection;
use redis::{ErrorKind, RedisError, ServerErrorKind};
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

/// Reads `INFO server`'s `run_id` and `uptime_in_seconds`.
///
/// `Ok(None)` when the server will not say: its ACL lacks `+info`, the
/// command is renamed away, or the reply has no run id; a restart of such
/// a master goes unseen, as documented. `Err` when it gave no answer by
/// `deadline` (or failed otherwise, `LOADING` among others): such a
/// connection must not be used, since a master that restarted empty
/// would then count as warm and vote a new holder in beside a lease that
/// still stands (a candidate whose reconnection ran out of time on this
/// read, beside two CPU hogs, used to go on as if nothing had restarted).
pub(crate) async fn read_start(
    url: &str,
    conn: &mut MultiplexedConnection,
    deadline: Instant,
) -> Result<Option<Uptime>, Error> {
    let mut cmd = redis::cmd("INFO");
    cmd.arg("server");
    let info = cmd.query_async::<String>(conn);
    let unread = |why: String| Error::Connection {
        backend: url.to_string(),
        detail: format!(
            "could not read when the master started ({why}); a restart would go unseen, so this connection is not used and the next request connects again; if this repeats, the master is loading its data or answers slower than --redis-timeout allows (check its load, or raise --redis-timeout)"
        ),
    };
    let text = match tokio::time::timeout_at(deadline, info).await {
        Ok(Ok(text)) => text,
        Ok(Err(e)) if refused(&e) => {
            tracing::debug!(error = %e, server = %url, "cannot read INFO server; a restart of this master goes unseen");
            return Ok(None);
        }
        Ok(Err(e)) => return Err(unread(format!("INFO server failed: {e}"))),
        Err(_) => return Err(unread("no answer to INFO server in time".into())),
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
        tracing::debug!(server = %url, "INFO server gave no run id or uptime; a restart of this master goes unseen");
        return Ok(None);
    };
    Ok(Some(Uptime {
        run_id: run_id.to_string(),
        uptime: Duration::from_secs(uptime),
        read: Instant::now(),
    }))
}

/// The server answered that it will not run `INFO` for us: a lasting
/// choice of its operator, not a passing failure.
fn refused(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm)
        || has_code(e, &["NOPERM"])
        || e.to_string().contains("unknown command")
}

/// Updates what is known of the server's start. A run id other than the
/// last one seen counts as a restart when it was read, whatever the uptime
/// says; without an answer the last knowledge stays.
pub(crate) fn note(started: &mut Option<Started>, seen: Uptime) {
    let at = match started.as_ref() {
        // The same run: keep the first estimate.
        Some(s) if s.run_id == seen.run_id => return,
        Some(_) => seen.read,
        // `uptime_in_seconds` is the difference of two whole-second clocks
        // (now and the start, each cut to the second), so it overstates the
        // time since the start by up to a second: a server that started
        // 20 ms ago can say 1. The latest start it allows is a second later
        // than the plain difference; counting from an earlier one ended a
        // restarted master's cold TTL up to a second early, and a new
        // candidate won on two restarted masters before the frozen holder's
        // guard had stopped its child (found under load by
        // `redlock::a_majority_restarted_empty_during_a_lease_never_makes_two_children`).
        None => seen
            .read
            .checked_sub(seen.uptime.saturating_sub(Duration::from_secs(1)))
            .unwrap_or(seen.read),
    };
    *started = Some(Started {
        run_id: seen.run_id,
        at,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(run_id: &str, uptime: u64, read: Instant) -> Uptime {
        Uptime {
            run_id: run_id.to_string(),
            uptime: Duration::from_secs(uptime),
            read,
        }
    }

    #[test]
    fn a_first_reading_takes_the_latest_start_the_whole_seconds_allow() {
        let read = Instant::now() + Duration::from_secs(60);
        for (uptime, since) in [(0, 0), (1, 0), (2, 1), (30, 29)] {
            let mut started = None;
            note(&mut started, seen("a", uptime, read));
            let at = started.expect("noted").at;
            // uptime 1 may mean 20 ms: the master counts as just started.
            assert_eq!(read - at, Duration::from_secs(since), "uptime {uptime}");
        }
    }

    #[test]
    fn a_new_run_id_is_a_restart_when_read_and_the_same_one_keeps_its_start() {
        let first = Instant::now() + Duration::from_secs(60);
        let mut started = None;
        note(&mut started, seen("a", 10, first));
        let at = started.as_ref().expect("noted").at;
        let later = first + Duration::from_secs(5);
        note(&mut started, seen("a", 15, later));
        assert_eq!(started.as_ref().expect("kept").at, at);
        // A restart: whatever its uptime says, it counts from the reading.
        note(&mut started, seen("b", 7, later));
        assert_eq!(started.expect("restart").at, later);
    }
}
