//! The candidates registry (issue #28): every candidate keeps a record
//! beside the lease — its id, priority, worker health, leaderd version and
//! since when it runs — that expires like a lease unless it is written again,
//! so candidates, `status` and `/leader` know who stands by. Pure: the
//! record, the priority and the order candidates would lead in; each backend
//! stores records its own way ([`super::LeaseBackend::register`]); those
//! that stamp a record with its expiry on the writer's wall clock (the lock
//! file, etcd, Kubernetes) judge it with [`Stamp`].

pub use crate::priority::Priority;
use serde::{Deserialize, Serialize};

/// One candidate's record, as stored (JSON) and as `/leader` lists it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub id: String,
    /// `--priority` as given: an integer or a dotted version.
    #[serde(default)]
    pub priority: Priority,
    /// The worker's health where a check is configured; `None` without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy: Option<bool>,
    /// The leaderd version the candidate runs.
    #[serde(default)]
    pub version: String,
    /// When the candidate started, in ms since the Unix epoch.
    #[serde(default)]
    pub since_ms: u64,
    /// A leader handing the lease to a named candidate (`step-down --to`):
    /// the others let that one lead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub successor: Option<String>,
    /// The writing process, random per run ([`instance`]): two live
    /// records with one id and two instances are two processes sharing an
    /// id. Empty in an older leaderd's record.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub instance: String,
    /// Written while its candidate leads. A live candidate rewrites its
    /// record at once when its term ends, so a record that still says so
    /// while another leads is a dead leader's, kept until it lapses (a
    /// heartbeat-slow registry keeps it minutes, issue #47): nobody hands
    /// over to it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub leads: bool,
}

/// This process's instance: 8 random hex digits, drawn once per run.
pub fn instance() -> &'static str {
    static INSTANCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    INSTANCE.get_or_init(|| {
        let mut bytes = [0u8; 4];
        getrandom::fill(&mut bytes).expect("the OS random source is available on Linux");
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    })
}

/// The name this process's record is kept under in the registry: its id
/// and its instance, so two processes sharing an id keep two records and
/// each sees the other's ([`Record::instance`]).
pub fn entry(id: &str) -> String {
    format!("{id}.{}", instance())
}

/// Whether `records` hold a record of another process under `id`.
pub fn shared(records: &[Record], id: &str) -> bool {
    records
        .iter()
        .any(|r| r.id == id && !r.instance.is_empty() && r.instance != instance())
}

impl Record {
    /// A candidate leads only with a healthy worker, or none checked.
    pub fn eligible(&self) -> bool {
        self.healthy != Some(false)
    }
}

/// The records in the order the candidates would lead: the holder first,
/// then those whose worker is healthy (or unchecked), by priority (highest
/// first), then the longest running, then by id. One record per id: a
/// candidate started again under its id (its old record not yet lapsed)
/// counts once, as the newest.
pub fn in_order(mut records: Vec<Record>, holder: Option<&str>) -> Vec<Record> {
    records.sort_by(|a, b| a.id.cmp(&b.id).then(b.since_ms.cmp(&a.since_ms)));
    records.dedup_by(|later, kept| later.id == kept.id);
    records.sort_by(|a, b| {
        let held = |r: &Record| Some(r.id.as_str()) == holder;
        held(b)
            .cmp(&held(a))
            .then(b.eligible().cmp(&a.eligible()))
            .then(b.priority.cmp(&a.priority))
            .then(a.since_ms.cmp(&b.since_ms))
            .then(a.id.cmp(&b.id))
    });
    records
}

/// Records read from the store: those that parse, the rest skipped (a
/// newer or older leaderd's, or something else written there).
pub fn parse_all<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Vec<Record> {
    values
        .into_iter()
        .filter_map(|v| serde_json::from_slice(v).ok())
        .collect()
}

/// A record's expiry on the writers' wall clock, in ms since the Unix
/// epoch: the registries whose store has no expiry of its own (the lock
/// file, etcd's keys, the Kubernetes object's annotations) stamp each
/// record with it, and judge it by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp(pub u64);

