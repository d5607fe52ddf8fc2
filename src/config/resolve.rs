//! Precedence and validation: picks each option from flag > environment >
//! file > default, parses it, then checks the relations between options.

use super::backend::{backend, redis_tls, redis_wait, sentinel_password};
use super::file::At;
use super::options::{self, Spec};
use super::sections::{admin, child, webhook};
use super::values;
use super::{BackendConfig, Config, ConfigError, LogConfig, LogFormat, Sources};
use crate::timing::Timing;
use std::fmt;
use std::time::Duration;

/// Where an effective value came from.
#[derive(Debug, Clone)]
pub enum Origin {
    Flag(&'static str),
    Env(&'static str),
    File {
        file: String,
        line: usize,
        key: &'static str,
    },
    Default(&'static str),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Flag(flag) => write!(f, "{flag}"),
            Origin::Env(var) => write!(f, "{var}"),
            Origin::File { file, line, key } => write!(f, "{file} line {line} ({key})"),
            Origin::Default("") => write!(f, "default"),
            Origin::Default(how) => write!(f, "default: {how}"),
        }
    }
}

pub struct Value<T> {
    pub value: T,
    pub origin: Origin,
}

pub struct Resolver<'a> {
    sources: &'a Sources<'a>,
}

impl<'a> Resolver<'a> {
    pub fn new(sources: &'a Sources<'a>) -> Self {
        Resolver { sources }
    }

    /// An environment variable: unset is `None`; empty or non-UTF-8 is an error.
    pub(super) fn env(&self, name: &'static str) -> Result<Option<String>, ConfigError> {
        match (self.sources.env)(name) {
            None => Ok(None),
            Some(v) if v.is_empty() => Err(ConfigError(format!(
                "{name} is set but empty; unset it to use the default, or give it a value"
            ))),
            Some(v) => v.into_string().map(Some).map_err(|_| {
                ConfigError(format!(
                    "{name} is not valid UTF-8; give it a plain text value"
                ))
            }),
        }
    }

    pub(super) fn file_origin<T>(&self, spec: &Spec, at: &At<T>) -> Origin {
        let file = self.sources.file.expect("a file value implies a file");
        Origin::File {
            file: file.name.clone(),
            line: file.line_of(&at.span),
            key: spec.key.expect("read from the file by its key"),
        }
    }

    /// One scalar option through flag > env > file; `None` when not set anywhere.
    pub(super) fn scalar<T>(
        &self,
        spec: &'static Spec,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Option<Value<T>>, ConfigError> {
        self.scalar_from(spec, [Layer::Flag, Layer::Env, Layer::File], parse)
    }

