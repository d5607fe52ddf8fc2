//! The Redis backend's options — one server (with Sentinel or Cluster) or
//! Redlock over three or more masters — declared once here and resolved
//! into [`RedisConfig`] or [`RedlockConfig`], with `check`'s printout of
//! them.

use crate::client::redis::urls::{RedisUrl, WaitReplicas, parse_redis_url, parse_wait_replicas};
use crate::config::options::{BACKEND, Commas, Spec, spec};
use crate::config::{
    ConfigError, Declared, Origin, Resolving, Secret, or_default, positive, show_duration as show,
};
use crate::lease::options::StoreOptions;
use std::time::Duration;

pub const REDIS: Spec = spec("redis", "--redis", "LEADERD_REDIS_URL", "redis.urls")
    .value("URL")
    .under(BACKEND)
    .secret()
    .help("Redis URL, redis://[user:pass@]host:port/db or rediss:// for TLS; three or more independent masters for Redlock (or in a file: LEADERD_REDIS_URL_FILE, redis.url_file)")
    .list()
    .commas(Commas::BeforeScheme);
pub const REDIS_URL_FILE: Spec = spec(
    "redis_url_file",
    "",
    "LEADERD_REDIS_URL_FILE",
    "redis.url_file",
)
.no_flag()
.value("FILE")
.under(BACKEND)
.help("A file holding the Redis URL(s), one per line, read at start-up");
pub const REDIS_SENTINEL_PASSWORD_FILE: Spec = spec(
    "redis_sentinel_password_file",
    "--redis-sentinel-password-file",
    "LEADERD_REDIS_SENTINEL_PASSWORD_FILE",
    "redis.sentinel_password_file",
)
.value("FILE")
.under(BACKEND)
.help("Sentinel only, when the sentinels have credentials of their own: a file holding their password (the user: ?sentinel_user= in the URL)");
pub const REDIS_SENTINEL_PASSWORD: Spec = spec(
    "redis_sentinel_password",
    "",
    "LEADERD_REDIS_SENTINEL_PASSWORD",
    "",
)
.no_flag()
.no_key()
.value("PASSWORD")
.under(BACKEND)
.secret()
.help("The sentinels' password itself (instead of the file)");
pub const REDIS_TLS_CA: Spec = spec(
    "redis_tls_ca",
    "--redis-tls-ca",
    "LEADERD_REDIS_TLS_CA",
    "redis.tls_ca_file",
)
.value("FILE")
.under(BACKEND)
.help("For rediss://: trust only this PEM CA bundle")
.default("the system's roots");
pub const REDIS_TLS_CERT: Spec = spec(
    "redis_tls_cert",
    "--redis-tls-cert",
    "LEADERD_REDIS_TLS_CERT",
    "redis.tls_cert_file",
)
.value("FILE")
.under(BACKEND)
.help("For rediss:// with mutual TLS: the client certificate (PEM), with --redis-tls-key");
pub const REDIS_TLS_KEY: Spec = spec(
    "redis_tls_key",
    "--redis-tls-key",
    "LEADERD_REDIS_TLS_KEY",
    "redis.tls_key_file",
)
.value("FILE")
.under(BACKEND)
.help("For rediss:// with mutual TLS: the client's private key (PEM)");
pub const REDIS_TIMEOUT: Spec = spec(
    "redis_timeout",
    "--redis-timeout",
    "LEADERD_REDIS_TIMEOUT",
    "redis.timeout",
)
.value("DUR")
.under(BACKEND)
.help("Timeout of every Redis command, TLS handshake included")
.default("500ms, at most half the renew interval");
pub const REDIS_NODE_TIMEOUT: Spec = spec(
    "redis_node_timeout",
    "--redis-node-timeout",
    "LEADERD_REDIS_NODE_TIMEOUT",
    "redis.node_timeout",
)
.value("DUR")
.under(BACKEND)
.help("Redlock (3+ URLs): how long each node has to answer one lease operation, small against the TTL (at most ttl/10); connecting is bounded by --redis-timeout")
.default("ttl/100, at least 20ms, at most ttl/10");
pub const REDIS_WAIT_REPLICAS: Spec = spec(
    "redis_wait_replicas",
    "--redis-wait-replicas",
    "LEADERD_REDIS_WAIT_REPLICAS",
    "redis.wait_replicas",
)
.value("N|auto")
.under(BACKEND)
.help("After each acquire and renewal, WAIT until N replicas acknowledged the write (auto: 1 when the primary has a connected replica); fewer → the attempt fails")
.choices(&["0", "1", "2", "auto"])
.default("0 (Sentinel, Cluster: auto)");

