//! PostgreSQL's options: `--postgres URL` (or its env var, secret file or
//! TOML key) and `--postgres-*`. The URL is libpq's form; leaderd takes its
//! own parameter (`mode`) and libpq's TLS parameters (`sslmode`,
//! `sslrootcert`, `sslcert`, `sslkey`, which tokio-postgres does not
//! implement the way libpq does) out of the query, and hands the rest to
//! tokio-postgres.

use super::options;
use super::resolve::{Layer, Origin, Resolver, Value, or_default, positive, show};
use super::values::{self, Secret};
use super::{BackendConfig, ConfigError, Sources};
use std::fmt;
use std::path::PathBuf;
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
        return values::redact_url(text);
    };
    match rest.rfind('@') {
        Some(at) if !rest[..at].contains(':') => text.to_string(),
        _ => format!(
            "{scheme}://{}",
            &values::redact_url(text)[scheme.len() + 3..]
        ),
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

fn parse_bool(text: &str) -> Result<bool, String> {
    match text {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        other => Err(format!("`{other}` is not true or false")),
    }
}

/// The PostgreSQL URL: `--postgres`, else `LEADERD_POSTGRES_URL` or the
/// file named by `LEADERD_POSTGRES_URL_FILE`, else `postgres.url` or the
/// file named by `postgres.url_file`.
pub(super) fn postgres_url(
    r: &Resolver<'_>,
    s: &Sources<'_>,
    warnings: &mut Vec<String>,
) -> Result<Option<Value<PgUrl>>, ConfigError> {
    let (spec, from_file) = (&options::POSTGRES, &options::POSTGRES_URL_FILE);
    let (file_env, file_key) = (
        from_file.env.expect("declared"),
        from_file.key.expect("declared"),
    );
    let given = r.scalar_from(spec, [Layer::Flag], parse_postgres_url)?;
    if let Some(given) = given {
        if given.value.connect.get_password().is_some() {
            warnings.push(format!(
                "--postgres: the URL's password is visible to every user of this host in `ps`; give the URL in {} or in a file named by {file_env} (or {file_key})",
                spec.env.expect("declared")
            ));
        }
        return Ok(Some(given));
    }
    let env = r.scalar_from(spec, [Layer::Env], parse_postgres_url)?;
    if let Some(path) = r.env(file_env)? {
        if let Some(env) = env {
            return Err(ConfigError(format!(
                "both {} and {file_env} are set; choose one",
                env.origin
            )));
        }
        return read_url(s, &PathBuf::from(path), Origin::Env(file_env), warnings).map(Some);
    }
    if env.is_some() {
        return Ok(env);
    }
    let in_file = r.scalar_from(spec, [Layer::File], parse_postgres_url)?;
    let Some(at) = s.file.and_then(|f| f.scalar(from_file)) else {
        return Ok(in_file);
    };
    let origin = r.file_origin(from_file, &at);
    if in_file.is_some() {
        return Err(ConfigError(format!(
            "{origin}: both postgres.url and {file_key} are set; choose one"
        )));
    }
    read_url(s, &PathBuf::from(&at.value.0), origin, warnings).map(Some)
}

fn read_url(
    s: &Sources<'_>,
    path: &std::path::Path,
    origin: Origin,
    warnings: &mut Vec<String>,
) -> Result<Value<PgUrl>, ConfigError> {
    let shown = path.display();
    let (text, mode) = (s.read_secret)(path)
        .map_err(|e| ConfigError(format!("{origin}: cannot read {shown}: {e}")))?;
    warnings.extend(super::loose_secret_file(&origin, path, mode));
    let value = parse_postgres_url(text.trim())
        .map_err(|msg| ConfigError(format!("{origin} ({shown}): {msg}")))?;
    Ok(Value { value, origin })
}

/// The rest of the PostgreSQL options, given the URL.
pub(super) fn resolve(
    r: &Resolver<'_>,
    s: &Sources<'_>,
    url: Value<PgUrl>,
    renew_interval: &Value<Duration>,
    warnings: &mut Vec<String>,
    note: &mut impl FnMut(&'static str, String, &Origin),
) -> Result<BackendConfig, ConfigError> {
    note(
        "postgres.url",
        format!("{:?}", url.value.redacted()),
        &url.origin,
    );
    let table = r.scalar(&options::POSTGRES_TABLE, parse_table)?;
    let table = or_default(table, parse_table("leaderd_lease").expect("valid"), "");
    note(
        "postgres.table",
        format!("{:?}", table.value.name),
        &table.origin,
    );
    let timeout = r.scalar(&options::POSTGRES_TIMEOUT, positive(values::parse_duration))?;
    let timeout = or_default(timeout, Duration::from_millis(500), "");
    note(
        "postgres.timeout",
        format!("{:?}", show(timeout.value)),
        &timeout.origin,
    );
    if timeout.value >= renew_interval.value {
        return Err(ConfigError(format!(
            "postgres.timeout = {} ({}) must be shorter than lease.renew_interval = {} ({}): a renewal has to be able to time out and be retried before the next one is due; lower the timeout or raise the renew interval",
            show(timeout.value),
            timeout.origin,
            show(renew_interval.value),
            renew_interval.origin
        )));
    }
    let mode = r.scalar(&options::POSTGRES_MODE, parse_mode)?;
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
        (None, Some(in_url)) => Value {
            value: in_url,
            origin: url.origin.clone(),
        },
        (None, None) => or_default(None, PgMode::Table, ""),
    };
    note(
        "postgres.mode",
        format!("{:?}", mode.value.as_str()),
        &mode.origin,
    );
    let create = r.scalar(&options::POSTGRES_CREATE_TABLE, parse_bool)?;
    let create = or_default(create, false, "");
    note(
        "postgres.create_table",
        create.value.to_string(),
        &create.origin,
    );
    let tls = tls(s, &url, warnings)?;
    Ok(BackendConfig::Postgres(Box::new(PgConfig {
        url: url.value,
        table: table.value,
        timeout: timeout.value,
        mode: mode.value,
        create_table: create.value,
        tls,
    })))
}

/// Reads the URL's TLS files now, so a wrong path fails at start-up.
fn tls(
    s: &Sources<'_>,
    url: &Value<PgUrl>,
    warnings: &mut Vec<String>,
) -> Result<PgTls, ConfigError> {
    let u = &url.value;
    let origin = &url.origin;
    let read = |param: &str, path: &str| {
        (s.read_secret)(std::path::Path::new(path)).map_err(|e| {
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
            warnings.extend(super::loose_secret_file(
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
