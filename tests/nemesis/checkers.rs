//! The nemesis's checkers: pure functions of a [`History`], each returning
//! its verdict and its figure. `--sanity` plants a violation for each and
//! shows that it fails.
//!
//! - C1: never two children alive at once, from the children's own
//!   timestamps (a child killed with SIGKILL writes no stop line: its end
//!   is the first of its pidfd, `/proc` and lock evidence), from `/proc`
//!   samples, and from an exclusive `flock` each child tries at birth.
//! - C2: fencing tokens strictly increase in child-start order (with the
//!   default `--on-child-exit release`, every child is a new term).
//! - C3: `/leader` never answers 200 on two candidates over one interval: a
//!   candidate surely leads from the reception of the first 200 of a streak
//!   (200s with no other answer, and no question left unanswered, between
//!   them: a candidate frozen in between may have lost and won again) to
//!   the sending of its last, and no two such intervals meet.
//! - C4: after the last fault heals, a leader within the bound.
//! - C5: nothing left running at the end.
//! - C6: while a fault the store tolerates is in force, alone, no stretch
//!   without a leader longer than its bound.
//! - C7: a fault the store rides out without a failover of its own (one
//!   Redlock master, a sentinel, a follower frozen), alone, costs the
//!   leader nothing: the child alive at its start is still alive at its
//!   end (the same term; every child is a term of its own).

use crate::history::{Answer, History, Life};
use std::time::Duration;

/// One checker's verdict and the figure it measured.
#[derive(Debug, Clone)]
pub struct Verdict {
    pub name: &'static str,
    pub ok: bool,
    pub figure: String,
}

/// What every checker said, and the figures of the summary line.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub verdicts: Vec<Verdict>,
    pub overlap_ms: f64,
    pub token_regressions: usize,
    pub dual_leaders: usize,
    pub terms: usize,
    pub handovers: usize,
    pub longest_leaderless_ms: f64,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.verdicts.iter().all(|v| v.ok)
    }
}

fn ms(ns: u128) -> f64 {
    ns as f64 / 1e6
}

/// The end of each child's life: its stop line; else the earliest of its
/// death seen by a pidfd, the first `/proc` sample after its start without
/// it, and the next child to find the `--exclusive` lock free after it
/// held it (each of them noticed after the fact, the lock by the kernel
/// itself); else the end of the run.
fn ends(history: &History, end_of_run: u128) -> Vec<(u128, u128, &Life)> {
    let frees: Vec<u128> = history
        .lives
        .iter()
        .filter_map(|l| l.exclusive.filter(|e| e.1).map(|e| e.0))
        .collect();
    history
        .lives
        .iter()
        .map(|life| {
            let died = history
                .deaths
                .iter()
                .find(|(pid, when)| *pid == life.pid && *when > life.start)
                .map(|(_, when)| *when);
            let unseen = history
                .samples
                .iter()
                .find(|(when, alive)| *when > life.start && !alive.contains(&life.pid))
                .map(|(when, _)| *when);
            let next_free = life
                .exclusive
                .filter(|e| e.1)
                .and_then(|(held, _)| frees.iter().filter(|t| **t > held).min().copied());
            let end = life.stop.unwrap_or_else(|| {
                [died, unseen, next_free]
                    .into_iter()
                    .flatten()
                    .min()
                    .unwrap_or(end_of_run)
            });
            (life.start, end, life)
        })
        .collect()
}

/// The longest time two children were alive at once, and when it began.
pub fn worst_overlap(history: &History, end_of_run: u128) -> (u128, Option<u128>) {
    let spans = ends(history, end_of_run);
    let (mut overlap, mut at) = (0, None);
    for (i, a) in spans.iter().enumerate() {
        for b in &spans[i + 1..] {
            let from = a.0.max(b.0);
            let to = a.1.min(b.1);
            if to > from && to - from > overlap {
                (overlap, at) = (to - from, Some(from));
            }
        }
    }
    (overlap, at)
}

