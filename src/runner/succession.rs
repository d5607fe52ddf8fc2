//! Who comes first, from the registry (issue #28), as a pure rule: another
//! candidate outranks this one when its worker is healthy (or unchecked)
//! and its priority is strictly higher; equal priorities never do. A
//! standby that is outranked defers at vacancies (the machine's rule); a
//! leader hands over to the best candidate that outranks it once it has
//! seen that same candidate registered for `--handover-delay` (the new pod
//! has settled), so a rolling update moves leadership once, to the first
//! new candidate, and a candidate that comes and goes moves nothing.

use crate::config::Priority;
use crate::lease::registry::Record;
use std::time::Duration;
use tokio::time::Instant;

pub(super) struct Succession {
    me: String,
    priority: Priority,
    delay: Duration,
    /// The best candidate outranking us, and since when we see it so.
    seen: Option<(String, Instant)>,
}

/// What one reading of the registry means for this candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Verdict {
    /// How many healthy candidates of higher priority are registered.
    pub outranked: u8,
    /// Leading, and the best of them has been seen for the delay: hand over
    /// to it (its id and priority).
    pub hand_over: Option<(String, Priority)>,
}

impl Succession {
    pub(super) fn new(me: &str, priority: Priority, delay: Duration) -> Succession {
        Succession {
            me: me.to_string(),
            priority,
            delay,
            seen: None,
        }
    }

    pub(super) fn priority(&self) -> &Priority {
        &self.priority
    }

    pub(super) fn judge(&mut self, records: &[Record], leading: bool, now: Instant) -> Verdict {
        let above: Vec<&Record> = records
            .iter()
            .filter(|r| r.id != self.me && r.eligible() && r.priority > self.priority)
            .collect();
        let best = above.iter().copied().max_by(|a, b| {
            a.priority
                .cmp(&b.priority)
                .then(b.since_ms.cmp(&a.since_ms))
                .then(b.id.cmp(&a.id))
        });
        self.seen = match (best, self.seen.take()) {
            (None, _) => None,
            (Some(b), Some((id, since))) if b.id == id => Some((id, since)),
            (Some(b), _) => Some((b.id.clone(), now)),
        };
        let hand_over = match (best, &self.seen) {
            (Some(b), Some((_, since))) if leading && now.duration_since(*since) >= self.delay => {
                Some((b.id.clone(), b.priority.clone()))
            }
            _ => None,
        };
        // A successor named by the leader (`step-down --to`) comes first:
        // it defers to nobody, and everyone else defers to it.
        let named = records.iter().find_map(|r| r.successor.as_deref());
        let outranked = match named {
            Some(id) if id == self.me => 0,
            Some(_) => above.len().max(1),
            None => above.len(),
        };
        Verdict {
            outranked: u8::try_from(outranked).unwrap_or(u8::MAX),
            hand_over,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, priority: &str, healthy: Option<bool>, since_ms: u64) -> Record {
        Record {
            id: id.into(),
            priority: Priority::parse(priority).unwrap(),
            healthy,
            version: "0.1.0".into(),
            since_ms,
            successor: None,
        }
    }

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn table() {
        let t0 = Instant::now();
        let me = || Succession::new("me", Priority::parse("1.14").unwrap(), 10 * S);
        let mine = record("me", "1.14", None, 0);
        // (records, leading, after, outranked, hand over to)
        type Row = (Vec<Record>, bool, Duration, u8, Option<&'static str>);
        let rows: Vec<Row> = vec![
            // Equal priority: never.
            (
                vec![mine.clone(), record("b", "1.14.0", None, 5)],
                true,
                60 * S,
                0,
                None,
            ),
            // Lower: never.
            (
                vec![mine.clone(), record("b", "1.9", None, 5)],
                true,
                60 * S,
                0,
                None,
            ),
            // Higher but unhealthy: never.
            (
                vec![mine.clone(), record("b", "2", Some(false), 5)],
                true,
                60 * S,
                0,
                None,
            ),
            // Higher and healthy: outranked at once, handed over after the delay.
            (
                vec![mine.clone(), record("b", "1.15", Some(true), 5)],
                true,
                9 * S,
                1,
                None,
            ),
            (
                vec![mine.clone(), record("b", "1.15", None, 5)],
                true,
                10 * S,
                1,
                Some("b"),
            ),
            // A standby is outranked but hands nothing over.
            (
                vec![mine.clone(), record("b", "1.15", None, 5)],
                false,
                60 * S,
                1,
                None,
            ),
            // The best of several: highest, then longest running.
            (
                vec![
                    record("b", "1.15", None, 5),
                    record("c", "1.16", None, 9),
                    record("d", "1.16", None, 7),
                ],
                true,
                10 * S,
                3,
                Some("d"),
            ),
        ];
        for (records, leading, after, outranked, to) in rows {
            let mut s = me();
            s.judge(&records, leading, t0);
            let v = s.judge(&records, leading, t0 + after);
            assert_eq!(v.outranked, outranked, "{records:?}");
            assert_eq!(v.hand_over.map(|(id, _)| id).as_deref(), to, "{records:?}");
        }
    }

    #[test]
    fn a_named_successor_comes_first() {
        let t0 = Instant::now();
        let mut leader = record("l", "1", None, 0);
        leader.successor = Some("me".into());
        let higher = record("h", "9", None, 0);
        let records = vec![leader, higher];
        let mut me = Succession::new("me", Priority::default(), 10 * S);
        assert_eq!(me.judge(&records, false, t0).outranked, 0);
        let mut other = Succession::new("o", Priority::parse("20").unwrap(), 10 * S);
        assert_eq!(other.judge(&records, false, t0).outranked, 1);
    }

    #[test]
    fn the_delay_counts_for_one_candidate_seen_without_a_break() {
        let t0 = Instant::now();
        let mut s = Succession::new("me", Priority::default(), 10 * S);
        let b = vec![record("b", "1", None, 5)];
        let c = vec![record("c", "2", None, 5)];
        assert_eq!(s.judge(&b, true, t0).hand_over, None);
        // Another, better one appears: its own delay starts.
        assert_eq!(s.judge(&c, true, t0 + 8 * S).hand_over, None);
        assert_eq!(s.judge(&c, true, t0 + 17 * S).hand_over, None);
        // Gone for one reading: the count starts again.
        assert_eq!(s.judge(&[], true, t0 + 18 * S).hand_over, None);
        assert_eq!(s.judge(&c, true, t0 + 19 * S).hand_over, None);
        assert!(s.judge(&c, true, t0 + 29 * S).hand_over.is_some());
    }
}
