//! How Redlock judges the masters' answers to one operation: pure functions
//! of the answers and the quorum, table-tested here. The I/O around them is
//! in the parent module.

use crate::lease::contract::Holder;
use std::cmp::Reverse;
use std::time::Duration;

/// One master's answer to one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Answer {
    /// The lease is ours there. Acquire: this master's proposal for the
    /// fencing token; renew: non-zero when the key was re-created.
    Ours(u64),
    /// Someone else's lease (`Some`) or none (`None`), and how long it has
    /// left when it has an expiry.
    Other(Option<Holder>, Option<Duration>),
    /// No answer in time, or an error.
    Failed,
}

/// ⌊N/2⌋ + 1: any two sets of this many masters share one.
pub(super) fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// Who holds the lease, judged over every master's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Standing {
    /// Fewer than a quorum answered: nothing can be said.
    Unreachable { answered: usize },
    /// A quorum holds no lease: the next candidate can win.
    Vacant,
    /// `holder` (the same id and fencing token) is on a quorum; it keeps
    /// the lease until fewer than a quorum hold it, when the quorum-th
    /// longest remaining time runs out.
    Held {
        holder: Holder,
        expires_in: Option<Duration>,
    },
    /// Nobody holds it on a quorum and a quorum is not vacant either: an
    /// acquire in progress, or leftovers of failed ones. `largest` is on
    /// the most masters; `expires_in` is when the first of them frees one.
    Contested {
        largest: Holder,
        expires_in: Option<Duration>,
    },
}

/// Leases of ours count as vacant: the caller gives them back.
pub(super) fn standing(answers: &[Answer], quorum: usize) -> Standing {
    let answered = answers
        .iter()
        .filter(|a| !matches!(a, Answer::Failed))
        .count();
    if answered < quorum {
        return Standing::Unreachable { answered };
    }
    let mut groups: Vec<(&Holder, Vec<Option<Duration>>)> = Vec::new();
    let mut vacant = 0;
    for answer in answers {
        match answer {
            Answer::Other(Some(holder), left) => match groups.iter_mut().find(|g| g.0 == holder) {
                Some(group) => group.1.push(*left),
                None => groups.push((holder, vec![*left])),
            },
            Answer::Other(None, _) | Answer::Ours(_) => vacant += 1,
            Answer::Failed => {}
        }
    }
    // The most widely held first; stable, so ties keep the masters' order.
    groups.sort_by_key(|g| Reverse(g.1.len()));
    match groups.first_mut() {
        Some((holder, lefts)) if lefts.len() >= quorum => {
            // No expiry (`None`) outlasts every expiry.
            lefts.sort_by_key(|l| Reverse(l.unwrap_or(Duration::MAX)));
            Standing::Held {
                holder: (*holder).clone(),
                expires_in: lefts[quorum - 1],
            }
        }
        _ if vacant >= quorum => Standing::Vacant,
        Some((largest, _)) => Standing::Contested {
            largest: (*largest).clone(),
            expires_in: groups
                .iter()
                .flat_map(|g| g.1.iter().flatten())
                .min()
                .copied(),
        },
        None => Standing::Vacant,
    }
}

/// Phase one of an acquire, judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Acquired {
    /// Ours on a quorum. `fencing`: the largest proposal and of every token
    /// seen in refusals, to be committed on the masters that are ours.
    Won {
        fencing: u64,
        ours: usize,
    },
    Refused(Standing),
}

/// Phase one judged when some masters restarted less than a TTL ago
/// (`cold`): their "ours" is no vote, though their proposals still count
/// toward the token. `Cold` when the quorum was there only with their votes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Voted {
    Judged(Acquired),
    Cold,
}

pub(super) fn acquire_warm(answers: &[Answer], cold: &[bool], quorum: usize) -> Voted {
    let votes: Vec<Answer> = answers
        .iter()
        .zip(cold)
        .map(|(a, cold)| match (a, cold) {
            (Answer::Ours(_), true) => Answer::Failed,
            (a, _) => a.clone(),
        })
        .collect();
    match (acquire(&votes, quorum), acquire(answers, quorum)) {
        (Acquired::Won { ours, .. }, Acquired::Won { fencing, .. }) => {
            Voted::Judged(Acquired::Won { fencing, ours })
        }
        (Acquired::Refused(_), Acquired::Won { .. }) => Voted::Cold,
        (refused, _) => Voted::Judged(refused),
    }
}

