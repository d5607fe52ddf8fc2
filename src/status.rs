//! The snapshot the runner publishes (a `watch` channel) and the HTTP
//! handlers read. Leadership is judged against the live lease at read time,
//! so `/leader` never says "leader" after the lease's local validity ended.

use crate::machine::StateName;
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use tokio::sync::broadcast;
use tokio::time::Instant;

/// The lease as we hold it: fencing token and local validity end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldLease {
    pub fencing_token: u64,
    pub valid_until: Instant,
}

/// Who holds the lease according to the last backend reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub id: Option<String>,
    pub fencing_token: Option<u64>,
    pub at: Instant,
    /// When that holder's lease runs out if not renewed; past it the
    /// observation is no longer reported.
    pub expires_at: Option<Instant>,
}

#[derive(Debug, Clone)]
pub struct Snapshot {
    pub state: StateName,
    pub state_since: SystemTime,
    /// `Some` only while working or renewing.
    pub lease: Option<HeldLease>,
    pub observed: Option<Observed>,
    pub ready: bool,
    pub shutting_down: bool,
    /// When the current term began (working or renewing since then).
    pub leading_since: Option<SystemTime>,
    /// The worker's health, where a check is configured.
    pub worker: Option<Worker>,
    /// The live records of the candidates registry, as last read.
    pub candidates: Vec<crate::lease::registry::Record>,
    /// Another process keeps a record under our id in the registry.
    pub shared_id: bool,
}

/// The worker's health as the checks last judged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worker {
    /// `None` before the first verdict (a worker not yet known healthy).
    pub healthy: Option<bool>,
    /// The last failure's reason, kept after a recovery.
    pub last_failure: Option<String>,
}

/// How long past its expiry a standby still names the holder it saw: the
/// standby looks again when the lease would expire, and its answer takes a
/// moment; without this `/leader` would say "no leader" at every look.
pub const OBSERVATION_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

impl Snapshot {
    pub fn new() -> Self {
        Snapshot {
            state: StateName::Idle,
            state_since: SystemTime::now(),
            lease: None,
            observed: None,
            ready: false,
            shutting_down: false,
            leading_since: None,
            worker: None,
            candidates: Vec::new(),
            shared_id: false,
        }
    }

    /// Leading means working or renewing on a lease still valid now.
    pub fn held_lease(&self, now: Instant) -> Option<HeldLease> {
        self.lease.filter(|l| now < l.valid_until)
    }

    /// The other holder as last observed, unless its lease has run out
    /// since (by more than [`OBSERVATION_GRACE`]).
    pub fn current_observation(&self, now: Instant) -> Option<&Observed> {
        self.observed
            .as_ref()
            .filter(|o| o.expires_at.is_none_or(|e| now < e + OBSERVATION_GRACE))
    }

    /// The body of `GET /leader` (PRODUCT §7).
    pub fn leader_view(&self, id: &str, key: &str, now: Instant) -> LeaderView {
        let held = self.held_lease(now);
        let observed = self.current_observation(now);
        let (leader, fencing_token) = match (held, observed) {
            (Some(l), _) => (Some(id.to_string()), Some(l.fencing_token)),
            (None, Some(o)) => (o.id.clone(), o.fencing_token),
            (None, None) => (None, None),
        };
        let leader_id = leader.clone();
        LeaderView {
            is_leader: held.is_some(),
            id: id.to_string(),
            key: key.to_string(),
            leader,
            fencing_token,
            state: self.state.as_str(),
            state_since: humantime::format_rfc3339_millis(self.state_since).to_string(),
            lease_remaining_ms: match (held, observed) {
                (Some(l), _) => Some(l.valid_until.duration_since(now).as_millis() as u64),
                (None, Some(o)) => o
                    .expires_at
                    .map(|e| e.saturating_duration_since(now).as_millis() as u64),
                (None, None) => None,
            },
            leader_observed_ms_ago: match held {
                Some(_) => Some(0),
                None => observed.map(|o| now.duration_since(o.at).as_millis() as u64),
            },
            leading_since: self
                .leading_since
                .filter(|_| held.is_some())
                .map(|t| humantime::format_rfc3339_millis(t).to_string()),
            // Another holder under our id, or another process's record
            // under it: two candidates share an id.
            duplicate_id: self.shared_id
                || (held.is_none() && observed.is_some_and(|o| o.id.as_deref() == Some(id))),
            backend_nodes: None,
            standby_reads: None,
            worker_healthy: self.worker.as_ref().map(|w| w.healthy.unwrap_or(false)),
            candidates: crate::lease::registry::in_order(
                self.candidates.clone(),
                leader_id.as_deref(),
            ),
            worker_last_failure: self.worker.as_ref().and_then(|w| w.last_failure.clone()),
            fence: std::collections::BTreeMap::new(),
        }
    }
}

