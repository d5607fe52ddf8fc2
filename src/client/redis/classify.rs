//! What a Redis reply or error means for leaderd: a replica or a primary
//! not ready (follow a failover), a Cluster redirect, a refused password
//! or permission (a person must act, with the ACL leaderd needs), a
//! timeout, a broken connection. Pure functions of the reply, shared by
//! the lease connection, the connecting task and the wake-up listener.

use crate::client::Error;
use redis::{ErrorKind, RedisError, ServerErrorKind, Value};
use std::time::Duration;

/// The ACL leaderd needs, for the hint of a refused permission.
pub(crate) const ACL_HINT: &str = "check the user and password in the Redis URL, and that the user's ACL allows ~leaderd:* &leaderd:* +evalsha +eval +script|load +get +set +pexpire +pttl +del +time +publish +rpush +blpop +subscribe +ping (and +wait +role with --redis-wait-replicas, +cluster|slots +cluster|keyslot +cluster|info in a Cluster, +info for Redlock to see a master's restarts)";

/// Connected replicas from a `ROLE` reply (`master`, offset, replicas);
/// `None` when the node is not a primary.
pub(crate) fn connected_replicas(role: &Value) -> Option<u32> {
    let Value::Array(items) = role else {
        return None;
    };
    match items.as_slice() {
        [Value::BulkString(kind), _, Value::Array(replicas), ..] if kind == b"master" => {
            Some(replicas.len() as u32)
        }
        _ => None,
    }
}

/// The error code of a reply, also when Redis wrapped it in a script error
/// (`ERR ... script: ...` keeps the original code at the front in 7.x,
/// older servers put it inside the message).
pub(crate) fn has_code(e: &RedisError, codes: &[&str]) -> bool {
    let detail = e.to_string();
    e.code().is_some_and(|c| codes.contains(&c)) || codes.iter().any(|c| detail.contains(c))
}

/// The node answered as a replica, or as a primary that cannot serve yet:
/// after a failover this connection still reaches the old node.
pub(crate) fn not_a_writable_primary(e: &RedisError) -> bool {
    has_code(e, &["READONLY", "MASTERDOWN", "LOADING"])
}

/// The node is part of a Redis Cluster and redirects us.
pub(crate) fn cluster_redirect(e: &RedisError) -> bool {
    has_code(e, &["MOVED", "ASK ", "CROSSSLOT", "CLUSTERDOWN"])
}

pub(crate) fn classify(e: RedisError, url: &str, timeout: Duration) -> Error {
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
                "this server is a node of a Redis Cluster ({detail}); a redis:// URL talks to one server and cannot follow the cluster's slots: give the cluster's nodes as redis+cluster://host1:6379,host2:6379,host3:6379"
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
    // A request of more than ten arguments (an acquire's script call) from
    // a client that has not logged in is refused before any command runs,
    // as a protocol error, and the connection closed.
    let unauthenticated = detail.contains("unauthenticated multibulk");
    let auth = e.kind() == ErrorKind::AuthenticationFailed
        || e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm)
        || matches!(e.code(), Some("WRONGPASS" | "NOAUTH" | "NOPERM"))
        || denied_in_script
        || unauthenticated;
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
