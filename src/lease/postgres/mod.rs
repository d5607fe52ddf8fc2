//! PostgreSQL: the lease is a row of a logged table (default
//! `leaderd_lease`), taken, renewed and released by one statement each,
//! judged by the server's clock ([`sql`]). Works through a transaction
//! pooler; wake-ups by `LISTEN`/`NOTIFY` on a session of their own
//! ([`wake`]), or the expiry timer where a pooler makes `LISTEN` useless.
//!
//! Advisory mode adds a session advisory lock, held by the lease's own
//! session while it leads ([`advisory`]): other programs that take the same
//! lock number are excluded too, and the server frees it within a TTL of the
//! session's silence (`idle_session_timeout`). The row stays the authority
//! for the fencing token and the expiry: a session the server terminated
//! frees the lock at once, while its holder may still believe it leads, so
//! a new holder also waits for the row to expire.

mod advisory;
mod check;
pub mod config;
pub(crate) mod session;
mod sql;
mod wake;

use crate::client::postgres::Conn;
use crate::lease::contract::Wakeups;
use session::{classify, connect, primary};

use crate::config::Backend;
use crate::lease::contract::open_as;
use crate::lease::contract::{
    Acquire, BackendEntry, Common, Error, Holder, LeaseBackend, Peek, Renew, new_token,
};
use crate::lease::registry::Record;
use crate::timing::Timing;
use config::{PgConfig, PgMode};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Row};

pub struct PgLease {
    pg: PgConfig,
    key: String,
    id: String,
    timing: Timing,
    /// The server, as logs show it (no password).
    shown: String,
    /// The ownership token of the lease we hold or may hold.
    token: Option<String>,
    /// Highest fencing token seen: a floor for the next term's.
    highest_fencing: u64,
    session: Option<Session>,
    statements: Statements,
    /// The `NOTIFY` channel of this key's releases.
    channel: String,
    /// The `NOTIFY` channel of its renewals, and what this candidate heard
    /// there ([`crate::lease::heard`]).
    renewed: String,
    heard: crate::lease::heard::Heard,
}

/// The lease's own session.
pub(super) struct Session {
    client: Client,
    task: JoinHandle<()>,
    /// Advisory mode: this session holds the lock.
    locked: bool,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Clone)]
struct Statements {
    acquire: String,
    renew: String,
    release: String,
    peek: String,
    register: String,
    candidates: String,
}

/// PostgreSQL: a lease table, optionally with a session advisory lock.
pub const ENTRY: BackendEntry = BackendEntry {
    declared: Some(&config::DECLARED),
    names: &["postgres-table", "postgres-advisory"],
    open,
    chatty_logs: &[],
};

fn open(backend: &Backend, common: &Common) -> Option<Result<Box<dyn LeaseBackend>, Error>> {
    open_as(backend, common, PgLease::open)
}

impl PgLease {
    /// A term whose renewals this standby hears needs no question; not
    /// with a token out (an earlier attempt's answer was lost).
    fn heard_term(&self) -> Option<(Holder, Duration)> {
        let answer = || {
            self.heard
                .answer(Instant::now(), self.highest_fencing, &self.id)
        };
        self.token.is_none().then(answer)?
    }

    /// The lease of `common.key` in the table `pg` names.
    pub fn open(pg: &PgConfig, common: &Common) -> Result<Self, Error> {
        let shown = describe(pg);
        // Fail now on TLS material that cannot be used.
        crate::client::postgres::tls::connector(&pg.connect.tls).map_err(|detail| Error::Tls {
            backend: shown.clone(),
            detail,
            hint: "check sslrootcert, sslcert and sslkey in the PostgreSQL URL".into(),
        })?;
        Ok(PgLease {
            statements: Statements {
                acquire: sql::acquire(&pg.table),
                renew: sql::renew(&pg.table),
                release: sql::release(&pg.table),
                peek: sql::peek(&pg.table),
                register: sql::register(&pg.table),
                candidates: sql::candidates(&pg.table),
            },
            channel: channel(&pg.table.name, &common.key),
            renewed: format!("{}_r", channel(&pg.table.name, &common.key)),
            heard: crate::lease::heard::Heard::default(),
            pg: pg.clone(),
            key: common.key.clone(),
            id: common.id.clone(),
            timing: common.timing,
            shown,
            token: None,
            highest_fencing: 0,
            session: None,
        })
    }

    fn ttl_ms(&self) -> i64 {
        self.timing.ttl_ms() as i64
    }

    /// The lease's session, connected (and vetted: a primary) if need be.
    async fn session(&mut self) -> Result<&mut Session, Error> {
        if self.session.as_ref().is_some_and(|s| s.client.is_closed()) {
            self.session = None;
        }
        if self.session.is_none() {
            let (client, conn) = connect(&self.pg, &self.shown).await?;
            let task = tokio::spawn(async move {
                let _ = conn.await;
            });
            primary(&client, &self.pg, &self.shown).await?;
            self.session = Some(Session {
                client,
                task,
                locked: false,
            });
        }
        Ok(self.session.as_mut().expect("connected above"))
    }

