//! The Redis lease: one key `leaderd:{KEY}:lease` holding
//! `{"id", "fencing_token", "token"}` with a TTL, a counter
//! `leaderd:{KEY}:fence`, the wake list `leaderd:{KEY}:wake` (see
//! [`super::notify`]) and the channel `leaderd:{KEY}:released`. Every
//! operation is one Lua script, called by hash (reloaded after `NOSCRIPT`),
//! under one overall timeout.

use super::{Acquire, Error, Holder, Peek, Renew, new_token};
use crate::config::RedisUrl;
use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, ErrorKind, RedisError, Script, ScriptInvocation, ServerErrorKind, Value,
};
use std::time::Duration;
use tokio::time::Instant;

const HOLDER: &str = include_str!("lua/holder.lua");

/// After this many timeouts in a row the connection is replaced: a Redis that
/// was paused or a black-holed socket never answers on the old one, and
/// redis-rs does not reconnect on timeouts by itself.
const REPLACE_AFTER_TIMEOUTS: u32 = 2;

struct Scripts {
    acquire: Script,
    renew: Script,
    release: Script,
    peek: Script,
    /// Every script's source, loaded on each new connection.
    sources: Vec<String>,
}

impl Scripts {
    fn new() -> Self {
        let sources: Vec<String> = [
            include_str!("lua/acquire.lua"),
            include_str!("lua/renew.lua"),
            include_str!("lua/release.lua"),
            include_str!("lua/peek.lua"),
        ]
        .iter()
        .map(|body| format!("{HOLDER}\n{body}"))
        .collect();
        Scripts {
            acquire: Script::new(&sources[0]),
            renew: Script::new(&sources[1]),
            release: Script::new(&sources[2]),
            peek: Script::new(&sources[3]),
            sources,
        }
    }
}

pub struct RedisLease {
    link: Link,
    lease_key: String,
    fence_key: String,
    wake_key: String,
    channel: String,
    id_json: String,
    ttl_ms: u64,
    /// The ownership token of the lease we hold or may hold (after a timeout).
    token: Option<String>,
    /// Highest fencing token seen for this key: a floor for the next one, so
    /// tokens keep growing even if Redis forgot the counter.
    highest_fencing: u64,
    scripts: Scripts,
}

/// The connection to Redis: made on demand, replaced when broken or when it
/// keeps timing out.
struct Link {
    client: redis::Client,
    /// Script sources to load on each new connection, so that the first
    /// release or renewal after a (re)connect is one round trip, not three
    /// (EVALSHA → NOSCRIPT → SCRIPT LOAD → EVALSHA).
    preload: Vec<String>,
    conn: Option<MultiplexedConnection>,
    timeout: Duration,
    /// The URL with its password redacted, for messages.
    url: String,
    timeouts_in_a_row: u32,
}

/// The names of an election's keys and channel (PRODUCT §5).
pub struct Keys {
    pub lease: String,
    pub fence: String,
    pub wake: String,
    pub channel: String,
}

/// The hash tag keeps the keys in one Cluster slot so one script may touch
/// them together.
pub fn keys(key: &str) -> Keys {
    Keys {
        lease: format!("leaderd:{{{key}}}:lease"),
        fence: format!("leaderd:{{{key}}}:fence"),
        wake: format!("leaderd:{{{key}}}:wake"),
        channel: format!("leaderd:{{{key}}}:released"),
    }
}

impl RedisLease {
    pub fn new(
        url: &RedisUrl,
        timeout: Duration,
        key: &str,
        id: &str,
        ttl: Duration,
    ) -> Result<Self, Error> {
        let client = redis::Client::open(url.expose()).map_err(|e| Error::Misconfigured {
            backend: url.redacted().to_string(),
            detail: e.to_string(),
        })?;
        let Keys {
            lease: lease_key,
            fence: fence_key,
            wake: wake_key,
            channel,
        } = keys(key);
        let scripts = Scripts::new();
        Ok(RedisLease {
            link: Link {
                client,
                preload: scripts.sources.clone(),
                conn: None,
                timeout,
                url: url.redacted().to_string(),
                timeouts_in_a_row: 0,
            },
            lease_key,
            fence_key,
            wake_key,
            channel,
            id_json: serde_json::to_string(id).expect("a string always serialises"),
            ttl_ms: ttl.as_millis() as u64,
            token: None,
            highest_fencing: 0,
            scripts,
        })
    }

    pub fn describe(&self) -> String {
        self.link.url.clone()
    }

    pub fn wake_queue(&self) -> super::notify::WakeQueue {
        super::notify::WakeQueue {
            client: self.link.client.clone(),
            key: self.wake_key.clone(),
            timeout: self.link.timeout,
            own_id: serde_json::from_str(&self.id_json).expect("id_json is a JSON string"),
        }
    }

    /// Checks that waiters can block on the wake list (`leaderd check`).
    pub async fn probe_wake_queue(&self) -> Result<(), Error> {
        super::notify::probe(&self.wake_queue())
            .await
            .map_err(|e| classify(e, &self.link.url, self.link.timeout))
    }

