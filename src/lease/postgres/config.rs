//! PostgreSQL's options: `--postgres URL` (or its env var, secret file or
//! TOML key) and `--postgres-*`. The URL, its TLS and the timeout are the
//! connection's ([`crate::client::postgres`]); the table and the mode are
//! the lease's.

use crate::client::postgres::{PgConnect, PgUrl, parse_postgres_url, resolve_tls};
use crate::config::options::{BACKEND, Spec, spec};
use crate::config::{Backend, ConfigError, Declared, Resolving, Value, or_default};
use crate::lease::options::StoreOptions;

/// The PostgreSQL backend's configuration: the connection, and how the
/// lease is kept there.
#[derive(Debug, Clone)]
pub struct PgConfig {
    pub connect: PgConnect,
    pub table: PgTable,
    pub mode: PgMode,
    pub create_table: bool,
}

/// How the lease is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PgMode {
    /// A row per key, judged by the server's clock.
    Table,
    /// The row, plus a session advisory lock on a dedicated session.
    Advisory,
}

impl PgMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PgMode::Table => "table",
            PgMode::Advisory => "advisory",
        }
    }
}

fn parse_mode(text: &str) -> Result<PgMode, String> {
    match text {
        "table" => Ok(PgMode::Table),
        "advisory" => Ok(PgMode::Advisory),
        other => Err(format!(
            "unknown PostgreSQL mode `{other}`; use table or advisory"
        )),
    }
}

/// A table name, `name` or `schema.name`, quoted for SQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgTable {
    /// As the user wrote it (for messages).
    pub name: String,
    /// Each part double-quoted: safe to put in a statement.
    pub quoted: String,
}

