//! A candidate's priority (`--priority`): an integer or a dotted version,
//! compared component by component. The candidates registry carries it,
//! and a leader hands over to a healthy candidate of higher priority.

mod options;

pub use options::{FEATURE, HANDOVER_DELAY, PRIORITY, Ranking};

use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::fmt;

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
}
