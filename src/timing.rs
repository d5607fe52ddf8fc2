//! The lease's timing rules (PRODUCT §4) in one place: how long a lease is
//! valid, when to renew, when to give up, and how much room is kept to kill
//! the work before anyone else can win.

use std::time::Duration;
use tokio::time::Instant;

/// Validated lease timing. Invariant (enforced by `config`):
/// `renew_interval < renew_deadline < ttl − drift − kill_margin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub ttl: Duration,
    pub renew_interval: Duration,
    pub renew_deadline: Duration,
    pub retry_interval: Duration,
    /// How often a candidate rewrites its unchanged registry record (issue
    /// #47): far slower than the lease, so the registry's idle load does
    /// not grow with the lease's pace times the number of standbys.
    pub registry_heartbeat: Duration,
}

impl Timing {
    /// The TTL in whole milliseconds, as the stores take it (`PX`, an
    /// interval in SQL, an expiry in a record). A TTL is validated to be far
    /// below `u64::MAX` ms.
    pub fn ttl_ms(&self) -> u64 {
        self.ttl.as_millis() as u64
    }

    /// Allowance for clock-rate differences between us and Redis: `ttl × 1% + 2ms`.
    pub fn drift(&self) -> Duration {
        self.ttl / 100 + Duration::from_millis(2)
    }

    /// How long before the lease's validity end the work must already have been
    /// SIGKILLed, so that it is dead (and reaped) before anyone else can win:
    /// 5% of the ttl, at least 20ms.
    pub fn kill_margin(&self) -> Duration {
        (self.ttl / 20).max(Duration::from_millis(20))
    }

    /// The local instant until which a lease acquired or renewed by a request
    /// *sent* at `sent_at` is ours: `sent_at + ttl − drift`.
    pub fn validity_end(&self, sent_at: Instant) -> Instant {
        sent_at + self.ttl - self.drift()
    }

    /// Latest instant the work may still run after losing the lease.
    pub fn kill_by(&self, validity_end: Instant) -> Instant {
        validity_end - self.kill_margin()
    }

    /// How long a registry record lives after its last write: two
    /// heartbeats, so one write lost or late never hides a live candidate,
    /// and never less than a TTL. A candidate killed without removing its
    /// record is listed at most this long after its last write.
    pub fn registry_lapse(&self) -> Duration {
        (self.registry_heartbeat * 2).max(self.ttl)
    }

    /// How often the leader reads the registry between its writes: every
    /// renew interval (it is the one reader that must see a newcomer of
    /// higher priority soon, and there is one of it).
    pub fn registry_look(&self) -> Duration {
        self.renew_interval.min(self.registry_heartbeat)
    }

    /// How long to wait between renewal attempts after one failed: short enough
    /// that several attempts fit before the renew deadline, never longer than
    /// the retry interval.
    pub fn renew_retry_delay(&self) -> Duration {
        let window = self.renew_deadline.saturating_sub(self.renew_interval);
        (window / 4)
            .min(self.retry_interval)
            .max(Duration::from_millis(10))
    }

    /// How long every path that talks to the store (the lease, the
    /// candidates registry, the release watcher) waits after the store
    /// refused our credentials or permissions: see [`refused_backoff`].
    pub fn refused_backoff(&self) -> Duration {
        refused_backoff(self.retry_interval)
    }

    /// Time left after the renew deadline to stop the work gracefully before
    /// it must be killed. Zero when the timing leaves no room.
    pub fn stop_window(&self) -> Duration {
        self.ttl
            .saturating_sub(self.drift())
            .saturating_sub(self.kill_margin())
            .saturating_sub(self.renew_deadline)
    }
}

impl Default for Timing {
    /// PRODUCT §2's defaults, rounded to whole milliseconds as `config` does.
    fn default() -> Self {
        Timing {
            ttl: Duration::from_secs(10),
            renew_interval: Duration::from_millis(3333),
            renew_deadline: Duration::from_millis(6666),
            retry_interval: Duration::from_secs(2),
            registry_heartbeat: Duration::from_secs(120),
        }
    }
}

/// After a refusal only a person can fix (a wrong password, a missing
/// permission): five retry intervals and at least 10 s, so the mistake is
/// loud in the logs but never a hot loop, and one fact for every path that
/// talks to the store (a registry or a watcher retrying on its own schedule
/// once opened 15 to 29 connections in 12 s against a wrong password).
pub fn refused_backoff(retry_interval: Duration) -> Duration {
    (retry_interval * 5).max(Duration::from_secs(10))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_leave_room_to_stop_the_work() {
        let t = Timing::default();
        assert_eq!(t.drift(), Duration::from_millis(102));
        assert_eq!(t.kill_margin(), Duration::from_millis(500));
        assert!(t.stop_window() > Duration::from_secs(2));
    }

    #[test]
    fn validity_counts_from_the_send_instant() {
        let t = Timing::default();
        let sent = Instant::now();
        assert_eq!(t.validity_end(sent), sent + Duration::from_millis(9898));
        assert_eq!(
            t.kill_by(t.validity_end(sent)),
            sent + Duration::from_millis(9398)
        );
    }

    #[test]
    fn renew_retries_fit_before_the_deadline() {
        let t = Timing::default();
        assert!(t.renew_retry_delay() * 3 < t.renew_deadline - t.renew_interval);
    }
}
