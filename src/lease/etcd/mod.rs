//! etcd: the lease is one key, `PREFIX` + KEY + `/leader`, created in a
//! transaction only if absent and bound to an etcd lease that its holder
//! keeps alive. etcd is linearizable, so at most one candidate's create can
//! succeed; the key's mod revision at the acquisition, a cluster-wide counter
//! that never goes back, is the fencing token (no clock floor needed).
//! Renewing is a keep-alive that must come back with a fresh TTL, and a
//! linearizable read that the key is still ours; releasing deletes the key
//! and writes the release record in one transaction, then revokes the lease,
//! so the next candidate, which watches the key, wins at once.
//!
//! The etcd lease lives twice the TTL, so a crashed holder's key is seen
//! expired while it is still there and a revoked one is never taken for an
//! expired one (`expiry.rs`).
//!
//! Every acquisition is a new term with a new revision, also when the key
//! still holds an earlier term of ours (a release that failed while etcd was
//! down, and etcd restored our lease when it came back): that key is written
//! again, never handed back with its old token.
//!
//! This is etcd's own election recipe with one key: `Campaign` blocks until
//! it wins, while leaderd's acquire must answer at once, so the
//! create-if-absent transaction is done here and the waiting is a watch.

mod check;
mod client;
pub mod config;
mod expiry;
mod registry;
mod term;
mod wake;

use crate::config::Backend;
use crate::lease::contract::Wakeups;
use crate::lease::contract::open_as;
use crate::lease::contract::{
    Acquire, BackendEntry, Common, Error, Holder, LeaseBackend, Peek, Renew,
};
use crate::lease::registry::Record;
use crate::lease::vacancy::Vacancies;
use crate::timing::Timing;
use client::{Client, b64, int};
use config::EtcdConfig;
use expiry::Sighting;
use serde_json::{Value, json};
use std::time::Duration;
use term::{Current, Keys, Look};
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub struct EtcdLease {
    client: Client,
    keys: Keys,
    id: String,
    timing: Timing,
    /// The etcd lease of our current attempt or term (kept after a timeout,
    /// or a release that failed, so the next acquire recognises a key that
    /// is ours).
    lease: Option<i64>,
    /// The fencing token of our term while we hold it (0: none).
    fencing: i64,
    /// What this candidate's watch heard of the holder's renewals.
    heard: crate::lease::heard::Heard,
    /// The largest token we handed out: never again.
    spent: i64,
    vacancies: Vacancies,
    registry: registry::Registry,
}

/// `holder`'s lease as a waiter's verdict: wait for its logical expiry,
/// look again at once when it is past it, or poll when etcd cannot say.
fn held(holder: Holder, seen: Sighting) -> Acquire {
    let expires_in = match seen {
        Sighting::Held(left) => Some(left),
        Sighting::Expired => Some(Duration::ZERO),
        Sighting::Gone => None,
    };
    Acquire::Held { holder, expires_in }
}

/// Nobody: a vacancy's or a missing holder's [`Holder`].
fn nobody() -> Holder {
    Holder {
        id: None,
        fencing_token: None,
    }
}

/// etcd: a key bound to an etcd lease.
pub const ENTRY: BackendEntry = BackendEntry {
    declared: Some(&config::DECLARED),
    names: &["etcd"],
    open,
    chatty_logs: &[],
};

fn open(backend: &Backend, common: &Common) -> Option<Result<Box<dyn LeaseBackend>, Error>> {
    open_as(backend, common, EtcdLease::open)
}

impl EtcdLease {
    /// A term whose renewals this standby hears needs no question; not
    /// with a lease of ours out (an attempt whose answer was lost).
    fn heard_term(&self) -> Option<(Holder, Duration)> {
        self.lease
            .is_none()
            .then(|| self.heard.answer(Instant::now(), 0, &self.id))?
    }

    /// The lease of `common.key` on the cluster `etcd` names.
    pub fn open(etcd: &EtcdConfig, common: &Common) -> Result<Self, Error> {
        Ok(Self::on(
            Client::new(etcd)?,
            &format!("{}{}", etcd.prefix, common.key),
            &common.id,
            common.timing,
        ))
    }

    fn on(client: Client, base: &str, id: &str, timing: Timing) -> Self {
        EtcdLease {
            client,
            keys: Keys::new(base),
            id: id.to_string(),
            timing,
            lease: None,
            fencing: 0,
            heard: crate::lease::heard::Heard::default(),
            spent: 0,
            vacancies: Vacancies::default(),
            registry: registry::Registry::new(
                base,
                &crate::lease::registry::entry(id),
                timing.registry_lapse(),
            ),
        }
    }

