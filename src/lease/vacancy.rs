//! The contract's rule for a lease that disappeared without a release
//! (`LeaseBackend`, "Vacancies"): deleted, revoked, evicted or unlinked from
//! outside, the previous holder may still be working, and learns of the loss
//! only at its next look at the store. A waiter takes such a lease only once
//! that holder's work must have stopped. Every holder stops its work within a
//! TTL of its last successful renewal (its guard kills by then), and that
//! renewal came before the lease vanished, so a TTL from the first sight of
//! the vacancy is always enough. It is also often too much: a lease that
//! simply expired (its holder crashed) is free at once, and a waiter that
//! looked at the lease knows when that expiry could come at the earliest.
//!
//! This module is the pure part: what a waiter remembers of the term it saw
//! held, and the verdict on a vacancy. Backends feed it what their store
//! tells (the term's token, whether a release was announced).

use std::time::Duration;
use tokio::time::Instant;

/// What a waiter remembers: the last term it saw held, and since when it has
/// seen that term's lease vacant without an announced release.
#[derive(Debug, Clone, Default)]
pub(crate) struct Vacancies {
    /// The term last seen held, and the earliest instant its lease could have
    /// expired by itself, judged from that look (the remaining TTL the store
    /// reported, counted from before the request was sent).
    seen: Option<(u64, Instant)>,
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
    /// The lease of `term` was seen held, and could not have expired by
    /// itself before `earliest_expiry`.
    pub(crate) fn saw_held(&mut self, term: u64, earliest_expiry: Instant) {
        self.seen = Some((term, earliest_expiry));
    }

    /// The lease, last held in `term`, is vacant and nobody announced its
    /// release. Free when this waiter's last look showed that term's lease
    /// would have expired by now (a holder that died); otherwise a TTL after
    /// the vacancy was first seen.
    pub(crate) fn judge(&mut self, term: u64, now: Instant, ttl: Duration) -> Verdict {
        if self
            .seen
            .is_some_and(|(seen, expiry)| seen == term && now >= expiry)
        {
            return Verdict::Free;
        }
        let since = match self.vacant {
            Some((vacant, since)) if vacant == term => since,
            _ => {
                self.vacant = Some((term, now));
                now
            }
        };
        match (since + ttl).checked_duration_since(now) {
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
        // (what was seen held: term, expiry offset), (vacant term, at), verdict
        type Row = (Option<(u64, u32)>, (u64, u32), Verdict);
        let rows: [Row; 6] = [
            // Never looked: a TTL from now.
            (None, (7, 0), Verdict::Wait(TTL)),
            // Looked, and it vanished before it could have expired: revoked.
            (Some((7, 1500)), (7, 100), Verdict::Wait(TTL)),
            // Looked, and it is gone after it would have expired: it did.
            (Some((7, 1500)), (7, 1500), Verdict::Free),
            (Some((7, 1500)), (7, 4000), Verdict::Free),
            // A later term than the one seen: nothing known of it.
            (Some((7, 0)), (8, 100), Verdict::Wait(TTL)),
            (Some((8, 0)), (7, 100), Verdict::Wait(TTL)),
        ];
        for (seen, (term, at), verdict) in rows {
            let mut v = Vacancies::default();
            if let Some((t, expiry)) = seen {
                v.saw_held(t, t0 + expiry * MS);
            }
            assert_eq!(v.judge(term, t0 + at * MS, TTL), verdict, "{seen:?} {term}");
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
    }
}
