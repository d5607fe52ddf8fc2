//! What a candidate knows of the Lease, and since when: the observer's
//! clock of client-go (another holder's lease expires `leaseDurationSeconds`
//! after *this* candidate first saw the record in that form, on its own
//! monotonic clock, never by comparing `renewTime` with the local wall
//! clock), fed by every look — the lease worker's GETs, dated when the
//! answer came, and every event of the watch, dated when it arrived. A
//! standby on a healthy watch so sees each renewal as it happens: a holder
//! that stops renewing is past its expiry a duration after its last
//! renewal, not a duration after the standby's last timed read.
//!
//! Pure but for the lock it lives behind ([`Shared`]), which the watch task
//! and the lease worker share. Looks are ordered by `resourceVersion`: an
//! answer older than what was already seen changes nothing.

use super::record::{Seen, revision};
use k8s_openapi::api::coordination::v1::Lease;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

/// The record last seen present, and since when in that form.
#[derive(Debug, Clone)]
pub(super) struct Sight {
    pub(super) lease: Lease,
    pub(super) seen: Seen,
    pub(super) since: Instant,
}

/// Everything looked at so far.
#[derive(Debug, Clone, Default)]
pub(super) struct Observer {
    /// The record last seen present.
    last: Option<Sight>,
    /// The last record seen with a holder (the term a vacancy is of).
    held: Option<Sight>,
    /// The latest look found no object (deleted) after `last`.
    gone: bool,
    /// The highest `resourceVersion` seen: older answers are ignored.
    version: u64,
    /// The longest duration any record of a term carried: a duration
    /// shortened from outside does not shorten the wait for that term.
    longest: Option<(u64, Duration)>,
    /// The watch is following the Lease: it delivered the object's state
    /// since it (re)started, and has not ended since.
    live: bool,
}

impl Observer {
    /// A look at the object (`None`: absent) at `at`.
    pub(super) fn look(&mut self, lease: Option<&Lease>, at: Instant) {
        let Some(lease) = lease else {
            self.gone = true;
            return;
        };
        let version = revision(lease).unwrap_or(0);
        if version != 0 && version < self.version {
            return;
        }
        self.version = self.version.max(version);
        self.gone = false;
        let seen = Seen::of(lease);
        let term = seen.term();
        let longest = match self.longest {
            Some((t, d)) if t == term => d.max(seen.duration),
            _ => seen.duration,
        };
        self.longest = Some((term, longest));
        // The same record, unless it was written again meanwhile: a copy
        // put back (an old term's record, after others this candidate did
        // not see) looks like the last sight but is a new write, counted
        // from now, like any change.
        let rewritten = |last: &Sight| {
            let before = revision(&last.lease).unwrap_or(0);
            before != 0 && version != 0 && before != version
        };
        match &mut self.last {
            Some(last) if last.seen == seen && !rewritten(last) => last.lease = lease.clone(),
            _ => {
                self.last = Some(Sight {
                    lease: lease.clone(),
                    seen,
                    since: at,
                })
            }
        }
        if let Some(last) = self.last.as_ref().filter(|l| l.seen.holder.is_some()) {
            self.held = Some(last.clone());
        }
    }

    /// The object was deleted (a watch event; a GET that found nothing is a
    /// [`Observer::look`] at `None`).
    pub(super) fn deleted(&mut self, version: Option<u64>) {
        if let Some(v) = version {
            self.version = self.version.max(v);
        }
        self.gone = true;
    }

    pub(super) fn set_live(&mut self, live: bool) {
        self.live = live;
    }

    pub(super) fn live(&self) -> bool {
        self.live
    }

    /// The record last seen, when the object was there at the latest look.
    pub(super) fn present(&self) -> Option<&Sight> {
        self.last.as_ref().filter(|_| !self.gone)
    }

    /// The last record seen with a holder, present or since deleted or
    /// emptied: the term a vacancy is of.
    pub(super) fn last_held(&self) -> Option<&Sight> {
        self.held.as_ref()
    }

    /// How long the term of `seen` is waited for: the longest duration a
    /// record of it carried, and never less than `floor`.
    pub(super) fn wait_for(&self, seen: &Seen, floor: Duration) -> Duration {
        let longest = match self.longest {
            Some((t, d)) if t == seen.term() => d,
            _ => Duration::ZERO,
        };
        seen.duration.max(longest).max(floor)
    }

    /// How long until `seen`'s lease expires by this observer's clock (zero:
    /// expired), when it is the record present and someone holds it;
    /// `None` when the Lease changed since (a newer look showed another
    /// record, or none), so nothing may be judged of `seen`.
    pub(super) fn left_of(&self, seen: &Seen, now: Instant, floor: Duration) -> Option<Duration> {
        self.present().filter(|s| s.seen == *seen)?;
        self.left(now, floor)
    }

    /// How long until the present record's lease expires by this observer's
    /// clock (zero: expired; `None`: absent, or nobody holds it).
    pub(super) fn left(&self, now: Instant, floor: Duration) -> Option<Duration> {
        let sight = self.present()?;
        sight.seen.holder.as_ref()?;
        let wait = self.wait_for(&sight.seen, floor);
        Some((sight.since + wait).saturating_duration_since(now))
    }
}

/// The observer behind the lock the watch task and the lease worker share.
#[derive(Debug, Clone, Default)]
pub(super) struct Shared(Arc<Mutex<Observer>>);

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, Observer> {
        // A panic while holding it leaves a consistent Observer (every
        // method writes whole fields), so a poisoned lock is still usable.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
#[path = "observe_tests.rs"]
mod tests;
