//! The candidates registry (issue #28): every candidate keeps a record
//! beside the lease — its id, priority, worker health, leaderd version and
//! since when it runs — that expires like a lease unless it is written again,
//! so candidates, `status` and `/leader` know who stands by. Pure: the
//! record, the priority and the order candidates would lead in; each backend
//! stores records its own way ([`super::LeaseBackend::register`]).

use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::fmt;

/// One candidate's record, as stored (JSON) and as `/leader` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
}

impl Record {
    /// A candidate leads only with a healthy worker, or none checked.
    pub fn eligible(&self) -> bool {
        self.healthy != Some(false)
    }
}

/// A priority: an integer or a dotted version (`1.14.2`), compared
/// component by component, missing components counting as 0 (`1.14` is
/// `1.14.0`). Higher leads.
#[derive(Debug, Clone, Default)]
pub struct Priority {
    /// The components, trailing zeros dropped (`1.14.0` is `1.14`).
    parts: Vec<u64>,
    /// As given, for display.
    text: String,
}

impl Priority {
    pub fn parse(text: &str) -> Result<Priority, String> {
        let text = text.trim().strip_prefix('v').unwrap_or(text.trim());
        let hint = "give an integer (10) or a dotted version (1.14.2); a suffix such as -rc1 or +build is not comparable, leave it out";
        if text.is_empty() {
            return Err(format!("the priority is empty; {hint}"));
        }
        let parts = text
            .split('.')
            .map(|p| {
                (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| p.parse::<u64>().ok())
                    .flatten()
            })
            .collect::<Option<Vec<u64>>>()
            .ok_or_else(|| format!("`{text}` is not a priority; {hint}"))?;
        if parts.len() > 8 {
            return Err(format!("`{text}` has more than 8 components; {hint}"));
        }
        let mut parts = parts;
        while parts.last() == Some(&0) {
            parts.pop();
        }
        Ok(Priority {
            parts,
            text: text.to_string(),
        })
    }
}

impl Ord for Priority {
    /// Component by component; with trailing zeros dropped, a shorter
    /// version that agrees so far is the smaller (`1.14` < `1.14.2`).
    fn cmp(&self, other: &Self) -> Ordering {
        self.parts.cmp(&other.parts)
    }
}

impl PartialEq for Priority {
    fn eq(&self, other: &Self) -> bool {
        self.parts == other.parts
    }
}

impl Eq for Priority {}

impl PartialOrd for Priority {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.text.is_empty() {
            "0"
        } else {
            &self.text
        })
    }
}

impl Serialize for Priority {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Priority {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Priority::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// The records in the order the candidates would lead: the holder first,
/// then those whose worker is healthy (or unchecked), by priority (highest
/// first), then the longest running, then by id.
/// One record per id: a candidate started again under its id (its old
/// record not yet lapsed) counts once, as the newest.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Priority {
        Priority::parse(text).unwrap()
    }

    #[test]
    fn priorities_compare_component_by_component() {
        assert!(p("1.14.2") > p("1.14"));
        assert!(p("1.14") == p("1.14.0"));
        assert!(p("1.10") > p("1.9.9"));
        assert!(p("2") > p("1.99"));
        assert!(p("10") > p("9"));
        assert!(p("v1.2.3") == p("1.2.3"));
        assert_eq!(p("0").to_string(), "0");
        assert_eq!(Priority::default(), p("0"));
        assert_eq!(p("1.14.2").to_string(), "1.14.2");
        for bad in [
            "",
            "1.14.2-rc1",
            "1..2",
            "a",
            "-1",
            "1.2.3+build",
            "1.2.3.4.5.6.7.8.9",
        ] {
            let err = Priority::parse(bad).unwrap_err();
            assert!(
                err.contains("priority") || err.contains("components"),
                "{bad}: {err}"
            );
        }
    }

    fn record(id: &str, priority: &str, healthy: Option<bool>, since_ms: u64) -> Record {
        Record {
            id: id.into(),
            priority: p(priority),
            healthy,
            version: "0.1.0".into(),
            since_ms,
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
