//! PostgreSQL's options: `--postgres URL` (or its env var, secret file or
//! TOML key) and `--postgres-*`. The URL is libpq's form; leaderd takes its
//! own parameter (`mode`) and libpq's TLS parameters (`sslmode`,
//! `sslrootcert`, `sslcert`, `sslkey`, which tokio-postgres does not
//! implement the way libpq does) out of the query, and hands the rest to
//! tokio-postgres.

use crate::config::options::{BACKEND, Spec, spec};
use crate::config::{Backend, ConfigError, Declared, Resolving, Secret, Value, or_default};
use crate::config::{loose_secret_file, redact_url};
use crate::lease::options::StoreOptions;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The PostgreSQL backend's configuration.
#[derive(Debug, Clone)]
pub struct PgConfig {
    pub url: PgUrl,
    pub table: PgTable,
    /// Bounds connecting and every statement.
    pub timeout: Duration,
    pub mode: PgMode,
    pub create_table: bool,
    pub tls: PgTls,
}

impl PgConfig {
    /// A connection's settings only, for a database that is not the lease
    /// store (a fenced resource): the lease's own settings at their defaults.
    pub(crate) fn connection(url: PgUrl, tls: PgTls, timeout: Duration) -> PgConfig {
        PgConfig {
            url,
            table: parse_table("leaderd_lease").expect("a valid table name"),
            timeout,
            mode: PgMode::Table,
            create_table: false,
            tls,
        }
    }
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

/// libpq's `sslmode`, with libpq's meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    /// TLS when the server offers it (libpq's default), unverified.
    Prefer,
    /// TLS always; unverified, unless a root certificate is given (then as
    /// `VerifyCa`, like libpq).
    Require,
    /// The server's certificate chains to the root; any host name.
    VerifyCa,
    /// The chain, and the host name in the certificate.
    VerifyFull,
}

impl SslMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// TLS as the URL asks for it, with its files read at start-up.
#[derive(Debug, Clone)]
pub struct PgTls {
    pub mode: SslMode,
    /// PEM roots to verify the server with (`sslrootcert`); `None` with a
    /// verifying mode: the system's roots.
    pub roots: Option<Vec<u8>>,
    /// Client certificate chain and key (`sslcert`, `sslkey`).
    pub client: Option<(Vec<u8>, Secret)>,
}

/// A parsed PostgreSQL URL: the connection settings for tokio-postgres, and
/// leaderd's own parameters. Shown only redacted.
#[derive(Clone)]
pub struct PgUrl {
    pub connect: tokio_postgres::Config,
    redacted: String,
    mode: Option<PgMode>,
    sslmode: Option<SslMode>,
    sslrootcert: Option<String>,
    sslcert: Option<String>,
    sslkey: Option<String>,
}

impl PgUrl {
    /// Whether the URL carries leaderd's `?mode=`, which only the lease's
    /// URL may (and only until the form is gone).
    pub fn gives_mode(&self) -> bool {
        self.mode.is_some()
    }
}

impl fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted)
    }
}

impl PgUrl {
    /// The URL with its password replaced by `***`.
    pub fn redacted(&self) -> &str {
        &self.redacted
    }
}

/// Parses `postgres[ql]://user:pass@host[,host2][:port]/db?params`.
pub fn parse_postgres_url(text: &str) -> Result<PgUrl, String> {
    let text = text.trim();
    let redacted = redact(text);
    if !(text.starts_with("postgres://") || text.starts_with("postgresql://")) {
        return Err(format!(
            "`{redacted}` is not a PostgreSQL URL; expected postgres://USER:PASSWORD@HOST:5432/DATABASE"
        ));
    }
    let (base, query) = text.split_once('?').unwrap_or((text, ""));
    let mut kept = url::form_urlencoded::Serializer::new(String::new());
    let mut url = PgUrl {
        connect: tokio_postgres::Config::new(),
        redacted: redacted.clone(),
        mode: None,
        sslmode: None,
        sslrootcert: None,
        sslcert: None,
        sslkey: None,
    };
    for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
        let value = value.into_owned();
        match name.as_ref() {
            "mode" => url.mode = Some(parse_mode(&value)?),
            "sslmode" => {
                url.sslmode = Some(match value.as_str() {
                    "disable" => SslMode::Disable,
                    "prefer" => SslMode::Prefer,
                    "require" => SslMode::Require,
                    "verify-ca" => SslMode::VerifyCa,
                    "verify-full" => SslMode::VerifyFull,
                    "allow" => return Err("sslmode=allow (TLS only when plain text is refused) is not supported; use prefer, require or verify-full".into()),
                    other => return Err(format!(
                        "unknown sslmode `{other}`; use disable, prefer, require, verify-ca or verify-full"
                    )),
                })
            }
            "sslrootcert" => url.sslrootcert = Some(value),
            "sslcert" => url.sslcert = Some(value),
            "sslkey" => url.sslkey = Some(value),
            "sslpassword" | "passfile" | "service" => {
                return Err(format!(
                    "the URL parameter `{name}` is not supported; give the key unencrypted (sslkey), and the password in the URL (from LEADERD_POSTGRES_URL_FILE)"
                ));
            }
            _ => {
                kept.append_pair(&name, &value);
            }
        }
    }
    let rest = kept.finish();
    let plain = if rest.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{rest}")
    };
    url.connect = tokio_postgres::Config::from_str(&plain)
        .map_err(|e| format!("`{redacted}` is not a valid PostgreSQL URL: {e}"))?;
    if url.connect.get_user().is_none_or(str::is_empty) {
        return Err(format!(
            "`{redacted}` names no user; give one: postgres://USER:PASSWORD@HOST/DATABASE"
        ));
    }
    if url.connect.get_hosts().is_empty() {
        return Err(format!(
            "`{redacted}` names no host; give one: postgres://USER:PASSWORD@HOST/DATABASE"
        ));
    }
    Ok(url)
}

