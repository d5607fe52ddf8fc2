//! The connection to one Redis server: made on demand, every call bounded
//! by one timeout, failures classified, and a connection that is broken or
//! keeps timing out replaced.

use super::Error;
use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, ErrorKind, RedisError, ScriptInvocation, ServerErrorKind, Value,
};
use std::time::Duration;
use tokio::time::Instant;

/// After this many timeouts in a row the connection is replaced: a Redis that
/// was paused or a black-holed socket never answers on the old one, and
/// redis-rs does not reconnect on timeouts by itself.
const REPLACE_AFTER_TIMEOUTS: u32 = 2;

/// The ACL leaderd needs, for the hint of a refused permission.
pub(super) const ACL_HINT: &str = "check the user and password in the Redis URL, and that the user's ACL allows ~leaderd:* &leaderd:* +evalsha +eval +script|load +get +set +pexpire +pttl +del +time +publish +rpush +blpop +ping";

/// The connection to Redis: made on demand, replaced when broken or when it
/// keeps timing out.
pub(super) struct Link {
    pub(super) client: redis::Client,
    /// Script sources to load on each new connection, so that the first
    /// release or renewal after a (re)connect is one round trip, not three
    /// (EVALSHA → NOSCRIPT → SCRIPT LOAD → EVALSHA).
    pub(super) preload: Vec<String>,
    pub(super) conn: Option<MultiplexedConnection>,
    pub(super) timeout: Duration,
    /// The URL with its password redacted, for messages.
    pub(super) url: String,
    pub(super) timeouts_in_a_row: u32,
    /// Counts connections dropped because the node was no longer a writable
    /// primary; the wake-up listener follows it to the new one.
    pub(super) moved: tokio::sync::watch::Sender<u64>,
}

impl Link {
    /// Runs one script call: connects if needed, bounds everything by the
    /// timeout, classifies failures, and drops a connection that is broken
    /// or keeps timing out so the next call starts on a fresh one.
    pub(super) async fn invoke(&mut self, call: &ScriptInvocation<'_>) -> Result<Value, Error> {
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
        let (result, timed_out_now, broken) = match tokio::time::timeout_at(
            deadline,
            call.invoke_async(&mut conn),
        )
        .await
        {
            Ok(Ok(value)) => (Ok(value), false, false),
            Ok(Err(e)) => {
                let moved = not_a_writable_primary(&e);
                if moved {
                    // A managed failover moves the DNS name to the new
                    // primary; this connection still reaches the old one.
                    tracing::warn!(error = %e, "Redis is not a writable primary on this connection; reconnecting to follow a failover");
                    self.moved.send_modify(|n| *n += 1);
                }
                let broken = moved
                    || e.is_connection_dropped()
                    || e.is_io_error()
                    || e.is_unrecoverable_error();
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

/// The error code of a reply, also when Redis wrapped it in a script error
/// (`ERR ... script: ...` keeps the original code at the front in 7.x,
/// older servers put it inside the message).
fn has_code(e: &RedisError, codes: &[&str]) -> bool {
    let detail = e.to_string();
    e.code().is_some_and(|c| codes.contains(&c)) || codes.iter().any(|c| detail.contains(c))
}

/// The node answered as a replica, or as a primary that cannot serve yet:
/// after a failover this connection still reaches the old node.
pub(super) fn not_a_writable_primary(e: &RedisError) -> bool {
    has_code(e, &["READONLY", "MASTERDOWN", "LOADING"])
}

/// The node is part of a Redis Cluster and redirects us.
fn cluster_redirect(e: &RedisError) -> bool {
    has_code(e, &["MOVED", "ASK ", "CROSSSLOT", "CLUSTERDOWN"])
}

pub(super) fn classify(e: RedisError, url: &str, timeout: Duration) -> Error {
    let backend = url.to_string();
    let detail = e.to_string();
    if let Some(hint) = super::tls::hint(&detail) {
        return Error::Tls {
            backend,
            detail,
            hint,
        };
    }
    if cluster_redirect(&e) {
        return Error::WrongKind {
            backend,
            detail: format!(
                "this server is a node of a Redis Cluster ({detail}); a redis:// URL talks to one server and cannot follow the cluster's slots: a redis+cluster:// backend is planned, until then point --redis at a standalone Redis"
            ),
        };
    }
    if not_a_writable_primary(&e) {
        return Error::Connection {
            backend,
            detail: format!("not a writable primary ({detail}); reconnecting"),
        };
    }
    // Inside a script Redis reports a denied command or key as a plain ERR.
    let denied_in_script = detail.contains("can't run this command")
        || detail.contains("No permissions to access")
        || detail.contains("NOPERM");
    let auth = e.kind() == ErrorKind::AuthenticationFailed
        || e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm)
        || matches!(e.code(), Some("WRONGPASS" | "NOAUTH" | "NOPERM"))
        || denied_in_script;
    if auth {
        Error::Misconfigured {
            backend,
            detail,
            hint: ACL_HINT,
        }
    } else if e.is_timeout() {
        Error::Timeout { backend, timeout }
    } else if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
        Error::Connection { backend, detail }
    } else {
        Error::Unexpected { backend, detail }
    }
}
