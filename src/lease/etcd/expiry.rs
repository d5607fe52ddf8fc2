//! When another holder's term is over, on a store that deletes expired
//! keys itself: an etcd lease vanishes when it expires and when someone
//! revokes it, so a vanished key proves nothing about its holder (the
//! contract's vacancy rule). The etcd lease is granted twice the TTL: the
//! term is over by leaderd's count after the first half (its *logical*
//! expiry), and for the second the key is still there, seen expired: a
//! waiter that sees that takes it over at once, and one that finds a key
//! gone without having seen it so waits the vacancy rule.

use super::EtcdLease;
use super::term::Look;
use crate::lease::contract::{Acquire, Holder};
use crate::lease::vacancy::Verdict;
use std::time::Duration;
use tokio::time::Instant;

/// What a look at another holder's etcd lease found.
pub(super) enum Sighting {
    /// Held: its logical expiry is this far off.
    Held(Duration),
    /// Still there past its logical expiry: its holder stopped renewing.
    Expired,
    /// Gone, or unknown (a key bound to no lease).
    Gone,
}

/// How soon a waiter looks again when the lease it saw is in its last
/// second before its logical expiry (etcd counts whole seconds).
const LAST_SECOND_POLL: Duration = Duration::from_millis(100);

impl EtcdLease {
    /// How long an etcd lease outlives its term's logical expiry, so that a
    /// holder that stopped renewing is seen expired while its key is still
    /// there: a TTL (a waiter's timed look comes well within it).
    pub(super) fn grace_secs(&self) -> i64 {
        self.ttl_secs()
    }

    /// Someone else's lease: held until its logical expiry, or seen past
    /// it while its key is still there. etcd truncates the remaining TTL
    /// to whole seconds, so a reading below the grace proves the real
    /// remaining time is too: the term is over by the holder's own count.
    pub(super) async fn sight(&mut self, token: i64, lease: i64) -> Sighting {
        let Some(left) = self.time_to_live(lease).await else {
            return Sighting::Gone;
        };
        let grace = Duration::from_secs(self.grace_secs() as u64);
        if left < grace {
            self.vacancies.saw_expired(token as u64);
            return Sighting::Expired;
        }
        Sighting::Held((left - grace).max(LAST_SECOND_POLL))
    }

    /// The leader key is gone: free, unless its last term went without an
    /// announced release and its holder may still be working (the
    /// contract's vacancy rule).
    pub(super) async fn vacancy(&mut self, look: &Look) -> Option<Acquire> {
        let term = look.term.as_ref().filter(|t| !t.released)?;
        if term.token == self.spent || self.lease == Some(term.lease) {
            // Our own term: our work has stopped, or we would not be here.
            return None;
        }
        let holder = Holder {
            id: term.id.clone(),
            fencing_token: Some(term.token as u64),
        };
        // Its lease still alive: the key deleted from outside, and its
        // holder keeps working until it notices — unless the lease is past
        // its logical expiry (then its holder has stopped).
        if let Sighting::Held(left) = self.sight(term.token, term.lease).await {
            return Some(Acquire::Held {
                holder,
                expires_in: Some(left),
            });
        }
        let wait = self.timing.ttl;
        match self
            .vacancies
            .judge(term.token as u64, Instant::now(), wait)
        {
            Verdict::Free => None,
            Verdict::Wait(left) => Some(Acquire::Held {
                holder,
                expires_in: Some(left),
            }),
        }
    }
}