/// The URL with its password as `***`; a user without a password is
/// shown as it is (unlike Redis, libpq reads a lone userinfo as the user).
fn redact(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else {
        return redact_url(text);
    };
    match rest.rfind('@') {
        Some(at) if !rest[..at].contains(':') => text.to_string(),
        _ => format!("{scheme}://{}", &redact_url(text)[scheme.len() + 3..]),
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
    let mode = match (mode, url.value.mode) {
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
        url: url.value,
        table: table.value,
        timeout: timeout.value,
        mode: mode.value,
        create_table: create.value,
        tls,
    }))
}

/// Reads the URL's TLS files now, so a wrong path fails at start-up.
pub(crate) fn resolve_tls(x: &mut Resolving<'_>, url: &Value<PgUrl>) -> Result<PgTls, ConfigError> {
    let u = &url.value;
    let origin = &url.origin;
    let read = |param: &str, path: &str| {
        (x.r.sources().read_secret)(std::path::Path::new(path)).map_err(|e| {
            ConfigError(format!(
                "{origin}: {param}={path} in the PostgreSQL URL: cannot read it: {e}"
            ))
        })
    };
    let mode = u.sslmode.unwrap_or(SslMode::Prefer);
    let roots = match u.sslrootcert.as_deref() {
        None | Some("system") => None,
        Some(path) => Some(read("sslrootcert", path)?.0.into_bytes()),
    };
    if mode == SslMode::Disable && (roots.is_some() || u.sslcert.is_some()) {
        return Err(ConfigError(format!(
            "{origin}: sslmode=disable with TLS files in the PostgreSQL URL; remove them or choose sslmode=verify-full"
        )));
    }
    // As libpq: a root certificate given with `require` verifies the chain.
    let mode = match mode {
        SslMode::Require if roots.is_some() => SslMode::VerifyCa,
        other => other,
    };
    let client = match (u.sslcert.as_deref(), u.sslkey.as_deref()) {
        (Some(cert), Some(key)) => {
            let (key_pem, file_mode) = read("sslkey", key)?;
            x.warnings.extend(loose_secret_file(
                origin,
                std::path::Path::new(key),
                file_mode,
            ));
            Some((read("sslcert", cert)?.0.into_bytes(), Secret::new(key_pem)))
        }
        (None, None) => None,
        _ => {
            return Err(ConfigError(format!(
                "{origin}: a client certificate needs both sslcert and sslkey in the PostgreSQL URL; give both or neither"
            )));
        }
    };
    Ok(PgTls {
        mode,
        roots,
        client,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_leaderds_parameters_and_hide_the_password() {
        let u = parse_postgres_url(
            "postgresql://app:s3cret@db1,db2:5433/jobs?mode=advisory&sslmode=verify-full&target_session_attrs=read-write",
        )
        .unwrap();
        assert_eq!(u.mode, Some(PgMode::Advisory));
        assert_eq!(u.sslmode, Some(SslMode::VerifyFull));
        assert_eq!(u.connect.get_hosts().len(), 2);
        assert_eq!(u.connect.get_dbname(), Some("jobs"));
        assert!(!u.redacted().contains("s3cret"), "{}", u.redacted());
        assert!(!format!("{u:?}").contains("s3cret"));
        let plain = parse_postgres_url("postgres://app@127.0.0.1/jobs").unwrap();
        assert_eq!(plain.redacted(), "postgres://app@127.0.0.1/jobs");
    }

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
    }

    #[test]
    fn bad_urls_say_what_to_fix_without_the_password() {
        let table: [(&str, &str); 5] = [
            ("redis://x:pw@h/0", "not a PostgreSQL URL"),
            ("postgres://h/db", "names no user"),
            ("postgres://u:pw@h/db?sslmode=allow", "sslmode=allow"),
            ("postgres://u:pw@h/db?sslmode=maybe", "unknown sslmode"),
            ("postgres://u:pw@h/db?mode=lock", "unknown PostgreSQL mode"),
        ];
        for (url, says) in table {
            let e = parse_postgres_url(url).unwrap_err();
            assert!(e.contains(says), "{url}: {e}");
            assert!(!e.contains("pw@"), "{url}: {e}");
        }
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
