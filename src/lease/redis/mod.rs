//! The Redis lease: one key `leaderd:{KEY}:lease` holding
//! `{"id", "fencing_token", "owner"}` (owner: the SHA-1 of the ownership
//! token, never the token) with a TTL, a counter
//! `leaderd:{KEY}:fence`, the wake list `leaderd:{KEY}:wake` (see
//! [`wake`]) and the channel `leaderd:{KEY}:released`. Every
//! operation is one Lua script, called by hash (reloaded after `NOSCRIPT`),
//! under one overall timeout.

mod check;
pub mod config;
#[cfg(test)]
mod config_tests;
pub mod keys;
pub mod registry;
pub mod renewals;
pub(crate) mod script;
pub mod wake;

use super::contract::{
    Acquire, BackendEntry, Common, Error, Holder, LeaseBackend, Peek, Renew, new_token,
};
use crate::client::redis::classify::classify;
use crate::client::redis::link::Link;
use crate::client::redis::urls::{RedisUrl, WaitReplicas};
use crate::config::Backend;
use crate::lease::contract::Wakeups;
use crate::lease::contract::open_as;
use crate::lease::registry::{Record, entry};
use config::RedisConfig;
use keys::{Keys, blocked, blocked_error, keys};
use redis::Value;
use script::{Reply, Scripts, eval, parse_reply, unexpected};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub struct RedisLease {
    link: Link,
    lease_key: String,
    term_key: String,
    counter_key: String,
    ended_key: String,
    wake_key: String,
    channel: String,
    /// Where terms and renewals are published, and what this candidate
    /// heard there ([`renewals`]).
    renewed: String,
    renewals: crate::lease::heard::Heard,
    registry_key: String,
    id: String,
    id_json: String,
    ttl_ms: u64,
    /// How long our registry record lives after a write ([`crate::timing::Timing::registry_lapse`]).
    registry_ms: u64,
    /// The ownership token of the lease we hold or may hold (after a timeout).
    token: Option<String>,
    /// Highest fencing token seen for this key: a floor for the next one, so
    /// tokens keep growing even if Redis forgot the counter.
    highest_fencing: u64,
    scripts: Scripts,
    /// What it was opened from, for `check`'s scratch election.
    opened: Option<(RedisConfig, Common)>,
}

/// Redis, with Sentinel and Cluster; its options with several URLs choose
/// Redlock (`crate::lease::redlock`), a backend of its own.
pub const ENTRY: BackendEntry = BackendEntry {
    declared: Some(&config::DECLARED),
    names: &["redis"],
    open,
    chatty_logs: &[],
};

/// Opens one server (or its Sentinel or Cluster deployment).
fn open(backend: &Backend, common: &Common) -> Option<Result<Box<dyn LeaseBackend>, Error>> {
    open_as(backend, common, RedisLease::open)
}

impl RedisLease {
    /// The lease of `common.key` on the Redis `config` names.
    pub fn open(config: &RedisConfig, common: &Common) -> Result<Self, Error> {
        let RedisConfig {
            url,
            timeout,
            tls,
            wait,
            sentinel_password,
        } = config;
        // Under Sentinel and Cluster the node is found at the first operation.
        let route = crate::client::redis::route::Route::open(
            url,
            tls,
            &keys(&common.key).lease,
            sentinel_password,
        )?;
        let client = match route {
            crate::client::redis::route::Route::Direct => {
                Some(crate::client::redis::tls::client(url, tls)?)
            }
            _ => None,
        };
        let mut lease = Self::new(
            client,
            url,
            *timeout,
            &common.key,
            &common.id,
            common.timing.ttl,
        );
        lease.link.wait = *wait;
        lease.registry_ms = common.timing.registry_lapse().as_millis() as u64;
        lease.link.route = route;
        lease.opened = Some((config.clone(), common.clone()));
        Ok(lease)
    }