    /// etcd grants whole seconds: the TTL rounded up.
    fn ttl_secs(&self) -> i64 {
        let ms = self.timing.ttl_ms() as i64;
        (ms + 999) / 1000
    }

    async fn grant(&mut self) -> Result<i64, Error> {
        let ttl = self.ttl_secs() + self.grace_secs();
        let reply = self
            .client
            .call("lease/grant", &json!({ "TTL": ttl }))
            .await?;
        let id = int(&reply, "ID");
        if id == 0 {
            return Err(self.client.unexpected("no lease ID in the grant reply"));
        }
        Ok(id)
    }

    /// A keep-alive; the lease's fresh TTL in seconds (0: it is gone).
    async fn keep_alive(&mut self, lease: i64) -> Result<i64, Error> {
        let reply = self
            .client
            .call("lease/keepalive", &json!({ "ID": lease.to_string() }))
            .await?;
        Ok(int(&reply["result"], "TTL"))
    }

    async fn revoke(&mut self, lease: i64) {
        let revoked = self
            .client
            .call("lease/revoke", &json!({ "ID": lease.to_string() }))
            .await;
        if let Err(e) = revoked
            && !e.to_string().contains("lease not found")
        {
            tracing::debug!(error = %e, "could not revoke an etcd lease; it expires by itself");
        }
    }

    /// The leader key, linearizably, or `None` when absent.
    async fn read(&mut self) -> Result<Option<Current>, Error> {
        let reply = self
            .client
            .call(
                "kv/range",
                &json!({ "key": b64(self.keys.leader.as_bytes()) }),
            )
            .await?;
        Ok(reply["kvs"].get(0).map(term::current))
    }

    /// A renewal's second step, in one transaction: the leader key is
    /// still ours (our lease, our term's revision), and then the renewal
    /// is announced on `BASE/renewed` for the standbys' watches (a write
    /// the leader makes once per renewal, whatever the number of
    /// standbys). `None`: ours; else what the key holds now.
    async fn confirm(&mut self, lease: i64) -> Result<Option<Option<Current>>, Error> {
        let key = b64(self.keys.leader.as_bytes());
        let id = serde_json::to_string(&self.id).expect("a string serialises");
        let notice = format!("{} {} {id}", self.fencing, self.timing.ttl_ms());
        let txn = json!({
            "compare": [
                { "target": "LEASE", "key": key, "lease": lease.to_string() },
                { "target": "MOD", "key": key, "mod_revision": self.fencing.to_string() },
            ],
            "success": [{ "request_put": {
                "key": b64(self.keys.renewed.as_bytes()),
                "value": b64(notice.as_bytes()),
                "lease": lease.to_string(),
            } }],
            "failure": [{ "request_range": { "key": key } }],
        });
        let reply = self.client.call("kv/txn", &txn).await?;
        if reply["succeeded"].as_bool() == Some(true) {
            return Ok(None);
        }
        let kv = reply["responses"][0]["response_range"]["kvs"]
            .get(0)
            .cloned();
        Ok(Some(kv.as_ref().map(term::current)))
    }

    /// The leader key and the latest term, in one linearizable read.
    async fn look(&mut self) -> Result<Look, Error> {
        let range = json!({
            "key": b64(self.keys.from.as_bytes()),
            "range_end": b64(self.keys.to.as_bytes()),
        });
        let reply = self.client.call("kv/range", &range).await?;
        let kvs = reply["kvs"].as_array().cloned().unwrap_or_default();
        Ok(self.keys.look(&kvs))
    }

    /// The remaining TTL of `lease`, for waiters' timers; `None` when it is
    /// gone (or unknown).
    async fn time_to_live(&mut self, lease: i64) -> Option<Duration> {
        if lease == 0 {
            return None;
        }
        let reply = self
            .client
            .call("lease/timetolive", &json!({ "ID": lease.to_string() }))
            .await
            .ok()?;
        let ttl = int(&reply, "TTL");
        (ttl >= 0).then(|| Duration::from_secs(ttl as u64))
    }

    fn won(&mut self, token: i64, sent_at: Instant) -> Acquire {
        self.fencing = token;
        self.spent = self.spent.max(token);
        Acquire::Won {
            fencing_token: token as u64,
            sent_at,
        }
    }

    /// The writes of an acquisition: the leader key bound to `lease`, and
    /// the term record naming it.
    fn puts(&self, lease: i64) -> Value {
        let value = json!({ "id": self.id }).to_string();
        let record = json!({ "id": self.id, "lease": lease.to_string() }).to_string();
        json!([
            { "request_put": { "key": b64(self.keys.leader.as_bytes()), "value": b64(value.as_bytes()), "lease": lease.to_string() } },
            { "request_put": { "key": b64(self.keys.term.as_bytes()), "value": b64(record.as_bytes()) } },
        ])
    }

