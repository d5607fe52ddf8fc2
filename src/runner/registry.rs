//! This candidate's record in the registry beside the lease (issue #47):
//! written at once when it changes (start, worker health, a term begun or
//! ended, a named successor), otherwise every heartbeat — so the
//! registry's idle load is one write per candidate per heartbeat, not one
//! per candidate per renew interval — and removed on the way out. A record
//! lapses two heartbeats after its last write. Each write's answer is the
//! live records, which `/leader` lists and the metrics count; the leader,
//! the one that must see a newcomer of higher priority soon, also reads
//! them every renew interval (a read, not a write). A standby woken by a
//! release reads them first, so it defers to a newcomer of higher priority
//! or to a named successor it has not seen yet.

use super::worker::Registered;
use crate::lease::registry::{Priority, Record};
use crate::metrics::Metrics;
use crate::status::Snapshot;
use crate::timing::Timing;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;
use tokio::time::Instant;

/// `d` and up to a quarter more, at random: candidates started together (a
/// rollout, a fleet restarted) would otherwise write together at every
/// heartbeat, and retry together after a store too busy to answer them
/// all in time (100 candidates started at once on one Lease object were
/// measured at 3.7 registry writes/s where their heartbeats make 0.8).
/// Two heartbeats' lapse still covers the longest interval and a retry.
fn spread(d: Duration) -> Duration {
    let mut byte = [0u8; 1];
    let quarter = getrandom::fill(&mut byte).map_or(0, |_| u32::from(byte[0]));
    d + d / 4 * quarter / 255
}

/// What [`Registration::take_due`] found due.
pub(super) enum Due {
    Write(Record),
    Read,
}

pub(super) struct Registration {
    id: String,
    priority: Priority,
    since_ms: u64,
    timing: Timing,
    /// After the store refused our credentials or permissions: the lease's
    /// own back-off (`Timing::refused_backoff`), one fact for both.
    refused: Duration,
    /// When the next write is due; `None` while one is out.
    next: Option<Instant>,
    /// While leading: when the leader reads the records next.
    look_at: Option<Instant>,
    /// The health we last wrote, and whether we led then.
    written: Option<bool>,
    written_leading: bool,
    /// A read of the records is out.
    pub(super) reading: bool,
    /// The successor a targeted handover names while it is under way, and
    /// after the release until when it is still named: the standbys the
    /// release wakes read the records after it, and must find the name.
    successor: Option<(String, Option<Instant>)>,
    /// The record changed while a write was out: write again at once.
    again: bool,
    /// Everyone's records, as the last answered write returned them.
    pub(super) records: Vec<Record>,
    /// When this process started, and how long a dead process's record may
    /// still be listed: another instance's record under our id counts only
    /// once we have run longer than that (a record of the process we
    /// replaced, killed before it could remove it, is no second process).
    started: Instant,
    lapse: Duration,
    /// Whether another process keeps a record under our id, as last said.
    shared: bool,
}

impl Registration {
    pub(super) fn new(id: &str, priority: Priority, timing: Timing) -> Registration {
        Registration {
            id: id.to_string(),
            priority,
            since_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            timing,
            refused: timing.refused_backoff(),
            next: Some(Instant::now()),
            look_at: None,
            written: None,
            written_leading: false,
            reading: false,
            successor: None,
            again: false,
            records: Vec::new(),
            started: Instant::now(),
            // A process we replaced, killed before it could remove its
            // record, is listed for a lapse after its last write.
            lapse: timing.registry_lapse() + timing.ttl,
            shared: false,
        }
    }

    /// When to write or read next (`None`: a write is out).
    pub(super) fn due(
        &self,
        healthy: Option<bool>,
        leading: bool,
        now: Instant,
    ) -> Option<Instant> {
        let write = self.write_at(healthy, leading, now)?;
        Some(self.look(leading).map_or(write, |look| look.min(write)))
    }

    /// What is due at `now`, if anything: a write (of the record
    /// returned), or the leader's read.
    pub(super) fn take_due(
        &mut self,
        healthy: Option<bool>,
        leading: bool,
        now: Instant,
    ) -> Option<Due> {
        if self.write_at(healthy, leading, now)? <= now {
            return Some(Due::Write(self.record(healthy, leading)));
        }
        if self.look(leading).is_some_and(|look| look <= now) {
            self.look_at = None;
            self.reading = true;
            return Some(Due::Read);
        }
        None
    }

    /// When to write next: every heartbeat, or `now` if the worker's health
    /// or whether we lead changed since the last write, or a successor's
    /// name is to go. (`now` is the caller's: a later reading of the clock
    /// would never be due by the caller's `now`.)
    fn write_at(&self, healthy: Option<bool>, leading: bool, now: Instant) -> Option<Instant> {
        let next = self.next?;
        let unnamed = self.successor.as_ref().and_then(|(_, until)| *until);
        Some(
            if healthy != self.written || leading != self.written_leading {
                now.min(next)
            } else {
                unnamed.map_or(next, |u| u.min(next))
            },
        )
    }

    /// The leader's next read, unless one is out.
    fn look(&self, leading: bool) -> Option<Instant> {
        self.look_at.filter(|_| leading && !self.reading)
    }

    /// The record to write now; the next is due when its answer came.
    fn record(&mut self, healthy: Option<bool>, leading: bool) -> Record {
        if let Some((_, Some(until))) = &self.successor
            && *until <= Instant::now()
        {
            self.successor = None;
        }
        self.next = None;
        self.written = healthy;
        self.written_leading = leading;
        Record {
            id: self.id.clone(),
            priority: self.priority.clone(),
            healthy,
            version: env!("CARGO_PKG_VERSION").to_string(),
            since_ms: self.since_ms,
            successor: self.successor.as_ref().map(|(to, _)| to.clone()),
            instance: crate::lease::registry::instance().to_string(),
            leads: leading,
        }
    }