    /// Runs one statement on the lease's session, bounded by the timeout.
    /// A timeout or a lost connection drops the session: the next
    /// operation starts on a fresh one.
    async fn run(
        &mut self,
        statement: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, Error> {
        let timeout = self.pg.connect.timeout;
        let shown = self.shown.clone();
        let session = self.session().await?;
        let outcome =
            tokio::time::timeout(timeout, session.client.query_typed(statement, params)).await;
        match outcome {
            Ok(Ok(rows)) => Ok(rows),
            Ok(Err(e)) => {
                let error = classify(&e, &shown, &self.pg);
                if e.as_db_error().is_none() {
                    self.session = None;
                }
                Err(error)
            }
            Err(_) => {
                self.session = None;
                Err(Error::Timeout {
                    backend: shown,
                    timeout,
                })
            }
        }
    }

    /// The holder columns starting at `at`: id, fence, milliseconds left.
    fn holder_of(&self, row: &Row, at: usize) -> Result<(Option<Holder>, Option<Duration>), Error> {
        let bad = |e: tokio_postgres::Error| self.unexpected(&e.to_string());
        let id: Option<String> = row.try_get(at).map_err(bad)?;
        let fence: Option<i64> = row.try_get(at + 1).map_err(bad)?;
        let left: Option<i64> = row.try_get(at + 2).map_err(bad)?;
        let holder = match left {
            Some(ms) if ms > 0 => Some(Holder {
                id,
                fencing_token: fence.map(|f| f.max(0) as u64),
            }),
            _ => None,
        };
        let left = left
            .filter(|ms| *ms > 0)
            .map(|ms| Duration::from_millis(ms as u64));
        Ok((holder, left))
    }

    fn unexpected(&self, detail: &str) -> Error {
        Error::Unexpected {
            backend: self.shown.clone(),
            detail: format!(
                "{detail} (is {} leaderd's lease table?)",
                self.pg.table.name
            ),
        }
    }
}

/// The statement that creates the lease table `name` (`check` prints it).
pub fn create_table_statement(name: &str) -> Result<String, String> {
    config::parse_table(name).map(|t| sql::create_table(&t))
}

/// `PostgreSQL user@host:port/db (table T, mode M)`, without the password.
fn describe(pg: &PgConfig) -> String {
    let c = &pg.connect.url.connect;
    let hosts: Vec<String> = c
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let host = match h {
                tokio_postgres::config::Host::Tcp(name) => name.clone(),
                tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
            };
            let port = c.get_ports().get(i).or(c.get_ports().first()).copied();
            format!("{host}:{}", port.unwrap_or(5432))
        })
        .collect();
    format!(
        "PostgreSQL {}@{}/{} (table {}, {} mode)",
        c.get_user().unwrap_or(""),
        hosts.join(","),
        c.get_dbname().or(c.get_user()).unwrap_or(""),
        pg.table.name,
        pg.mode.as_str()
    )
}

/// The wake-up channel: a hash, since channel names are identifiers of at
/// most 63 bytes and keys may be longer.
fn channel(table: &str, key: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{table}\n{key}").as_bytes());
    let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
    format!("leaderd_{hex}")
}

#[async_trait::async_trait]
impl LeaseBackend for PgLease {
    fn describe(&self) -> String {
        self.shown.clone()
    }

    async fn acquire(&mut self) -> Result<Acquire, Error> {
        if let Some((holder, left)) = self.heard_term() {
            return Ok(Acquire::Held {
                holder,
                expires_in: Some(left),
            });
        }
        let token = self.token.get_or_insert_with(new_token).clone();
        let sent_at = Instant::now();
        if self.pg.mode == PgMode::Advisory && !self.take_lock().await? {
            // The row's expiry when it has one; else (another program
            // holds the lock) the retry interval.
            let (holder, expires_in) = self.lock_holder().await?;
            return Ok(Acquire::Held { holder, expires_in });
        }
        let (ttl, seen) = (self.ttl_ms(), self.highest_fencing as i64);
        let statement = self.statements.acquire.clone();
        let rows = self
            .run(
                &statement,
                &[
                    (&self.key.clone(), Type::TEXT),
                    (&self.id.clone(), Type::TEXT),
                    (&token, Type::TEXT),
                    (&ttl, Type::INT8),
                    (&seen, Type::INT8),
                ],
            )
            .await;
        let rows = match rows {
            Ok(rows) => rows,
            Err(e) => {
                self.drop_lock().await;
                return Err(e);
            }
        };
        let row = rows.first().ok_or_else(|| self.unexpected("no row"))?;
        let (holder, left) = self.holder_of(row, 1)?;
        if let Some(seen) = holder.as_ref().and_then(|h| h.fencing_token) {
            self.highest_fencing = self.highest_fencing.max(seen);
        }
        match row.try_get::<_, Option<i64>>(0) {
            Ok(Some(fencing)) => {
                let fencing = fencing.max(0) as u64;
                self.highest_fencing = self.highest_fencing.max(fencing);
                Ok(Acquire::Won {
                    fencing_token: fencing,
                    sent_at,
                })
            }
            Ok(None) => {
                // Not ours: a timed-out attempt with this token lost, and
                // a copy of an old term of ours put back is not ours.
                self.token = None;
                self.drop_lock().await;
                Ok(Acquire::Held {
                    holder: holder.unwrap_or(Holder {
                        id: None,
                        fencing_token: None,
                    }),
                    expires_in: left,
                })
            }
            Err(e) => Err(self.unexpected(&e.to_string())),
        }
    }

