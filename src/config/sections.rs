//! Resolution of the backend, child and webhook options: which backend is
//! used (Redis, an explicit lock file, or the embedded default) and the work's
//! settings, each value with its origin.

use super::resolve::{Opt, Origin, Resolver, Value, opt, or_default, show};
use super::values::{self, Signal};
use super::{BackendConfig, ChildConfig, ConfigError, OnChildExit, Sources, WebhookConfig};
use std::path::PathBuf;
use std::time::Duration;

pub(super) fn backend(
    r: &Resolver<'_>,
    s: &Sources<'_>,
    key: &str,
) -> Result<Value<BackendConfig>, ConfigError> {
    let a = s.args;
    let f = s.file.map(|f| &f.values);
    let no_list = None;
    let no_scalar = None;
    let urls = r.list(
        &opt("--redis", "LEADERD_REDIS_URL", "redis.urls"),
        &a.redis,
        f.map_or(&no_list, |f| &f.redis.urls),
        values::parse_redis_url,
    )?;
    let lock_file = r.scalar(
        &opt("--lock-file", "LEADERD_LOCK_FILE", "lock_file"),
        a.lock_file.as_ref().and_then(|p| p.to_str()),
        f.map_or(&no_scalar, |f| &f.lock_file),
        |p| {
            if p.trim().is_empty() {
                Err("is empty; give a file path".to_string())
            } else {
                Ok(PathBuf::from(p))
            }
        },
    )?;
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

pub(super) fn child(
    r: &Resolver<'_>,
    s: &Sources<'_>,
    note: &mut impl FnMut(&'static str, String, &Origin),
) -> Result<ChildConfig, ConfigError> {
    let a = s.args;
    let empty = Default::default();
    let f = s.file.map(|f| &f.values).unwrap_or(&empty);
    let command = if !s.command.is_empty() {
        Value {
            value: s.command.to_vec(),
            origin: Origin::Flag("the command after --"),
        }
    } else if let Some(at) = &f.child.command {
        if at.value.is_empty() || at.value[0].trim().is_empty() {
            return Err(ConfigError(format!(
                "{}: the command is empty; give [\"program\", \"arg\", ...] or remove the key",
                r.file_origin("child.command", at)
            )));
        }
        Value {
            value: at.value.clone(),
            origin: r.file_origin("child.command", at),
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
    let stop_signal = r.scalar(
        &opt("--stop-signal", "LEADERD_STOP_SIGNAL", "child.stop_signal"),
        a.stop_signal.as_deref(),
        &f.child.stop_signal,
        values::parse_signal,
    )?;
    let stop_signal = or_default(stop_signal, Signal::TERM, "");
    note(
        "child.stop_signal",
        format!("{:?}", stop_signal.value.name),
        &stop_signal.origin,
    );
    let stop_timeout = r.scalar(
        &opt(
            "--stop-timeout",
            "LEADERD_STOP_TIMEOUT",
            "child.stop_timeout",
        ),
        a.stop_timeout.as_deref(),
        &f.child.stop_timeout,
        values::parse_duration,
    )?;
    let stop_timeout = or_default(stop_timeout, Duration::from_secs(10), "");
    note(
        "child.stop_timeout",
        format!("{:?}", show(stop_timeout.value)),
        &stop_timeout.origin,
    );
    let on_exit = r.scalar(
        &opt("--on-child-exit", "LEADERD_ON_CHILD_EXIT", "child.on_exit"),
        a.on_child_exit.as_deref(),
        &f.child.on_exit,
        values::parse_on_child_exit,
    )?;
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
    s: &Sources<'_>,
    note: &mut impl FnMut(&'static str, String, &Origin),
) -> Result<WebhookConfig, ConfigError> {
    let a = s.args;
    let empty = Default::default();
    let f = s.file.map(|f| &f.values).unwrap_or(&empty);
    let urls = r.list(
        &opt("--webhook", "LEADERD_WEBHOOK_URL", "webhook.urls"),
        &a.webhook,
        &f.webhook.urls,
        values::parse_webhook_url,
    )?;
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
    let secret = r.env("LEADERD_WEBHOOK_SECRET")?.map(values::Secret::new);
    let secret_file = r.scalar(
        &Opt {
            flag: "--webhook-secret-file",
            env: None,
            key: "webhook.secret_file",
        },
        a.webhook_secret_file.as_ref().and_then(|p| p.to_str()),
        &f.webhook.secret_file,
        |p| Ok(PathBuf::from(p)),
    )?;
    if secret.is_some() && secret_file.is_some() {
        return Err(ConfigError(
            "both LEADERD_WEBHOOK_SECRET and a webhook secret file are set; choose one".into(),
        ));
    }
    if secret.is_some() {
        note(
            "webhook.secret",
            "\"***\"".into(),
            &Origin::Env("LEADERD_WEBHOOK_SECRET"),
        );
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
