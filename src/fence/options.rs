//! Fencing as a feature: its rows, each declared once (flag, env, TOML
//! key, default, help), and their resolution into [`FenceConfig`]; off
//! unless a resource is named. The resources' URLs are secret rows, so the
//! child never sees them: the worker brings its own credentials.

use super::{FenceConfig, PgTarget, RedisTarget};
use crate::client::postgres::{PgConnect, parse_postgres_url, resolve_tls};
use crate::client::redis::urls::{RedisUrl, parse_redis_url};
use crate::config::options::{Spec, spec};
use crate::config::{ConfigError, Feature, Resolving, Section, Settings, Value, or_default};
use crate::lease::options::StoreOptions;
use std::sync::Arc;

const FENCE: &str = "Fencing at the resource";

pub const FENCE_POSTGRES: Spec = spec(
    "fence_postgres",
    "--fence-postgres",
    "LEADERD_FENCE_POSTGRES_URL",
    "fence.postgres_url",
)
.value("URL")
.under(FENCE)
.secret()
.help("Raise the fence in this PostgreSQL database to each term's token before the term's work starts (libpq URL, sslmode=… as for --postgres; or in a file: LEADERD_FENCE_POSTGRES_URL_FILE, fence.postgres_url_file); `leaderd fence install` installs its guard");
pub const FENCE_POSTGRES_URL_FILE: Spec = spec(
    "fence_postgres_url_file",
    "",
    "LEADERD_FENCE_POSTGRES_URL_FILE",
    "fence.postgres_url_file",
)
.no_flag()
.value("FILE")
.under(FENCE)
.help("A file holding the fenced PostgreSQL's URL, read at start-up");
pub const FENCE_REDIS: Spec = spec(
    "fence_redis",
    "--fence-redis",
    "LEADERD_FENCE_REDIS_URL",
    "fence.redis_url",
)
.value("URL")
.under(FENCE)
.secret()
.help("Raise the fence in this Redis server (redis:// or rediss://, one server or primary) to each term's token before the term's work starts (or in a file: LEADERD_FENCE_REDIS_URL_FILE, fence.redis_url_file); `leaderd fence install` loads its guard");
pub const FENCE_REDIS_URL_FILE: Spec = spec(
    "fence_redis_url_file",
    "",
    "LEADERD_FENCE_REDIS_URL_FILE",
    "fence.redis_url_file",
)
.no_flag()
.value("FILE")
.under(FENCE)
.help("A file holding the fenced Redis's URL, read at start-up");
pub const FENCE_REDIS_TLS_CA: Spec = spec(
    "fence_redis_tls_ca",
    "--fence-redis-tls-ca",
    "LEADERD_FENCE_REDIS_TLS_CA",
    "fence.redis_tls_ca",
)
.value("FILE")
.under(FENCE)
.help("PEM bundle to trust for a rediss:// fence instead of the system's roots");
pub const FENCE_REDIS_TLS_CERT: Spec = spec(
    "fence_redis_tls_cert",
    "--fence-redis-tls-cert",
    "LEADERD_FENCE_REDIS_TLS_CERT",
    "fence.redis_tls_cert",
)
.value("FILE")
.under(FENCE)
.help("Client certificate (PEM) for a rediss:// fence that asks for one");
pub const FENCE_REDIS_TLS_KEY: Spec = spec(
    "fence_redis_tls_key",
    "--fence-redis-tls-key",
    "LEADERD_FENCE_REDIS_TLS_KEY",
    "fence.redis_tls_key",
)
.value("FILE")
.under(FENCE)
.help("The client certificate's private key (PEM)");
pub const FENCE_KEY: Spec = spec("fence_key", "--fence-key", "LEADERD_FENCE_KEY", "fence.key")
    .value("NAME")
    .under(FENCE)
    .help("The fence's name: the PostgreSQL row and the Redis key that hold the newest token, which workers pass to the guard (exported to the child as LEADERD_FENCE_KEY)")
    .default("the election key");
pub const FENCE_TIMEOUT: Spec = spec(
    "fence_timeout",
    "--fence-timeout",
    "LEADERD_FENCE_TIMEOUT",
    "fence.timeout",
)
.value("DUR")
.under(FENCE)
.help("Timeout of connecting to a fenced resource and of raising its fence")
.default("500ms, at most half the renew interval");

/// The rows, in the order of `--help`, `check` and the docs.
pub const OPTIONS: [&Spec; 9] = [
    &FENCE_POSTGRES,
    &FENCE_POSTGRES_URL_FILE,
    &FENCE_REDIS,
    &FENCE_REDIS_URL_FILE,
    &FENCE_REDIS_TLS_CA,
    &FENCE_REDIS_TLS_CERT,
    &FENCE_REDIS_TLS_KEY,
    &FENCE_KEY,
    &FENCE_TIMEOUT,
];

pub static FEATURE: Feature = Feature {
    name: "the fence",
    section: Section::Work,
    options: &OPTIONS,
    resolve: |x| Ok(resolve(x)?.map(|f| Arc::new(f) as Arc<dyn Settings>)),
};

