//! The lease's sessions: opened by the PostgreSQL client
//! ([`crate::client::postgres`]), checked to have reached a primary, and
//! their errors sorted with what the lease's table means (a missing table,
//! a missing grant) before the connection's own classes.

use super::config::PgConfig;
use super::sql;
use crate::client::postgres::{self, Conn};
use crate::lease::contract::Error;
use tokio_postgres::Client;

/// Opens a connection to the lease's database.
pub(crate) async fn connect(pg: &PgConfig, shown: &str) -> Result<(Client, Conn), Error> {
    postgres::connect(&pg.connect, shown).await
}

/// Checks the session's server is a primary.
pub(super) async fn primary(client: &Client, pg: &PgConfig, shown: &str) -> Result<(), Error> {
    let row = tokio::time::timeout(pg.connect.timeout, client.query_typed_one(sql::SERVER, &[]))
        .await
        .map_err(|_| Error::Timeout {
            backend: shown.to_string(),
            timeout: pg.connect.timeout,
        })?
        .map_err(|e| classify(&e, shown, pg))?;
    let standby: bool = row.get(0);
    if standby {
        return Err(Error::WrongKind {
            backend: shown.to_string(),
            detail: "the server is a standby (pg_is_in_recovery() is true); leaderd writes its lease only on the primary: point the URL at the primary, or list every host with ?target_session_attrs=read-write".into(),
        });
    }
    Ok(())
}

/// Sorts a tokio-postgres error into what a person must fix and what a
/// retry may fix. Never shows the password (the server's messages do not
/// carry it, and the URL is shown redacted).
pub(super) fn classify(e: &tokio_postgres::Error, shown: &str, pg: &PgConfig) -> Error {
    use tokio_postgres::error::SqlState;
    let backend = shown.to_string();
    if let Some(db) = e.as_db_error() {
        let message = db.message().to_string();
        let code = db.code();
        let table = &pg.table.name;
        let user = pg
            .connect
            .url
            .connect
            .get_user()
            .unwrap_or("leaderd's user");
        if *code == SqlState::UNDEFINED_TABLE {
            return Error::NotSetUp {
                backend,
                detail: format!(
                    "the lease table {table} does not exist ({message}); create it once: {}; or start leaderd with --postgres-create-table",
                    sql::create_table(&pg.table)
                ),
            };
        }
        if *code == SqlState::INSUFFICIENT_PRIVILEGE {
            return Error::NotSetUp {
                backend,
                detail: format!(
                    "{message}; leaderd needs: GRANT SELECT, INSERT, UPDATE ON {} TO {user}",
                    pg.table.quoted
                ),
            };
        }
    }
    postgres::classify(e, shown)
}
