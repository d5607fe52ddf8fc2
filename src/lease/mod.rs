//! Lease backends (PRODUCT §4–§5): acquire, renew and release a lease by
//! ownership token, and peek at who holds it.
//!
//! The backend owns the random ownership token (a secret: it is never logged
//! or served) and the bookkeeping that resolves an ambiguous outcome: after a
//! timed-out acquire the same token is offered again, so a request that did
//! win is recognised rather than assumed either way.

mod file;
pub mod notify;
mod redis;

pub use self::file::FileLease;
pub use self::redis::RedisLease;

use crate::config::{BackendConfig, Config};
use std::time::Duration;
use tokio::time::Instant;

/// Who holds a lease, as far as the backend could tell. `id` is `None` when
/// the key holds something leaderd did not write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub id: Option<String>,
    pub fencing_token: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    /// The lease is ours. Its validity counts from `sent_at`.
    Won {
        fencing_token: u64,
        sent_at: Instant,
    },
    /// Someone else holds it; `expires_in` is its remaining time when known.
    Held {
        holder: Holder,
        expires_in: Option<Duration>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renew {
    Renewed {
        sent_at: Instant,
    },
    /// The key holds another token (`Some`) or nothing (`None`).
    Lost {
        holder: Option<Holder>,
    },
}

/// A look at the lease without touching it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peek {
    pub holder: Option<Holder>,
    pub expires_in: Option<Duration>,
}

/// A backend failure. `is_misconfiguration` separates what retrying fixes
/// from what a person must fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{backend} did not answer within {timeout:?}")]
    Timeout { backend: String, timeout: Duration },
    #[error("cannot reach {backend}: {detail}")]
    Connection { backend: String, detail: String },
    #[error(
        "{backend} refused leaderd's credentials or permissions: {detail}; check the user and password in the Redis URL, and that the user's ACL allows ~leaderd:* &leaderd:* +evalsha +eval +script|load +get +set +pexpire +pttl +del +time +publish +rpush +blpop +ping"
    )]
    Misconfigured { backend: String, detail: String },
    #[error("unexpected reply from {backend}: {detail}")]
    Unexpected { backend: String, detail: String },
    #[error("lock file {path}: {detail}")]
    File { path: String, detail: String },
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
        matches!(self, Error::Misconfigured { .. } | Error::File { .. })
    }

    /// Only a person can fix it (configuration, or a blocked key): retried
    /// slowly, and logged as an error.
    pub fn needs_a_person(&self) -> bool {
        self.is_misconfiguration() || matches!(self, Error::Blocked { .. })
    }
}

/// The configured backend. An enum rather than a trait object: there are two,
/// and async methods stay plain.
pub enum Backend {
    Redis(Box<RedisLease>),
    File(FileLease),
}

impl Backend {
    pub fn new(config: &Config) -> Result<Backend, Error> {
        match &config.backend {
            BackendConfig::Redis { url, timeout } => Ok(Backend::Redis(Box::new(RedisLease::new(
                url,
                *timeout,
                &config.key,
                &config.id,
                config.timing.ttl,
            )?))),
            BackendConfig::LockFile { path, .. } => {
                Ok(Backend::File(FileLease::new(path, &config.id)))
            }
        }
    }

    /// A printable name (URL with the password redacted, or the file path).
    pub fn describe(&self) -> String {
        match self {
            Backend::Redis(r) => r.describe(),
            Backend::File(f) => f.describe(),
        }
    }

    /// Where waiters are woken on a release, for backends that wake them.
    pub fn wake_queue(&self) -> Option<notify::WakeQueue> {
        match self {
            Backend::Redis(r) => Some(r.wake_queue()),
            Backend::File(_) => None,
        }
    }

    pub async fn acquire(&mut self) -> Result<Acquire, Error> {
        match self {
            Backend::Redis(r) => r.acquire().await,
            Backend::File(f) => f.acquire(),
        }
    }

    pub async fn renew(&mut self) -> Result<Renew, Error> {
        match self {
            Backend::Redis(r) => r.renew().await,
            Backend::File(f) => f.renew(),
        }
    }

    /// Releases the lease if it is still ours. `Ok(false)`: it was not.
    pub async fn release(&mut self) -> Result<bool, Error> {
        match self {
            Backend::Redis(r) => r.release().await,
            Backend::File(f) => Ok(f.release()),
        }
    }

    pub async fn peek(&mut self) -> Result<Peek, Error> {
        match self {
            Backend::Redis(r) => r.peek().await,
            Backend::File(f) => f.peek(),
        }
    }
}

/// A fresh 128-bit random ownership token, hex-encoded.
pub(crate) fn new_token() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the OS random source is available on Linux");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
