//! Kubernetes: the lease is a `coordination.k8s.io/v1` Lease object, with
//! the record client-go writes (`holderIdentity`, `leaseDurationSeconds`,
//! `acquireTime`, `renewTime`, `leaseTransitions`), so `kubectl get lease`
//! names the holder and client-go electors honour it. Every write is a
//! compare-and-swap on `resourceVersion` (a create when absent); a 409
//! means read again and judge, never "lost" on a write that may have
//! landed. Another holder's lease expires by the observer's clock
//! ([`record::Observer`]). The fencing token is the `resourceVersion` of
//! the acquiring write — etcd's revision, which only grows — above this
//! candidate's floor, and is shown in an annotation for people to read.
//! A release clears the holder (client-go's `ReleaseOnCancel`) after the
//! work stopped; waiters watch the object and try at once.

mod check;
mod client;
pub mod config;
mod record;
mod registry;
mod wake;

use crate::config::Backend;
use crate::lease::contract::{
    Acquire, BackendEntry, Common, Error, Holder, LeaseBackend, Peek, Renew, Wakeups, open_as,
};
use crate::lease::registry::Record;
use crate::lease::vacancy::{Vacancies, Verdict};
use crate::timing::Timing;
use client::{Client, Failure};
use config::KubernetesConfig;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use record::{Observer, Seen};
use sha2::Digest;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How often one operation reads again after a conflict before it gives
/// the caller a verdict (a 409 storm of many candidates settles in one).
const CONFLICT_ROUNDS: usize = 4;

/// The Kubernetes Lease backend.
pub const ENTRY: BackendEntry = BackendEntry {
    declared: Some(&config::DECLARED),
    names: &["kubernetes"],
    open,
    chatty_logs: &[],
};

fn open(backend: &Backend, common: &Common) -> Option<Result<Box<dyn LeaseBackend>, Error>> {
    open_as(backend, common, KubeLease::open)
}

pub struct KubeLease {
    client: Client,
    name: String,
    id: String,
    timing: Timing,
    /// A digest of this candidate's ownership token: the `leaderd.io/owner`
    /// annotation of the leases it writes.
    digest: String,
    /// Our term: the object as we last wrote it, and its fencing token.
    term: Option<(Lease, u64)>,
    /// The largest token we handed out: never again.
    spent: u64,
    observer: Observer,
    vacancies: Vacancies,
    registry: registry::Registry,
    implicit: bool,
}

impl KubeLease {
    pub fn open(config: &KubernetesConfig, common: &Common) -> Result<Self, Error> {
        let token = crate::lease::new_token();
        let digest = sha2::Sha256::digest(token.as_bytes());
        let digest: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
        Ok(KubeLease {
            client: Client::new(config),
            name: config.lease.clone(),
            id: common.id.clone(),
            timing: common.timing,
            digest,
            term: None,
            spent: 0,
            observer: Observer::default(),
            vacancies: Vacancies::default(),
            registry: registry::Registry::new(&config.lease, &common.id, common.timing.ttl),
            implicit: config.implicit,
        })
    }

    /// `leaseDurationSeconds`: the TTL rounded up to whole seconds.
    fn duration_secs(&self) -> i32 {
        self.timing.ttl_ms().div_ceil(1000).max(1) as i32
    }

    fn holder_of(&self, lease: &Lease) -> Holder {
        Holder {
            id: Seen::of(lease).holder,
            fencing_token: record::shown_token(lease),
        }
    }