pub(super) fn acquire(answers: &[Answer], quorum: usize) -> Acquired {
    let ours = answers
        .iter()
        .filter(|a| matches!(a, Answer::Ours(_)))
        .count();
    if ours < quorum {
        return Acquired::Refused(standing(answers, quorum));
    }
    let fencing = answers
        .iter()
        .filter_map(|a| match a {
            Answer::Ours(proposal) => Some(*proposal),
            Answer::Other(Some(holder), _) => holder.fencing_token,
            _ => None,
        })
        .max()
        .unwrap_or(0);
    Acquired::Won { fencing, ours }
}

/// A renewal, judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Renewed {
    /// Ours on a quorum; `restored` of them had lost the key and have it back.
    Yes { restored: usize },
    /// Even if every master that did not answer were ours, that is short of
    /// a quorum: the lease is gone. `standing` says who has it.
    Lost(Standing),
    /// Not a quorum now, but the masters that did not answer could make
    /// one: a failed attempt (retried until the renew deadline).
    Failed { ours: usize, failed: usize },
}

pub(super) fn renew(answers: &[Answer], quorum: usize) -> Renewed {
    let ours = answers
        .iter()
        .filter(|a| matches!(a, Answer::Ours(_)))
        .count();
    let failed = answers
        .iter()
        .filter(|a| matches!(a, Answer::Failed))
        .count();
    if ours >= quorum {
        let restored = answers
            .iter()
            .filter(|a| matches!(a, Answer::Ours(t) if *t > 0))
            .count();
        Renewed::Yes { restored }
    } else if ours + failed < quorum {
        Renewed::Lost(standing(answers, quorum))
    } else {
        Renewed::Failed { ours, failed }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Answer::{Failed, Ours};

    fn held(id: &str, token: u64, left_ms: u64) -> Answer {
        Answer::Other(
            Some(Holder {
                id: Some(id.into()),
                fencing_token: Some(token),
            }),
            Some(Duration::from_millis(left_ms)),
        )
    }
    fn holder(id: &str, token: u64) -> Holder {
        Holder {
            id: Some(id.into()),
            fencing_token: Some(token),
        }
    }
    const VACANT: Answer = Answer::Other(None, None);
    const MS: fn(u64) -> Option<Duration> = |ms| Some(Duration::from_millis(ms));

    #[test]
    fn quorum_is_a_strict_majority() {
        let table = [(3, 2), (4, 3), (5, 3), (6, 4), (7, 4)];
        for (n, q) in table {
            assert_eq!(quorum(n), q, "N = {n}");
        }
    }

    #[test]
    fn standing_table() {
        use Standing::*;
        let a = |t| holder("a", t);
        let table: Vec<(Vec<Answer>, Standing)> = vec![
            (vec![VACANT, VACANT, VACANT], Vacant),
            (vec![Failed, Failed, VACANT], Unreachable { answered: 1 }),
            // The quorum-th longest remaining time: until then a quorum holds it.
            (
                vec![held("a", 7, 900), held("a", 7, 500), held("a", 7, 700)],
                Held {
                    holder: a(7),
                    expires_in: MS(700),
                },
            ),
            (
                vec![
                    held("a", 7, 900),
                    Failed,
                    held("a", 7, 300),
                    VACANT,
                    held("a", 7, 500),
                ],
                Held {
                    holder: a(7),
                    expires_in: MS(300),
                },
            ),
            // The same id with another token is another lease.
            (
                vec![held("a", 7, 900), held("a", 8, 900), VACANT],
                Contested {
                    largest: a(7),
                    expires_in: MS(900),
                },
            ),
            (
                vec![held("a", 7, 900), held("b", 9, 400), Failed],
                Contested {
                    largest: a(7),
                    expires_in: MS(400),
                },
            ),
            (vec![held("a", 7, 900), VACANT, VACANT], Vacant),
            // Ours counts as vacant: the caller gives it back.
            (vec![Ours(5), VACANT, held("b", 9, 400)], Vacant),
            (
                vec![
                    held("a", 7, 900),
                    Answer::Other(Some(a(7)), None),
                    held("a", 7, 100),
                ],
                Held {
                    holder: a(7),
                    expires_in: MS(900),
                },
            ),
        ];
        for (answers, expected) in table {
            assert_eq!(
                standing(&answers, quorum(answers.len())),
                expected,
                "{answers:?}"
            );
        }
    }

    #[test]
    fn restarted_masters_do_not_vote() {
        let (c, w) = (true, false);
        let table: Vec<(Vec<Answer>, Vec<bool>, Voted)> = vec![
            // A quorum of warm masters: won, the cold proposal in the token.
            (
                vec![Ours(10), Ours(12), Ours(30)],
                vec![w, w, c],
                Voted::Judged(Acquired::Won {
                    fencing: 30,
                    ours: 2,
                }),
            ),
            // Ours on a quorum only with a restarted master's vote.
            (vec![Ours(10), VACANT, Ours(11)], vec![w, w, c], Voted::Cold),
            (
                vec![Ours(10), Ours(12), held("b", 4, 900)],
                vec![c, w, w],
                Voted::Cold,
            ),
            // Refused anyway: the standing says why.
            (
                vec![held("b", 4, 900), held("b", 4, 800), Ours(11)],
                vec![w, w, c],
                Voted::Judged(Acquired::Refused(Standing::Held {
                    holder: holder("b", 4),
                    expires_in: MS(800),
                })),
            ),
        ];
        for (answers, cold, verdict) in table {
            assert_eq!(
                acquire_warm(&answers, &cold, 2),
                verdict,
                "{answers:?} {cold:?}"
            );
        }
    }

    #[test]
    fn acquire_table() {
        use Acquired::*;
        let table: Vec<(Vec<Answer>, Acquired)> = vec![
            (
                vec![Ours(10), Ours(12), Ours(11)],
                Won {
                    fencing: 12,
                    ours: 3,
                },
            ),
            // A refusal's token counts: a later majority must exceed it too.
            (
                vec![Ours(10), held("b", 40, 100), Ours(11)],
                Won {
                    fencing: 40,
                    ours: 2,
                },
            ),
            (
                vec![Ours(10), Failed, Ours(11), Failed, Ours(3)],
                Won {
                    fencing: 11,
                    ours: 3,
                },
            ),
            (
                vec![Ours(10), Failed, Ours(11), Failed, held("b", 4, 100)],
                Refused(Standing::Contested {
                    largest: holder("b", 4),
                    expires_in: MS(100),
                }),
            ),
            (
                vec![Ours(10), Failed, Failed],
                Refused(Standing::Unreachable { answered: 1 }),
            ),
            (
                vec![held("b", 4, 800), held("b", 4, 600), Ours(10)],
                Refused(Standing::Held {
                    holder: holder("b", 4),
                    expires_in: MS(600),
                }),
            ),
        ];
        for (answers, expected) in table {
            assert_eq!(
                acquire(&answers, quorum(answers.len())),
                expected,
                "{answers:?}"
            );
        }
    }

    #[test]
    fn renew_table() {
        use Renewed::*;
        let table: Vec<(Vec<Answer>, Renewed)> = vec![
            (vec![Ours(0), Ours(0), Ours(0)], Yes { restored: 0 }),
            (vec![Ours(0), Ours(7), Failed], Yes { restored: 1 }),
            (
                vec![Ours(0), Ours(0), Ours(0), Failed, Failed],
                Yes { restored: 0 },
            ),
            // Two of five could still be ours: not lost, not renewed.
            (
                vec![Ours(0), Failed, Failed, held("b", 9, 100), VACANT],
                Failed { ours: 1, failed: 2 },
            ),
            (
                vec![Failed, Failed, Failed, Ours(0), Ours(0)],
                Failed { ours: 2, failed: 3 },
            ),
            // Even with every silent master ours, short of a quorum.
            (
                vec![Ours(0), held("b", 9, 100), held("b", 9, 200)],
                Lost(Standing::Held {
                    holder: holder("b", 9),
                    expires_in: MS(100),
                }),
            ),
            (
                vec![Ours(0), VACANT, VACANT, VACANT, Failed],
                Lost(Standing::Vacant),
            ),
        ];
        for (answers, expected) in table {
            assert_eq!(
                renew(&answers, quorum(answers.len())),
                expected,
                "{answers:?}"
            );
        }
    }
}
