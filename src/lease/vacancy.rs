//! The contract's rule for a lease that disappeared without a release
//! (`LeaseBackend`, "Vacancies"): deleted, revoked, evicted, emptied or
//! unlinked from outside, the previous holder may still be working, and
//! learns of the loss only at its next look at the store. A vanished or
//! emptied record is never proof that its holder stopped: a waiter's last
//! look may be older than the holder's last renewal, which the waiter did
//! not see. Only two things free a lease at once: a release its holder
//! announced (after its work stopped), or a look that found **the same
//! term's record still present past its expiry** (the holder stopped
//! renewing, so its guard has stopped its work). Every other vacancy waits
//! until that holder's work must have stopped: each holder stops within its
//! TTL of its last successful renewal, that renewal came before the vacancy,
//! so the larger of the waiter's own TTL and the duration the holder's
//! record carried, counted from the first sight of the vacancy, is enough.
//!
//! A store that deletes expired records itself (etcd leases, Redis `PX`,
//! ZooKeeper ephemerals) must still let a waiter see a crashed holder's
//! record expired while it is there, or crash takeover would wait a TTL
//! more: each backend says how (etcd: a lease that outlives its term's
//! logical expiry by a grace).
//!
//! This module is the pure part: what a waiter remembers of the terms it
//! saw, and the verdict on a vacancy. Backends feed it what their store
//! tells (the term's token, a record seen past its expiry).

use std::time::Duration;
use tokio::time::Instant;

/// What a waiter remembers: the last term whose record it saw present past
/// its expiry, and since when it has seen a term's lease vacant without an
/// announced release.
#[derive(Debug, Clone, Default)]
pub(crate) struct Vacancies {
    /// A term whose record a look found still there after its expiry.
    expired: Option<u64>,
    /// The unannounced vacancy of a term: first seen at this instant.
    vacant: Option<(u64, Instant)>,
}

/// A waiter's verdict on a vacant lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Take it now.
    Free,
    /// Wait this long: the previous holder may still be working.
    Wait(Duration),
}

impl Vacancies {
    /// A look found the record of `term` still in the store after its
    /// expiry: its holder stopped renewing, so its work has stopped, and a
    /// vacancy of that term is free at once.
    pub(crate) fn saw_expired(&mut self, term: u64) {
        self.expired = Some(term);
    }

    /// The lease, last held in `term`, is vacant and nobody announced its
    /// release. Free when a look found that term's record present past its
    /// expiry; otherwise `wait` (the larger of this waiter's TTL and the
    /// duration the term's record carried) after the vacancy was first seen.
    pub(crate) fn judge(&mut self, term: u64, now: Instant, wait: Duration) -> Verdict {
        if self.expired == Some(term) {
            return Verdict::Free;
        }
        let since = match self.vacant {
            Some((vacant, since)) if vacant == term => since,
            _ => {
                self.vacant = Some((term, now));
                now
            }
        };
        match (since + wait).checked_duration_since(now) {
            Some(left) if !left.is_zero() => Verdict::Wait(left),
            _ => Verdict::Free,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(2);
    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn verdicts() {
        let t0 = Instant::now();
        // a term seen expired, (vacant term, at), verdict
        type Row = (Option<u64>, (u64, u32), Verdict);
        let rows: [Row; 5] = [
            // Never looked: a TTL from now.
            (None, (7, 0), Verdict::Wait(TTL)),
            // Gone, with no look that found it expired: however late, a
            // renewal this waiter never saw may have come before the delete.
            (None, (7, 4000), Verdict::Wait(TTL)),
            // Seen still there past its expiry, then gone: its holder died.
            (Some(7), (7, 0), Verdict::Free),
            // Another term's expiry says nothing of this one.
            (Some(6), (7, 100), Verdict::Wait(TTL)),
            (Some(8), (7, 100), Verdict::Wait(TTL)),
        ];
        for (expired, (term, at), verdict) in rows {
            let mut v = Vacancies::default();
            if let Some(t) = expired {
                v.saw_expired(t);
            }
            assert_eq!(
                v.judge(term, t0 + at * MS, TTL),
                verdict,
                "{expired:?} {term}"
            );
        }
    }

    #[test]
    fn the_wait_counts_from_the_first_sight_of_the_vacancy() {
        let t0 = Instant::now();
        let mut v = Vacancies::default();
        assert_eq!(v.judge(3, t0, TTL), Verdict::Wait(TTL));
        assert_eq!(v.judge(3, t0 + 500 * MS, TTL), Verdict::Wait(1500 * MS));
        assert_eq!(v.judge(3, t0 + TTL, TTL), Verdict::Free);
        // Another term's vacancy starts its own wait.
        assert_eq!(v.judge(4, t0 + TTL, TTL), Verdict::Wait(TTL));
        // A longer duration carried by the record is waited out in full.
        let mut v = Vacancies::default();
        assert_eq!(v.judge(5, t0, 15 * TTL), Verdict::Wait(15 * TTL));
    }
}
