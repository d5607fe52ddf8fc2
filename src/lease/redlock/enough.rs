//! When a Redlock operation has heard enough to decide: a pure function of
//! the answers so far, table-tested here. A win never waits for a master
//! whose vote it does not need (issue #36: one frozen master of three held
//! every operation for a connect timeout).

/// What one master said so far, for the operation's rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Heard {
    /// Not part of this operation.
    NotAsked,
    /// Asked, no answer yet.
    Pending,
    /// An answer that counts toward the quorum (the lease is ours there,
    /// from a master whose vote counts).
    Vote,
    /// Any other answer, an error included.
    Other,
}

/// What an operation waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Until {
    /// Every master asked (a peek: who holds it is judged over all).
    All,
    /// A quorum of votes (acquire, commit, renew): a win needs no more
    /// answers. A refusal waits for every master asked, within the
    /// deadline: who holds the lease, and for how long, is judged over all
    /// of them (decided on the first few, a standby took a holder short of
    /// a quorum among them for a split vote and looked again every 100 ms).
    Quorum,
    /// This many answers of any kind (the registry: a majority's records
    /// are everyone's).
    Answers(usize),
}

/// Whether the operation may decide now.
pub(super) fn enough(heard: &[Heard], until: Until, quorum: usize) -> bool {
    let count = |which: &[Heard]| heard.iter().filter(|h| which.contains(h)).count();
    let pending = count(&[Heard::Pending]);
    if pending == 0 {
        return true;
    }
    match until {
        Until::All => false,
        Until::Quorum => count(&[Heard::Vote]) >= quorum,
        Until::Answers(n) => count(&[Heard::Vote, Heard::Other]) >= n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Heard::{NotAsked, Other, Pending, Vote};

    #[test]
    fn a_win_decides_without_the_masters_it_does_not_need() {
        let table: &[(&[Heard], Until, bool)] = &[
            // Nothing pending: decided, whatever the rule.
            (&[Vote, Other, Other], Until::All, true),
            (&[NotAsked, NotAsked, NotAsked], Until::Quorum, true),
            // A peek waits for every master asked.
            (&[Vote, Vote, Pending], Until::All, false),
            // Two votes of three: the frozen master is not waited for.
            (&[Pending, Vote, Vote], Until::Quorum, true),
            (&[Pending, Vote, Other], Until::Quorum, false),
            (&[Pending, Pending, Vote], Until::Quorum, false),
            // No quorum possible any more: still every answer, for who
            // holds it and how long.
            (&[Pending, Other, Other], Until::Quorum, false),
            (
                &[Vote, Other, Other, Pending, Pending],
                Until::Quorum,
                false,
            ),
            (&[Vote, Other, Other, Other, Pending], Until::Quorum, false),
            (&[Vote, Vote, Vote, Pending, Pending], Until::Quorum, true),
            // A commit asked only the masters that were ours.
            (&[NotAsked, Vote, Vote], Until::Quorum, true),
            (&[NotAsked, Vote, Pending], Until::Quorum, false),
            // The registry: a majority's answers, errors included.
            (&[Pending, Other, Vote], Until::Answers(2), true),
            (&[Pending, Pending, Vote], Until::Answers(2), false),
        ];
        for (heard, until, decided) in table {
            assert_eq!(
                enough(heard, *until, 2.max(heard.len() / 2 + 1)),
                *decided,
                "{heard:?} {until:?}"
            );
        }
    }
}