/// Where a stamped record stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Age {
    /// Before its expiry: listed.
    Live,
    /// Past it, but within the slack: not listed, not yet removed (the
    /// clocks of two writers may disagree by that much).
    Lapsed,
    /// Past its expiry by more than the slack: its candidate is gone, and
    /// any writer may remove it.
    Gone,
}

impl Stamp {
    /// The wall clock now.
    pub fn now() -> Stamp {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Stamp(ms)
    }

    /// A record written at `self` that lapses after `lapse`
    /// ([`crate::timing::Timing::registry_lapse`]).
    pub fn plus(self, lapse: std::time::Duration) -> Stamp {
        Stamp(self.0 + lapse.as_millis() as u64)
    }

    /// Where a record expiring at `self` stands at `now`, with `slack`.
    pub fn age(self, slack: std::time::Duration, now: Stamp) -> Age {
        if self.0 > now.0 {
            Age::Live
        } else if self.plus(slack).0 < now.0 {
            Age::Gone
        } else {
            Age::Lapsed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_is_live_before_its_expiry_lapsed_within_the_slack_and_gone_after() {
        let slack = std::time::Duration::from_millis(100);
        let expiry = Stamp(1_000);
        assert_eq!(expiry.age(slack, Stamp(999)), Age::Live);
        assert_eq!(expiry.age(slack, Stamp(1_000)), Age::Lapsed);
        assert_eq!(expiry.age(slack, Stamp(1_100)), Age::Lapsed);
        assert_eq!(expiry.age(slack, Stamp(1_101)), Age::Gone);
        assert_eq!(Stamp(5).plus(slack), Stamp(105));
    }

    fn p(text: &str) -> Priority {
        Priority::parse(text).unwrap()
    }

    fn record(id: &str, priority: &str, healthy: Option<bool>, since_ms: u64) -> Record {
        Record {
            id: id.into(),
            priority: p(priority),
            healthy,
            version: "0.1.0".into(),
            since_ms,
            successor: None,
            instance: String::new(),
            leads: false,
        }
    }

    #[test]
    fn the_holder_first_then_healthy_by_priority_then_seniority() {
        let records = vec![
            record("old", "1.2", None, 1),
            record("sick", "9", Some(false), 0),
            record("new", "1.3", Some(true), 5),
            record("holder", "1.0", None, 9),
            record("peer", "1.2", None, 1),
            record("peer", "1.2", None, 0),
        ];
        let order: Vec<String> = in_order(records, Some("holder"))
            .into_iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(order, ["holder", "new", "old", "peer", "sick"]);
    }

    #[test]
    fn another_instance_under_our_id_is_a_second_process() {
        let mine = Record {
            instance: instance().to_string(),
            ..record("web-0", "1", None, 1)
        };
        let other = Record {
            instance: "0badc0de".into(),
            ..record("web-0", "1", None, 2)
        };
        let older = record("web-0", "1", None, 3);
        let peer = Record {
            instance: "0badc0de".into(),
            ..record("web-1", "1", None, 1)
        };
        assert!(!shared(&[mine.clone(), peer.clone()], "web-0"));
        // An older leaderd's record says nothing of its process.
        assert!(!shared(&[mine.clone(), older], "web-0"));
        assert!(shared(&[mine, other, peer], "web-0"));
        assert_eq!(instance().len(), 8);
        assert_eq!(entry("web-0"), format!("web-0.{}", instance()));
    }

    #[test]
    fn records_round_trip_and_foreign_ones_are_skipped() {
        let r = record("a", "1.14.2", Some(true), 7);
        let json = serde_json::to_vec(&r).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&json),
            r#"{"id":"a","priority":"1.14.2","healthy":true,"version":"0.1.0","since_ms":7}"#
        );
        let parsed = parse_all([json.as_slice(), b"not json", br#"{"id":"b"}"#]);
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[0], r);
        assert_eq!(parsed[1].priority, Priority::default());
    }
}