/// The fence, if a resource is named; its other options alone are an error
/// (they would silently do nothing).
fn resolve(x: &mut Resolving<'_>) -> Result<Option<FenceConfig>, ConfigError> {
    let postgres = x.url_or_file(
        &FENCE_POSTGRES,
        &FENCE_POSTGRES_URL_FILE,
        parse_postgres_url,
        |u| u.connect.get_password().is_some(),
    )?;
    let redis = x.url_or_file(
        &FENCE_REDIS,
        &FENCE_REDIS_URL_FILE,
        parse_fenced_redis_url,
        RedisUrl::has_password,
    )?;
    if postgres.is_none() && redis.is_none() {
        if let Some(origin) = x.r.given(&OPTIONS[4..]) {
            return Err(ConfigError(format!(
                "{origin}: a fence option, but no fenced resource is configured; give --fence-postgres URL or --fence-redis URL, or remove it"
            )));
        }
        return Ok(None);
    }
    let timeout = x.store_timeout(&FENCE_TIMEOUT)?;
    let key = x.r.scalar(&FENCE_KEY, parse_key)?;
    let key = or_default(key, x.key.to_string(), "the election key");
    x.note("fence.key", format!("{:?}", key.value), &key.origin);
    let postgres = match postgres {
        Some(mut urls) => {
            let url = Value {
                value: urls.value.remove(0),
                origin: urls.origin,
            };
            if url.value.gives_mode() {
                return Err(ConfigError(format!(
                    "{}: ?mode= chooses how leaderd's own lease is held, and means nothing for the fenced database; remove it from the fence's URL",
                    url.origin
                )));
            }
            x.note(
                "fence.postgres_url",
                format!("{:?}", url.value.redacted()),
                &url.origin,
            );
            let tls = resolve_tls(x, &url)?;
            Some(PgTarget {
                pg: PgConnect {
                    url: url.value,
                    tls,
                    timeout: timeout.value,
                },
            })
        }
        None => None,
    };
    let redis = match redis {
        Some(mut urls) => {
            let url = urls.value.remove(0);
            x.note(
                "fence.redis_url",
                format!("{:?}", url.redacted()),
                &urls.origin,
            );
            let plain = (!url.is_tls()).then(|| {
                format!(
                    "TLS files apply to rediss:// URLs, but the fenced Redis's URL is `{}`; use rediss://",
                    url.redacted()
                )
            });
            let tls = crate::client::pem::files(
                x,
                [
                    &FENCE_REDIS_TLS_CA,
                    &FENCE_REDIS_TLS_CERT,
                    &FENCE_REDIS_TLS_KEY,
                ],
                plain,
            )?;
            Some(RedisTarget { url, tls })
        }
        None if x.r.given(&OPTIONS[4..7]).is_some() => {
            let origin = x.r.given(&OPTIONS[4..7]).expect("just seen");
            return Err(ConfigError(format!(
                "{origin}: a TLS file for a fenced Redis, but no --fence-redis URL is given; give it, or remove the TLS option"
            )));
        }
        None => None,
    };
    Ok(Some(FenceConfig {
        key: key.value,
        timeout: timeout.value,
        postgres,
        redis,
    }))
}

/// One server or primary: the fence's raise must reach the node the
/// workers write to, which a Sentinel or Cluster URL leaves to routing
/// leaderd does not do for the fence.
fn parse_fenced_redis_url(text: &str) -> Result<RedisUrl, String> {
    let url = parse_redis_url(text)?;
    if url.sentinel().is_some() || url.cluster().is_some() {
        return Err(format!(
            "`{}` names a Sentinel or a Cluster; the fence is raised on one server: give the primary's redis:// or rediss:// URL (in a cluster, the primary of the fence key's slot)",
            url.redacted()
        ));
    }
    Ok(url)
}

fn parse_key(text: &str) -> Result<String, String> {
    let key = text.trim();
    if key.is_empty() || key.chars().any(char::is_control) {
        return Err(format!(
            "`{}` is not a fence name; give a non-empty name without control characters, e.g. jobs",
            key.escape_debug()
        ));
    }
    Ok(key.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentinel_or_cluster_url_is_refused_with_what_to_give() {
        for url in [
            "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380,127.0.0.1:26381/mymaster",
            "redis+cluster://127.0.0.1:7000,127.0.0.1:7001",
        ] {
            let e = parse_fenced_redis_url(url).expect_err(url);
            assert!(e.contains("give the primary's"), "{e}");
        }
        assert!(parse_fenced_redis_url("rediss://u:pw@127.0.0.1:6379/0").is_ok());
    }

    #[test]
    fn a_fence_name_is_not_blank() {
        assert!(parse_key(" ").is_err());
        assert!(parse_key("a\nb").is_err());
        assert_eq!(parse_key(" jobs ").unwrap(), "jobs");
    }
}