    /// A single-valued option from the first of `layers` that sets it.
    pub(super) fn scalar_from<T, const N: usize>(
        &self,
        spec: &'static Spec,
        layers: [Layer; N],
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Option<Value<T>>, ConfigError> {
        let mut found = None;
        for layer in layers {
            found = match layer {
                Layer::Flag => self.sources.args.get(spec).map(|v| {
                    (
                        v.to_string(),
                        Origin::Flag(spec.flag.expect("given as a flag")),
                    )
                }),
                Layer::Env => self.env_of(spec)?.map(|(v, name)| (v, Origin::Env(name))),
                Layer::File => self.sources.file.and_then(|f| f.scalar(spec)).map(|at| {
                    let origin = self.file_origin(spec, &at);
                    (at.value.0, origin)
                }),
            };
            if found.is_some() {
                break;
            }
        }
        let Some((text, origin)) = found else {
            return Ok(None);
        };
        let value = parse(&text).map_err(|msg| ConfigError(format!("{origin}: {msg}")))?;
        Ok(Some(Value { value, origin }))
    }

    /// A list option: repeated flag > comma-separated env > TOML array.
    pub(super) fn list<T>(
        &self,
        spec: &'static Spec,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Option<Value<Vec<T>>>, ConfigError> {
        self.list_from(spec, [Layer::Flag, Layer::Env, Layer::File], parse)
    }

    /// A list option from the first of `layers` that sets it.
    pub(super) fn list_from<T, const N: usize>(
        &self,
        spec: &'static Spec,
        layers: [Layer; N],
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Option<Value<Vec<T>>>, ConfigError> {
        let mut found = None;
        for layer in layers {
            found = match layer {
                Layer::Flag => {
                    let given = self.sources.args.list(spec);
                    (!given.is_empty())
                        .then(|| (given.to_vec(), Origin::Flag(spec.flag.expect("a flag"))))
                }
                Layer::Env => self.env_of(spec)?.map(|(v, name)| {
                    let items = v.split(',').map(|s| s.trim().to_string()).collect();
                    (items, Origin::Env(name))
                }),
                Layer::File => self.sources.file.and_then(|f| f.list(spec)).map(|at| {
                    let origin = self.file_origin(spec, &at);
                    (at.value, origin)
                }),
            };
            if found.is_some() {
                break;
            }
        }
        let Some((items, origin)) = found else {
            return Ok(None);
        };
        let parsed = items
            .iter()
            .map(|item| parse(item).map_err(|msg| ConfigError(format!("{origin}: {msg}"))))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Some(Value {
            value: parsed,
            origin,
        }))
    }

    /// `spec`'s environment variable, if it has one and it is set.
    fn env_of(&self, spec: &Spec) -> Result<Option<(String, &'static str)>, ConfigError> {
        match spec.env {
            Some(name) => Ok(self.env(name)?.map(|v| (v, name))),
            None => Ok(None),
        }
    }
}

/// Where a value may come from, in precedence order.
#[derive(Debug, Clone, Copy)]
pub(super) enum Layer {
    Flag,
    Env,
    File,
}

pub(super) fn or_default<T>(value: Option<Value<T>>, default: T, how: &'static str) -> Value<T> {
    value.unwrap_or(Value {
        value: default,
        origin: Origin::Default(how),
    })
}

/// Formats a duration the way a user would write it.
pub fn show(d: Duration) -> String {
    let ms = d.as_millis();
    if !d.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{:.3}ms", d.as_secs_f64() * 1000.0)
    } else if ms.is_multiple_of(1000) && ms > 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

fn whole_millis(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}

pub(super) fn positive(
    parse: fn(&str) -> Result<Duration, String>,
) -> impl Fn(&str) -> Result<Duration, String> {
    move |text| {
        let d = parse(text)?;
        if d.is_zero() {
            return Err(format!("`{text}` must be greater than zero"));
        }
        if d > Duration::from_secs(24 * 3600) {
            return Err(format!(
                "`{text}` is longer than 24h; leases are meant to be seconds long"
            ));
        }
        Ok(d)
    }
}

pub fn build(r: Resolver<'_>, s: &Sources<'_>) -> Result<Config, ConfigError> {
    let mut effective: Vec<(&'static str, String, String)> = Vec::new();
    let mut note = |key: &'static str, value: String, origin: &Origin| {
        effective.push((key, value, origin.to_string()));
    };

    let key = r.scalar(&options::KEY, values::parse_key)?;
    let key = or_default(key, "leaderd".to_string(), "");
    note("key", format!("{:?}", key.value), &key.origin);

    let id = match r.scalar(&options::ID, values::parse_id)? {
        Some(id) => id,
        None => default_id(&r, s)?,
    };
    note("id", format!("{:?}", id.value), &id.origin);

    let ttl = r.scalar(&options::TTL, positive(values::parse_duration))?;
    let ttl = or_default(ttl, Duration::from_secs(10), "");
    let renew_interval = r.scalar(&options::RENEW_INTERVAL, positive(values::parse_duration))?;
    let renew_interval = or_default(renew_interval, whole_millis(ttl.value / 3), "ttl / 3");
    let renew_deadline = r.scalar(&options::RENEW_DEADLINE, positive(values::parse_duration))?;
    let renew_deadline = or_default(renew_deadline, whole_millis(ttl.value * 2 / 3), "ttl × 2/3");
    let retry_interval = r.scalar(&options::RETRY_INTERVAL, positive(values::parse_duration))?;
    let retry_interval = or_default(retry_interval, Duration::from_secs(2), "");
    for (name, v) in [
        ("lease.ttl", &ttl),
        ("lease.renew_interval", &renew_interval),
        ("lease.renew_deadline", &renew_deadline),
        ("lease.retry_interval", &retry_interval),
    ] {
        note(name, format!("{:?}", show(v.value)), &v.origin);
    }

    let redis_timeout = r.scalar(&options::REDIS_TIMEOUT, positive(values::parse_duration))?;
    let redis_timeout = or_default(redis_timeout, Duration::from_millis(500), "");
    let mut warnings = Vec::new();
    let backend = backend(&r, s, &key.value, &renew_interval, &mut warnings, &mut note)?;
    match &backend.value {
        BackendConfig::Redis { .. } | BackendConfig::Redlock { .. } => {
            let urls = match &backend.value {
                BackendConfig::Redis { url, .. } => std::slice::from_ref(url),
                BackendConfig::Redlock { urls, .. } => urls.as_slice(),
                BackendConfig::LockFile { .. }
                | BackendConfig::Postgres(_)
                | BackendConfig::Etcd(_) => unreachable!("matched above"),
            };
            let shown: Vec<String> = urls.iter().map(|u| format!("{:?}", u.redacted())).collect();
            note(
                "redis.urls",
                format!("[{}]", shown.join(", ")),
                &backend.origin,
            );
            note(
                "redis.timeout",
                format!("{:?}", show(redis_timeout.value)),
                &redis_timeout.origin,
            );
        }
        BackendConfig::Postgres(_) | BackendConfig::Etcd(_) => {}
        BackendConfig::LockFile { path, .. } => {
            note(
                "lock_file",
                format!("{:?}", path.display().to_string()),
                &backend.origin,
            );
        }
    }
    let backend_is_redis = matches!(
        backend.value,
        BackendConfig::Redis { .. } | BackendConfig::Redlock { .. }
    );
    let node_timeout = r.scalar(
        &options::REDIS_NODE_TIMEOUT,
        positive(values::parse_duration),
    )?;
    if let Some(given) = &node_timeout
        && !matches!(backend.value, BackendConfig::Redlock { .. })
    {
        return Err(ConfigError(format!(
            "{}: --redis-node-timeout applies to Redlock (three or more Redis URLs); for one server, --redis-timeout bounds every command",
            given.origin
        )));
    }
    let backend = match backend.value {
        BackendConfig::Redlock { urls, .. } => {
            let tls = redis_tls(&r, s, &urls, &mut warnings, &mut note)?;
            if let Some(wait) =
                r.scalar(&options::REDIS_WAIT_REPLICAS, values::parse_wait_replicas)?
                && wait.value != values::WaitReplicas::Count(0)
            {
                return Err(ConfigError(format!(
                    "{}: --redis-wait-replicas does not apply to Redlock: its masters are independent and the lease is safe on a majority of them without replicas",
                    wait.origin
                )));
            }
            let default = (ttl.value / 100).max(Duration::from_millis(20));
            let node_timeout = or_default(
                node_timeout,
                whole_millis(default),
                "ttl/100, at least 20ms",
            );
            if node_timeout.value > ttl.value / 10 {
                return Err(ConfigError(format!(
                    "redis.node_timeout = {} ({}) is too long for lease.ttl = {} ({}): every node's answer must come well within the lease's validity; set it to at most ttl/10 ({}) or raise the ttl",
                    show(node_timeout.value),
                    node_timeout.origin,
                    show(ttl.value),
                    ttl.origin,
                    show(ttl.value / 10)
                )));
            }
            note(
                "redis.node_timeout",
                format!("{:?}", show(node_timeout.value)),
                &node_timeout.origin,
            );
            BackendConfig::Redlock {
                urls,
                timeout: redis_timeout.value,
                node_timeout: node_timeout.value,
                tls,
            }
        }
        BackendConfig::Redis { url, .. } => {
            let tls = redis_tls(&r, s, std::slice::from_ref(&url), &mut warnings, &mut note)?;
            let wait = redis_wait(&r, &url, &mut note)?;
            let sentinel_password = sentinel_password(&r, s, &url, &mut warnings, &mut note)?;
            BackendConfig::Redis {
                wait,
                sentinel_password,
                url,
                timeout: redis_timeout.value,
                tls,
            }
        }
        other => other,
    };

    let timing = Timing {
        ttl: ttl.value,
        renew_interval: renew_interval.value,
        renew_deadline: renew_deadline.value,
        retry_interval: retry_interval.value,
    };
    check_timing(&timing, &ttl, &renew_interval, &renew_deadline)?;
    if backend_is_redis && redis_timeout.value >= renew_interval.value {
        return Err(ConfigError(format!(
            "redis.timeout = {} ({}) must be shorter than lease.renew_interval = {} ({}): a renewal has to be able to time out and be retried before the next one is due; lower the Redis timeout or raise the renew interval",
            show(redis_timeout.value),
            redis_timeout.origin,
            show(renew_interval.value),
            renew_interval.origin
        )));
    }

    let http = r.scalar(&options::HTTP, values::parse_http)?;
    let http = or_default(http, Some(([127, 0, 0, 1], 4040).into()), "");
    note(
        "http.listen",
        format!(
            "{:?}",
            http.value.map_or("off".to_string(), |a| a.to_string())
        ),
        &http.origin,
    );

    let child = child(&r, s, &mut note)?;
    let webhook = webhook(&r, &mut note)?;
    let admin = admin(&r, &mut note)?;

    let format = r.scalar(&options::LOG_FORMAT, values::parse_log_format)?;
    let format = or_default(format, LogFormat::Text, "");
    note(
        "log.format",
        format!("{:?}", format!("{:?}", format.value).to_lowercase()),
        &format.origin,
    );
    let level = r.scalar(&options::LOG_LEVEL, values::parse_log_level)?;
    let level = or_default(level, "info".to_string(), "");
    note("log.level", format!("{:?}", level.value), &level.origin);

    Ok(Config {
        key: key.value,
        id: id.value,
        backend,
        timing,
        http: http.value,
        child,
        webhook,
        admin,
        log: LogConfig {
            format: format.value,
            level: level.value,
        },
        effective,
        warnings,
    })
}

/// `$POD_NAME` (set from the downward API in Kubernetes), else the host name.
fn default_id(r: &Resolver<'_>, s: &Sources<'_>) -> Result<Value<String>, ConfigError> {
    if let Some(pod) = r.env("POD_NAME")? {
        let value = values::parse_id(&pod).map_err(|m| ConfigError(format!("POD_NAME: {m}")))?;
        return Ok(Value {
            value,
            origin: Origin::Default("$POD_NAME"),
        });
    }
    match &s.hostname {
        Some(host) => Ok(Value { value: host.clone(), origin: Origin::Default("host name") }),
        None => Err(ConfigError(
            "no candidate id: POD_NAME is unset and the host name is unknown; set --id or LEADERD_ID".into(),
        )),
    }
}

fn check_timing(
    t: &Timing,
    ttl: &Value<Duration>,
    ri: &Value<Duration>,
    rd: &Value<Duration>,
) -> Result<(), ConfigError> {
    if ri.value >= rd.value {
        return Err(ConfigError(format!(
            "lease.renew_interval = {} ({}) must be shorter than lease.renew_deadline = {} ({}): the deadline would pass before a renewal is even tried; e.g. renew_interval = ttl/3 and renew_deadline = ttl×2/3",
            show(ri.value),
            ri.origin,
            show(rd.value),
            rd.origin
        )));
    }
    if rd.value >= ttl.value {
        return Err(ConfigError(format!(
            "lease.renew_deadline = {} ({}) must be shorter than lease.ttl = {} ({}): the leader has to step down before its lease can expire; e.g. renew_deadline = ttl×2/3",
            show(rd.value),
            rd.origin,
            show(ttl.value),
            ttl.origin
        )));
    }
    let needed = t.ttl / 10;
    if t.stop_window() < needed {
        let max = t.ttl.saturating_sub(t.drift() + t.kill_margin() + needed);
        return Err(ConfigError(format!(
            "lease.renew_deadline = {} ({}) leaves {} to stop the work before the lease's validity ends (ttl {} − drift {} − kill margin {}); at least {} (ttl/10) is needed: set renew_deadline ≤ {} or raise the ttl",
            show(rd.value),
            rd.origin,
            show(t.stop_window()),
            show(t.ttl),
            show(t.drift()),
            show(t.kill_margin()),
            show(needed),
            show(whole_millis(max))
        )));
    }
    Ok(())
}
