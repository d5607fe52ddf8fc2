//! What went wrong talking to a store, as every client, lease backend and
//! the fence report it: typed where a caller branches (a timeout or a
//! dropped connection may simply be tried again; a refusal needs a
//! person), each with what was wrong, where, and how to fix it. The lease
//! contract returns it as [`crate::client::Error`].

use std::time::Duration;

/// A backend failure. `is_misconfiguration` separates what retrying fixes
/// from what a person must fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{backend} did not answer within {timeout:?}")]
    Timeout { backend: String, timeout: Duration },
    #[error("cannot reach {backend}: {detail}")]
    Connection { backend: String, detail: String },
    /// Credentials or permissions refused; `hint` says, in the backend's
    /// terms, what leaderd needs.
    #[error("{backend} refused leaderd's credentials or permissions: {detail}; {hint}")]
    Misconfigured {
        backend: String,
        detail: String,
        hint: &'static str,
    },
    /// The server is not the kind this backend talks to (a Redis Cluster
    /// node behind a single-server URL); `detail` names the right one.
    #[error("{backend}: {detail}")]
    WrongKind { backend: String, detail: String },
    /// A TLS handshake or TLS setting failed; `hint` says what to fix.
    #[error("TLS with {backend} failed: {detail}; {hint}")]
    Tls {
        backend: String,
        detail: String,
        hint: String,
    },
    #[error("unexpected reply from {backend}: {detail}")]
    Unexpected { backend: String, detail: String },
    /// The write reached the primary but too few replicas acknowledged it
    /// (`WAIT`): a failover now could hand the lease to another candidate.
    #[error(
        "{backend}: only {acknowledged} of {asked} replica(s) acknowledged the lease write in time; a failover could lose it, so the attempt counts as failed (check the replicas' links, or lower --redis-wait-replicas)"
    )]
    UnderReplicated {
        backend: String,
        asked: u32,
        acknowledged: u32,
    },
    #[error("lock file {path}: {detail}")]
    File { path: String, detail: String },
    /// Something a person must set up on the server first (a table, a
    /// grant); `detail` says what, in the server's own terms.
    #[error("{backend}: {detail}")]
    NotSetUp { backend: String, detail: String },
    /// The lease's key holds something nobody can take over (a value leaderd
    /// did not write, a wrong type, no expiry). leaderd never overwrites it.
    #[error(
        "the lease {key} on {backend} cannot be taken: {what}; leaderd never overwrites it. {fix}"
    )]
    Blocked {
        backend: String,
        key: String,
        what: String,
        /// How to clear it, in the backend's own terms.
        fix: String,
    },
}

impl Error {
    /// A configuration error: `status` and `check` exit 2 for it.
    pub fn is_misconfiguration(&self) -> bool {
        matches!(
            self,
            Error::Misconfigured { .. }
                | Error::NotSetUp { .. }
                | Error::File { .. }
                | Error::WrongKind { .. }
                | Error::Tls { .. }
        )
    }

    /// Only a person can fix it (configuration, or a blocked key): retried
    /// slowly, and logged as an error.
    pub fn needs_a_person(&self) -> bool {
        self.is_misconfiguration() || matches!(self, Error::Blocked { .. })
    }

    /// The answer may simply not have come back (a timeout, a dropped
    /// connection): the same request again may land.
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Timeout { .. } | Error::Connection { .. })
    }

    /// The `result` label of a failed operation in the metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Error::Timeout { .. } => "timeout",
            Error::UnderReplicated { .. } => "under_replicated",
            _ => "error",
        }
    }
}