pub fn parse_table(text: &str) -> Result<PgTable, String> {
    let parts: Vec<&str> = text.split('.').collect();
    let ok = |p: &str| {
        !p.is_empty()
            && p.len() <= 63
            && p.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    if parts.len() > 2 || !parts.iter().all(|p| ok(p)) {
        return Err(format!(
            "`{text}` is not a table name leaderd accepts: give name or schema.name, each of letters, digits and _ (at most 63), not starting with a digit"
        ));
    }
    let quoted: Vec<String> = parts.iter().map(|p| format!("\"{p}\"")).collect();
    Ok(PgTable {
        name: text.to_string(),
        quoted: quoted.join("."),
    })
}

pub const POSTGRES: Spec = spec(
    "postgres",
    "--postgres",
    "LEADERD_POSTGRES_URL",
    "postgres.url",
)
.value("URL")
.under(BACKEND)
.secret()
.help("PostgreSQL URL, postgres://user:pass@host[,host2][:port]/db?sslmode=…&target_session_attrs=read-write (or in a file: LEADERD_POSTGRES_URL_FILE, postgres.url_file); the mode is --postgres-mode");

pub const POSTGRES_URL_FILE: Spec = spec(
    "postgres_url_file",
    "",
    "LEADERD_POSTGRES_URL_FILE",
    "postgres.url_file",
)
.no_flag()
.value("FILE")
.under(BACKEND)
.help("A file holding the PostgreSQL URL, read at start-up");

pub const POSTGRES_TABLE: Spec = spec(
    "postgres_table",
    "--postgres-table",
    "LEADERD_POSTGRES_TABLE",
    "postgres.table",
)
.value("NAME")
.under(BACKEND)
.help("The lease table, [schema.]name (used as written, quoted)")
.default("leaderd_lease");

pub const POSTGRES_TIMEOUT: Spec = spec(
    "postgres_timeout",
    "--postgres-timeout",
    "LEADERD_POSTGRES_TIMEOUT",
    "postgres.timeout",
)
.value("DUR")
.under(BACKEND)
.help("Timeout of connecting and of every statement")
.default("500ms, at most half the renew interval");

pub const POSTGRES_MODE: Spec = spec(
    "postgres_mode",
    "--postgres-mode",
    "LEADERD_POSTGRES_MODE",
    "postgres.mode",
)
.value("MODE")
.under(BACKEND)
.help("table: a lease row judged by the server's clock (works through transaction poolers); advisory: the row plus a session advisory lock held by a dedicated session (refused behind a transaction pooler); ?mode= in the URL still works, deprecated")
.choices(&["table", "advisory"])
.default("table");

pub const POSTGRES_CREATE_TABLE: Spec = spec(
    "postgres_create_table",
    "--postgres-create-table",
    "LEADERD_POSTGRES_CREATE_TABLE",
    "postgres.create_table",
)
.value("BOOL")
.under(BACKEND)
.help("Create the lease table at start-up when it is missing (needs CREATE on the schema); without it, a missing table is an error that prints the statement")
.switch()
.default("false");

/// PostgreSQL as the configuration sees it.
pub const DECLARED: Declared = Declared {
    name: "PostgreSQL",
    options: &[
        &POSTGRES,
        &POSTGRES_URL_FILE,
        &POSTGRES_TABLE,
        &POSTGRES_TIMEOUT,
        &POSTGRES_MODE,
        &POSTGRES_CREATE_TABLE,
    ],
    selectors: &[&POSTGRES, &POSTGRES_URL_FILE],
    resolve,
    fallback: None,
};

fn has_password(url: &PgUrl) -> bool {
    url.connect.get_password().is_some()
}

/// The URL (from the flag, env var, TOML key or a file), then the rest.
fn resolve(x: &mut Resolving<'_>) -> Result<Backend, ConfigError> {
    let mut urls = x
        .url_or_file(
            &POSTGRES,
            &POSTGRES_URL_FILE,
            parse_postgres_url,
            has_password,
        )?
        .expect("chosen by one of these options");
    let url = Value {
        value: urls.value.remove(0),
        origin: urls.origin,
    };
    x.note(
        "postgres.url",
        format!("{:?}", url.value.redacted()),
        &url.origin,
    );
    let table = x.r.scalar(&POSTGRES_TABLE, parse_table)?;
    let table = or_default(table, parse_table("leaderd_lease").expect("valid"), "");
    x.note(
        "postgres.table",
        format!("{:?}", table.value.name),
        &table.origin,
    );
    let timeout = x.store_timeout(&POSTGRES_TIMEOUT)?;
    let mode = x.r.scalar(&POSTGRES_MODE, parse_mode)?;
    let in_url = url.value.mode().map(parse_mode).transpose();
    let in_url = in_url.map_err(|e| ConfigError(format!("{}: {e}", url.origin)))?;
    let mode = match (mode, in_url) {
        (Some(given), Some(in_url)) if given.value != in_url => {
            return Err(ConfigError(format!(
                "{} says mode {} but the PostgreSQL URL ({}) says mode={}; choose one",
                given.origin,
                given.value.as_str(),
                url.origin,
                in_url.as_str()
            )));
        }
        (Some(given), _) => given,
        (None, Some(in_url)) => {
            x.warnings.push(format!(
                "{}: ?mode= in the PostgreSQL URL is deprecated (the URL names a database; the mode is how the lease is held): give --postgres-mode {} (LEADERD_POSTGRES_MODE, postgres.mode) instead",
                url.origin,
                in_url.as_str()
            ));
            Value {
                value: in_url,
                origin: url.origin.clone(),
            }
        }
        (None, None) => or_default(None, PgMode::Table, ""),
    };
    x.note(
        "postgres.mode",
        format!("{:?}", mode.value.as_str()),
        &mode.origin,
    );
    let create =
        x.r.scalar(&POSTGRES_CREATE_TABLE, crate::config::parse_bool)?;
    let create = or_default(create, false, "");
    x.note(
        "postgres.create_table",
        create.value.to_string(),
        &create.origin,
    );
    let tls = resolve_tls(x, &url)?;
    Ok(Backend::new(PgConfig {
        connect: PgConnect {
            url: url.value,
            tls,
            timeout: timeout.value,
        },
        table: table.value,
        mode: mode.value,
        create_table: create.value,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mode_in_the_url_still_works_but_says_to_give_the_option() {
        use crate::config::tests::Case;
        let url = "postgres://u:pw@127.0.0.1/db?mode=advisory";
        let config = Case::new()
            .env("LEADERD_POSTGRES_URL", url)
            .build()
            .unwrap();
        let warned = config.warnings.iter().find(|w| w.contains("deprecated"));
        let warned = warned.expect("a deprecation warning");
        assert!(warned.contains("--postgres-mode advisory"), "{warned}");
        let config = Case::new()
            .env("LEADERD_POSTGRES_URL", "postgres://u:pw@127.0.0.1/db")
            .env("LEADERD_POSTGRES_MODE", "advisory")
            .build()
            .unwrap();
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
        // The fenced database's URL takes no mode at all.
        let e = Case::new()
            .env("LEADERD_REDIS_URL", "redis://127.0.0.1:6379")
            .env("LEADERD_FENCE_POSTGRES_URL", url)
            .err();
        assert!(e.contains("remove it from the fence's URL"), "{e}");
        assert!(!e.contains("pw@"), "{e}");
        let e = Case::new()
            .env(
                "LEADERD_POSTGRES_URL",
                "postgres://u:pw@127.0.0.1/db?mode=lock",
            )
            .err();
        assert!(e.contains("unknown PostgreSQL mode"), "{e}");
        assert!(!e.contains("pw@"), "{e}");
    }

    #[test]
    fn table_names_are_identifiers_quoted_as_written() {
        assert_eq!(parse_table("leases").unwrap().quoted, "\"leases\"");
        assert_eq!(
            parse_table("ops.Leases").unwrap().quoted,
            "\"ops\".\"Leases\""
        );
        for bad in ["", "a.b.c", "1x", "x;drop", "x\"y", "a."] {
            assert!(parse_table(bad).is_err(), "{bad}");
        }
    }
}