    pub async fn acquire(&mut self) -> Result<Acquire, Error> {
        let token = self.token.get_or_insert_with(new_token).clone();
        let sent_at = Instant::now();
        let mut call = self.scripts.acquire.key(&self.lease_key);
        call.key(&self.fence_key)
            .arg(&token)
            .arg(&self.id_json)
            .arg(self.ttl_ms)
            .arg(self.highest_fencing);
        let reply = match self
            .link
            .invoke(&call)
            .await
            .map_err(|e| self.wrong_type(e))
        {
            Ok(reply) => reply,
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

    pub async fn renew(&mut self) -> Result<Renew, Error> {
        let Some(token) = self.token.clone() else {
            return Ok(Renew::Lost { holder: None });
        };
        let sent_at = Instant::now();
        let mut call = self.scripts.renew.key(&self.lease_key);
        call.arg(&token).arg(self.ttl_ms);
        let reply = self.link.invoke(&call).await?;
        match parse_reply(&reply, &self.link.url)? {
            Reply::Ours(_) => Ok(Renew::Renewed { sent_at }),
            Reply::Held(holder, _) => {
                self.token = None;
                self.observe(&holder);
                Ok(Renew::Lost { holder })
            }
        }
    }

    pub async fn release(&mut self) -> Result<bool, Error> {
        let Some(token) = self.token.clone() else {
            return Ok(false);
        };
        let mut call = self.scripts.release.key(&self.lease_key);
        call.key(&self.wake_key)
            .arg(&token)
            .arg(&self.channel)
            .arg(super::notify::WAKE_COPIES)
            .arg(super::notify::WAKE_LINGER.as_millis() as u64);
        let reply = self.link.invoke(&call).await?;
        self.token = None;
        match reply {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            other => Err(unexpected(&self.link.url, &other)),
        }
    }

    pub async fn peek(&mut self) -> Result<super::Peek, Error> {
        let call = self.scripts.peek.key(&self.lease_key);
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
                Ok(Peek { holder, expires_in })
            }
            Reply::Ours(_) => Err(unexpected(&self.link.url, &reply)),
        }
    }

    /// A lease nobody can take over: a value leaderd did not write, or one
    /// without an expiry (leaderd always sets one; `PERSIST` removes it),
    /// which never lapses if its holder is gone.
    fn blocked(&self, holder: &Option<Holder>, expires_in: Option<Duration>) -> Option<Error> {
        let holder = holder.as_ref()?;
        let what = match (&holder.id, expires_in) {
            (None, None) => {
                "it holds a value leaderd did not write, with no expiry, so it never lapses"
                    .to_string()
            }
            (None, Some(left)) => format!(
                "it holds a value leaderd did not write (it expires in {})",
                crate::config::show_duration(left)
            ),
            (Some(id), None) => format!(
                "it has no expiry (made permanent, e.g. by PERSIST), so it never lapses if its holder {id:?} is gone"
            ),
            (Some(_), Some(_)) => return None,
        };
        Some(self.blocked_error(what))
    }

    fn blocked_error(&self, what: String) -> Error {
        Error::Blocked {
            backend: self.link.url.clone(),
            key: self.lease_key.clone(),
            what,
            fix: format!(
                "Remove it with `DEL {}` once you know what wrote it, or choose another --key",
                self.lease_key
            ),
        }
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

    fn observe(&mut self, holder: &Option<Holder>) {
        if let Some(seen) = holder.as_ref().and_then(|h| h.fencing_token) {
            self.highest_fencing = self.highest_fencing.max(seen);
        }
    }
}

impl Link {
    /// Runs one script call: connects if needed, bounds everything by the
    /// timeout, classifies failures, and drops a connection that is broken
    /// or keeps timing out so the next call starts on a fresh one.
    async fn invoke(&mut self, call: &ScriptInvocation<'_>) -> Result<Value, Error> {
        let deadline = Instant::now() + self.timeout;
        let timed_out = || Error::Timeout {
            backend: self.url.clone(),
            timeout: self.timeout,
        };
        let mut conn = match self.conn.clone() {
            Some(conn) => conn,
            None => {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.timeout))
                    .set_response_timeout(Some(self.timeout));
                let connecting = self
                    .client
                    .get_multiplexed_async_connection_with_config(&config);
                match tokio::time::timeout_at(deadline, connecting).await {
                    Ok(Ok(mut conn)) => {
                        let mut load = redis::pipe();
                        for source in &self.preload {
                            load.cmd("SCRIPT").arg("LOAD").arg(source).ignore();
                        }
                        // Best effort: EVALSHA still reloads after NOSCRIPT.
                        let loading = load.query_async::<()>(&mut conn);
                        if let Ok(Err(e)) = tokio::time::timeout_at(deadline, loading).await {
                            tracing::debug!(error = %e, "could not preload the lease scripts");
                        }
                        self.conn.insert(conn).clone()
                    }
                    Ok(Err(e)) => return Err(classify(e, &self.url, self.timeout)),
                    Err(_) => return Err(timed_out()),
                }
            }
        };
        let (result, timed_out_now, broken) =
            match tokio::time::timeout_at(deadline, call.invoke_async(&mut conn)).await {
                Ok(Ok(value)) => (Ok(value), false, false),
                Ok(Err(e)) => {
                    let broken =
                        e.is_connection_dropped() || e.is_io_error() || e.is_unrecoverable_error();
                    let timed_out = e.is_timeout();
                    (Err(classify(e, &self.url, self.timeout)), timed_out, broken)
                }
                Err(_) => (Err(timed_out()), true, false),
            };
        self.timeouts_in_a_row = if timed_out_now {
            self.timeouts_in_a_row + 1
        } else {
            0
        };
        if broken || self.timeouts_in_a_row >= REPLACE_AFTER_TIMEOUTS {
            self.conn = None;
            self.timeouts_in_a_row = 0;
        }
        result
    }
}

