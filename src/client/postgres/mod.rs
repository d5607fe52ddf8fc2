//! A PostgreSQL connection: its settings ([`PgConnect`]: the URL, its TLS
//! and the timeout), opening one (TLS as configured, every host of the
//! URL in turn, bounded per host), and the connection-level sorting of the
//! client's errors into what a person must fix and what a retry may fix.
//! The PostgreSQL lease contains a [`PgConnect`] and adds its table and
//! mode; the fence uses one as it is.

pub mod tls;
pub mod url;

use crate::client::Error;
use std::time::Duration;
use tokio_postgres::Client;
pub use url::{PgTls, PgUrl, SslMode, parse_postgres_url, resolve_tls};

/// How to reach a PostgreSQL database.
#[derive(Debug, Clone)]
pub struct PgConnect {
    pub url: PgUrl,
    pub tls: PgTls,
    /// Bounds connecting (per host) and every statement.
    pub timeout: Duration,
}

/// tokio-postgres's connection, over rustls (or plain text).
pub type Conn = tokio_postgres::Connection<
    tokio_postgres::Socket,
    <tokio_postgres_rustls::MakeRustlsConnect as tokio_postgres::tls::MakeTlsConnect<
        tokio_postgres::Socket,
    >>::Stream,
>;

/// Opens a connection (TLS as configured), bounded by the timeout per
/// host; `shown` names the server in errors. A server error is sorted by
/// [`classify`].
pub async fn connect(pg: &PgConnect, shown: &str) -> Result<(Client, Conn), Error> {
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
        Ok(Err(e)) => Err(classify(&e, shown)),
        Err(_) => Err(Error::Timeout {
            backend: shown.to_string(),
            timeout: pg.timeout,
        }),
    }
}

/// Sorts a tokio-postgres error, as far as the connection goes: refused
/// credentials, a missing database, a read-only server, TLS, else a
/// failure a retry may fix. Never shows the password (the server's
/// messages do not carry it, and the URL is shown redacted). What a
/// statement's objects mean (a missing table, a missing grant) is the
/// caller's to say first.
pub fn classify(e: &tokio_postgres::Error, shown: &str) -> Error {
    use tokio_postgres::error::SqlState;
    let backend = shown.to_string();
    if let Some(db) = e.as_db_error() {
        let message = db.message().to_string();
        let code = db.code();
        return if *code == SqlState::INVALID_PASSWORD
            || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
        {
            Error::Misconfigured {
                backend,
                detail: message,
                hint: "check the user and password in the PostgreSQL URL (and the server's pg_hba.conf)",
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
