//! Advisory mode: a session advisory lock (`pg_try_advisory_lock`) on the
//! lease's own session, taken before the row and given up with it. While
//! the lock is held the session sets `idle_session_timeout` to the TTL, so
//! a holder that falls silent (partitioned, frozen) loses the lock on the
//! server within a TTL, and `tcp_user_timeout` to the TTL, so a server
//! whose replies go unacknowledged that long drops the session too. Session state is exactly what a transaction pooler
//! breaks, so a pooler in the path is refused ([`pooled`]).

use super::config::PgConfig;
use super::{PgLease, classify, connect};
use crate::lease::contract::LeaseBackend;
use crate::lease::contract::{Error, Holder};
use std::time::Duration;
use tokio_postgres::types::Type;

/// The lock's number: from the table and key, so it is the same for every
/// candidate of one election. Printed by `check`, for other programs that
/// want to take part.
pub(super) fn lock_id(table: &str, key: &str) -> i64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{table}\n{key}").as_bytes());
    i64::from_be_bytes(digest[..8].try_into().expect("8 bytes"))
}

impl PgLease {
    fn lock_id(&self) -> i64 {
        lock_id(&self.pg.table.name, &self.key)
    }

    /// Takes the lock on the lease's session (once: it is re-entrant, and a
    /// second hold would need a second unlock). False: held elsewhere.
    pub(super) async fn take_lock(&mut self) -> Result<bool, Error> {
        if self
            .session
            .as_ref()
            .is_some_and(|s| s.locked && !s.client.is_closed())
        {
            return Ok(true);
        }
        let (id, ttl) = (self.lock_id(), self.ttl_ms().to_string());
        let rows = self
            .run(
                "SELECT CASE WHEN pg_try_advisory_lock($1)
                   THEN set_config('idle_session_timeout', $2, false) || set_config('tcp_user_timeout', $2, false) END IS NOT NULL",
                &[(&id, Type::INT8), (&ttl, Type::TEXT)],
            )
            .await?;
        let locked = rows.first().is_some_and(|r| r.get::<_, bool>(0));
        if let Some(session) = &mut self.session {
            session.locked = locked;
        }
        Ok(locked)
    }

    /// A renewal's first step: the session still holds the lock (a round
    /// trip, which also keeps the session from going idle). A new session
    /// (the old one was lost) takes it again. False: another session has it.
    pub(super) async fn keep_lock(&mut self) -> Result<bool, Error> {
        let held = self
            .session
            .as_ref()
            .is_some_and(|s| s.locked && !s.client.is_closed());
        if !held {
            return self.take_lock().await;
        }
        let id = self.lock_id();
        let rows = self
            .run(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
                   AND classid = (($1 >> 32) & 4294967295)::oid AND objid = ($1 & 4294967295)::oid AND objsubid = 1",
                &[(&id, Type::INT8)],
            )
            .await?;
        if rows.first().is_some_and(|r| r.get::<_, i64>(0) > 0) {
            return Ok(true);
        }
        if let Some(session) = &mut self.session {
            session.locked = false;
        }
        self.take_lock().await
    }

    /// Gives the lock up, if this session holds it; best effort (a lost
    /// session has lost it already).
    pub(super) async fn drop_lock(&mut self) {
        if !self.session.as_ref().is_some_and(|s| s.locked) {
            return;
        }
        let id = self.lock_id();
        let released = self
            .run(
                "SELECT pg_advisory_unlock($1), set_config('idle_session_timeout', '0', false), set_config('tcp_user_timeout', '0', false)",
                &[(&id, Type::INT8)],
            )
            .await;
        match released {
            Ok(_) => {
                if let Some(session) = &mut self.session {
                    session.locked = false;
                }
            }
            // The session is unusable: drop it, and the lock with it.
            Err(_) => self.session = None,
        }
    }

    /// Who holds the lock, as far as the row says (nobody: another program
    /// holds the lock).
    pub(super) async fn lock_holder(&mut self) -> Result<(Holder, Option<Duration>), Error> {
        let peek = self.peek().await?;
        let holder = peek.holder.unwrap_or(Holder {
            id: None,
            fencing_token: None,
        });
        Ok((holder, peek.expires_in))
    }
}

/// Whether a transaction (or statement) pooler sits between leaderd and the
/// server: session state set by one statement must still be there for the
/// next one, on the same server process, even while another client holds a
/// transaction open (which pins the server connection a pooler would
/// otherwise hand back).
pub(super) async fn pooled(pg: &PgConfig, shown: &str) -> Result<bool, Error> {
    let (a, a_conn) = connect(pg, shown).await?;
    let a_task = tokio::spawn(async move {
        let _ = a_conn.await;
    });
    let (b, b_conn) = connect(pg, shown).await?;
    let b_task = tokio::spawn(async move {
        let _ = b_conn.await;
    });
    // Other clients of the pool can hand b a connection other than a's, so
    // one round can miss a pooler: a few, stopping at the first evidence.
    let mut verdict = Ok(false);
    for _ in 0..3 {
        verdict = probe(&a, &b, pg, shown).await;
        let _ = tokio::time::timeout(pg.connect.timeout, b.batch_execute("ROLLBACK")).await;
        if !matches!(verdict, Ok(false)) {
            break;
        }
    }
    a_task.abort();
    b_task.abort();
    verdict
}

async fn probe(
    a: &tokio_postgres::Client,
    b: &tokio_postgres::Client,
    pg: &PgConfig,
    shown: &str,
) -> Result<bool, Error> {
    let nonce = crate::lease::contract::new_token();
    let timed = |e| classify(&e, shown, pg);
    let timeout = pg.connect.timeout;
    let first = tokio::time::timeout(
        timeout,
        a.query_typed_one(
            "SELECT pg_backend_pid(), set_config('leaderd.probe', $1, false)",
            &[(&nonce, Type::TEXT)],
        ),
    )
    .await
    .map_err(|_| too_slow(shown, timeout))?
    .map_err(timed)?;
    let a_pid: i32 = first.get(0);
    tokio::time::timeout(timeout, b.batch_execute("BEGIN"))
        .await
        .map_err(|_| too_slow(shown, timeout))?
        .map_err(timed)?;
    let b_pid: i32 =
        tokio::time::timeout(timeout, b.query_typed_one("SELECT pg_backend_pid()", &[]))
            .await
            .map_err(|_| too_slow(shown, timeout))?
            .map_err(timed)?
            .get(0);
    if b_pid == a_pid {
        return Ok(true);
    }
    // With the pool's connection pinned by b, a pooler must give a another
    // one, where the setting is missing; a pool of one makes a wait.
    let second = tokio::time::timeout(
        timeout,
        a.query_typed_one(
            "SELECT pg_backend_pid(), current_setting('leaderd.probe', true)",
            &[],
        ),
    )
    .await;
    Ok(match second {
        Err(_) => true,
        Ok(Err(e)) => return Err(timed(e)),
        Ok(Ok(row)) => {
            row.get::<_, i32>(0) != a_pid || row.get::<_, Option<String>>(1) != Some(nonce)
        }
    })
}

fn too_slow(shown: &str, timeout: std::time::Duration) -> Error {
    Error::Timeout {
        backend: shown.to_string(),
        timeout,
    }
}
