//! Resolution of the backend, child and webhook options: which backend is
//! used (Redis, an explicit lock file, or the embedded default) and the work's
//! settings, each value with its origin.

use super::options;
use super::resolve::{Layer, Origin, Resolver, Value, or_default, show};
use super::values::{self, RedisUrl, Signal};
use super::{
    BackendConfig, ChildConfig, ConfigError, OnChildExit, RedisTls, Sources, WebhookConfig,
};
use std::path::PathBuf;
use std::time::Duration;

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
    if mode & 0o077 != 0 {
        warnings.push(format!(
            "{origin}: {shown} is readable by group or others (mode {:04o}); `chmod 600` it (in Kubernetes, give the Secret volume defaultMode: 0400)",
            mode & 0o7777
        ));
    }
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
    warnings: &mut Vec<String>,
) -> Result<Value<BackendConfig>, ConfigError> {
    let urls = redis_urls(r, s, warnings)?;
    let lock_file = r.scalar(&options::LOCK_FILE, |p| {
        if p.trim().is_empty() {
            Err("is empty; give a file path".to_string())
        } else {
            Ok(PathBuf::from(p))
        }
    })?;
    match (urls, lock_file) {
        (Some(urls), Some(file)) => Err(ConfigError(format!(
            "both a Redis backend ({}) and a lock file ({}) are configured; choose one",
            urls.origin, file.origin
        ))),
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
                },
                origin: urls.origin,
            }),
            n => Err(ConfigError(format!(
                "{}: {n} Redis URLs given; Redlock over several servers is not supported yet, give exactly one",
                urls.origin
            ))),
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
            let dir = r
                .env("XDG_RUNTIME_DIR")
                .ok()
                .flatten()
                .unwrap_or_else(|| "/tmp".into());
            let path = PathBuf::from(dir).join(format!("leaderd-{}.lock", key.replace('/', "_")));
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

