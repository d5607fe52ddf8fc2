//! Redis URLs as users write them: `redis://`, `rediss://`,
//! `redis+sentinel://` and `redis+cluster://`, parsed at start-up with
//! messages that never echo the password, and the `WAIT` replica count.

use crate::config::Secret;
use crate::config::redact_url;
use std::fmt;

/// A Redis URL: the full text (a secret: it may carry a password) and a
/// redacted form that is safe to print.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl {
    full: Secret,
    redacted: String,
}

impl RedisUrl {
    pub fn expose(&self) -> &str {
        self.full.expose()
    }
    /// `rediss://` or `rediss+sentinel://`: TLS.
    pub fn is_tls(&self) -> bool {
        let url = self.full.expose();
        url.starts_with("rediss://")
            || url.starts_with("rediss+sentinel://")
            || url.starts_with("rediss+cluster://")
    }
    /// The Redis Cluster this URL names, if it is a `redis[s]+cluster://` URL.
    pub fn cluster(&self) -> Option<ClusterUrl> {
        parse_cluster(self.full.expose()).ok().flatten()
    }
    /// The Sentinel deployment this URL names, if it is a
    /// `redis[s]+sentinel://` URL (checked when it was parsed).
    pub fn sentinel(&self) -> Option<SentinelUrl> {
        parse_sentinel(self.full.expose()).ok().flatten()
    }
    /// It carries a password (what redaction hid).
    pub fn has_password(&self) -> bool {
        self.redacted != self.full.expose()
    }
    pub fn redacted(&self) -> &str {
        &self.redacted
    }
}

impl fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted)
    }
}

impl fmt::Display for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted)
    }
}

/// Parses a Redis URL, refusing what this build cannot honour with a message
/// that never repeats the password.
pub fn parse_redis_url(text: &str) -> Result<RedisUrl, String> {
    let redacted = redact_url(text);
    if text.starts_with("redis+sentinel://") || text.starts_with("rediss+sentinel://") {
        parse_sentinel(text).map_err(|e| format!("`{redacted}`: {e}"))?;
        return Ok(RedisUrl {
            full: Secret::new(text),
            redacted,
        });
    }
    if text.starts_with("redis+cluster://") || text.starts_with("rediss+cluster://") {
        parse_cluster(text).map_err(|e| format!("`{redacted}`: {e}"))?;
        return Ok(RedisUrl {
            full: Secret::new(text),
            redacted,
        });
    }
    let parsed = url::Url::parse(text).map_err(|e| {
        format!(
            "`{redacted}` is not a valid URL ({e}); expected redis://[user:password@]host:port/db or rediss://… (percent-encode `/ # ? @ %` in a password, e.g. `/` as %2F)"
        )
    })?;
    match parsed.scheme() {
        "redis" => {}
        "rediss" if parsed.fragment().is_some_and(|f| f.contains("insecure")) => {
            return Err(format!(
                "`{redacted}`: #insecure would turn off certificate verification, which leaderd never does (anyone on the path could then hold the lease); give the server's CA with --redis-tls-ca instead"
            ));
        }
        "rediss" => {}
        other => {
            return Err(format!(
                "`{redacted}` has scheme `{other}`; expected redis://[user:password@]host:port/db, rediss://…, redis+sentinel://host1:26379,host2:26379,host3:26379/SERVICE, or redis+cluster://host1:6379,host2:6379"
            ));
        }
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(format!(
            "`{redacted}` has no host; expected redis://host:port, e.g. redis://127.0.0.1:6379"
        ));
    }
    if parsed.port() == Some(0) {
        return Err(format!(
            "`{redacted}` has port 0; give the port Redis listens on (usually 6379)"
        ));
    }
    let path = parsed.path().trim_start_matches('/');
    if !path.is_empty() && path.parse::<u16>().is_err() {
        return Err(format!(
            "`{redacted}` names database `{path}`; the path must be a database number such as /0"
        ));
    }
    if parsed.fragment().is_some() {
        return Err(format!("`{redacted}` has a `#` fragment; remove it"));
    }
    if redis::parse_redis_url(text).is_none() {
        return Err(format!("`{redacted}` is not a Redis URL redis-rs accepts"));
    }
    Ok(RedisUrl {
        full: Secret::new(text),
        redacted,
    })
}

/// A Sentinel deployment: the sentinels to ask, the service (master name)
/// they monitor, and how to reach the master they agree on.
#[derive(Clone, PartialEq, Eq)]
pub struct SentinelUrl {
    pub sentinels: Vec<(String, u16)>,
    pub service: String,
    pub db: u16,
    /// `user:password@`, as written (percent-encoded), for the data nodes.
    pub userinfo: Option<String>,
    /// `?sentinel_user=`: the sentinels' own user, when they have one.
    pub sentinel_user: Option<String>,
    pub tls: bool,
}

