//! A PostgreSQL URL, libpq's form: leaderd takes libpq's TLS parameters
//! (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`, which tokio-postgres
//! does not implement the way libpq does) and the lease's deprecated
//! `mode` out of the query, and hands the rest to tokio-postgres; the TLS
//! files are read at start-up ([`resolve_tls`]).

use crate::config::{ConfigError, Resolving, Secret, Value, loose_secret_file, redact_url};
use std::fmt;
use std::str::FromStr;

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

/// A parsed PostgreSQL URL: the connection settings for tokio-postgres,
/// libpq's TLS parameters, and the lease's deprecated `mode`, kept for the
/// lease to judge. Shown only redacted.
#[derive(Clone)]
pub struct PgUrl {
    pub connect: tokio_postgres::Config,
    redacted: String,
    mode: Option<String>,
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

    /// The URL's `?mode=`, as written.
    pub fn mode(&self) -> Option<&str> {
        self.mode.as_deref()
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
            "mode" => url.mode = Some(value),
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

/// Reads the URL's TLS files now, so a wrong path fails at start-up.
pub fn resolve_tls(x: &mut Resolving<'_>, url: &Value<PgUrl>) -> Result<PgTls, ConfigError> {
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
        assert_eq!(u.mode(), Some("advisory"));
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
        let table: [(&str, &str); 4] = [
            ("redis://x:pw@h/0", "not a PostgreSQL URL"),
            ("postgres://h/db", "names no user"),
            ("postgres://u:pw@h/db?sslmode=allow", "sslmode=allow"),
            ("postgres://u:pw@h/db?sslmode=maybe", "unknown sslmode"),
        ];
        for (url, says) in table {
            let e = parse_postgres_url(url).unwrap_err();
            assert!(e.contains(says), "{url}: {e}");
            assert!(!e.contains("pw@"), "{url}: {e}");
        }
    }
}