/// C1 by each of its three measures.
#[derive(Debug, Clone, Copy)]
pub struct Overlaps {
    /// The longest two children were alive at once by their own lines, ns.
    pub longest: u128,
    /// The most probe children alive in one `/proc` sample.
    pub most_alive: usize,
    /// Children that found the `--exclusive` lock held at birth.
    pub busy: usize,
}

impl Overlaps {
    pub fn of(history: &History, end_of_run: u128) -> Overlaps {
        Overlaps {
            longest: worst_overlap(history, end_of_run).0,
            most_alive: history
                .samples
                .iter()
                .map(|(_, a)| a.len())
                .max()
                .unwrap_or(0),
            busy: history
                .lives
                .iter()
                .filter(|l| l.exclusive.is_some_and(|e| !e.1))
                .count(),
        }
    }

    /// Whether every measure saw an overlap (what `--sanity` requires).
    pub fn all_saw(&self) -> bool {
        self.longest > 0 && self.most_alive > 1 && self.busy > 0
    }
}

/// When the first child that found the `--exclusive` lock held was born.
pub fn first_busy(history: &History) -> Option<u128> {
    history
        .lives
        .iter()
        .filter(|l| l.exclusive.is_some_and(|e| !e.1))
        .map(|l| l.start)
        .min()
}

/// C1: the longest time two children were alive at once by their own
/// lines, the most alive in one `/proc` sample, and the children that found
/// an earlier one still holding the lock.
pub fn c1(history: &History, end_of_run: u128) -> (Verdict, f64) {
    let o = Overlaps::of(history, end_of_run);
    let ok = o.longest == 0 && o.most_alive <= 1 && o.busy == 0;
    (
        Verdict {
            name: "C1 one child at a time",
            ok,
            figure: format!(
                "max overlap {:.1} ms, most alive in one /proc sample {}, born beside a live one (lock) {}",
                ms(o.longest),
                o.most_alive,
                o.busy
            ),
        },
        ms(o.longest),
    )
}

/// C2: tokens in child-start order; a token not above every earlier one is
/// a regression.
pub fn c2(history: &History) -> (Verdict, usize, usize) {
    let mut lives: Vec<&Life> = history.lives.iter().collect();
    lives.sort_by_key(|l| l.start);
    let mut highest = 0;
    let mut regressions = Vec::new();
    for life in &lives {
        if life.token <= highest {
            regressions.push(format!("{} after {highest}", life.token));
        }
        highest = highest.max(life.token);
    }
    let handovers = lives.windows(2).filter(|w| w[0].who != w[1].who).count();
    (
        Verdict {
            name: "C2 tokens grow per term",
            ok: regressions.is_empty(),
            figure: format!(
                "{} terms, {} regressions{}",
                lives.len(),
                regressions.len(),
                if regressions.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", regressions.join(", "))
                }
            ),
        },
        regressions.len(),
        handovers,
    )
}

/// The intervals in which each candidate surely led: `(who, from, to)`.
pub fn leading_intervals(answers: &[Answer]) -> Vec<(usize, u128, u128)> {
    let mut by_who: Vec<&Answer> = answers.iter().collect();
    by_who.sort_by_key(|a| (a.who, a.sent));
    let mut out = Vec::new();
    let mut streak: Option<(usize, u128, u128)> = None;
    for a in by_who {
        match (&mut streak, a.leader) {
            (Some((who, _, last)), true) if *who == a.who => *last = a.sent,
            (_, true) => {
                if let Some(s) = streak.take() {
                    out.push(s);
                }
                streak = Some((a.who, a.received, a.sent));
            }
            (_, false) => {
                if let Some(s) = streak.take() {
                    out.push(s);
                }
            }
        }
    }
    out.extend(streak);
    out.retain(|(_, from, to)| to > from);
    out
}

/// Every pair of candidates whose sure leading intervals meet: `(x, y,
/// from, to)`, in the order found.
pub fn duals(answers: &[Answer]) -> Vec<(usize, usize, u128, u128)> {
    let intervals = leading_intervals(answers);
    let mut out = Vec::new();
    for (i, a) in intervals.iter().enumerate() {
        for b in &intervals[i + 1..] {
            let (from, to) = (a.1.max(b.1), a.2.min(b.2));
            if a.0 != b.0 && from < to {
                out.push((a.0, b.0, from, to));
            }
        }
    }
    out
}