    fn new(
        client: Option<redis::Client>,
        url: &RedisUrl,
        timeout: Duration,
        key: &str,
        id: &str,
        ttl: Duration,
    ) -> Self {
        let Keys {
            lease: lease_key,
            term: term_key,
            counter: counter_key,
            ended: ended_key,
            wake: wake_key,
            channel,
            renewed,
        } = keys(key);
        let scripts = Scripts::new();
        RedisLease {
            link: Link {
                target: tokio::sync::watch::Sender::new(client),
                route: crate::client::redis::route::Route::Direct,
                master: None,
                preload: scripts.sources.clone(),
                conn: None,
                timeout,
                request_timeout: None,
                url: url.redacted().to_string(),
                timeouts_in_a_row: 0,
                wait: WaitReplicas::Count(0),
                replicas: None,
                started: None,
                dialing: None,
                track_start: false,
            },
            lease_key,
            term_key,
            counter_key,
            ended_key,
            wake_key,
            channel,
            renewed,
            renewals: crate::lease::heard::Heard::default(),
            registry_key: registry::key(key),
            id: id.to_string(),
            id_json: serde_json::to_string(id).expect("a string always serialises"),
            ttl_ms: ttl.as_millis() as u64,
            registry_ms: ttl.as_millis() as u64,
            token: None,
            highest_fencing: 0,
            scripts,
            opened: None,
        }
    }

    fn wake_queue(&self) -> wake::WakeQueue {
        wake::WakeQueue {
            target: self.link.target.subscribe(),
            key: self.wake_key.clone(),
            timeout: self.link.timeout,
            own_id: serde_json::from_str(&self.id_json).expect("id_json is a JSON string"),
            shown: self.link.url.clone(),
            renewals: self.renewals.clone(),
        }
    }

    /// Where this candidate hears terms and renewals.
    fn renewals_source(&self) -> renewals::Source {
        renewals::Source {
            target: self.link.target.subscribe(),
            renewed: self.renewed.clone(),
            timeout: self.link.timeout,
            shown: self.link.url.clone(),
            renewals: self.renewals.clone(),
        }
    }

    /// Checks that waiters can block on the wake list (`leaderd check`).
    async fn probe_wake_queue(&self) -> Result<(), Error> {
        wake::probe(&self.wake_queue())
            .await
            .map_err(|e| classify(e, &self.link.url, self.link.timeout))
    }

    /// A lease nobody can take over: a value leaderd did not write, or one
    /// without an expiry (leaderd always sets one; `PERSIST` removes it),
    /// which never lapses if its holder is gone.
    fn blocked(&self, holder: &Option<Holder>, expires_in: Option<Duration>) -> Option<Error> {
        blocked(&self.link.url, &self.lease_key, holder, expires_in)
    }

    fn blocked_error(&self, what: String) -> Error {
        blocked_error(&self.link.url, &self.lease_key, what)
    }

    /// `WRONGTYPE` from the script: the key is not a string at all.
    fn wrong_type(&self, e: Error) -> Error {
        match &e {
            Error::Unexpected { detail, .. } if detail.contains("WRONGTYPE") => {
                self.blocked_error("it is not a string (another program uses this key)".into())
            }
            _ => e,
        }
    }

    /// A term whose renewals this standby hears needs no question. Not
    /// with a token out: an earlier attempt's answer was lost, and only
    /// Redis can say whether it won.
    fn heard(&self) -> Option<(Holder, Duration)> {
        let own = self.id_json.trim_matches('"');
        self.token.is_none().then(|| {
            self.renewals
                .answer(Instant::now(), self.highest_fencing, own)
        })?
    }

    fn observe(&mut self, holder: &Option<Holder>) {
        if let Some(seen) = holder.as_ref().and_then(|h| h.fencing_token) {
            self.highest_fencing = self.highest_fencing.max(seen);
        }
    }
}

#[async_trait::async_trait]
impl LeaseBackend for RedisLease {
    fn describe(&self) -> String {
        self.link.url.clone()
    }