/// `--redis-tls-ca`, `--redis-tls-cert` and `--redis-tls-key`: read now,
/// for `rediss://` only, the certificate and key both or neither.
pub(super) fn redis_tls(
    r: &Resolver<'_>,
    s: &Sources<'_>,
    url: &RedisUrl,
    warnings: &mut Vec<String>,
    note: &mut impl FnMut(&'static str, String, &Origin),
) -> Result<RedisTls, ConfigError> {
    let path = |p: &str| {
        if p.trim().is_empty() {
            Err("is empty; give a file path".to_string())
        } else {
            Ok(PathBuf::from(p))
        }
    };
    let ca = r.scalar(&options::REDIS_TLS_CA, path)?;
    let cert = r.scalar(&options::REDIS_TLS_CERT, path)?;
    let key = r.scalar(&options::REDIS_TLS_KEY, path)?;
    let given = [&ca, &cert, &key].into_iter().flatten().next();
    if let Some(first) = given
        && !url.is_tls()
    {
        return Err(ConfigError(format!(
            "{}: TLS files apply to rediss:// URLs, but the Redis URL is `{}`; use rediss://",
            first.origin,
            url.redacted()
        )));
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
    let mut tls = RedisTls::default();
    if let Some(ca) = &ca {
        note(
            "redis.tls_ca",
            format!("{:?}", ca.value.display().to_string()),
            &ca.origin,
        );
        tls.ca = Some(read(ca)?.0.into_bytes());
    }
    match (&cert, &key) {
        (Some(cert), Some(key)) => {
            note(
                "redis.tls_cert",
                format!("{:?}", cert.value.display().to_string()),
                &cert.origin,
            );
            note(
                "redis.tls_key",
                format!("{:?}", key.value.display().to_string()),
                &key.origin,
            );
            let (key_pem, mode) = read(key)?;
            if mode & 0o077 != 0 {
                warnings.push(format!(
                    "{}: the private key {} is readable by group or others (mode {:04o}); `chmod 600` it",
                    key.origin,
                    key.value.display(),
                    mode & 0o7777
                ));
            }
            tls.client = Some((read(cert)?.0.into_bytes(), values::Secret::new(key_pem)));
        }
        (None, None) => {}
        (Some(one), None) | (None, Some(one)) => {
            return Err(ConfigError(format!(
                "{}: mutual TLS needs both --redis-tls-cert and --redis-tls-key (or their env vars or TOML keys); give both or neither",
                one.origin
            )));
        }
    }
    Ok(tls)
}

pub(super) fn child(
    r: &Resolver<'_>,
    s: &Sources<'_>,
    note: &mut impl FnMut(&'static str, String, &Origin),
) -> Result<ChildConfig, ConfigError> {
    let command = if !s.command.is_empty() {
        Value {
            value: s.command.to_vec(),
            origin: Origin::Flag("the command after --"),
        }
    } else if let Some(at) = s.file.and_then(|f| f.list(&options::CHILD_COMMAND)) {
        let origin = r.file_origin(&options::CHILD_COMMAND, &at);
        if at.value.is_empty() || at.value[0].trim().is_empty() {
            return Err(ConfigError(format!(
                "{origin}: the command is empty; give [\"program\", \"arg\", ...] or remove the key"
            )));
        }
        Value {
            value: at.value,
            origin,
        }
    } else {
        Value {
            value: Vec::new(),
            origin: Origin::Default("none (elect-only)"),
        }
    };
    note(
        "child.command",
        format!("{:?}", command.value),
        &command.origin,
    );
    let stop_signal = r.scalar(&options::STOP_SIGNAL, values::parse_signal)?;
    let stop_signal = or_default(stop_signal, Signal::TERM, "");
    note(
        "child.stop_signal",
        format!("{:?}", stop_signal.value.name),
        &stop_signal.origin,
    );
    let stop_timeout = r.scalar(&options::STOP_TIMEOUT, values::parse_duration)?;
    let stop_timeout = or_default(stop_timeout, Duration::from_secs(10), "");
    note(
        "child.stop_timeout",
        format!("{:?}", show(stop_timeout.value)),
        &stop_timeout.origin,
    );
    let on_exit = r.scalar(&options::ON_CHILD_EXIT, values::parse_on_child_exit)?;
    let on_exit = or_default(on_exit, OnChildExit::Release, "");
    note(
        "child.on_exit",
        format!("{:?}", format!("{:?}", on_exit.value).to_lowercase()),
        &on_exit.origin,
    );
    Ok(ChildConfig {
        command: command.value,
        stop_signal: stop_signal.value,
        stop_timeout: stop_timeout.value,
        on_exit: on_exit.value,
    })
}

pub(super) fn webhook(
    r: &Resolver<'_>,
    note: &mut impl FnMut(&'static str, String, &Origin),
) -> Result<WebhookConfig, ConfigError> {
    let urls = r.list(&options::WEBHOOK, values::parse_webhook_url)?;
    let urls = or_default(urls, Vec::new(), "none");
    note(
        "webhook.urls",
        format!(
            "{:?}",
            urls.value
                .iter()
                .map(|u| values::redact_url(u.as_str()))
                .collect::<Vec<_>>()
        ),
        &urls.origin,
    );
    let secret_env = options::WEBHOOK_SECRET.env.expect("declared");
    let secret = r.env(secret_env)?.map(values::Secret::new);
    let secret_file = r.scalar(&options::WEBHOOK_SECRET_FILE, |p| Ok(PathBuf::from(p)))?;
    if secret.is_some() && secret_file.is_some() {
        return Err(ConfigError(
            "both LEADERD_WEBHOOK_SECRET and a webhook secret file are set; choose one".into(),
        ));
    }
    if secret.is_some() {
        note("webhook.secret", "\"***\"".into(), &Origin::Env(secret_env));
    }
    if let Some(file) = &secret_file {
        note(
            "webhook.secret_file",
            format!("{:?}", file.value.display().to_string()),
            &file.origin,
        );
    }
    Ok(WebhookConfig {
        urls: urls.value,
        secret,
        secret_file: secret_file.map(|f| f.value),
    })
}
