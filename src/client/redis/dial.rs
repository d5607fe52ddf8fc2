//! Making a connection to one Redis server: connect, preload the lease
//! scripts, and read what the link tracks (the server's start for Redlock,
//! the replica count for `--redis-wait-replicas auto`), all by one
//! deadline. A value of its own, so that Redlock can run it as a task and
//! let an operation wait for it only within its request budget.

use super::classify::{classify, connected_replicas};
use crate::client::Error;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ErrorKind, RedisError, Value};
use std::time::Duration;
use tokio::time::Instant;

/// A connection just made, with what was read on it.
pub(crate) struct Dialed {
    pub(crate) conn: MultiplexedConnection,
    /// `INFO server`'s run id and uptime, when tracked and answered.
    pub(crate) start: Option<super::restarts::Uptime>,
    /// Connected replicas from `ROLE`, under `WaitReplicas::Auto`.
    pub(crate) replicas: Option<Option<u32>>,
}

/// What making a connection needs, apart from the `Link` (so that it can
/// run as a task of its own).
pub(crate) struct Dial {
    pub(crate) client: redis::Client,
    pub(crate) url: String,
    pub(crate) timeout: Duration,
    pub(crate) preload: Vec<String>,
    pub(crate) track_start: bool,
    pub(crate) role: bool,
}

impl Dial {
    /// Connects, preloads the scripts, and reads what the link tracks (the
    /// server's start, the replica count), all by `deadline`.
    pub(crate) async fn run(self, deadline: Instant) -> Result<Dialed, Error> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let connecting = self
            .client
            .get_multiplexed_async_connection_with_config(&config);
        let mut conn = match tokio::time::timeout_at(deadline, connecting).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Err(classify(e, &self.url, self.timeout)),
            Err(_) => {
                return Err(Error::Timeout {
                    backend: self.url.clone(),
                    timeout: self.timeout,
                });
            }
        };
        // Best effort: a script that is missing is loaded after NOSCRIPT.
        if let Err(e) = load_scripts(&self.preload, &mut conn, deadline).await {
            tracing::debug!(error = %e, "could not preload the lease scripts");
        }
        let start = if self.track_start {
            super::restarts::read_start(&self.url, &mut conn, deadline).await?
        } else {
            None
        };
        let mut replicas = None;
        if self.role {
            let role_cmd = redis::cmd("ROLE");
            let role = role_cmd.query_async::<Value>(&mut conn);
            if let Ok(Ok(role)) = tokio::time::timeout_at(deadline, role).await {
                replicas = Some(connected_replicas(&role));
            }
        }
        Ok(Dialed {
            conn,
            start,
            replicas,
        })
    }
}

/// So that the first call after a (re)connect is one round trip, not
/// three (EVALSHA → NOSCRIPT → SCRIPT LOAD → EVALSHA).
pub(crate) async fn load_scripts(
    preload: &[String],
    conn: &mut MultiplexedConnection,
    deadline: Instant,
) -> Result<(), RedisError> {
    let mut load = redis::pipe();
    for source in preload {
        load.cmd("SCRIPT").arg("LOAD").arg(source).ignore();
    }
    match tokio::time::timeout_at(deadline, load.query_async::<()>(conn)).await {
        Ok(result) => result,
        Err(_) => Err((ErrorKind::Io, "timed out loading the scripts").into()),
    }
}
