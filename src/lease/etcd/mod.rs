//! etcd: the lease is one key, `PREFIX` + KEY + `/leader`, created in a
//! transaction only if absent and bound to an etcd lease that its holder
//! keeps alive. etcd is linearizable, so at most one candidate's create can
//! succeed; the key's create revision, a cluster-wide counter that never
//! goes back, is the fencing token (no clock floor needed). Renewing is a
//! keep-alive that must come back with a fresh TTL, and a linearizable read
//! that the key is still ours; releasing deletes the key and revokes the
//! lease, so the next candidate, which watches the key, wins at once.
//!
//! This is etcd's own election recipe with one key: `Campaign` blocks until
//! it wins, while leaderd's acquire must answer at once, so the
//! create-if-absent transaction is done here and the waiting is a watch.

mod check;
mod client;
mod watch;

use crate::config::{BackendConfig, Config};
use crate::lease::{Acquire, BoxFuture, Error, Holder, LeaseBackend, Peek, Renew};
use crate::timing::Timing;
use client::{Client, b64, int, unb64};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub struct EtcdLease {
    client: Client,
    /// The leader key.
    key: String,
    id: String,
    timing: Timing,
    /// The etcd lease of our current attempt or term (kept after a timeout,
    /// so the next acquire recognises a key that did get created).
    lease: Option<i64>,
    /// The create revision of our key while we hold it (0: none).
    fencing: i64,
}

impl EtcdLease {
    pub fn open(config: &Config) -> Result<Self, Error> {
        let BackendConfig::Etcd(etcd) = &config.backend else {
            unreachable!("lease::open passes only an etcd configuration")
        };
        Ok(EtcdLease {
            client: Client::new(etcd)?,
            key: format!("{}{}/leader", etcd.prefix, config.key),
            id: config.id.clone(),
            timing: config.timing,
            lease: None,
            fencing: 0,
        })
    }

    /// etcd grants whole seconds: the TTL rounded up.
    fn ttl_secs(&self) -> i64 {
        let ms = self.timing.ttl.as_millis() as i64;
        (ms + 999) / 1000
    }

