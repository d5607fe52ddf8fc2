//! This candidate's record in the registry beside the lease: written every
//! renew interval by every candidate (so it lives while the candidate does,
//! and lapses a TTL after it dies), at once when its worker's health
//! changes, and removed on the way out; each write's answer is the live
//! records, which `/leader` lists and the metrics count.

use crate::lease::registry::{Priority, Record};
use crate::metrics::Metrics;
use crate::status::Snapshot;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;
use tokio::time::Instant;

pub(super) struct Registration {
    id: String,
    priority: Priority,
    since_ms: u64,
    every: Duration,
    /// After the store refused our credentials or permissions: the lease's
    /// own back-off (`Timing::refused_backoff`), one fact for both.
    refused: Duration,
    /// When the next write is due; `None` while one is out.
    next: Option<Instant>,
    /// The health we last wrote.
    written: Option<bool>,
    /// The successor a targeted handover names while it is under way.
    pub(super) successor: Option<String>,
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
    pub(super) fn new(
        id: &str,
        priority: Priority,
        every: Duration,
        refused: Duration,
        lapse: Duration,
    ) -> Registration {
        Registration {
            id: id.to_string(),
            priority,
            since_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            every,
            refused,
            next: Some(Instant::now()),
            written: None,
            successor: None,
            again: false,
            records: Vec::new(),
            started: Instant::now(),
            lapse,
            shared: false,
        }
    }

    /// When to write next: at the interval, or now if the worker's health
    /// changed since the last write.
    pub(super) fn due(&self, healthy: Option<bool>) -> Option<Instant> {
        let next = self.next?;
        Some(if healthy != self.written {
            Instant::now().min(next)
        } else {
            next
        })
    }

    /// The record to write now; the next is due when its answer came.
    pub(super) fn record(&mut self, healthy: Option<bool>) -> Record {
        self.next = None;
        self.written = healthy;
        Record {
            id: self.id.clone(),
            priority: self.priority.clone(),
            healthy,
            version: env!("CARGO_PKG_VERSION").to_string(),
            since_ms: self.since_ms,
            successor: self.successor.clone(),
            instance: crate::lease::registry::instance().to_string(),
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
    pub(super) fn answered(
        &mut self,
        result: Result<Vec<Record>, crate::lease::Error>,
        status: &watch::Sender<Snapshot>,
        metrics: &Metrics,
    ) -> Option<Vec<Record>> {
        let wait = match &result {
            Err(e) if e.needs_a_person() => self.refused,
            _ if std::mem::take(&mut self.again) => Duration::ZERO,
            _ => self.every,
        };
        self.next = Some(Instant::now() + wait);
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