    async fn acquire(&mut self) -> Result<Acquire, Error> {
        if let Some((holder, left)) = self.heard() {
            return Ok(Acquire::Held {
                holder,
                expires_in: Some(left),
            });
        }
        let token = self.token.get_or_insert_with(new_token).clone();
        let sent_at = Instant::now();
        let call = eval(
            &self.scripts.acquire,
            &[
                &self.lease_key,
                &self.counter_key,
                &self.term_key,
                &self.ended_key,
            ],
            &[&token, &self.id_json, &self.ttl_ms, &self.highest_fencing],
        );
        let (reply, replication) =
            match self.link.write(&call).await.map_err(|e| self.wrong_type(e)) {
                Ok(written) => written,
                Err(e) => {
                    if let Error::Blocked { .. } = e {
                        // The script failed before writing: this token did not win.
                        self.token = None;
                    }
                    return Err(e);
                }
            };
        match parse_reply(&reply, &self.link.url)? {
            Reply::Held(holder, expires_in) if self.blocked(&holder, expires_in).is_some() => {
                self.token = None;
                Err(self.blocked(&holder, expires_in).expect("checked"))
            }
            Reply::Ours(fencing_token) => {
                self.highest_fencing = self.highest_fencing.max(fencing_token);
                if let Some(short) = replication.shortfall(&self.link.url) {
                    // Not acknowledged by enough replicas: a failover now
                    // could hand the lease to another. Give it back (owner-
                    // checked, on the same primary) and fail the attempt.
                    let _ = self.release().await;
                    return Err(short);
                }
                Ok(Acquire::Won {
                    fencing_token,
                    sent_at,
                })
            }
            Reply::Held(holder, expires_in) => {
                // Not ours: an earlier timed-out attempt with this token lost.
                self.token = None;
                self.observe(&holder);
                Ok(Acquire::Held {
                    holder: holder.unwrap_or(Holder {
                        id: None,
                        fencing_token: None,
                    }),
                    expires_in,
                })
            }
        }
    }

    async fn renew(&mut self) -> Result<Renew, Error> {
        let Some(token) = self.token.clone() else {
            return Ok(Renew::Lost { holder: None });
        };
        let sent_at = Instant::now();
        let call = eval(
            &self.scripts.renew,
            &[&self.lease_key, &self.term_key],
            &[&token, &self.ttl_ms, &self.renewed],
        );
        let (reply, replication) = self.link.write(&call).await?;
        match parse_reply(&reply, &self.link.url)? {
            // Too few acknowledgements: a failed renewal (not a lost one),
            // so a leader whose replicas stay away steps down at its deadline.
            Reply::Ours(_) => match replication.shortfall(&self.link.url) {
                Some(short) => Err(short),
                None => Ok(Renew::Renewed { sent_at }),
            },
            Reply::Held(holder, _) => {
                self.token = None;
                self.observe(&holder);
                Ok(Renew::Lost { holder })
            }
        }
    }

    async fn release(&mut self) -> Result<bool, Error> {
        let Some(token) = self.token.clone() else {
            return Ok(false);
        };
        let call = eval(
            &self.scripts.release,
            &[
                &self.lease_key,
                &self.wake_key,
                &self.term_key,
                &self.ended_key,
            ],
            &[
                &token,
                &self.channel,
                &wake::WAKE_COPIES,
                &(wake::WAKE_LINGER.as_millis() as u64),
            ],
        );
        let reply = self.link.invoke(&call).await?;
        self.token = None;
        match reply {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            other => Err(unexpected(&self.link.url, &other)),
        }
    }

    async fn look(&mut self) -> Result<Peek, Error> {
        match self.heard() {
            Some(heard) => Ok(Peek::heard(heard)),
            None => self.peek().await,
        }
    }