/// The Redis backend as the configuration sees it.
pub const DECLARED: Declared = Declared {
    name: "Redis",
    options: &[
        &REDIS,
        &REDIS_URL_FILE,
        &REDIS_SENTINEL_PASSWORD_FILE,
        &REDIS_SENTINEL_PASSWORD,
        &REDIS_TLS_CA,
        &REDIS_TLS_CERT,
        &REDIS_TLS_KEY,
        &REDIS_TIMEOUT,
        &REDIS_NODE_TIMEOUT,
        &REDIS_WAIT_REPLICAS,
    ],
    selectors: &[&REDIS, &REDIS_URL_FILE],
    resolve,
    fallback: None,
};

/// Redis's TLS files (for `rediss://`).
pub type RedisTls = crate::client::pem::TlsFiles;

/// One Redis server, or its Sentinel or Cluster deployment.
#[derive(Debug, Clone)]
pub struct RedisConfig {
    pub url: RedisUrl,
    pub timeout: Duration,
    pub tls: RedisTls,
    /// Replicas that must acknowledge each acquire and renewal.
    pub wait: WaitReplicas,
    /// Under Sentinel, the sentinels' own password, when they have one.
    pub sentinel_password: Option<Secret>,
}

/// Redlock: three or more independent Redis masters, a lease held on a
/// majority of them.
#[derive(Debug, Clone)]
pub struct RedlockConfig {
    pub urls: Vec<RedisUrl>,
    /// Bounds connecting to a node (TLS handshake included).
    pub timeout: Duration,
    /// Bounds each node's answer to one lease operation.
    pub node_timeout: Duration,
    pub tls: RedisTls,
}

fn whole_millis(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}

