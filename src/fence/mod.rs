//! Fencing at the resource. Three words, one thing each (docs/fencing.md,
//! "Words"):
//! - a *fence* is one election's mark in a resource: the row of
//!   `leaderd_fence` or the Redis key holding the newest token that wrote,
//!   named by `--fence-key`; it is raised, never lowered;
//! - a *guard* is the shipped code that keeps it ([`Guard`]:
//!   `fence/postgres.sql`, `fence/redis.lua` and its `EVAL` form): it
//!   refuses a write with an older token and raises the fence for a newer;
//! - a backend's *fence exports* ([`crate::lease::LeaseBackend::fence_exports`])
//!   are what a lease store that fences by itself gives the worker to
//!   compare against; they are not this module's.
//!
//! What leaderd does here: install the guards (`leaderd fence install`),
//! look at them and the fence (`leaderd fence check`), and, with
//! `--fence-postgres` / `--fence-redis` on `run`, raise the fence to each
//! new term's token *before* the term's work starts.
//!
//! Why leaderd raises it too, when every fenced write raises it anyway: a
//! new term's worker may take a while to write for the first time, and
//! until it does, the fence still holds the previous term's token — a
//! deposed leader that wakes from a pause in that gap would pass it. Raised
//! at acquisition, the fence refuses the old term from the moment the new
//! one exists. The raise happens inside the acquisition, on the lease's
//! worker task: a term whose fence cannot be raised is given back, never
//! worked (see [`crate::runner`]'s worker).
//!
//! The resources' connections are the stores' clients
//! ([`crate::client::postgres`], [`crate::client::redis`]), the ones the
//! lease backends use too, so a fenced resource takes the same URLs and TLS
//! files as a lease store; the fence imports no lease backend.

mod options;
mod postgres;
mod redis;

pub use options::FEATURE;
pub use postgres::GUARD as POSTGRES_GUARD;
pub use redis::{GUARD as REDIS_GUARD, eval_guard as redis_eval_guard};

use crate::client::Error;
use crate::client::pem::TlsFiles;
use crate::client::postgres::PgConnect;
use crate::client::redis::urls::RedisUrl;
use crate::config::Config;
use std::time::Duration;

/// The fence's settings: which resources to raise it in, under which name.
#[derive(Debug, Clone)]
pub struct FenceConfig {
    /// The fence's name: the PostgreSQL row's key, the Redis key.
    pub key: String,
    /// Bounds connecting and each statement.
    pub timeout: Duration,
    pub postgres: Option<PgTarget>,
    pub redis: Option<RedisTarget>,
}

/// A PostgreSQL database with its guard (`fence/postgres.sql`) installed.
#[derive(Debug, Clone)]
pub struct PgTarget {
    pg: PgConnect,
}

/// A Redis server (or primary) with its guard library loaded.
#[derive(Debug, Clone)]
pub struct RedisTarget {
    url: RedisUrl,
    tls: TlsFiles,
}

/// What `leaderd fence check` found in one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Installed as this leaderd ships it; the fence's token (0: none yet).
    Fenced { token: u64, what: String },
    /// Installed, but not as this leaderd ships it (an older leaderd's).
    Differs { token: u64, what: String },
    /// Not installed: what is missing.
    Missing { what: String },
}

/// One fenced resource, as `fence install` and `fence check` report it.
pub struct Report {
    /// "PostgreSQL postgres://app@127.0.0.1/jobs" (no password).
    pub resource: String,
    pub outcome: Result<String, Error>,
}

impl FenceConfig {
    /// The configured fence, if any.
    pub fn of(config: &Config) -> Option<&FenceConfig> {
        config.features.get::<FenceConfig>()
    }

    /// What the child and `/leader` (`fence.fence_key`) learn: the fence's
    /// name, never a URL.
    pub fn exports(&self) -> [(&'static str, String); 1] {
        [("LEADERD_FENCE_KEY", self.key.clone())]
    }

    /// Raises the fence to `token` in every resource, before the term's
    /// work starts: an older term's late write is refused from now on.
    /// A resource whose fence already holds a newer token refuses, as a
    /// misconfiguration (two elections share a fence, or the lease store
    /// lost its history): no work may start under this token.
    pub async fn raise(&self, token: u64) -> Result<(), Error> {
        if let Some(pg) = &self.postgres {
            pg.raise(&self.key, token).await?;
        }
        if let Some(redis) = &self.redis {
            redis.raise(&self.key, token, self.timeout).await?;
        }
        Ok(())
    }

    /// Installs the guard in every configured resource (or only those of
    /// `guard`'s kind); one report each.
    pub async fn install(&self, guard: Option<Guard>) -> Vec<Report> {
        let mut reports = Vec::new();
        if let Some(pg) = self
            .postgres
            .as_ref()
            .filter(|_| guard.is_none_or(|g| g == Guard::Postgres))
        {
            reports.push(Report {
                resource: pg.shown(),
                outcome: pg.install().await,
            });
        }
        if let Some(redis) = self
            .redis
            .as_ref()
            .filter(|_| guard.is_none_or(Guard::is_redis))
        {
            reports.push(Report {
                resource: redis.shown(),
                outcome: redis
                    .install(self.timeout, guard == Some(Guard::RedisEval))
                    .await,
            });
        }
        reports
    }

    /// Looks at the guard and the fence in every configured resource.
    pub async fn inspect(&self) -> Vec<(String, Result<Found, Error>)> {
        let mut found = Vec::new();
        if let Some(pg) = &self.postgres {
            found.push((pg.shown(), pg.inspect(&self.key).await));
        }
        if let Some(redis) = &self.redis {
            found.push((redis.shown(), redis.inspect(&self.key, self.timeout).await));
        }
        found
    }
}

/// A shipped guard: what `leaderd fence install` prints or installs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Guard {
    /// `fence/postgres.sql`: a table and two functions.
    Postgres,
    /// `fence/redis.lua`: a function library (Redis 7 and Valkey).
    Redis,
    /// The same Lua as one script for `EVAL`/`EVALSHA` (older Redis).
    RedisEval,
}

impl Guard {
    fn is_redis(self) -> bool {
        matches!(self, Guard::Redis | Guard::RedisEval)
    }

    /// The text `leaderd fence install GUARD` prints.
    pub fn text(self) -> String {
        match self {
            Guard::Postgres => POSTGRES_GUARD.to_string(),
            Guard::Redis => REDIS_GUARD.to_string(),
            Guard::RedisEval => redis_eval_guard(),
        }
    }
}

/// The refusal of a raise: the fence already holds a newer token, so no
/// work may start under this one. `refusal` is the resource's own message,
/// which names both tokens.
fn newer_wrote(resource: String, refusal: String) -> Error {
    Error::NotSetUp {
        backend: resource,
        detail: format!(
            "{refusal}. Either two elections share this fence (give each its own --fence-key), or the lease store lost its history and hands out older tokens (reset the fence's row or key once no worker runs)"
        ),
    }
}
