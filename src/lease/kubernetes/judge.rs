//! What a waiter makes of what it saw of another holder's Lease: held for
//! how long (from the watch alone, while it is healthy), or vacant — the
//! Lease gone, or its holder cleared — and then whether the vacancy is
//! free (an announced release, our own term, a term seen past its expiry)
//! or must be waited out (the contract's vacancy rule, `lease/vacancy.rs`).

use super::KubeLease;
use super::record::{self, Seen};
use crate::lease::contract::{Acquire, Error, Holder};
use crate::lease::vacancy::Verdict;
use k8s_openapi::api::coordination::v1::Lease;
use tokio::time::Instant;

impl KubeLease {
    /// What a waiter on a healthy watch knows without reading: another
    /// holder's record, seen since the watch (re)started, not yet expired.
    pub(super) fn watched(&self) -> Option<Acquire> {
        let observer = self.observer.lock();
        if !observer.live() {
            return None;
        }
        let left = observer.left(Instant::now(), self.timing.ttl)?;
        let sight = observer.present()?;
        if left.is_zero() || self.is_ours(&sight.lease) {
            return None;
        }
        Some(Acquire::Held {
            holder: self.holder_of(&sight.lease),
            expires_in: Some(left),
        })
    }

    /// The Lease absent, or its holder cleared by someone other than the
    /// holder: free, unless a term may still be at work (the contract's
    /// vacancy rule). `cleared`: the record without a holder, when present.
    pub(super) async fn vacancy(
        &mut self,
        cleared: Option<&Lease>,
    ) -> Result<Option<Acquire>, Error> {
        let last_held = {
            let observer = self.observer.lock();
            observer.last_held().map(|s| {
                let wait = observer.wait_for(&s.seen, self.timing.ttl);
                (s.seen.clone(), wait)
            })
        };
        if let Some(lease) = cleared
            && record::announced_release(lease, last_held.as_ref().map(|(s, _)| s))
        {
            return Ok(None);
        }
        if last_held
            .as_ref()
            .is_some_and(|(s, _)| Some(s.term()) == self.mine)
        {
            return Ok(None);
        }
        // A holder this candidate saw; else one the registry says leads (a
        // candidate that never saw it); else the cleared record itself.
        let leading = match &last_held {
            Some(_) => None,
            None => self.registry.leading(&mut self.client).await?,
        };
        let ttl = self.timing.ttl;
        let (id, token, term, wait) = match (last_held, leading, cleared) {
            (Some((seen, wait)), _, _) => (seen.holder.clone(), None, seen.term(), wait),
            (None, Some((id, token)), _) => (Some(id), Some(token), token, ttl),
            (None, None, Some(lease)) => {
                let seen = Seen::of(lease);
                (None, None, seen.term(), seen.duration.max(ttl))
            }
            (None, None, None) => return Ok(None),
        };
        match self.vacancies.judge(term, Instant::now(), wait) {
            Verdict::Free => Ok(None),
            Verdict::Wait(left) => Ok(Some(Acquire::Held {
                holder: Holder {
                    id,
                    fencing_token: token,
                },
                expires_in: Some(left),
            })),
        }
    }
}