/// The URLs decide: one is Redis (Sentinel, Cluster), three or more are
/// Redlock.
fn resolve(x: &mut Resolving<'_>) -> Result<crate::config::Backend, ConfigError> {
    let urls = x
        .url_or_file(
            &REDIS,
            &REDIS_URL_FILE,
            parse_redis_url,
            RedisUrl::has_password,
        )?
        .expect("chosen by one of these options");
    let origin = urls.origin.clone();
    let n = urls.value.len();
    match n {
        0 => {
            return Err(ConfigError(format!(
                "{origin}: no Redis URL given; give one redis:// URL"
            )));
        }
        2 => {
            return Err(ConfigError(format!(
                "{origin}: two Redis URLs given; a majority of two servers is both, so Redlock over two survives no failure: give one URL (with replicas and Sentinel for failover) or three or more independent masters"
            )));
        }
        _ => {}
    }
    if n > 2 {
        if let Some(url) = urls
            .value
            .iter()
            .find(|u| u.sentinel().is_some() || u.cluster().is_some())
        {
            return Err(ConfigError(format!(
                "{origin}: `{}` among {n} Redis URLs; Sentinel and Cluster URLs stand alone (one URL names the whole deployment), Redlock takes plain redis:// or rediss:// URLs of independent masters",
                url.redacted()
            )));
        }
        if n % 2 == 0 {
            x.warnings.push(format!(
                "{origin}: {n} Redis masters: Redlock needs {} of them, so this survives as many failures as {} masters would; an odd number is cheaper",
                n / 2 + 1,
                n - 1
            ));
        }
    }
    let shown: Vec<String> = urls
        .value
        .iter()
        .map(|u| format!("{:?}", u.redacted()))
        .collect();
    x.note("redis.urls", format!("[{}]", shown.join(", ")), &origin);
    let timeout = x.store_timeout(&REDIS_TIMEOUT)?;
    let node_timeout =
        x.r.scalar(&REDIS_NODE_TIMEOUT, positive(crate::config::parse_duration))?;
    if let Some(given) = &node_timeout
        && n == 1
    {
        return Err(ConfigError(format!(
            "{}: --redis-node-timeout applies to Redlock (three or more Redis URLs); for one server, --redis-timeout bounds every command",
            given.origin
        )));
    }
    let settings = if n == 1 {
        let url = urls.value.into_iter().next().expect("one URL");
        let tls = tls(x, std::slice::from_ref(&url))?;
        let wait = wait(x, &url)?;
        let sentinel_password = sentinel_password(x, &url)?;
        crate::config::Backend::new(RedisConfig {
            url,
            timeout: timeout.value,
            tls,
            wait,
            sentinel_password,
        })
    } else {
        let tls = tls(x, &urls.value)?;
        if let Some(wait) = x.r.scalar(&REDIS_WAIT_REPLICAS, parse_wait_replicas)?
            && wait.value != WaitReplicas::Count(0)
        {
            return Err(ConfigError(format!(
                "{}: --redis-wait-replicas does not apply to Redlock: its masters are independent and the lease is safe on a majority of them without replicas",
                wait.origin
            )));
        }
        let ttl = x.ttl;
        // Never past its own limit: a very short TTL alone needs no node
        // timeout of its own.
        let default = (ttl.value / 100)
            .max(Duration::from_millis(20))
            .min(ttl.value / 10);
        let node_timeout = or_default(
            node_timeout,
            whole_millis(default).max(Duration::from_millis(1)),
            "ttl/100, at least 20ms, at most ttl/10",
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
        x.note(
            "redis.node_timeout",
            format!("{:?}", show(node_timeout.value)),
            &node_timeout.origin,
        );
        crate::config::Backend::new(RedlockConfig {
            urls: urls.value,
            timeout: timeout.value,
            node_timeout: node_timeout.value,
            tls,
        })
    };
    Ok(settings)
}

/// `--redis-tls-ca`, `--redis-tls-cert` and `--redis-tls-key`: for
/// `rediss://` only, the certificate and key both or neither.
fn tls(x: &mut Resolving<'_>, urls: &[RedisUrl]) -> Result<RedisTls, ConfigError> {
    let plain = urls.iter().find(|u| !u.is_tls()).map(|u| {
        format!(
            "TLS files apply to rediss:// URLs, but the Redis URL is `{}`; use rediss://",
            u.redacted()
        )
    });
    crate::client::pem::files(x, [&REDIS_TLS_CA, &REDIS_TLS_CERT, &REDIS_TLS_KEY], plain)
}

/// `--redis-wait-replicas`: how many replicas must acknowledge each lease
/// write before it counts.
fn wait(x: &mut Resolving<'_>, url: &RedisUrl) -> Result<WaitReplicas, ConfigError> {
    let wait = x.r.scalar(&REDIS_WAIT_REPLICAS, parse_wait_replicas)?;
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
    x.note("redis.wait_replicas", format!("{shown:?}"), &origin);
    Ok(wait)
}

/// The sentinels' own password: `LEADERD_REDIS_SENTINEL_PASSWORD`, or the
/// file named by `--redis-sentinel-password-file` (or its env var or TOML
/// key). Only with a `redis+sentinel://` URL.
fn sentinel_password(x: &mut Resolving<'_>, url: &RedisUrl) -> Result<Option<Secret>, ConfigError> {
    let Some(password) = x.secret(
        &REDIS_SENTINEL_PASSWORD,
        &REDIS_SENTINEL_PASSWORD_FILE,
        "a sentinel password file",
    )?
    else {
        return Ok(None);
    };
    if url.sentinel().is_none() {
        return Err(ConfigError(format!(
            "{}: a sentinel password applies to redis+sentinel:// URLs, but the Redis URL is `{}`",
            password.origin,
            url.redacted()
        )));
    }
    x.note(
        "redis.sentinel_password",
        "\"***\"".into(),
        &password.origin,
    );
    Ok(Some(password.value))
}