/// When the earliest two-leader interval began, if any.
pub fn first_dual(history: &History) -> Option<u128> {
    duals(&history.answers).iter().map(|d| d.2).min()
}

/// C3: two candidates' sure leading intervals that meet.
pub fn c3(history: &History) -> (Verdict, usize) {
    let duals = duals(&history.answers);
    let first = duals.iter().min_by_key(|d| d.2);
    (
        Verdict {
            name: "C3 one 200 at a time",
            ok: duals.is_empty(),
            figure: match first {
                None => "no two candidates answered 200 over one interval".into(),
                Some((x, y, from, to)) => format!(
                    "{} overlaps, the first: candidates {x} and {y} for {:.1} ms",
                    duals.len(),
                    ms(to - from)
                ),
            },
        },
        duals.len(),
    )
}

/// Stretches without any 200, between `from` and `to`: the longest, in ns.
pub fn longest_leaderless(answers: &[Answer], from: u128, to: u128) -> u128 {
    let mut leads: Vec<u128> = answers
        .iter()
        .filter(|a| a.leader && a.received >= from && a.sent <= to)
        .map(|a| a.received)
        .collect();
    leads.sort();
    let mut last = from;
    let mut longest = 0;
    for t in leads {
        longest = longest.max(t.saturating_sub(last));
        last = last.max(t);
    }
    longest.max(to.saturating_sub(last))
}

/// C4: the first 200 after the last fault healed, within `bound`.
pub fn c4(history: &History, healed: u128, bound: Duration) -> Verdict {
    let first = history
        .answers
        .iter()
        .filter(|a| a.leader && a.received >= healed)
        .map(|a| a.received)
        .min();
    let took = first.map(|t| t - healed);
    Verdict {
        name: "C4 a leader after the faults heal",
        ok: took.is_some_and(|t| t <= bound.as_nanos()),
        figure: match took {
            Some(t) => format!("{:.0} ms after the last heal (bound {bound:?})", ms(t)),
            None => format!("no leader after the last heal (bound {bound:?})"),
        },
    }
}

/// C5: nothing left running.
pub fn c5(history: &History) -> Verdict {
    Verdict {
        name: "C5 nothing left running",
        ok: history.leftovers.is_empty(),
        figure: if history.leftovers.is_empty() {
            "no child, leaderd or server left".into()
        } else {
            format!("left running: {}", history.leftovers.join("; "))
        },
    }
}

/// During each tolerated fault that no other fault overlapped (nor
/// preceded within its bound), the longest stretch without a leader: how
/// many were judged, and the worst one over its bound as `(gap, bound,
/// when the fault began)`.
pub fn worst_tolerated(history: &History) -> (usize, Option<(u128, Duration, u128)>) {
    let mut worst: Option<(u128, Duration, u128)> = None;
    let mut judged = 0;
    for (i, f) in history.faults.iter().enumerate() {
        let Some(bound) = f.tolerated else { continue };
        let quiet_from = f.start.saturating_sub(bound.as_nanos());
        let alone = history
            .faults
            .iter()
            .enumerate()
            .all(|(j, g)| j == i || g.end < quiet_from || g.start > f.end);
        if !alone || f.end - f.start <= bound.as_nanos() {
            continue;
        }
        judged += 1;
        let gap = longest_leaderless(&history.answers, f.start, f.end);
        if gap > bound.as_nanos() && worst.is_none_or(|(w, _, _)| gap > w) {
            worst = Some((gap, bound, f.start));
        }
    }
    (judged, worst)
}

/// C6: during each tolerated fault that no other fault overlapped (nor
/// preceded within its bound), the longest stretch without a leader.
pub fn c6(history: &History) -> Verdict {
    let (judged, worst) = worst_tolerated(history);
    Verdict {
        name: "C6 a leader through tolerated faults",
        ok: worst.is_none(),
        figure: match worst {
            None => format!(
                "{judged} tolerated fault(s) judged alone, each with a leader within its bound"
            ),
            Some((gap, bound, _)) => {
                format!("{:.0} ms without a leader (bound {bound:?})", ms(gap))
            }
        },
    }
}

