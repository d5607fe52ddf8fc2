//! Connections to PostgreSQL: opening one (TLS as configured, every host
//! of the URL in turn), checking that it reached a primary, and sorting the
//! client's errors into what a person must fix and what a retry may fix.

use super::config::PgConfig;
use super::{sql, tls};
use crate::lease::contract::Error;
use std::time::Duration;
use tokio_postgres::Client;

/// tokio-postgres's connection, over rustls (or plain text).
pub(crate) type Conn = tokio_postgres::Connection<
    tokio_postgres::Socket,
    <tokio_postgres_rustls::MakeRustlsConnect as tokio_postgres::tls::MakeTlsConnect<
        tokio_postgres::Socket,
    >>::Stream,
>;

/// Opens a connection (TLS as configured), bounded by the timeout per host.
pub(crate) async fn connect(pg: &PgConfig, shown: &str) -> Result<(Client, Conn), Error> {
    let (connector, sslmode) = tls::connector(&pg.tls).map_err(|detail| Error::Tls {
        backend: shown.to_string(),
        detail,
        hint: "check sslrootcert, sslcert and sslkey in the PostgreSQL URL".into(),
    })?;
    let mut config = pg.url.connect.clone();
    config
        .ssl_mode(sslmode)
        .connect_timeout(pg.timeout)
        .keepalives(true)
        .keepalives_idle(Duration::from_secs(5));
    if config.get_application_name().is_none() {
        config.application_name("leaderd");
    }
    let hosts = config.get_hosts().len().max(1) as u32;
    match tokio::time::timeout(pg.timeout * (hosts + 1), config.connect(connector)).await {
        Ok(Ok(pair)) => Ok(pair),
        Ok(Err(e)) => Err(classify(&e, shown, pg)),
        Err(_) => Err(Error::Timeout {
            backend: shown.to_string(),
            timeout: pg.timeout,
        }),
    }
}

/// Checks the session's server is a primary.
pub(super) async fn primary(client: &Client, pg: &PgConfig, shown: &str) -> Result<(), Error> {
    let row = tokio::time::timeout(pg.timeout, client.query_typed_one(sql::SERVER, &[]))
        .await
        .map_err(|_| Error::Timeout {
            backend: shown.to_string(),
            timeout: pg.timeout,
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
        let user = pg.url.connect.get_user().unwrap_or("leaderd's user");
        return if *code == SqlState::INVALID_PASSWORD
            || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
        {
            Error::Misconfigured {
                backend,
                detail: message,
                hint: "check the user and password in the PostgreSQL URL (and the server's pg_hba.conf)",
            }
        } else if *code == SqlState::UNDEFINED_TABLE {
            Error::NotSetUp {
                backend,
                detail: format!(
                    "the lease table {table} does not exist ({message}); create it once: {}; or start leaderd with --postgres-create-table",
                    sql::create_table(&pg.table)
                ),
            }
        } else if *code == SqlState::INSUFFICIENT_PRIVILEGE {
            Error::NotSetUp {
                backend,
                detail: format!(
                    "{message}; leaderd needs: GRANT SELECT, INSERT, UPDATE ON {} TO {user}",
                    pg.table.quoted
                ),
            }
        } else if *code == SqlState::INVALID_CATALOG_NAME {
            Error::NotSetUp {
                backend,
                detail: format!("{message}; create the database or fix its name in the URL"),
            }
        } else if *code == SqlState::READ_ONLY_SQL_TRANSACTION {
            Error::WrongKind {
                backend,
                detail: format!(
                    "{message}: the server is a standby or read-only; point the URL at the primary, or list every host with ?target_session_attrs=read-write"
                ),
            }
        } else {
            Error::Connection {
                backend,
                detail: message,
            }
        };
    }
    let mut detail = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(inner) = source {
        detail = format!("{detail}: {inner}");
        source = inner.source();
    }
    if let Some(hint) = tls::hint(&detail) {
        return Error::Tls {
            backend,
            detail,
            hint: hint.to_string(),
        };
    }
    Error::Connection { backend, detail }
}