    async fn renew(&mut self) -> Result<Renew, Error> {
        let Some(token) = self.token.clone() else {
            return Ok(Renew::Lost { holder: None });
        };
        let sent_at = Instant::now();
        if self.pg.mode == PgMode::Advisory && !self.keep_lock().await? {
            return Ok(Renew::Lost {
                holder: self.lock_holder().await.ok().map(|(h, _)| h),
            });
        }
        let ttl = self.ttl_ms();
        let statement = self.statements.renew.clone();
        let rows = self
            .run(
                &statement,
                &[
                    (&self.key.clone(), Type::TEXT),
                    (&token, Type::TEXT),
                    (&ttl, Type::INT8),
                    (&self.renewed.clone(), Type::TEXT),
                ],
            )
            .await?;
        let row = rows.first().ok_or_else(|| self.unexpected("no row"))?;
        let renewed: i64 = row
            .try_get(0)
            .map_err(|e| self.unexpected(&e.to_string()))?;
        if renewed == 1 {
            return Ok(Renew::Renewed { sent_at });
        }
        let (holder, _) = self.holder_of(row, 1)?;
        self.token = None;
        self.drop_lock().await;
        Ok(Renew::Lost { holder })
    }

    async fn release(&mut self) -> Result<bool, Error> {
        let Some(token) = self.token.clone() else {
            return Ok(false);
        };
        // The lock first: the release's notification must find it free. A
        // waiter that tries in between finds the row still held, and the
        // notification comes right after.
        self.drop_lock().await;
        let statement = self.statements.release.clone();
        let rows = self
            .run(
                &statement,
                &[
                    (&self.key.clone(), Type::TEXT),
                    (&token, Type::TEXT),
                    (&self.channel.clone(), Type::TEXT),
                    (&self.id.clone(), Type::TEXT),
                ],
            )
            .await?;
        self.token = None;
        Ok(!rows.is_empty())
    }

    async fn look(&mut self) -> Result<Peek, Error> {
        match self.heard_term() {
            Some(heard) => Ok(Peek::heard(heard)),
            None => self.peek().await,
        }
    }

    async fn peek(&mut self) -> Result<Peek, Error> {
        let statement = self.statements.peek.clone();
        let rows = self
            .run(&statement, &[(&self.key.clone(), Type::TEXT)])
            .await?;
        let Some(row) = rows.first() else {
            return Ok(Peek::default());
        };
        let (holder, expires_in) = self.holder_of(row, 0)?;
        Ok(Peek {
            holder,
            expires_in,
            contested: false,
        })
    }

    async fn register(&mut self, me: Option<&Record>) -> Result<Vec<Record>, Error> {
        let statement = self.statements.register.clone();
        let json = me.map(|r| serde_json::to_string(r).expect("a record always serialises"));
        let ttl_ms = self.timing.registry_lapse().as_millis() as i64;
        let (key, id) = (self.key.clone(), crate::lease::registry::entry(&self.id));
        let rows = self
            .run(
                &statement,
                &[
                    (&key, Type::TEXT),
                    (&id, Type::TEXT),
                    (&json, Type::TEXT),
                    (&ttl_ms, Type::INT8),
                ],
            )
            .await?;
        Ok(sql::records(&rows))
    }

    async fn candidates(&mut self) -> Result<Vec<Record>, Error> {
        let statement = self.statements.candidates.clone();
        let rows = self
            .run(&statement, &[(&self.key.clone(), Type::TEXT)])
            .await?;
        Ok(sql::records(&rows))
    }

    fn watch_releases(&self, wakeups: Wakeups) -> Option<JoinHandle<()>> {
        let listener = wake::Listener {
            pg: self.pg.clone(),
            shown: self.shown.clone(),
            channel: self.channel.clone(),
            renewed: self.renewed.clone(),
            own_id: self.id.clone(),
            heard: self.heard.clone(),
        };
        Some(wake::watch(listener, wakeups))
    }

    fn standby_reads(&self) -> crate::lease::StandbyReads {
        if self.heard.live() {
            crate::lease::StandbyReads::Watch
        } else {
            crate::lease::StandbyReads::Fallback
        }
    }

    async fn vet(&mut self) -> Result<(), Error> {
        self.vet_op().await
    }

    async fn self_check(&mut self) -> Result<Vec<String>, Error> {
        self.report().await
    }
}