    /// Names `to` as our successor (`step-down --to`), written at once.
    pub(super) fn name_successor(&mut self, to: String) {
        self.successor = Some((to, None));
        self.soon();
    }

    /// The handover is due: the name stays until `until`, long enough for
    /// the standbys the release wakes to read it, then goes.
    pub(super) fn successor_named_until(&mut self, until: Instant) {
        if let Some((_, end)) = &mut self.successor {
            *end = Some(until);
        }
    }

    /// Writes again at once (the record changed), or as soon as the write
    /// that is out has been answered.
    pub(super) fn soon(&mut self) {
        match self.next {
            Some(_) => self.next = Some(Instant::now()),
            None => self.again = true,
        }
    }

    /// The answer: the live records, or why there are none this time (a
    /// backend error is the lease operations' to report; logged at DEBUG).
    /// `wrote`: the answer to a write (the next is scheduled from it), not
    /// to a read.
    pub(super) fn answered(
        &mut self,
        answer: Registered,
        (leading, now): (bool, Instant),
        status: &watch::Sender<Snapshot>,
        metrics: &Metrics,
    ) -> Option<Vec<Record>> {
        let Registered { result, wrote } = answer;
        // The leader reads again a renew interval after any answer.
        self.look_at = leading.then(|| now + self.timing.registry_look());
        if wrote {
            let wait = match &result {
                Err(e) if e.needs_a_person() => self.refused,
                // A transient failure: soon, not a heartbeat later, or the
                // record could lapse before the next try.
                Err(_) => spread(
                    self.timing
                        .retry_interval
                        .min(self.timing.registry_heartbeat),
                ),
                _ if std::mem::take(&mut self.again) => Duration::ZERO,
                _ => spread(self.timing.registry_heartbeat),
            };
            self.next = Some(now + wait);
        } else {
            self.reading = false;
        }
        match result {
            Ok(records) => {
                // One per id: a process started again under its id (the
                // old one's record not yet lapsed) counts once.
                metrics.candidates(crate::lease::registry::in_order(records.clone(), None).len());
                let shared = self.started.elapsed() > self.lapse
                    && crate::lease::registry::shared(&records, &self.id);
                self.notice_shared(shared);
                status.send_modify(|s| {
                    s.candidates = records.clone();
                    s.shared_id = shared;
                });
                self.records = records.clone();
                Some(records)
            }
            Err(e) => {
                tracing::debug!(error = %e, "registration failed; written again at the next interval");
                None
            }
        }
    }

    /// Says once per change that another process keeps a record under our
    /// id, and when it no longer does.
    fn notice_shared(&mut self, shared: bool) {
        if shared == std::mem::replace(&mut self.shared, shared) {
            return;
        }
        if shared {
            tracing::error!(
                id = %self.id,
                "another process keeps a candidate record under this instance's id: give every candidate a unique --id (in Kubernetes, the pod name)"
            );
        } else {
            tracing::info!(id = %self.id, "no other process keeps a record under this instance's id any more");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer() -> Registered {
        Registered {
            result: Ok(Vec::new()),
            wrote: true,
        }
    }

    /// The schedule (issue #47): a write at start and whenever the record
    /// changes, else one per heartbeat; while leading, a read every renew
    /// interval in between; a standby reads nothing on its own.
    #[test]
    fn writes_on_change_and_at_the_heartbeat_and_the_leader_reads_between() {
        let timing = Timing::default(); // renew 3.333 s, heartbeat 120 s
        let (status, _) = watch::channel(Snapshot::new());
        let metrics = Metrics::new("k");
        let mut r = Registration::new("me", Priority::default(), timing);
        let t0 = Instant::now();
        assert!(matches!(r.take_due(None, false, t0), Some(Due::Write(_))));
        assert_eq!(r.due(None, false, t0), None, "nothing while a write is out");
        r.answered(answer(), (false, t0), &status, &metrics);
        // A standby: the heartbeat (and up to a quarter more), nothing before.
        let due = r.due(None, false, t0).expect("a write is due");
        let beat = timing.registry_heartbeat;
        assert!(due >= t0 + beat && due <= t0 + beat * 5 / 4);
        assert!(
            r.take_due(None, false, t0 + Duration::from_secs(60))
                .is_none()
        );
        // Its term begins: written at once, then read every renew interval.
        let now = t0 + Duration::from_secs(70);
        let Some(Due::Write(me)) = r.take_due(None, true, now) else {
            panic!("a term's start is written at once");
        };
        assert!(me.leads);
        r.answered(answer(), (true, now), &status, &metrics);
        let look = r.due(None, true, now);
        assert_eq!(look, Some(now + timing.renew_interval));
        let look = look.expect("a read is due");
        assert!(matches!(r.take_due(None, true, look), Some(Due::Read)));
        assert!(
            r.due(None, true, look)
                .is_some_and(|d| d >= now + timing.registry_heartbeat),
            "no second read while one is out"
        );
        // A health change is written at once.
        assert_eq!(r.due(Some(false), true, look), Some(look));
        // A failed write is tried again within a retry interval (and a
        // quarter), not a heartbeat later.
        let failed = Registered {
            result: Err(crate::lease::Error::Connection {
                backend: "x".into(),
                detail: "refused".into(),
            }),
            wrote: true,
        };
        assert!(matches!(
            r.take_due(Some(false), true, look),
            Some(Due::Write(_))
        ));
        r.answered(failed, (true, look), &status, &metrics);
        let retry = r.due(Some(false), true, look).expect("a retry is due");
        assert!(
            retry <= look + timing.retry_interval * 5 / 4,
            "{:?}",
            retry - look
        );
    }
}