/// During each fault that must keep the leader (`keeps_leader`), judged
/// alone as in C6, the child alive at its start: how many were judged, and
/// the first whose child ended before the fault did, as `(when the fault
/// began, when the child ended)`.
pub fn lost_terms(history: &History, end_of_run: u128) -> (usize, Option<(u128, u128)>) {
    let spans = ends(history, end_of_run);
    let mut judged = 0;
    for (i, f) in history.faults.iter().enumerate() {
        if !f.keeps_leader {
            continue;
        }
        let quiet_from = f
            .start
            .saturating_sub(f.tolerated.unwrap_or_default().as_nanos());
        let alone = history
            .faults
            .iter()
            .enumerate()
            .all(|(j, g)| j == i || g.end < quiet_from || g.start > f.end);
        // No leader at its start: C6 judges how soon there is one.
        let Some((_, ended, _)) = spans.iter().find(|(s, e, _)| *s < f.start && *e > f.start)
        else {
            continue;
        };
        if !alone {
            continue;
        }
        judged += 1;
        if *ended < f.end {
            return (judged, Some((f.start, *ended)));
        }
    }
    (judged, None)
}

/// C7: the leader at the start of each fault that must keep it still leads,
/// in the same term, at its end.
pub fn c7(history: &History, end_of_run: u128) -> Verdict {
    let (judged, lost) = lost_terms(history, end_of_run);
    Verdict {
        name: "C7 the same leader through faults that keep it",
        ok: lost.is_none(),
        figure: match lost {
            None => format!("{judged} fault(s) judged alone, each with the same term throughout"),
            Some((start, ended)) => format!(
                "the leader's term ended {:.0} ms into a fault the store rides out",
                ms(ended - start)
            ),
        },
    }
}

/// Every checker over `history`.
pub fn judge(history: &History, end_of_run: u128, healed: u128, bound: Duration) -> Report {
    let (v1, overlap_ms) = c1(history, end_of_run);
    let (v2, token_regressions, handovers) = c2(history);
    let (v3, dual_leaders) = c3(history);
    let start = history.answers.iter().map(|a| a.sent).min().unwrap_or(0);
    let first_lead = history
        .answers
        .iter()
        .filter(|a| a.leader)
        .map(|a| a.received)
        .min()
        .unwrap_or(start);
    Report {
        terms: history.lives.len(),
        handovers,
        overlap_ms,
        token_regressions,
        dual_leaders,
        longest_leaderless_ms: ms(longest_leaderless(&history.answers, first_lead, end_of_run)),
        verdicts: vec![
            v1,
            v2,
            v3,
            c4(history, healed, bound),
            c5(history),
            c6(history),
            c7(history, end_of_run),
        ],
    }
}

/// C3's streaks on made-up histories (run by `--sanity`): a question left
/// unanswered (a frozen candidate) ends a streak, 200s on both sides of it
/// do not make one interval, and two real streaks that meet are found.
pub fn self_test() -> Result<(), String> {
    let ms = |n: u128| n * 1_000_000;
    let a = |who, at: u128, leader| Answer {
        who,
        sent: ms(at),
        received: ms(at) + ms(2),
        leader,
    };
    // Candidate 0 leads, is frozen (unanswered) while 1 leads, then leads again.
    let frozen = [
        a(0, 0, true),
        a(0, 20, true),
        a(0, 40, false),
        a(0, 600, true),
        a(0, 620, true),
        a(1, 100, true),
        a(1, 120, true),
        a(1, 500, true),
        a(1, 520, false),
    ];
    if !duals(&frozen).is_empty() {
        return Err(format!(
            "a streak ran through an unanswered question: {:?}",
            duals(&frozen)
        ));
    }
    let both = [
        a(0, 0, true),
        a(0, 20, true),
        a(0, 40, true),
        a(1, 10, true),
        a(1, 30, true),
    ];
    match duals(&both).as_slice() {
        [(0, 1, from, to)] if *from == ms(12) && *to == ms(30) => Ok(()),
        other => Err(format!(
            "two meeting streaks not found as one dual: {other:?}"
        )),
    }
}