impl Default for Snapshot {
    fn default() -> Self {
        Snapshot::new()
    }
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LeaderView {
    pub is_leader: bool,
    pub id: String,
    pub key: String,
    pub leader: Option<String>,
    pub fencing_token: Option<u64>,
    pub state: &'static str,
    pub state_since: String,
    /// Ours while leading; a standby's: the holder's, as last observed.
    pub lease_remaining_ms: Option<u64>,
    pub leader_observed_ms_ago: Option<u64>,
    /// The start of the current term; `state_since` moves at every renewal.
    pub leading_since: Option<String>,
    pub duplicate_id: bool,
    /// Redlock: how many masters answered the last lease operation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend_nodes: Option<crate::lease::Nodes>,
    /// How a standby learns its holder still holds the lease (issue #47):
    /// `watch` (no timed reads), `fallback` (its watch is down: it asks
    /// the store on a timer) or `timer` (this backend's standbys always
    /// do); absent before the first lease operation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub standby_reads: Option<crate::lease::StandbyReads>,
    /// With a health check: whether the worker is healthy now (`false`
    /// before its first pass); absent without one.
    pub worker_healthy: Option<bool>,
    /// Every registered candidate, in the order they would lead (the
    /// holder first), as this candidate last read the registry.
    pub candidates: Vec<crate::lease::registry::Record>,
    /// With a health check: the reason the checks gave when they last
    /// found the worker unhealthy (kept after it recovers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_last_failure: Option<String>,
    /// What a worker beside leaderd compares with `fencing_token` to fence
    /// its writes in the store itself (etcd: `etcd_leader_key`); absent
    /// where the store has no such compare. The child has the same as
    /// environment variables.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub fence: std::collections::BTreeMap<String, String>,
}

/// The `fence` fields of `/leader`, from the child's variables:
/// `LEADERD_ETCD_LEADER_KEY` is `etcd_leader_key`.
pub fn fence_fields(
    exports: &[(&'static str, String)],
) -> std::collections::BTreeMap<String, String> {
    exports
        .iter()
        .map(|(name, value)| {
            let field = name.strip_prefix("LEADERD_").unwrap_or(name);
            (field.to_ascii_lowercase(), value.clone())
        })
        .collect()
}

/// One entry of the `/leader/events` stream: a transition (`from`, `reason`)
/// or, first, the current state.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Change {
    /// Its place in the stream (the SSE `id:`); 0 for a state that is not a
    /// transition.
    #[serde(skip)]
    pub seq: u64,
    /// The SSE event name: `transition`, or `health` for a change of the
    /// worker's health (the state may stay the same).
    #[serde(skip)]
    pub event: &'static str,
    pub from: Option<&'static str>,
    pub state: &'static str,
    pub reason: Option<&'static str>,
    pub is_leader: bool,
    pub leader: Option<String>,
    pub fencing_token: Option<u64>,
    /// With a health check: the worker's health after this change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_healthy: Option<bool>,
    pub at: String,
}

impl Change {
    pub fn now(view: &LeaderView, from: Option<StateName>, reason: Option<&'static str>) -> Change {
        Change {
            seq: 0,
            event: "transition",
            from: from.map(StateName::as_str),
            state: view.state,
            reason,
            is_leader: view.is_leader,
            leader: view.leader.clone(),
            fencing_token: view.fencing_token,
            worker_healthy: view.worker_healthy,
            at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
        }
    }
}

/// Transitions numbered and kept a while, for `/leader/events` subscribers
/// and for those that come back with `Last-Event-ID`.
#[derive(Clone)]
pub struct Changes {
    log: Arc<Mutex<ChangeLog>>,
    live: broadcast::Sender<Change>,
}

struct ChangeLog {
    last_seq: u64,
    recent: VecDeque<Change>,
}

/// Transitions kept for resuming subscribers: a few handovers' worth.
const KEPT: usize = 64;

/// What a subscriber gets: the kept transitions after its `Last-Event-ID`
/// (`None` when some are gone: it starts afresh from the current state),
/// the sequence number of the latest one, and the live stream after it.
pub struct Subscription {
    pub missed: Option<Vec<Change>>,
    pub last_seq: u64,
    pub live: broadcast::Receiver<Change>,
}

impl Changes {
    pub fn new() -> Changes {
        // Enough for a burst of transitions; a subscriber that lags skips ahead.
        let (live, _) = broadcast::channel(KEPT);
        Changes {
            log: Arc::new(Mutex::new(ChangeLog {
                last_seq: 0,
                recent: VecDeque::with_capacity(KEPT),
            })),
            live,
        }
    }

    pub fn publish(&self, mut change: Change) {
        let mut log = self.log.lock().expect("change log lock");
        log.last_seq += 1;
        change.seq = log.last_seq;
        if log.recent.len() == KEPT {
            log.recent.pop_front();
        }
        log.recent.push_back(change.clone());
        // Under the lock, so a subscriber sees each change exactly once.
        let _ = self.live.send(change);
    }

    pub fn subscribe(&self, after: Option<u64>) -> Subscription {
        let log = self.log.lock().expect("change log lock");
        let live = self.live.subscribe();
        let oldest = log.recent.front().map_or(log.last_seq + 1, |c| c.seq);
        let missed = after
            .filter(|&after| after + 1 >= oldest && after <= log.last_seq)
            .map(|after| {
                log.recent
                    .iter()
                    .filter(|c| c.seq > after)
                    .cloned()
                    .collect()
            });
        Subscription {
            missed,
            last_seq: log.last_seq,
            live,
        }
    }
}

impl Default for Changes {
    fn default() -> Self {
        Changes::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn never_leader_after_local_validity_ends() {
        let now = Instant::now();
        let mut s = Snapshot::new();
        s.state = StateName::Working;
        s.lease = Some(HeldLease {
            fencing_token: 3,
            valid_until: now + Duration::from_secs(1),
        });
        let v = s.leader_view("me", "k", now);
        assert!(v.is_leader);
        assert_eq!(
            (v.leader.as_deref(), v.fencing_token, v.lease_remaining_ms),
            (Some("me"), Some(3), Some(1000))
        );
        let later = s.leader_view("me", "k", now + Duration::from_secs(1));
        assert!(!later.is_leader);
        assert_eq!(later.leader, None);
    }

    #[test]
    fn an_expired_observation_is_not_reported() {
        let now = Instant::now();
        let mut s = Snapshot::new();
        s.observed = Some(Observed {
            id: Some("other".into()),
            fencing_token: Some(9),
            at: now,
            expires_at: Some(now + Duration::from_secs(2)),
        });
        let v = s.leader_view("me", "k", now + Duration::from_millis(500));
        assert!(!v.duplicate_id);
        assert!(
            s.leader_view("other", "k", now).duplicate_id,
            "the holder has our id"
        );
        assert_eq!(
            (v.leader.as_deref(), v.leader_observed_ms_ago),
            (Some("other"), Some(500))
        );
        // Still named while the standby's look at expiry is answered.
        let at_expiry = s.leader_view("me", "k", now + Duration::from_millis(2500));
        assert_eq!(
            (at_expiry.leader.as_deref(), at_expiry.lease_remaining_ms),
            (Some("other"), Some(0))
        );
        assert_eq!(
            s.leader_view("me", "k", now + Duration::from_secs(2) + OBSERVATION_GRACE)
                .leader,
            None
        );
    }

    fn change(state: &'static str) -> Change {
        Change {
            seq: 0,
            event: "transition",
            from: None,
            state,
            reason: None,
            is_leader: false,
            leader: None,
            fencing_token: None,
            worker_healthy: None,
            at: String::new(),
        }
    }

    #[test]
    fn a_subscriber_resumes_from_what_is_kept_or_starts_afresh() {
        let changes = Changes::new();
        for _ in 0..KEPT + 6 {
            changes.publish(change("waiting"));
        }
        let last = (KEPT + 6) as u64;
        let resumed = changes.subscribe(Some(last - 2));
        let seqs: Vec<u64> = resumed.missed.unwrap().iter().map(|c| c.seq).collect();
        assert_eq!((seqs, resumed.last_seq), (vec![last - 1, last], last));
        // The oldest kept is 7: after 6 resumes, after 5 cannot.
        assert_eq!(
            changes.subscribe(Some(6)).missed.map(|m| m.len()),
            Some(KEPT)
        );
        assert!(changes.subscribe(Some(5)).missed.is_none());
        // An id from the future (another leaderd, a restart) starts afresh.
        assert!(changes.subscribe(Some(last + 1)).missed.is_none());
        assert!(changes.subscribe(None).missed.is_none());
        let mut live = changes.subscribe(Some(last)).live;
        changes.publish(change("acquiring"));
        assert_eq!(live.try_recv().unwrap().seq, last + 1);
    }
}