    /// Creates the leader key if absent; on failure, reads it.
    async fn create(&mut self, lease: i64) -> Result<Value, Error> {
        let key = b64(self.keys.leader.as_bytes());
        let txn = json!({
            "compare": [{ "target": "CREATE", "key": key, "create_revision": "0" }],
            "success": self.puts(lease),
            "failure": [{ "request_range": { "key": key } }],
        });
        self.client.call("kv/txn", &txn).await
    }

    /// Writes the leader key as ours, bound to `lease`, if it is still at
    /// `revision`: another holder's key seen past its logical expiry.
    async fn take_over(&mut self, lease: i64, revision: i64) -> Result<Value, Error> {
        let key = b64(self.keys.leader.as_bytes());
        let txn = json!({
            "compare": [{ "target": "MOD", "key": key, "mod_revision": revision.to_string() }],
            "success": self.puts(lease),
        });
        self.client.call("kv/txn", &txn).await
    }

    /// Writes our leader key again, if it is still at `revision` and bound
    /// to `lease`: a new term of a key we already held.
    async fn rewrite(&mut self, lease: i64, revision: i64) -> Result<Value, Error> {
        let key = b64(self.keys.leader.as_bytes());
        let txn = json!({
            "compare": [
                { "target": "LEASE", "key": key, "lease": lease.to_string() },
                { "target": "MOD", "key": key, "mod_revision": revision.to_string() },
            ],
            "success": self.puts(lease),
        });
        self.client.call("kv/txn", &txn).await
    }
}

#[async_trait::async_trait]
impl LeaseBackend for EtcdLease {
    fn describe(&self) -> String {
        format!("{}, key {}", self.client.shown, self.keys.leader)
    }

    fn fence_exports(&self) -> Vec<(&'static str, String)> {
        vec![("LEADERD_ETCD_LEADER_KEY", self.keys.leader.clone())]
    }

    fn notes(&self) -> Vec<String> {
        let ms = self.timing.ttl_ms();
        if ms.is_multiple_of(1000) {
            return Vec::new();
        }
        vec![format!(
            "etcd grants leases in whole seconds: a term lasts {} s on etcd for a ttl of {ms} ms (leaderd still counts its own validity from the ttl)",
            self.ttl_secs()
        )]
    }

    async fn acquire(&mut self) -> Result<Acquire, Error> {
        if let Some((holder, left)) = self.heard_term() {
            return Ok(Acquire::Held {
                holder,
                expires_in: Some(left),
            });
        }
        // A waiter's look: a read first, so a held key costs no lease grant
        // and revoke.
        let look = self.look().await?;
        // Another holder's key, seen past its logical expiry: the key it
        // was at, to take over.
        let mut expired = None;
        match &look.current {
            Some(c) if Some(c.lease) != self.lease => match self.sight(c.revision, c.lease).await {
                Sighting::Expired => expired = Some((c.revision, c.lease)),
                seen => return Ok(held(c.holder.clone(), seen)),
            },
            Some(_) => {}
            None => {
                if let Some(wait) = self.vacancy(&look).await {
                    return Ok(wait);
                }
            }
        }
        let sent_at = Instant::now();
        // A lease kept from an attempt that timed out, or from a term whose
        // release failed: still alive, it may hold the key; else a fresh one.
        let mut kept = self.lease;
        if let Some(lease) = kept
            && self.keep_alive(lease).await? <= 0
        {
            kept = None;
        }
        let lease = match kept {
            Some(lease) => lease,
            None => self.grant().await?,
        };
        self.lease = Some(lease);
        if let Some((revision, theirs)) = expired {
            let reply = self.take_over(lease, revision).await?;
            if reply["succeeded"].as_bool() == Some(true) {
                // Its key is ours now; its lease would only linger.
                self.revoke(theirs).await;
                return Ok(self.won(int(&reply["header"], "revision"), sent_at));
            }
            // Written meanwhile (renewed keys are not rewritten, so by a
            // new term, or deleted): look again at once.
            return Ok(Acquire::Held {
                holder: nobody(),
                expires_in: Some(Duration::ZERO),
            });
        }
        let reply = self.create(lease).await?;
        if reply["succeeded"].as_bool() == Some(true) {
            return Ok(self.won(int(&reply["header"], "revision"), sent_at));
        }
        let kv = reply["responses"][0]["response_range"]["kvs"]
            .get(0)
            .cloned();
        let Some(kv) = kv else {
            // Deleted in between: look again at once.
            self.revoke(lease).await;
            self.lease = None;
            return Ok(Acquire::Held {
                holder: nobody(),
                expires_in: Some(Duration::ZERO),
            });
        };
        let current = term::current(&kv);
        if current.lease != lease {
            self.revoke(lease).await;
            self.lease = None;
            // Seen expired just now: the next look takes it over.
            let seen = self.sight(current.revision, current.lease).await;
            return Ok(held(current.holder, seen));
        }
        if current.revision > self.spent {
            // Our earlier attempt won after all; its token was never handed out.
            return Ok(self.won(current.revision, sent_at));
        }
        // An earlier term of ours, still in etcd: a new term needs a new
        // revision, so write the key again.
        let reply = self.rewrite(lease, current.revision).await?;
        if reply["succeeded"].as_bool() == Some(true) {
            return Ok(self.won(int(&reply["header"], "revision"), sent_at));
        }
        Ok(Acquire::Held {
            holder: nobody(),
            expires_in: Some(Duration::ZERO),
        })
    }