impl SentinelUrl {
    /// The URL of a data node at `host:port` with this URL's credentials,
    /// database and TLS.
    pub fn node_url(&self, host: &str, port: u16) -> String {
        node_url(self.tls, self.userinfo.as_deref(), host, port) + &format!("/{}", self.db)
    }
}

const SENTINEL_FORM: &str =
    "expected redis+sentinel://[user:password@]host1:26379,host2:26379,host3:26379/SERVICE[/DB]";

/// `redis[s]+sentinel://[userinfo@]h1:p1,h2:p2/SERVICE[/DB]`; `None` for
/// any other scheme.
fn parse_sentinel(text: &str) -> Result<Option<SentinelUrl>, String> {
    let Some((tls, userinfo, rest)) = split_multi(text, "sentinel") else {
        return Ok(None);
    };
    let (hosts, path) = rest
        .split_once('/')
        .ok_or_else(|| format!("no service name; {SENTINEL_FORM}"))?;
    let sentinels = parse_hosts(hosts, 26379, SENTINEL_FORM)?;
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    let mut sentinel_user = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("sentinel_user", user)) if !user.is_empty() => {
                sentinel_user = Some(user.to_string());
            }
            _ => {
                return Err(format!(
                    "unknown parameter `{pair}`; the one parameter is ?sentinel_user=NAME (its password: LEADERD_REDIS_SENTINEL_PASSWORD or --redis-sentinel-password-file)"
                ));
            }
        }
    }
    let mut parts = path.split('/');
    let service = parts.next().unwrap_or_default().to_string();
    if service.is_empty() {
        return Err(format!("no service name; {SENTINEL_FORM}"));
    }
    let db = match parts.next() {
        None | Some("") => 0,
        Some(db) => db
            .parse::<u16>()
            .map_err(|_| format!("`{db}` is not a database number; {SENTINEL_FORM}"))?,
    };
    if parts.next().is_some() || service.contains(['?', '#']) {
        return Err(format!(
            "unexpected text after the service and database; {SENTINEL_FORM}"
        ));
    }
    if sentinels.len() < 3 {
        return Err(format!(
            "{} sentinel(s) given; leaderd follows the master a majority of the sentinels names, so give at least three (every sentinel of the deployment)",
            sentinels.len()
        ));
    }
    Ok(Some(SentinelUrl {
        sentinels,
        service,
        db,
        userinfo,
        sentinel_user,
        tls,
    }))
}

/// `redis[s]://[userinfo@]host:port` for one node of a multi-node URL.
fn node_url(tls: bool, userinfo: Option<&str>, host: &str, port: u16) -> String {
    let scheme = if tls { "rediss" } else { "redis" };
    let userinfo = userinfo.map_or(String::new(), |u| format!("{u}@"));
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    format!("{scheme}://{userinfo}{host}:{port}")
}

/// For `redis+KIND://` and `rediss+KIND://`: TLS or not, the userinfo (up
/// to the last `@`: a password may hold `/`) and the rest; `None` for any
/// other scheme.
fn split_multi<'a>(text: &'a str, kind: &str) -> Option<(bool, Option<String>, &'a str)> {
    let (tls, rest) = if let Some(rest) = text.strip_prefix(&format!("redis+{kind}://")) {
        (false, rest)
    } else {
        (true, text.strip_prefix(&format!("rediss+{kind}://"))?)
    };
    Some(match rest.rfind('@') {
        Some(at) => (tls, Some(rest[..at].to_string()), &rest[at + 1..]),
        None => (tls, None, rest),
    })
}

/// `host:port,host:port,…` (IPv6 in brackets), each port `default` when left out.
fn parse_hosts(hosts: &str, default: u16, form: &str) -> Result<Vec<(String, u16)>, String> {
    let mut parsed_hosts = Vec::new();
    for host in hosts.split(',') {
        let parsed = url::Url::parse(&format!("redis://{host}"))
            .ok()
            .filter(|u| u.host_str().is_some_and(|h| !h.is_empty()) && u.path().len() <= 1);
        let Some(parsed) = parsed else {
            return Err(format!("`{host}` is not an address (host:port); {form}"));
        };
        let name = parsed
            .host_str()
            .expect("checked")
            .trim_matches(['[', ']'])
            .to_string();
        parsed_hosts.push((name, parsed.port().unwrap_or(default)));
    }
    Ok(parsed_hosts)
}

