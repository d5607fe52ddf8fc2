//! Acquiring on a quorum, in two phases: each master proposes a fencing
//! token with the acquire; the largest proposal (and of every token seen in
//! refusals) is committed on every master that is ours; leadership counts
//! only once a quorum committed, with enough of the lease's validity left
//! after each phase. Anything short is given back on every master.
//!
//! A master that restarted less than a TTL ago does not vote a new holder
//! in: it may have lost a lease that still stands (Redis without
//! persistence, or with `appendfsync everysec`), and its vote plus one
//! vacant master would be a quorum for anyone. This is the delayed restart
//! the Redlock design asks operators for, enforced here. A win on fewer
//! than every master puts the lease on the rest at once, so it does not
//! rest on a bare quorum until the next renewal.

use super::Redlock;
use super::enough::Until;
use super::tally::{self, Acquired, Answer, Standing, Voted};
use crate::lease::contract::{Acquire, Error, new_token};
use crate::lease::redis::script::eval;
use redis::Value;
use std::time::Duration;
use tokio::time::Instant;

impl Redlock {
    /// Time left to use a lease won by a request sent at `sent_at` is above
    /// the kill margin; else an error saying so.
    fn in_time(&self, sent_at: Instant, stage: &str) -> Result<(), Error> {
        let stop_by = self.timing.kill_by(self.timing.validity_end(sent_at));
        if Instant::now() < stop_by {
            return Ok(());
        }
        Err(Error::Connection {
            backend: self.describe_short(),
            detail: format!(
                "{stage} took {:?} of the {:?} lease, too little validity left to use it; given back (the masters answer slowly: check their load and --redis-node-timeout)",
                sent_at.elapsed(),
                self.timing.ttl
            ),
        })
    }

    /// Between one and two node timeouts: time for a competing attempt to
    /// finish, giving back its part.
    fn split_backoff(&self) -> Duration {
        let mut byte = [0u8; 1];
        let spread = getrandom::fill(&mut byte).map_or(128, |_| u32::from(byte[0]));
        self.node_timeout + self.node_timeout * spread / 255
    }

    pub(super) async fn acquire_op(&mut self) -> Result<Acquire, Error> {
        let token = self.token.get_or_insert_with(new_token).clone();
        let sent_at = Instant::now();
        let call = eval(
            &self.scripts.acquire,
            &[
                &self.keys.lease,
                &self.keys.counter,
                &self.keys.term,
                &self.keys.ended,
            ],
            &[&token, &self.id_json, &self.ttl_ms(), &self.highest_fencing],
        );
        self.hear_late();
        let replies = self.on_all(&call, Until::Quorum).await;
        let judged = match self.answers(replies) {
            Ok(judged) => judged,
            Err(e) => {
                self.give_back(None, false);
                return Err(e);
            }
        };
        // A cold master's "ours" is not a vote (see the module's doc).
        let cold = self.cold();
        let is_cold: Vec<bool> = cold.iter().map(Option::is_some).collect();
        let fencing = match tally::acquire_warm(&judged.answers, &is_cold, self.quorum) {
            Voted::Judged(Acquired::Won { fencing, .. }) => fencing,
            Voted::Cold => {
                // Won, but only with the votes of masters that restarted
                // within a TTL: wait until the first of them may vote.
                self.give_back(Some(&judged.answers), false);
                let warm_in = cold.iter().flatten().min().copied();
                tracing::debug!(
                    ?warm_in,
                    "a quorum only with restarted masters; waiting for them to count"
                );
                return Ok(Acquire::Held {
                    holder: crate::lease::contract::Holder {
                        id: None,
                        fencing_token: None,
                    },
                    expires_in: warm_in,
                });
            }
            Voted::Judged(Acquired::Refused(standing)) => {
                self.give_back(Some(&judged.answers), false);
                return match standing {
                    Standing::Unreachable { .. } => Err(self.unreachable(judged.errors)),
                    Standing::Held { holder, expires_in } => {
                        Ok(Acquire::Held { holder, expires_in })
                    }
                    // A split vote (each gave back its part, no one wakes
                    // anyone) or leftovers of a failed attempt: look again
                    // soon, at a random moment so that candidates split by
                    // one vote do not split again.
                    Standing::Contested {
                        largest: holder,
                        expires_in,
                    } => Ok(Acquire::Held {
                        holder,
                        expires_in: Some(
                            self.split_backoff()
                                .min(expires_in.unwrap_or(Duration::MAX)),
                        ),
                    }),
                    // Ours on too few and no one else's: masters that did
                    // not answer kept it from a quorum.
                    Standing::Vacant => Err(self.unreachable(judged.errors)),
                };
            }
        };
        if let Err(e) = self.in_time(sent_at, "winning a quorum") {
            self.give_back(Some(&judged.answers), false);
            return Err(e);
        }
        // Phase two, on the masters that are ours.
        let commit = eval(
            &self.scripts.commit,
            &[&self.keys.lease, &self.keys.counter, &self.keys.term],
            &[&token, &self.id_json, &fencing],
        );
        let ours: Vec<bool> = judged
            .answers
            .iter()
            .map(|a| matches!(a, Answer::Ours(_)))
            .collect();
        let commits = self.ask(&commit, &ours, Until::Quorum).await;
        let committed = commits
            .iter()
            .zip(&ours)
            .zip(&cold)
            .filter(|((c, ours), cold)| {
                **ours
                    && cold.is_none()
                    && matches!(c, Ok(Value::Array(v)) if v.first() == Some(&Value::Int(1)))
            })
            .count();
        self.highest_fencing = self.highest_fencing.max(fencing);
        if committed < self.quorum {
            self.give_back(Some(&judged.answers), false);
            return Err(Error::Connection {
                backend: self.describe_short(),
                detail: format!(
                    "won on a quorum but committed its fencing token on only {committed} master(s), {} needed; given back",
                    self.quorum
                ),
            });
        }
        if let Err(e) = self.in_time(sent_at, "winning a quorum and committing its token") {
            self.give_back(Some(&judged.answers), false);
            return Err(e);
        }
        self.fencing = fencing;
        self.valid_until = Some(self.timing.validity_end(sent_at));
        if ours.iter().any(|o| !o) {
            self.spread(&token, &ours, fencing);
        }
        Ok(Acquire::Won {
            fencing_token: fencing,
            sent_at,
        })
    }

    /// Puts a lease just won on the masters that are not ours yet (vacant,
    /// or that did not answer), where it is free: the `reclaim` a renewal
    /// would do a third of a TTL later, done now. Not waited for: a master
    /// that did not answer the acquire runs it after the acquire.
    fn spread(&mut self, token: &str, ours: &[bool], fencing: u64) {
        let call = eval(
            &self.scripts.reclaim,
            &[&self.keys.lease, &self.keys.counter, &self.keys.term],
            &[&token, &self.ttl_ms(), &self.id_json, &fencing],
        );
        let rest: Vec<bool> = ours.iter().map(|o| !o).collect();
        self.tell(&call, &rest);
    }
}