    async fn renew(&mut self) -> Result<Renew, Error> {
        let Some(lease) = self.lease.filter(|_| self.fencing > 0) else {
            return Ok(Renew::Lost { holder: None });
        };
        let sent_at = Instant::now();
        // A keep-alive answered by a member cut off from the quorum cannot
        // come back with a TTL: only the etcd leader grants one.
        if self.keep_alive(lease).await? <= 0 {
            self.lease = None;
            self.fencing = 0;
            let holder = self.read().await.ok().flatten().map(|c| c.holder);
            return Ok(Renew::Lost { holder });
        }
        match self.confirm(lease).await? {
            None => Ok(Renew::Renewed { sent_at }),
            Some(other) => {
                // Deleted or replaced behind our back: our term is over. The
                // lease is left to expire, not revoked: while it lives,
                // waiters know our work may still run.
                self.lease = None;
                self.fencing = 0;
                Ok(Renew::Lost {
                    holder: other.map(|c| c.holder),
                })
            }
        }
    }

    async fn release(&mut self) -> Result<bool, Error> {
        let Some(lease) = self.lease else {
            return Ok(false);
        };
        // Whatever happens next, this term is over: an acquire that finds
        // the key still ours takes it as a new term.
        self.fencing = 0;
        let key = b64(self.keys.leader.as_bytes());
        let txn = json!({
            "compare": [{ "target": "LEASE", "key": key, "lease": lease.to_string() }],
            "success": [
                { "request_delete_range": { "key": key } },
                { "request_put": { "key": b64(self.keys.released.as_bytes()), "value": b64(self.id.as_bytes()) } },
            ],
        });
        let reply = self.client.call("kv/txn", &txn).await?;
        let released = reply["succeeded"].as_bool() == Some(true);
        self.revoke(lease).await;
        self.lease = None;
        Ok(released)
    }

    async fn look(&mut self) -> Result<Peek, Error> {
        match self.heard_term() {
            Some(heard) => Ok(Peek::heard(heard)),
            None => self.peek().await,
        }
    }

    async fn peek(&mut self) -> Result<Peek, Error> {
        let Some(current) = self.read().await? else {
            return Ok(Peek::default());
        };
        let grace = Duration::from_secs(self.grace_secs() as u64);
        let expires_in = self
            .time_to_live(current.lease)
            .await
            .map(|left| left.saturating_sub(grace));
        Ok(Peek {
            holder: Some(current.holder),
            expires_in,
            contested: false,
        })
    }

    async fn register(&mut self, me: Option<&Record>) -> Result<Vec<Record>, Error> {
        self.registry.register(&mut self.client, me).await
    }

    async fn candidates(&mut self) -> Result<Vec<Record>, Error> {
        self.registry.candidates(&mut self.client).await
    }

    fn watch_releases(&self, wakeups: Wakeups) -> Option<JoinHandle<()>> {
        let client = Client::new(&self.client.config).ok()?;
        let watched = wake::Watched {
            leader: self.keys.leader.clone(),
            renewed: self.keys.renewed.clone(),
            from: self.keys.from.clone(),
            to: self.keys.to.clone(),
            heard: self.heard.clone(),
        };
        Some(wake::watch(client, watched, wakeups))
    }

    fn standby_reads(&self) -> crate::lease::StandbyReads {
        if self.heard.live() {
            crate::lease::StandbyReads::Watch
        } else {
            crate::lease::StandbyReads::Fallback
        }
    }

    async fn self_check(&mut self) -> Result<Vec<String>, Error> {
        self.report().await
    }
}