    /// The lease absent: free, unless a term may still be at work (it was
    /// deleted from outside; the contract's vacancy rule).
    async fn vacancy(&mut self) -> Result<Option<Acquire>, Error> {
        let now = Instant::now();
        // A holder this candidate saw: its lease could expire by itself then.
        let seen = self
            .observer
            .expiry()
            .map(|(s, at)| (s.holder.clone(), s.term(), at));
        // A holder the registry says leads (a candidate that never saw it).
        let leading = self.registry.leading(&mut self.client).await?;
        let term = match (&seen, &leading) {
            (Some((holder, term, expiry)), _) => {
                self.vacancies.saw_held(*term, *expiry);
                Some((holder.clone(), None, *term))
            }
            (None, Some((id, token))) => Some((Some(id.clone()), Some(*token), *token)),
            _ => None,
        };
        let Some((id, token, term)) = term else {
            return Ok(None);
        };
        match self.vacancies.judge(term, now, self.timing.ttl) {
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

    /// Our write landed at `written`: a new term, its token above our floor.
    /// The token is shown from the first renewal on (one write per
    /// acquisition keeps the handover short).
    fn won(&mut self, written: Lease, sent_at: Instant) -> Acquire {
        let token = record::revision(&written).unwrap_or(0).max(self.spent + 1);
        self.spent = token;
        self.term = Some((written, token));
        self.observer = Observer::default();
        Acquire::Won {
            fencing_token: token,
            sent_at,
        }
    }

    /// One look and, when the lease is ours to take, one write.
    async fn attempt(&mut self, sent_at: Instant) -> Result<Option<Acquire>, Error> {
        let now = Instant::now();
        let current = self.client.get(&self.name).await?;
        let wall = Timestamp::now();
        let secs = self.duration_secs();
        let write = match &current {
            None => {
                if let Some(wait) = self.vacancy().await? {
                    return Ok(Some(wait));
                }
                let lease =
                    record::acquisition(None, &self.name, &self.id, &self.digest, secs, wall);
                self.client.create(&lease).await
            }
            Some(lease) => {
                let seen = Seen::of(lease);
                let left = self.observer.look(&seen, now);
                let ours = record::is_ours(lease, &self.id, &self.digest);
                if let Some(left) = left.filter(|l| !ours && !l.is_zero()) {
                    return Ok(Some(Acquire::Held {
                        holder: self.holder_of(lease),
                        expires_in: Some(left),
                    }));
                }
                // Free (released, or expired by our clock), or ours: an
                // attempt of ours whose answer was lost, or a term whose
                // release failed — written again, a new term either way.
                let lease = record::acquisition(
                    Some(lease),
                    &self.name,
                    &self.id,
                    &self.digest,
                    secs,
                    wall,
                );
                self.client.replace(&lease).await
            }
        };
        match write {
            Ok(written) => Ok(Some(self.won(written, sent_at))),
            Err(Failure::Conflict | Failure::Missing) => Ok(None),
            Err(Failure::Other(e)) => Err(e),
        }
    }

    /// Our term's lease, read again after a conflict: still ours (the
    /// fresh object, to write over), or who holds it now.
    async fn reread(&mut self, acquired: &Seen) -> Result<Result<Lease, Option<Holder>>, Error> {
        let current = self.client.get(&self.name).await?;
        Ok(match current {
            Some(lease)
                if record::is_ours(&lease, &self.id, &self.digest)
                    && Seen::of(&lease).acquired == acquired.acquired =>
            {
                Ok(lease)
            }
            Some(lease) => Err(Some(self.holder_of(&lease))),
            None => Err(None),
        })
    }
}

#[async_trait::async_trait]
impl LeaseBackend for KubeLease {
    fn describe(&self) -> String {
        self.client.shown.clone()
    }

    fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.implicit {
            notes.push(format!(
                "no backend configured and leaderd runs in a pod: it elects with the Lease {:?} in the pod's namespace (give --kubernetes-lease, or another backend, to choose)",
                self.name
            ));
        }
        let ms = self.timing.ttl_ms();
        if !ms.is_multiple_of(1000) {
            notes.push(format!(
                "a Lease's duration is whole seconds: leaseDurationSeconds is {} for a ttl of {ms} ms (leaderd still counts its own validity from the ttl)",
                self.duration_secs()
            ));
        }
        notes
    }

    async fn acquire(&mut self) -> Result<Acquire, Error> {
        let sent_at = Instant::now();
        for _ in 0..CONFLICT_ROUNDS {
            if let Some(verdict) = self.attempt(sent_at).await? {
                return Ok(verdict);
            }
        }
        // Still contended: someone else's write keeps landing first.
        let holder = match self.client.get(&self.name).await? {
            Some(lease) => self.holder_of(&lease),
            None => Holder {
                id: None,
                fencing_token: None,
            },
        };
        Ok(Acquire::Held {
            holder,
            expires_in: Some(Duration::ZERO),
        })
    }

    async fn renew(&mut self) -> Result<Renew, Error> {
        let Some((mut mine, token)) = self.term.clone() else {
            return Ok(Renew::Lost { holder: None });
        };
        let sent_at = Instant::now();
        let acquired = Seen::of(&mine);
        let secs = self.duration_secs();
        for _ in 0..CONFLICT_ROUNDS {
            let write = record::with_token(record::renewal(mine, secs, Timestamp::now()), token);
            match self.client.replace(&write).await {
                Ok(written) => {
                    self.term = Some((written, token));
                    return Ok(Renew::Renewed { sent_at });
                }
                Err(Failure::Other(e)) => return Err(e),
                // Changed under us: an annotation someone wrote keeps our
                // term; another holder or none ends it.
                Err(Failure::Conflict | Failure::Missing) => match self.reread(&acquired).await? {
                    Ok(fresh) => mine = fresh,
                    Err(holder) => {
                        self.term = None;
                        return Ok(Renew::Lost { holder });
                    }
                },
            }
        }
        Err(Error::Connection {
            backend: "the Kubernetes API server".into(),
            detail: format!(
                "the Lease changed under every one of {CONFLICT_ROUNDS} renewals in a row"
            ),
        })
    }

    async fn release(&mut self) -> Result<bool, Error> {
        let Some((mut mine, _)) = self.term.take() else {
            return Ok(false);
        };
        let acquired = Seen::of(&mine);
        for _ in 0..CONFLICT_ROUNDS {
            match self
                .client
                .replace(&record::release(mine, Timestamp::now()))
                .await
            {
                Ok(_) => return Ok(true),
                Err(Failure::Other(e)) => return Err(e),
                Err(Failure::Conflict | Failure::Missing) => match self.reread(&acquired).await? {
                    Ok(fresh) => mine = fresh,
                    Err(_) => return Ok(false),
                },
            }
        }
        Ok(false)
    }

    async fn peek(&mut self) -> Result<Peek, Error> {
        let now = Instant::now();
        let Some(lease) = self.client.get(&self.name).await? else {
            return Ok(Peek::default());
        };
        let seen = Seen::of(&lease);
        let expires_in = self.observer.look(&seen, now);
        Ok(Peek {
            holder: seen.holder.is_some().then(|| self.holder_of(&lease)),
            expires_in,
            contested: false,
        })
    }

    async fn register(&mut self, me: Option<&Record>) -> Result<Vec<Record>, Error> {
        let leads = self.term.as_ref().map(|(_, token)| *token);
        self.registry.register(&mut self.client, me, leads).await
    }

    async fn candidates(&mut self) -> Result<Vec<Record>, Error> {
        self.registry.candidates(&mut self.client).await
    }

    fn watch_releases(&self, wakeups: Wakeups) -> Option<JoinHandle<()>> {
        Some(wake::watch(
            Client::new(&self.client.config),
            self.name.clone(),
            wakeups,
        ))
    }

    async fn self_check(&mut self) -> Result<Vec<String>, Error> {
        check::report(self).await
    }
}