/// A Redis Cluster: nodes to discover it from, and how to reach its nodes.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterUrl {
    pub seeds: Vec<(String, u16)>,
    /// `user:password@`, as written (percent-encoded).
    pub userinfo: Option<String>,
    pub tls: bool,
}

impl ClusterUrl {
    /// The URL of node `host:port` with this URL's credentials and TLS.
    pub fn node_url(&self, host: &str, port: u16) -> String {
        node_url(self.tls, self.userinfo.as_deref(), host, port)
    }
}

const CLUSTER_FORM: &str =
    "expected redis+cluster://[user:password@]host1:6379,host2:6379,host3:6379";

/// `redis[s]+cluster://[userinfo@]h1:p1,h2:p2[/0]`; `None` for any other scheme.
fn parse_cluster(text: &str) -> Result<Option<ClusterUrl>, String> {
    let Some((tls, userinfo, rest)) = split_multi(text, "cluster") else {
        return Ok(None);
    };
    let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
    if !matches!(path, "" | "0") {
        return Err(format!(
            "names database `{path}`; a Redis Cluster has only database 0; {CLUSTER_FORM}"
        ));
    }
    Ok(Some(ClusterUrl {
        seeds: parse_hosts(hosts, 6379, CLUSTER_FORM)?,
        userinfo,
        tls,
    }))
}

/// How many replicas must acknowledge a lease write (`WAIT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitReplicas {
    Count(u32),
    /// One when the primary reports a connected replica, else none.
    Auto,
}

pub fn parse_wait_replicas(text: &str) -> Result<WaitReplicas, String> {
    match text.trim() {
        "auto" => Ok(WaitReplicas::Auto),
        n => n.parse::<u32>().map(WaitReplicas::Count).map_err(|_| {
            format!("`{n}` is not a replica count; use 0 (no WAIT), a number such as 1, or auto")
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_redis_urls_never_echo_the_password() {
        for bad in [
            "redis://user:secret@:6379",
            "http://user:secret@host:6379",
            "redis://user:secret@host:0",
            "redis://user:secret@host:6379/db",
            "redis://user:secret@host:99999",
            "rediss://user:secret@host/#insecure",
            "redis://user:sec/ret@host:6379",
            "redis://user:sec#ret@host:6379",
            "redis://user:sec?ret@host:6379",
        ] {
            let err = parse_redis_url(bad).unwrap_err();
            assert!(
                !err.contains("secret") && !err.contains("ret@"),
                "{bad}: {err}"
            );
        }
        let ok = parse_redis_url("redis://user:secret@127.0.0.1:6379/2").unwrap();
        assert_eq!(ok.redacted(), "redis://user:***@127.0.0.1:6379/2");
        assert_eq!(format!("{ok:?} {ok}"), format!("{0} {0}", ok.redacted()));
    }

    #[test]
    fn sentinel_and_cluster_urls_name_their_nodes_with_the_credentials() {
        let url = parse_redis_url(
            "rediss+sentinel://app:p%2Fw@s1:26379,[::1]:26380,s3/svc/2?sentinel_user=sen",
        )
        .expect("valid");
        assert!(url.is_tls());
        assert_eq!(
            url.redacted(),
            "rediss+sentinel://app:***@s1:26379,[::1]:26380,s3/svc/2?sentinel_user=sen"
        );
        let sentinel = url.sentinel().expect("a sentinel URL");
        assert_eq!(
            sentinel.sentinels,
            [
                ("s1".into(), 26379),
                ("::1".into(), 26380),
                ("s3".into(), 26379)
            ]
        );
        assert_eq!((sentinel.service.as_str(), sentinel.db), ("svc", 2));
        assert_eq!(sentinel.sentinel_user.as_deref(), Some("sen"));
        assert_eq!(
            sentinel.node_url("10.0.0.9", 6380),
            "rediss://app:p%2Fw@10.0.0.9:6380/2"
        );

        let url = parse_redis_url("redis+cluster://n1:7000,n2").expect("valid");
        let cluster = url.cluster().expect("a cluster URL");
        assert_eq!(cluster.seeds, [("n1".into(), 7000), ("n2".into(), 6379)]);
        assert_eq!(cluster.node_url("::1", 7001), "redis://[::1]:7001");
        assert!(url.sentinel().is_none() && !url.is_tls());

        for bad in [
            "redis+sentinel://s1,s2/svc",
            "redis+sentinel://s1,s2,s3",
            "redis+sentinel://s1,s2,s3/svc?other=1",
            "redis+cluster://n1,n2/1",
        ] {
            assert!(parse_redis_url(bad).is_err(), "{bad}");
        }
    }
}
