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