fn classify(e: RedisError, url: &str, timeout: Duration) -> Error {
    let backend = url.to_string();
    let detail = e.to_string();
    // Inside a script Redis reports a denied command or key as a plain ERR.
    let denied_in_script = detail.contains("can't run this command")
        || detail.contains("No permissions to access")
        || detail.contains("NOPERM");
    let auth = e.kind() == ErrorKind::AuthenticationFailed
        || e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm)
        || matches!(e.code(), Some("WRONGPASS" | "NOAUTH" | "NOPERM"))
        || denied_in_script;
    if auth {
        Error::Misconfigured { backend, detail }
    } else if e.is_timeout() {
        Error::Timeout { backend, timeout }
    } else if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
        Error::Connection { backend, detail }
    } else {
        Error::Unexpected { backend, detail }
    }
}

enum Reply {
    Ours(u64),
    Held(Option<Holder>, Option<Duration>),
}

fn unexpected(url: &str, value: &Value) -> Error {
    Error::Unexpected {
        backend: url.to_string(),
        detail: format!("{value:?}"),
    }
}

/// `{1, fencing}` / `{1}` mean ours; `{0, id, fencing, pttl}` someone else's
/// (pttl −2: vacant, −1: no expiry). Anything else is an error, never success.
fn parse_reply(value: &Value, url: &str) -> Result<Reply, Error> {
    let bad = || unexpected(url, value);
    let Value::Array(items) = value else {
        return Err(bad());
    };
    match items.as_slice() {
        [Value::Int(1)] => Ok(Reply::Ours(0)),
        [Value::Int(1), Value::Int(f)] if *f > 0 => Ok(Reply::Ours(*f as u64)),
        [Value::Int(0), id, fencing, Value::Int(pttl)] => {
            let id = match id {
                Value::Nil => None,
                Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
                _ => return Err(bad()),
            };
            let fencing_token = match fencing {
                Value::Nil => None,
                Value::Int(n) if *n > 0 => Some(*n as u64),
                _ => return Err(bad()),
            };
            let expires_in = (*pttl >= 0).then(|| Duration::from_millis(*pttl as u64));
            let holder = (*pttl != -2).then_some(Holder { id, fencing_token });
            Ok(Reply::Held(holder, expires_in))
        }
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag() {
        let k = keys("jobs");
        assert_eq!(k.lease, "leaderd:{jobs}:lease");
        assert_eq!(k.fence, "leaderd:{jobs}:fence");
        assert_eq!(k.wake, "leaderd:{jobs}:wake");
        assert_eq!(k.channel, "leaderd:{jobs}:released");
    }

    #[test]
    fn odd_replies_are_errors_never_success() {
        let b = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        for odd in [
            Value::Int(1),
            Value::Nil,
            Value::Array(vec![]),
            Value::Array(vec![Value::Int(1), b("7")]),
            Value::Array(vec![Value::Int(2)]),
            Value::Array(vec![
                Value::Int(0),
                Value::Int(3),
                Value::Nil,
                Value::Int(5),
            ]),
            Value::Array(vec![Value::Int(1), Value::Int(-4)]),
        ] {
            assert!(parse_reply(&odd, "redis://x").is_err(), "{odd:?}");
        }
        let held = Value::Array(vec![Value::Int(0), b("a"), Value::Int(9), Value::Int(1500)]);
        let Ok(Reply::Held(Some(h), Some(left))) = parse_reply(&held, "r") else {
            panic!()
        };
        assert_eq!(
            (h.id.as_deref(), h.fencing_token, left),
            (Some("a"), Some(9), Duration::from_millis(1500))
        );
        let vacant = Value::Array(vec![Value::Int(0), Value::Nil, Value::Nil, Value::Int(-2)]);
        assert!(matches!(
            parse_reply(&vacant, "r"),
            Ok(Reply::Held(None, None))
        ));
    }
}
