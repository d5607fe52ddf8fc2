//! Kubernetes: the lease is a `coordination.k8s.io/v1` Lease object, with
//! the record client-go writes (`holderIdentity`, `leaseDurationSeconds`,
//! `acquireTime`, `renewTime`, `leaseTransitions`), so `kubectl get lease`
//! names the holder and client-go electors honour it. Every write is a
//! compare-and-swap on `resourceVersion` (a create when absent); a 409
//! means read again and judge, never "lost" on a write that may have
//! landed. Another holder's lease expires by the observer's clock
//! (`observe.rs`), fed by every GET and every watch event. The fencing
//! token is the `resourceVersion` of the acquiring write — etcd's
//! revision, which only grows — above this candidate's floor, and is shown
//! in an annotation for people to read. A release clears the holder
//! (client-go's `ReleaseOnCancel`) after the work stopped; waiters watch
//! the object and try at once.
//!
//! The Lease lives in a store anyone with RBAC can write, so nothing a
//! candidate last saw is trusted over what the store now holds:
//! - "ours" is this process's own latest write still there, not our id
//!   (a restored copy, a client-go elector with the same id, an edit of
//!   the record end our term at the next look, which the watch makes at
//!   once);
//! - a Lease deleted, or its holder cleared with a leaderd term's
//!   annotations kept, is a vacancy nobody announced: taken only after the
//!   larger of our TTL and the longest duration the term carried, from
//!   its first sight — unless a look found that term's record still
//!   there past its expiry (its holder died), the contract's vacancy rule;
//! - a duration shortened from outside does not shorten the term for a
//!   waiter that saw it longer, and never below the waiter's own TTL.
//!
//! Beside the Lease, [`herald`] tells the cluster of each term: the
//! Service that follows the leader and the Events on the Lease.

mod check;
mod client;
pub mod config;
pub mod herald;
mod judge;
pub mod names;
mod observe;
mod record;
mod registry;
mod wake;

