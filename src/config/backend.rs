//! Which lease backend, and its options: the configuration side of a
//! backend. A new backend adds its variant to [`BackendConfig`] and its
//! resolution here (its options are rows in `options`; its lease is a
//! module under `lease`).

use super::options;
use super::resolve::{Layer, Origin, Resolver, Value};
use super::values::{self, RedisUrl, Secret, WaitReplicas};
use super::{ConfigError, Sources};
use std::path::PathBuf;
use std::time::Duration;

/// Which lease backend to use (PRODUCT §5).
#[derive(Debug, Clone)]
pub enum BackendConfig {
    Redis {
        url: RedisUrl,
        timeout: Duration,
        tls: RedisTls,
        /// Replicas that must acknowledge each acquire and renewal.
        wait: WaitReplicas,
        /// Under Sentinel, the sentinels' own password, when they have one.
        sentinel_password: Option<Secret>,
    },
    /// Redlock: three or more independent Redis masters, a lease held on a
    /// majority of them.
    Redlock {
        urls: Vec<RedisUrl>,
        /// Bounds connecting to a node (TLS handshake included).
        timeout: Duration,
        /// Bounds each node's answer to one lease operation.
        node_timeout: Duration,
        tls: RedisTls,
    },
    /// A lease row (or a row and an advisory lock) in PostgreSQL.
    Postgres(Box<super::postgres::PgConfig>),
    /// A leader key bound to an etcd lease.
    Etcd(Box<super::etcd::EtcdConfig>),
    /// `implicit` when no backend was configured and the embedded default is used.
    LockFile { path: PathBuf, implicit: bool },
}

/// TLS material read at start-up: for `rediss://` (and, in the same shape,
/// etcd's `https://`). Empty: the system's roots, no client certificate.
#[derive(Debug, Clone, Default)]
pub struct TlsFiles {
    /// PEM bundle to trust instead of the system's roots.
    pub ca: Option<Vec<u8>>,
    /// PEM certificate chain and private key for mutual TLS.
    pub client: Option<(Vec<u8>, Secret)>,
}

/// The Redis URLs: `--redis`, else `LEADERD_REDIS_URL` or the file named by
/// `LEADERD_REDIS_URL_FILE`, else `redis.urls` or the file named by
/// `redis.url_file`. Warns about a password on the command line and about a
/// secret file others can read.
fn redis_urls(
    r: &Resolver<'_>,
    s: &Sources<'_>,
    warnings: &mut Vec<String>,
) -> Result<Option<Value<Vec<RedisUrl>>>, ConfigError> {
    let (urls, from_file) = (&options::REDIS, &options::REDIS_URL_FILE);
    let parse = values::parse_redis_url;
    let (file_env, file_key) = (
        from_file.env.expect("declared"),
        from_file.key.expect("declared"),
    );
    if let Some(given) = r.list_from(urls, [Layer::Flag], parse)? {
        if given.value.iter().any(RedisUrl::has_password) {
            warnings.push(format!(
                "--redis: the URL's password is visible to every user of this host in `ps`; give the URL in {} or in a file named by {file_env} (or {file_key})",
                urls.env.expect("declared")
            ));
        }
        return Ok(Some(given));
    }
    if let Some(path) = r.env(file_env)? {
        if let Some(env) = r.list_from(urls, [Layer::Env], parse)? {
            return Err(ConfigError(format!(
                "both {} and {file_env} are set; choose one",
                env.origin
            )));
        }
        let origin = Origin::Env(file_env);
        return Ok(Some(read_urls(s, &PathBuf::from(path), origin, warnings)?));
    }
    if let Some(env) = r.list_from(urls, [Layer::Env], parse)? {
        return Ok(Some(env));
    }
    let Some(at) = s.file.and_then(|f| f.scalar(from_file)) else {
        return r.list_from(urls, [Layer::File], parse);
    };
    let origin = r.file_origin(from_file, &at);
    if s.file.and_then(|f| f.list(urls)).is_some() {
        return Err(ConfigError(format!(
            "{origin}: both redis.urls and {file_key} are set; choose one"
        )));
    }
    Ok(Some(read_urls(
        s,
        &PathBuf::from(&at.value.0),
        origin,
        warnings,
    )?))
}

