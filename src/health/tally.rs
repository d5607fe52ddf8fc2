//! Counting check results into a verdict, as a pure table-tested function:
//! unhealthy after `failures` failed checks in a row, healthy again after
//! `successes` passed ones, failures not counted during the start period.
//! Only a *change* of verdict is reported, so the runner, the logs and
//! `/leader/events` hear of a flapping check once per flip, never per check.

/// What one check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// The current verdict; `None` until the first one (a worker checked
    /// from leaderd's start is not trusted before a check has passed).
    pub healthy: Option<bool>,
    /// Consecutive results that disagree with the verdict.
    streak: u32,
    failures: u32,
    successes: u32,
}

impl Tally {
    pub fn new(healthy: Option<bool>, failures: u32, successes: u32) -> Tally {
        Tally {
            healthy,
            streak: 0,
            failures: failures.max(1),
            successes: successes.max(1),
        }
    }

    /// Counts one result; returns the new verdict when it changed.
    /// `starting`: within the start period, where failures do not count
    /// (and do not break a run of passes either).
    pub fn record(&mut self, outcome: Outcome, starting: bool) -> Option<bool> {
        let passed = outcome == Outcome::Passed;
        if !passed && starting {
            return None;
        }
        match (self.healthy, passed) {
            (Some(h), p) if h == p => {
                self.streak = 0;
                return None;
            }
            // Not yet known: the first pass is enough to trust the worker
            // (as after a start period), failures need the full count.
            (None, true) => {
                self.streak = 0;
                self.healthy = Some(true);
                return self.healthy;
            }
            _ => self.streak += 1,
        }
        let needed = if passed {
            self.successes
        } else {
            self.failures
        };
        if self.streak >= needed {
            self.streak = 0;
            self.healthy = Some(passed);
            return self.healthy;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::Outcome::{Failed as F, Passed as P};
    use super::*;

    /// Feeds `results` (with `starting` for the first `start` of them) and
    /// returns the changes reported after each.
    fn run(mut t: Tally, results: &[Outcome], start: usize) -> Vec<Option<bool>> {
        results
            .iter()
            .enumerate()
            .map(|(i, r)| t.record(*r, i < start))
            .collect()
    }

    #[test]
    fn table() {
        let s = Some(true);
        let u = Some(false);
        type Row = (Tally, Vec<Outcome>, usize, Vec<Option<bool>>);
        let cases: Vec<Row> = vec![
            // Unknown: one pass makes it healthy.
            (Tally::new(None, 3, 2), vec![P, P], 0, vec![s, None]),
            // Unknown: three failures make it unhealthy.
            (
                Tally::new(None, 3, 1),
                vec![F, F, F, P],
                0,
                vec![None, None, u, s],
            ),
            // Healthy: failures must be consecutive.
            (
                Tally::new(s, 3, 1),
                vec![F, F, P, F, F, F],
                0,
                vec![None, None, None, None, None, u],
            ),
            // Unhealthy: two passes in a row needed, a failure restarts the count.
            (
                Tally::new(u, 3, 2),
                vec![P, F, P, P],
                0,
                vec![None, None, None, s],
            ),
            // Start period: failures ignored, passes count.
            (
                Tally::new(None, 1, 1),
                vec![F, F, P, F],
                2,
                vec![None, None, s, u],
            ),
            (
                Tally::new(s, 2, 1),
                vec![F, F, F],
                2,
                vec![None, None, None],
            ),
            // failures = 1: every failure flips at once.
            (Tally::new(s, 1, 1), vec![F, P, F], 0, vec![u, s, u]),
        ];
        for (tally, results, start, expected) in cases {
            assert_eq!(
                run(tally, &results, start),
                expected,
                "{tally:?} {results:?}"
            );
        }
    }

    #[test]
    fn a_check_that_flaps_every_time_never_changes_the_verdict_with_counts_above_one() {
        let flapping: Vec<Outcome> = (0..100).map(|i| if i % 2 == 0 { F } else { P }).collect();
        let changes = run(Tally::new(Some(true), 2, 1), &flapping, 0);
        assert!(changes.iter().all(Option::is_none));
    }
}