    async fn grant(&mut self) -> Result<i64, Error> {
        let ttl = self.ttl_secs();
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

    /// The key's current value, linearizably: `(holder, create revision,
    /// its lease)`, or `None` when absent.
    async fn read(&mut self) -> Result<Option<(Holder, i64)>, Error> {
        let reply = self
            .client
            .call("kv/range", &json!({ "key": b64(self.key.as_bytes()) }))
            .await?;
        Ok(reply["kvs"].get(0).map(holder_of))
    }

    /// The remaining TTL of `lease`, for waiters' timers.
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

    async fn acquire_op(&mut self) -> Result<Acquire, Error> {
        // A waiter's look: a read first, so a held key costs no lease grant
        // and revoke (a kept lease means an attempt may have won: go on).
        if self.lease.is_none()
            && let Some((holder, lease)) = self.read().await?
        {
            let expires_in = self.time_to_live(lease).await;
            return Ok(Acquire::Held { holder, expires_in });
        }
        let sent_at = Instant::now();
        // A lease kept from an attempt that timed out: still alive, it may
        // hold the key; else a fresh one.
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
        let key = b64(self.key.as_bytes());
        let value = serde_json::to_string(&json!({ "id": self.id })).expect("serialises");
        let txn = json!({
            "compare": [{ "target": "CREATE", "key": key, "create_revision": "0" }],
            "success": [{ "request_put": { "key": key, "value": b64(value.as_bytes()), "lease": lease.to_string() } }],
            "failure": [{ "request_range": { "key": key } }],
        });
        let reply = self.client.call("kv/txn", &txn).await?;
        if reply["succeeded"].as_bool() == Some(true) {
            self.fencing = int(&reply["header"], "revision");
            return Ok(Acquire::Won {
                fencing_token: self.fencing as u64,
                sent_at,
            });
        }
        let kv = reply["responses"][0]["response_range"]["kvs"]
            .get(0)
            .cloned();
        let Some(kv) = kv else {
            // Deleted in between: look again at once.
            self.revoke(lease).await;
            self.lease = None;
            return Ok(Acquire::Held {
                holder: Holder {
                    id: None,
                    fencing_token: None,
                },
                expires_in: Some(Duration::ZERO),
            });
        };
        let (holder, holder_lease) = holder_of(&kv);
        if holder_lease == lease {
            // Our earlier attempt won after all.
            self.fencing = int(&kv, "create_revision");
            return Ok(Acquire::Won {
                fencing_token: self.fencing as u64,
                sent_at,
            });
        }
        self.revoke(lease).await;
        self.lease = None;
        let expires_in = self.time_to_live(holder_lease).await;
        Ok(Acquire::Held { holder, expires_in })
    }

    async fn renew_op(&mut self) -> Result<Renew, Error> {
        let Some(lease) = self.lease.filter(|_| self.fencing > 0) else {
            return Ok(Renew::Lost { holder: None });
        };
        let sent_at = Instant::now();
        // A keep-alive answered by a member cut off from the quorum cannot
        // come back with a TTL: only the etcd leader grants one.
        if self.keep_alive(lease).await? <= 0 {
            self.lease = None;
            self.fencing = 0;
            let holder = self.read().await.ok().flatten().map(|(h, _)| h);
            return Ok(Renew::Lost { holder });
        }
        match self.read().await? {
            Some((_, holder_lease)) if holder_lease == lease => Ok(Renew::Renewed { sent_at }),
            other => {
                // Deleted or replaced behind our back: our term is over.
                self.revoke(lease).await;
                self.lease = None;
                self.fencing = 0;
                Ok(Renew::Lost {
                    holder: other.map(|(h, _)| h),
                })
            }
        }
    }

    async fn release_op(&mut self) -> Result<bool, Error> {
        let Some(lease) = self.lease else {
            return Ok(false);
        };
        let key = b64(self.key.as_bytes());
        let txn = json!({
            "compare": [{ "target": "LEASE", "key": key, "lease": lease.to_string() }],
            "success": [{ "request_delete_range": { "key": key } }],
        });
        let reply = self.client.call("kv/txn", &txn).await?;
        let released = reply["succeeded"].as_bool() == Some(true);
        self.revoke(lease).await;
        self.lease = None;
        self.fencing = 0;
        Ok(released)
    }

    async fn peek_op(&mut self) -> Result<Peek, Error> {
        let Some((holder, lease)) = self.read().await? else {
            return Ok(Peek::default());
        };
        let expires_in = self.time_to_live(lease).await;
        Ok(Peek {
            holder: Some(holder),
            expires_in,
            contested: false,
        })
    }
}

/// The holder a key names, and the etcd lease it is bound to.
fn holder_of(kv: &Value) -> (Holder, i64) {
    let value = unb64(kv["value"].as_str().unwrap_or(""));
    let id = serde_json::from_slice::<Value>(&value)
        .ok()
        .and_then(|v| v["id"].as_str().map(str::to_string))
        .or_else(|| String::from_utf8(value).ok().filter(|s| !s.is_empty()));
    (
        Holder {
            id,
            fencing_token: Some(int(kv, "create_revision").max(0) as u64),
        },
        int(kv, "lease"),
    )
}

impl LeaseBackend for EtcdLease {
    fn describe(&self) -> String {
        format!("{}, key {}", self.client.shown, self.key)
    }

    fn notes(&self) -> Vec<String> {
        let ms = self.timing.ttl.as_millis();
        if ms.is_multiple_of(1000) {
            return Vec::new();
        }
        vec![format!(
            "etcd grants leases in whole seconds: the lease on etcd lives {} s for a ttl of {ms} ms (leaderd still counts its own validity from the ttl)",
            self.ttl_secs()
        )]
    }

    fn acquire(&mut self) -> BoxFuture<'_, Result<Acquire, Error>> {
        Box::pin(self.acquire_op())
    }

    fn renew(&mut self) -> BoxFuture<'_, Result<Renew, Error>> {
        Box::pin(self.renew_op())
    }

    fn release(&mut self) -> BoxFuture<'_, Result<bool, Error>> {
        Box::pin(self.release_op())
    }

    fn peek(&mut self) -> BoxFuture<'_, Result<Peek, Error>> {
        Box::pin(self.peek_op())
    }

    fn watch_releases(
        &self,
        retry: Duration,
        notices: mpsc::UnboundedSender<()>,
        stop: CancellationToken,
    ) -> Option<JoinHandle<()>> {
        let client = Client::new(&self.client.config).ok()?;
        Some(watch::watch(client, self.key.clone(), retry, notices, stop))
    }

    fn self_check(&mut self) -> BoxFuture<'_, Result<Vec<String>, Error>> {
        Box::pin(self.report())
    }
}