/// Redis URLs from a secret file: one per line (or comma-separated).
fn read_urls(
    s: &Sources<'_>,
    path: &std::path::Path,
    origin: Origin,
    warnings: &mut Vec<String>,
) -> Result<Value<Vec<RedisUrl>>, ConfigError> {
    let shown = path.display();
    let (text, mode) = (s.read_secret)(path)
        .map_err(|e| ConfigError(format!("{origin}: cannot read {shown}: {e}")))?;
    warnings.extend(super::loose_secret_file(&origin, path, mode));
    let urls = text
        .split(['\n', ','])
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| {
            values::parse_redis_url(l)
                .map_err(|msg| ConfigError(format!("{origin} ({shown}): {msg}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Value {
        value: urls,
        origin,
    })
}

pub(super) fn backend(
    r: &Resolver<'_>,
    s: &Sources<'_>,
    key: &str,
    renew_interval: &Value<Duration>,
    warnings: &mut Vec<String>,
    note: &mut impl FnMut(&'static str, String, &Origin),
) -> Result<Value<BackendConfig>, ConfigError> {
    let urls = redis_urls(r, s, warnings)?;
    let postgres = super::postgres::postgres_url(r, s, warnings)?;
    let etcd = super::etcd::endpoints(r)?;
    let lock_file = r.scalar(&options::LOCK_FILE, |p| {
        if p.trim().is_empty() {
            Err("is empty; give a file path".to_string())
        } else {
            Ok(PathBuf::from(p))
        }
    })?;
    let given: Vec<String> = [
        urls.as_ref().map(|u| format!("Redis ({})", u.origin)),
        postgres
            .as_ref()
            .map(|u| format!("PostgreSQL ({})", u.origin)),
        etcd.as_ref().map(|u| format!("etcd ({})", u.origin)),
        lock_file
            .as_ref()
            .map(|f| format!("a lock file ({})", f.origin)),
    ]
    .into_iter()
    .flatten()
    .collect();
    if given.len() > 1 {
        return Err(ConfigError(format!(
            "more than one backend is configured: {}; choose one",
            given.join(" and ")
        )));
    }
    if let Some(urls) = etcd {
        let origin = urls.origin.clone();
        let value = super::etcd::resolve(r, s, urls, renew_interval, warnings, note)?;
        return Ok(Value { value, origin });
    }
    if let Some(url) = postgres {
        let origin = url.origin.clone();
        let value = super::postgres::resolve(r, s, url, renew_interval, warnings, note)?;
        return Ok(Value { value, origin });
    }
    match (urls, lock_file) {
        (Some(_), Some(_)) => unreachable!("refused above"),
        (Some(mut urls), None) => match urls.value.len() {
            0 => Err(ConfigError(format!(
                "{}: no Redis URL given; give one redis:// URL",
                urls.origin
            ))),
            1 => Ok(Value {
                value: BackendConfig::Redis {
                    url: urls.value.remove(0),
                    timeout: Duration::ZERO,
                    tls: RedisTls::default(),
                    wait: WaitReplicas::Count(0),
                    sentinel_password: None,
                },
                origin: urls.origin,
            }),
            2 => Err(ConfigError(format!(
                "{}: two Redis URLs given; a majority of two servers is both, so Redlock over two survives no failure: give one URL (with replicas and Sentinel for failover) or three or more independent masters",
                urls.origin
            ))),
            n => {
                if let Some(url) = urls
                    .value
                    .iter()
                    .find(|u| u.sentinel().is_some() || u.cluster().is_some())
                {
                    return Err(ConfigError(format!(
                        "{}: `{}` among {n} Redis URLs; Sentinel and Cluster URLs stand alone (one URL names the whole deployment), Redlock takes plain redis:// or rediss:// URLs of independent masters",
                        urls.origin,
                        url.redacted()
                    )));
                }
                if n % 2 == 0 {
                    warnings.push(format!(
                        "{}: {n} Redis masters: Redlock needs {} of them, so this survives as many failures as {} masters would; an odd number is cheaper",
                        urls.origin,
                        n / 2 + 1,
                        n - 1
                    ));
                }
                Ok(Value {
                    value: BackendConfig::Redlock {
                        urls: urls.value,
                        timeout: Duration::ZERO,
                        node_timeout: Duration::ZERO,
                        tls: RedisTls::default(),
                    },
                    origin: urls.origin,
                })
            }
        },
        (None, Some(file)) => Ok(Value {
            value: BackendConfig::LockFile {
                path: file.value,
                implicit: false,
            },
            origin: file.origin,
        }),
        (None, None) => {
            if (s.env)("KUBERNETES_SERVICE_HOST").is_some_and(|v| !v.is_empty()) {
                return Err(ConfigError(
                    "no backend configured, and inside Kubernetes the embedded lock file would coordinate only this pod; give --redis redis://HOST:6379 (or LEADERD_REDIS_URL)".into(),
                ));
            }
            let dir = crate::private::default_dir(
                r.env("XDG_RUNTIME_DIR").ok().flatten(),
                r.env("TMPDIR").ok().flatten(),
            );
            let path = dir.join(format!("leaderd-{}.lock", key.replace('/', "_")));
            Ok(Value {
                value: BackendConfig::LockFile {
                    path,
                    implicit: true,
                },
                origin: Origin::Default("no --redis: lock file on this host"),
            })
        }
    }
}

/// Redis's TLS files.
pub type RedisTls = TlsFiles;

/// `--redis-tls-ca`, `--redis-tls-cert` and `--redis-tls-key`: read now,
/// for `rediss://` only, the certificate and key both or neither.
pub(super) fn redis_tls(
    r: &Resolver<'_>,
    s: &Sources<'_>,
    urls: &[RedisUrl],
    warnings: &mut Vec<String>,
    note: &mut impl FnMut(&'static str, String, &Origin),
) -> Result<RedisTls, ConfigError> {
    let plain = urls.iter().find(|u| !u.is_tls()).map(|u| {
        format!(
            "TLS files apply to rediss:// URLs, but the Redis URL is `{}`; use rediss://",
            u.redacted()
        )
    });
    let specs = [
        &options::REDIS_TLS_CA,
        &options::REDIS_TLS_CERT,
        &options::REDIS_TLS_KEY,
    ];
    tls_files(r, s, specs, plain, warnings, note)
}

/// TLS files named by three options (a CA bundle; a client certificate and
/// its key, both or neither), read now so a wrong path fails at start-up.
/// `plain`: what to say if any is given although a URL is not TLS.
pub(super) fn tls_files(
    r: &Resolver<'_>,
    s: &Sources<'_>,
    [ca, cert, key]: [&'static options::Spec; 3],
    plain: Option<String>,
    warnings: &mut Vec<String>,
    note: &mut impl FnMut(&'static str, String, &Origin),
) -> Result<TlsFiles, ConfigError> {
    let path = |p: &str| {
        if p.trim().is_empty() {
            Err("is empty; give a file path".to_string())
        } else {
            Ok(PathBuf::from(p))
        }
    };
    let (ca_spec, cert_spec, key_spec) = (ca, cert, key);
    let ca = r.scalar(ca_spec, path)?;
    let cert = r.scalar(cert_spec, path)?;
    let key = r.scalar(key_spec, path)?;
    if let Some(first) = [&ca, &cert, &key].into_iter().flatten().next()
        && let Some(plain) = plain
    {
        return Err(ConfigError(format!("{}: {plain}", first.origin)));
    }
    let read = |v: &Value<PathBuf>| {
        (s.read_secret)(&v.value).map_err(|e| {
            ConfigError(format!(
                "{}: cannot read {}: {e}",
                v.origin,
                v.value.display()
            ))
        })
    };
    let mut shown = |spec: &options::Spec, v: &Value<PathBuf>| {
        note(
            spec.key.expect("declared"),
            format!("{:?}", v.value.display().to_string()),
            &v.origin,
        );
    };
    let ca = match &ca {
        Some(v) => {
            shown(ca_spec, v);
            Some(read(v)?.0.into_bytes())
        }
        None => None,
    };
    let client = match (&cert, &key) {
        (Some(cert), Some(key)) => {
            shown(cert_spec, cert);
            shown(key_spec, key);
            let (key_pem, mode) = read(key)?;
            warnings.extend(super::loose_secret_file(&key.origin, &key.value, mode));
            Some((read(cert)?.0.into_bytes(), Secret::new(key_pem)))
        }
        (None, None) => None,
        (Some(one), None) | (None, Some(one)) => {
            return Err(ConfigError(format!(
                "{}: a client certificate needs both {} and {} (or their env vars or TOML keys); give both or neither",
                one.origin,
                cert_spec.flag.expect("declared"),
                key_spec.flag.expect("declared")
            )));
        }
    };
    Ok(TlsFiles { ca, client })
}

/// `--redis-wait-replicas`: how many replicas must acknowledge each lease
/// write before it counts.
pub(super) fn redis_wait(
    r: &Resolver<'_>,
    url: &RedisUrl,
    note: &mut impl FnMut(&'static str, String, &Origin),
) -> Result<WaitReplicas, ConfigError> {
    let wait = r.scalar(&options::REDIS_WAIT_REPLICAS, values::parse_wait_replicas)?;
    // Sentinel means replicas: wait for one whenever there is one.
    let (wait, origin) = match wait {
        Some(v) => (v.value, v.origin),
        None if url.sentinel().is_some() => (WaitReplicas::Auto, Origin::Default("Sentinel: auto")),
        None if url.cluster().is_some() => (WaitReplicas::Auto, Origin::Default("Cluster: auto")),
        None => (WaitReplicas::Count(0), Origin::Default("")),
    };
    let shown = match wait {
        WaitReplicas::Count(n) => n.to_string(),
        WaitReplicas::Auto => "auto".to_string(),
    };
    note("redis.wait_replicas", format!("{shown:?}"), &origin);
    Ok(wait)
}

/// The sentinels' own password: `LEADERD_REDIS_SENTINEL_PASSWORD`, or the
/// file named by `--redis-sentinel-password-file` (or its env var or TOML
/// key). Only with a `redis+sentinel://` URL.
pub(super) fn sentinel_password(
    r: &Resolver<'_>,
    s: &Sources<'_>,
    url: &RedisUrl,
    warnings: &mut Vec<String>,
    note: &mut impl FnMut(&'static str, String, &Origin),
) -> Result<Option<Secret>, ConfigError> {
    let env = options::REDIS_SENTINEL_PASSWORD.env.expect("declared");
    let given = r.env(env)?.map(|p| (Secret::new(p), Origin::Env(env)));
    let file = r.scalar(&options::REDIS_SENTINEL_PASSWORD_FILE, |p| {
        Ok(PathBuf::from(p))
    })?;
    let password = match (given, file) {
        (Some(_), Some(file)) => {
            return Err(ConfigError(format!(
                "both {env} and a sentinel password file ({}) are set; choose one",
                file.origin
            )));
        }
        (Some(given), None) => Some(given),
        (None, Some(file)) => {
            let (text, mode) = (s.read_secret)(&file.value).map_err(|e| {
                ConfigError(format!(
                    "{}: cannot read {}: {e}",
                    file.origin,
                    file.value.display()
                ))
            })?;
            warnings.extend(super::loose_secret_file(&file.origin, &file.value, mode));
            Some((
                Secret::new(text.trim_end_matches(['\n', '\r'])),
                file.origin,
            ))
        }
        (None, None) => None,
    };
    let Some((password, origin)) = password else {
        return Ok(None);
    };
    if url.sentinel().is_none() {
        return Err(ConfigError(format!(
            "{origin}: a sentinel password applies to redis+sentinel:// URLs, but the Redis URL is `{}`",
            url.redacted()
        )));
    }
    note("redis.sentinel_password", "\"***\"".into(), &origin);
    Ok(Some(password))
}
