//! Fencing in PostgreSQL: the guard `fence/postgres.sql` installed and
//! looked at, and the fence (a row of `leaderd_fence`) raised by
//! `leaderd_fence_check(key, token)` in a statement of its own.
//! A connection per operation: a term starts rarely, and a connection kept
//! open between terms would only be one more to watch and re-dial.

use super::{Found, PgTarget, newer_wrote};
use crate::client::Error;
use crate::client::postgres::{Conn, connect};
use std::time::Duration;
use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

/// The shipped guard, as `leaderd fence install postgres` prints it.
pub const GUARD: &str = include_str!("../../fence/postgres.sql");

/// An install may wait for locks held by running workers' transactions;
/// longer than any statement of a term, short enough for a person.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The functions the file creates, with their signatures.
const FUNCTIONS: [(&str, &str); 2] = [
    ("leaderd_fence_check", "leaderd_fence_check(text,bigint)"),
    ("leaderd_fence_trigger", "leaderd_fence_trigger()"),
];

impl PgTarget {
    /// How reports and errors name it: the URL without its password.
    pub(super) fn shown(&self) -> String {
        format!("PostgreSQL {}", self.pg.url.redacted())
    }

    async fn open(&self) -> Result<Session, Error> {
        let (client, conn) = connect(&self.pg, &self.shown()).await?;
        Ok(Session {
            client,
            driver: drive(conn),
        })
    }

    pub(super) async fn raise(&self, key: &str, token: u64) -> Result<(), Error> {
        let token = i64::try_from(token).map_err(|_| Error::Unexpected {
            backend: self.shown(),
            detail: format!("fencing token {token} does not fit PostgreSQL's bigint"),
        })?;
        let session = self.open().await?;
        let raised = self
            .bounded(
                self.pg.timeout,
                session
                    .client
                    .query_one("SELECT leaderd_fence_check($1, $2)", &[&key, &token]),
            )
            .await;
        match raised {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(self.classify(&e)),
            Err(timeout) => Err(timeout),
        }
    }

    pub(super) async fn install(&self) -> Result<String, Error> {
        let session = self.open().await?;
        match self.bounded(INSTALL_TIMEOUT, session.client.batch_execute(GUARD))
            .await?
        {
            Ok(()) => Ok("installed: the table leaderd_fence, the functions leaderd_fence_check(key, token) and leaderd_fence_trigger()".into()),
            Err(e) => Err(self.classify(&e)),
        }
    }

    pub(super) async fn inspect(&self, key: &str) -> Result<Found, Error> {
        let session = self.open().await?;
        let query = async {
            let table: bool = session
                .client
                .query_one("SELECT to_regclass('leaderd_fence') IS NOT NULL", &[])
                .await?
                .get(0);
            let mut missing = Vec::new();
            let mut differs = Vec::new();
            if !table {
                missing.push("the table leaderd_fence".to_string());
            }
            for (name, signature) in FUNCTIONS {
                let row = session
                    .client
                    .query_opt(
                        "SELECT prosrc FROM pg_proc WHERE oid = to_regprocedure($1)",
                        &[&signature],
                    )
                    .await?;
                match row.map(|r| r.get::<_, String>(0)) {
                    None => missing.push(format!("the function {signature}")),
                    Some(body) if Some(body.as_str()) != shipped_body(name) => {
                        differs.push(signature)
                    }
                    Some(_) => {}
                }
            }
            if !missing.is_empty() {
                return Ok(Found::Missing {
                    what: format!("{} missing", missing.join(", ")),
                });
            }
            let row = session
                .client
                .query_opt(
                    "SELECT token, updated_at::text FROM leaderd_fence WHERE key = $1",
                    &[&key],
                )
                .await?;
            let (token, when) = match row {
                Some(r) => (
                    r.get::<_, i64>(0) as u64,
                    format!(", raised {}", r.get::<_, String>(1)),
                ),
                None => (0, String::new()),
            };
            Ok(if differs.is_empty() {
                Found::Fenced {
                    token,
                    what: format!("as this leaderd ships it{when}"),
                }
            } else {
                Found::Differs {
                    token,
                    what: format!(
                        "{} not as this leaderd ships it{when}",
                        differs.join(" and ")
                    ),
                }
            })
        };
        match self
            .bounded(self.pg.timeout.max(Duration::from_secs(5)), query)
            .await?
        {
            Ok(found) => Ok(found),
            Err(e) => Err(self.classify(&e)),
        }
    }

    /// `work`, bounded: a statement that does not answer is a timeout.
    async fn bounded<T>(&self, limit: Duration, work: impl Future<Output = T>) -> Result<T, Error> {
        tokio::time::timeout(limit, work)
            .await
            .map_err(|_| Error::Timeout {
                backend: self.shown(),
                timeout: limit,
            })
    }

    /// The server's refusal in the fence's terms; anything not the
    /// guard's is the PostgreSQL client's to sort (credentials, TLS, a
    /// standby, a lost connection), as for the lease.
    fn classify(&self, e: &tokio_postgres::Error) -> Error {
        let backend = self.shown();
        if let Some(db) = e.as_db_error() {
            let message = db.message().to_string();
            let code = db.code();
            if code.code() == "LDF01" {
                return newer_wrote(backend, message);
            }
            if *code == SqlState::UNDEFINED_FUNCTION || *code == SqlState::UNDEFINED_TABLE {
                return Error::NotSetUp {
                    backend,
                    detail: format!(
                        "the guard is not installed in this database ({message}); install it once: leaderd fence install postgres --apply --fence-postgres URL (or psql -f /usr/share/leaderd/fence/postgres.sql)"
                    ),
                };
            }
            if *code == SqlState::INSUFFICIENT_PRIVILEGE {
                let user = self.pg.url.connect.get_user().unwrap_or("leaderd's user");
                return Error::NotSetUp {
                    backend,
                    detail: format!(
                        "{message}; raising the fence needs: GRANT EXECUTE ON FUNCTION leaderd_fence_check(text, bigint) TO {user}; GRANT SELECT, INSERT, UPDATE ON leaderd_fence TO {user}"
                    ),
                };
            }
        }
        crate::client::postgres::classify(e, &backend)
    }
}

/// A connection and the task that drives it, ended when dropped.
struct Session {
    client: Client,
    driver: tokio::task::JoinHandle<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

fn drive(conn: Conn) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let _ = conn.await;
    })
}

/// The body of function `name` in the shipped file, as `pg_proc.prosrc`
/// keeps it: the text between its `$$` quotes.
fn shipped_body(name: &str) -> Option<&'static str> {
    let start = GUARD.find(&format!("FUNCTION {name}("))?;
    let rest = &GUARD[start..];
    let open = rest.find("$$")? + 2;
    let close = rest[open..].find("$$")?;
    Some(&rest[open..open + close])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_shipped_function_has_a_body_to_compare() {
        for (name, _) in FUNCTIONS {
            let body = shipped_body(name).expect(name);
            assert!(
                body.contains("BEGIN") && body.trim_end().ends_with("END"),
                "{body}"
            );
        }
    }
}