    async fn peek(&mut self) -> Result<Peek, Error> {
        let keys = [
            &*self.lease_key,
            &self.term_key,
            &self.counter_key,
            &self.ended_key,
        ];
        let call = eval(&self.scripts.peek, &keys, &[&self.ttl_ms]);
        let reply = self
            .link
            .invoke(&call)
            .await
            .map_err(|e| self.wrong_type(e))?;
        match parse_reply(&reply, &self.link.url)? {
            Reply::Held(holder, expires_in) => {
                if let Some(blocked) = self.blocked(&holder, expires_in) {
                    return Err(blocked);
                }
                self.observe(&holder);
                Ok(Peek {
                    holder,
                    expires_in,
                    contested: false,
                })
            }
            Reply::Ours(_) => Err(unexpected(&self.link.url, &reply)),
        }
    }

    fn standby_reads(&self) -> crate::lease::StandbyReads {
        if self.renewals.live() {
            crate::lease::StandbyReads::Watch
        } else {
            crate::lease::StandbyReads::Fallback
        }
    }

    fn watch_releases(&self, wakeups: Wakeups) -> Option<JoinHandle<()>> {
        let subscription = renewals::subscribe(self.renewals_source(), &wakeups);
        let wake = wake::watch(self.wake_queue(), wakeups);
        Some(tokio::spawn(async move {
            let _ = tokio::join!(subscription, wake);
        }))
    }

    async fn register(&mut self, me: Option<&Record>) -> Result<Vec<Record>, Error> {
        let (key, entry) = (&self.registry_key, &entry(&self.id));
        let call = registry::register(&self.scripts, key, entry, me, self.registry_ms);
        let reply = self.link.invoke(&call).await?;
        registry::records(&reply, &self.link.url)
    }

    async fn candidates(&mut self) -> Result<Vec<Record>, Error> {
        let call = registry::candidates(&self.scripts, &self.registry_key);
        let reply = self.link.invoke(&call).await?;
        registry::records(&reply, &self.link.url)
    }

    /// Runs acquire, renew and release on a scratch election (`KEY.check`)
    /// as the configured user, one short `BLPOP` on its wake list and one
    /// `SUBSCRIBE` to its renewals, so a
    /// missing ACL permission shows up now rather than at the first
    /// election. Leaves only the scratch token counter and its
    /// released token (`KEY.check` keys without expiry) behind.
    async fn self_check(&mut self) -> Result<Vec<String>, Error> {
        let (config, common) = self.opened.clone().expect("opened from its settings");
        let mut scratch = RedisLease::open(&config, &common.scratch())?;
        // Held by another `check` running right now: acquire was exercised.
        crate::lease::scratch::exercise(&mut scratch).await?;
        scratch.probe_wake_queue().await?;
        renewals::probe(&scratch.renewals_source())
            .await
            .map_err(|e| classify(e, &scratch.link.url, scratch.link.timeout))?;
        let mut lines = Vec::new();
        if !matches!(
            scratch.link.route,
            crate::client::redis::route::Route::Direct
        ) || scratch.link.wait != WaitReplicas::Count(0)
        {
            lines.extend(scratch.link.report().await?);
        }
        if let RedisConfig {
            url, timeout, tls, ..
        } = &config
            && url.is_tls()
            && url.sentinel().is_none()
            && url.cluster().is_none()
        {
            lines.extend(crate::client::redis::tls::report(url, tls, *timeout).await?);
        }
        lines.push(format!(
                "acquire, renew, release and the wait for wake-ups run as the configured user (scratch key {})",
                scratch.lease_key
            ));
        Ok(lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag() {
        let k = keys("jobs");
        assert_eq!(k.lease, "leaderd:{jobs}:lease");
        assert_eq!(k.term, "leaderd:{jobs}:term");
        assert_eq!(k.counter, "leaderd:{jobs}:fence");
        assert_eq!(k.ended, "leaderd:{jobs}:ended");
        assert_eq!(k.wake, "leaderd:{jobs}:wake");
        assert_eq!(k.channel, "leaderd:{jobs}:released");
    }
}
