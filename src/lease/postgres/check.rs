//! What `run` and `check` verify before campaigning (the server is a
//! primary, the table exists and may be used, advisory mode has what it
//! needs), and `check`'s report.

use super::config::PgMode;
use super::{PgLease, advisory, sql};
use crate::lease::contract::Error;
use crate::lease::scratch::exercise;
use tokio_postgres::types::Type;

/// `idle_session_timeout` arrived in PostgreSQL 14.
const ADVISORY_MIN_VERSION: i32 = 140_000;

/// What the server said about itself and the table.
struct Facts {
    version: i32,
    database: String,
    tls: Option<String>,
    exists: bool,
    /// SELECT, INSERT, UPDATE.
    grants: [bool; 3],
}

impl PgLease {
    async fn facts(&mut self) -> Result<Facts, Error> {
        let rows = self
            .run(
                "SELECT current_setting('server_version_num')::int, current_database(),
                   (SELECT version FROM pg_stat_ssl WHERE pid = pg_backend_pid() AND ssl)",
                &[],
            )
            .await?;
        let row = rows.first().ok_or_else(|| self.unexpected("no row"))?;
        let (version, database, tls) = (row.get(0), row.get(1), row.get(2));
        let table = self.pg.table.quoted.clone();
        let rows = self.run(sql::PRIVILEGES, &[(&table, Type::TEXT)]).await?;
        let row = rows.first().ok_or_else(|| self.unexpected("no row"))?;
        let grant = |i| row.get::<_, Option<bool>>(i).unwrap_or(false);
        Ok(Facts {
            version,
            database,
            tls,
            exists: row.get(0),
            grants: [grant(1), grant(2), grant(3)],
        })
    }

    /// The table is there (created if asked to) and usable.
    async fn table_ready(&mut self, facts: &Facts) -> Result<Vec<String>, Error> {
        let name = self.pg.table.name.clone();
        let mut lines = Vec::new();
        if !facts.exists {
            if !self.pg.create_table {
                return Err(Error::NotSetUp {
                    backend: self.shown.clone(),
                    detail: format!(
                        "the lease table {name} does not exist; create it once (as a user with CREATE on the schema): {}; or start leaderd with --postgres-create-table",
                        sql::create_table(&self.pg.table)
                    ),
                });
            }
            let ddl = sql::create_table(&self.pg.table);
            self.run(&ddl, &[]).await?;
            tracing::info!(table = %name, "created the lease table (--postgres-create-table)");
            lines.push(format!("created the lease table {name}"));
            return Ok(lines);
        }
        let missing: Vec<&str> = ["SELECT", "INSERT", "UPDATE"]
            .into_iter()
            .zip(facts.grants)
            .filter(|(_, granted)| !granted)
            .map(|(p, _)| p)
            .collect();
        if !missing.is_empty() {
            let user = self
                .pg
                .connect
                .url
                .connect
                .get_user()
                .unwrap_or("")
                .to_string();
            return Err(Error::NotSetUp {
                backend: self.shown.clone(),
                detail: format!(
                    "the user {user} lacks {} on the lease table {name}; grant it: GRANT SELECT, INSERT, UPDATE ON {} TO {user}",
                    missing.join(", "),
                    self.pg.table.quoted
                ),
            });
        }
        lines.push(format!(
            "the lease table {name} exists; SELECT, INSERT and UPDATE granted"
        ));
        Ok(lines)
    }

    /// Advisory mode's needs: PostgreSQL 14 or later, and no pooler.
    async fn advisory_ready(&mut self, facts: &Facts) -> Result<Vec<String>, Error> {
        if facts.version < ADVISORY_MIN_VERSION {
            return Err(Error::NotSetUp {
                backend: self.shown.clone(),
                detail: format!(
                    "advisory mode needs PostgreSQL 14 or later (idle_session_timeout, which frees the lock of a silent holder); this server is {}; use table mode (--postgres-mode table)",
                    facts.version
                ),
            });
        }
        if advisory::pooled(&self.pg, &self.shown).await? {
            return Err(Error::WrongKind {
                backend: self.shown.clone(),
                detail: "advisory mode needs a session of its own, and a transaction pooler (PgBouncer pool_mode = transaction, or similar) is in the path: two candidates could share one server session and both hold the lock. Use table mode (--postgres-mode table), which works through poolers, or connect to the server directly".into(),
            });
        }
        Ok(vec![format!(
            "advisory lock {}: no transaction pooler in the path",
            advisory::lock_id(&self.pg.table.name, &self.key)
        )])
    }

    /// Before campaigning: refuses on evidence that no retry can fix; a
    /// server that is down passes (it is retried).
    pub(super) async fn vet_op(&mut self) -> Result<(), Error> {
        let outcome: Result<(), Error> = async {
            let facts = self.facts().await?;
            self.table_ready(&facts).await?;
            if self.pg.mode == PgMode::Advisory {
                self.advisory_ready(&facts).await?;
            }
            Ok(())
        }
        .await;
        match outcome {
            Err(e) if !e.is_misconfiguration() => Ok(()),
            other => other,
        }
    }

    /// `leaderd check`: the server, the table, the mode's needs, wake-ups,
    /// and a real acquire, renew and release on a scratch key.
    pub(super) async fn report(&mut self) -> Result<Vec<String>, Error> {
        let facts = self.facts().await?;
        let mut lines = vec![format!(
            "{}: PostgreSQL {}.{}, a primary, database {}, {}",
            self.shown,
            facts.version / 10_000,
            facts.version % 10_000,
            facts.database,
            match &facts.tls {
                Some(version) => format!(
                    "TLS ({version}, sslmode={})",
                    self.pg.connect.tls.mode.as_str()
                ),
                None => "no TLS".into(),
            }
        )];
        lines.extend(self.table_ready(&facts).await?);
        if self.pg.mode == PgMode::Advisory {
            lines.extend(self.advisory_ready(&facts).await?);
        } else if advisory::pooled(&self.pg, &self.shown).await? {
            lines.push("a transaction pooler is in the path: LISTEN/NOTIFY wake-ups cannot work, so waiters take over when the lease expires".into());
        } else {
            lines.push(
                "no transaction pooler in the path: releases wake waiters by LISTEN/NOTIFY".into(),
            );
        }
        lines.push(self.scratch().await?);
        Ok(lines)
    }

    /// Acquire, renew and release on `KEY.check`, as the configured user.
    async fn scratch(&mut self) -> Result<String, Error> {
        let mut scratch = PgLease {
            key: format!("{}.check", self.key),
            channel: super::channel(&self.pg.table.name, &format!("{}.check", self.key)),
            renewed: format!(
                "{}_r",
                super::channel(&self.pg.table.name, &format!("{}.check", self.key))
            ),
            heard: Default::default(),
            token: None,
            session: None,
            highest_fencing: 0,
            statements: self.statements.clone(),
            pg: self.pg.clone(),
            id: self.id.clone(),
            timing: self.timing,
            shown: self.shown.clone(),
        };
        let place = format!("the scratch lease {}", scratch.key);
        let verbs = ["acquire", "renew", "release"];
        let outcome = exercise(&mut scratch).await?;
        Ok(outcome.line(verbs, &place, |t| format!("fencing token {t}")))
    }
}