use crate::config::Backend;
use crate::lease::contract::{
    Acquire, BackendEntry, Common, Error, Holder, LeaseBackend, Peek, Renew, Wakeups, open_as,
};
use crate::lease::registry::Record;
use crate::lease::vacancy::Vacancies;
use crate::timing::Timing;
use client::{Client, Failure};
use config::KubernetesConfig;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use observe::Shared;
use record::Seen;
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
    /// The records of our writes since the last one whose answer came back
    /// (an acquisition, renewal or release that timed out): ours too if one
    /// landed (a release's record carries no owner, so it is never taken
    /// for a term of ours, only for the release it was).
    sent: Vec<Seen>,
    /// The largest token we handed out: never again.
    spent: u64,
    /// Our latest term (its `acquireTime`, as the vacancy rule names
    /// terms): a vacancy of it is ours to take at once, since we acquire
    /// only after our work stopped.
    mine: Option<u64>,
    /// What this candidate saw of the Lease, shared with its watch.
    observer: Shared,
    vacancies: Vacancies,
    registry: registry::Registry,
    implicit: bool,
    /// What [`herald`] needs: the configuration, and how often it tries a
    /// write again.
    announce: (KubernetesConfig, Duration),
    /// Said once: the API server's `resourceVersion` is not a number.
    opaque_warned: bool,
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
            sent: Vec::new(),
            spent: 0,
            mine: None,
            observer: Shared::default(),
            vacancies: Vacancies::default(),
            registry: registry::Registry::new(
                &config.lease,
                &crate::lease::registry::entry(&common.id),
                common.timing.registry_lapse(),
            ),
            implicit: config.implicit,
            announce: (config.clone(), common.timing.retry_interval),
            opaque_warned: false,
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

    /// Our own latest write is what the Lease holds.
    fn is_ours(&self, lease: &Lease) -> bool {
        let written = self.term.as_ref().map(|(l, _)| Seen::of(l));
        let writes: Vec<&Seen> = written.iter().chain(&self.sent).collect();
        record::is_ours(lease, &self.digest, &writes)
    }

    /// A write about to be sent: ours if it lands, whether or not its
    /// answer comes back. A few are kept (one per timed-out try).
    fn sending(&mut self, write: &Lease) {
        if self.sent.len() >= CONFLICT_ROUNDS * 2 {
            self.sent.remove(0);
        }
        self.sent.push(Seen::of(write));
    }

    /// One GET, dated when its answer came (a renewal that lands during a
    /// slow GET is not credited to the instant it was sent), and fed to
    /// the observer.
    async fn get(&mut self) -> Result<Option<Lease>, Error> {
        let current = self.client.get(&self.name).await?;
        self.observer.lock().look(current.as_ref(), Instant::now());
        Ok(current)
    }

    /// Our write landed at `written`: a new term, its token above our floor.
    /// The token is shown from the first renewal on (one write per
    /// acquisition keeps the handover short).
    fn won(&mut self, written: Lease, sent_at: Instant) -> Acquire {
        let revision = record::revision(&written);
        if revision.is_none() && !self.opaque_warned {
            self.opaque_warned = true;
            tracing::warn!(
                resource_version = written.metadata.resource_version.as_deref(),
                "the API server's resourceVersion is not a number: fencing tokens count up from this process's last one only, so a restarted candidate may hand out a token an earlier process used (docs/kubernetes.md)"
            );
        }
        let token = revision.unwrap_or(0).max(self.spent + 1);
        self.spent = token;
        self.mine = Some(Seen::of(&written).term());
        self.term = Some((written, token));
        self.sent.clear();
        Acquire::Won {
            fencing_token: token,
            sent_at,
        }
    }

    /// One look and, when the lease is ours to take, one write.
    async fn attempt(&mut self, sent_at: Instant) -> Result<Option<Acquire>, Error> {
        let current = self.get().await?;
        let wall = record::stamp(Timestamp::now());
        let secs = self.duration_secs();
        let write = match &current {
            None => {
                if let Some(wait) = self.vacancy(None).await? {
                    return Ok(Some(wait));
                }
                let lease =
                    record::acquisition(None, &self.name, &self.id, &self.digest, secs, wall);
                self.sending(&lease);
                self.client.create(&lease).await
            }
            Some(lease) => {
                let seen = Seen::of(lease);
                let ours = self.is_ours(lease);
                if seen.holder.is_none()
                    && let Some(wait) = self.vacancy(Some(lease)).await?
                {
                    return Ok(Some(wait));
                }
                if seen.holder.is_some() && !ours {
                    let now = Instant::now();
                    let left = self.observer.lock().left_of(&seen, now, self.timing.ttl);
                    match left {
                        Some(left) if !left.is_zero() => {
                            return Ok(Some(Acquire::Held {
                                holder: self.holder_of(lease),
                                expires_in: Some(left),
                            }));
                        }
                        // Still there past its expiry: its holder stopped
                        // renewing, so a delete of it now frees it at once.
                        Some(_) => self.vacancies.saw_expired(seen.term()),
                        // The watch has seen it change since this read (a
                        // renewal, a delete): judge nothing of it, look again.
                        None => return Ok(None),
                    }
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
                self.sending(&lease);
                self.client.replace(&lease).await
            }
        };
        match write {
            Ok(written) => Ok(Some(self.won(written, sent_at))),
            Err(Failure::Conflict | Failure::Missing) => Ok(None),
            Err(Failure::Other(e)) => Err(e),
        }
    }

    /// Our term's lease, read again after a conflict: still holding our own
    /// latest write (someone only annotated it: the fresh object, to write
    /// over), or who holds it now. Another process writing under our id
    /// is said here, once per term.
    async fn reread(&mut self) -> Result<Result<Lease, Option<Holder>>, Error> {
        let current = self.get().await?;
        Ok(match current {
            Some(lease) if self.is_ours(&lease) => Ok(lease),
            Some(lease) => {
                let holder = self.holder_of(&lease);
                if holder.id.as_deref() == Some(self.id.as_str()) {
                    tracing::error!(
                        id = %self.id,
                        "the Lease was written under this candidate's id by another process (a second leaderd or a client-go elector with the same id, or a restored copy): ending this term; give every candidate a unique --id"
                    );
                }
                Err(Some(holder))
            }
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

    fn standby_reads(&self) -> crate::lease::StandbyReads {
        if self.observer.lock().live() {
            crate::lease::StandbyReads::Watch
        } else {
            crate::lease::StandbyReads::Fallback
        }
    }

    async fn acquire(&mut self) -> Result<Acquire, Error> {
        if let Some(held) = self.watched() {
            return Ok(held);
        }
        let sent_at = Instant::now();
        for _ in 0..CONFLICT_ROUNDS {
            if let Some(verdict) = self.attempt(sent_at).await? {
                return Ok(verdict);
            }
        }
        // Still contended: someone else's write keeps landing first.
        let holder = match self.get().await? {
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
        let secs = self.duration_secs();
        for _ in 0..CONFLICT_ROUNDS {
            let now = record::stamp(Timestamp::now());
            let write = record::with_token(record::renewal(mine, secs, now), token);
            self.sending(&write);
            match self.client.replace(&write).await {
                Ok(written) => {
                    self.term = Some((written, token));
                    self.sent.clear();
                    return Ok(Renew::Renewed { sent_at });
                }
                Err(Failure::Other(e)) => return Err(e),
                // Changed under us: an annotation someone added keeps our
                // term; anything else (another holder or none, an edit of
                // the record, a restore, a delete) ends it.
                Err(Failure::Conflict | Failure::Missing) => match self.reread().await? {
                    Ok(fresh) => mine = fresh,
                    Err(holder) => {
                        self.term = None;
                        self.sent.clear();
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

    /// The term is kept until the release lands or the term is known gone:
    /// a release that timed out is tried again (by the lease worker), so
    /// waiters are not left to sit out a whole duration.
    async fn release(&mut self) -> Result<bool, Error> {
        let mut mine = match self.term.clone() {
            Some((mine, _)) => mine,
            // No term, but an acquisition whose answer was lost may have
            // landed: give it back if it did.
            None if !self.sent.is_empty() => match self.get().await? {
                Some(current) if self.is_ours(&current) => current,
                _ => {
                    self.sent.clear();
                    return Ok(false);
                }
            },
            None => return Ok(false),
        };
        for _ in 0..CONFLICT_ROUNDS {
            let write = record::release(mine, record::stamp(Timestamp::now()));
            self.sending(&write);
            let outcome = match self.client.replace(&write).await {
                Ok(_) => Ok(true),
                Err(Failure::Other(e)) => return Err(e),
                Err(Failure::Conflict | Failure::Missing) => match self.reread().await? {
                    Ok(fresh) => {
                        mine = fresh;
                        continue;
                    }
                    // An earlier try of this release landed though its
                    // answer was lost: released, not "no longer ours".
                    Err(_) => Ok(self
                        .observer
                        .lock()
                        .present()
                        .is_some_and(|s| self.sent.contains(&s.seen))),
                },
            };
            self.term = None;
            self.sent.clear();
            return outcome;
        }
        Ok(false)
    }

    async fn look(&mut self) -> Result<Peek, Error> {
        match self.watched() {
            Some(Acquire::Held { holder, expires_in }) => Ok(Peek {
                holder: Some(holder),
                expires_in,
                contested: false,
            }),
            _ => self.peek().await,
        }
    }

    async fn peek(&mut self) -> Result<Peek, Error> {
        let Some(lease) = self.get().await? else {
            return Ok(Peek::default());
        };
        let seen = Seen::of(&lease);
        let expires_in = self.observer.lock().left(Instant::now(), self.timing.ttl);
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

    fn herald(&self) -> Option<crate::lease::herald::Started> {
        let (config, retry) = &self.announce;
        herald::start(config, &self.id, *retry)
    }

    fn watch_releases(&self, wakeups: Wakeups) -> Option<JoinHandle<()>> {
        Some(wake::watch(
            Client::new(&self.client.config),
            self.name.clone(),
            self.observer.clone(),
            self.timing.ttl,
            wakeups,
        ))
    }

    async fn self_check(&mut self) -> Result<Vec<String>, Error> {
        check::report(self).await
    }
}
