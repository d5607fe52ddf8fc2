//! Parsers for single option values (durations, signals, URLs, names) and the
//! small value types they produce. Each returns a message saying what is wrong
//! and how to fix it; the caller prefixes the source (flag, env var, file key).

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

/// A secret string (a password, a webhook secret). `Debug` and `Display` print
/// `***`, so it cannot leak through logs or error messages by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }
    /// The secret itself, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

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

/// Replaces the password of anything that looks like `scheme://user:pass@host`
/// with `***`. Works on text that does not parse as a URL too, so it is safe
/// to use in error messages about malformed URLs.
pub fn redact_url(text: &str) -> String {
    let Some(scheme_end) = text.find("://") else {
        return text.to_string();
    };
    let rest = &text[scheme_end + 3..];
    // By position, not by parsing: a password may hold `/`, `#`, `?` or `@`
    // (unencoded, which is exactly when parsing fails), so the userinfo ends
    // at the *last* `@`. A path with an `@` is over-redacted, never leaked.
    let Some(at) = rest.rfind('@') else {
        return text.to_string();
    };
    let userinfo = &rest[..at];
    let user = match userinfo.find(':') {
        Some(colon) => &userinfo[..colon],
        None if userinfo.is_empty() => "",
        // `redis://secret@host`: redis-rs reads a lone userinfo as the password.
        None => "",
    };
    format!(
        "{}{}:***@{}",
        &text[..scheme_end + 3],
        user,
        &rest[at + 1..]
    )
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

/// Parses a duration with a unit (`500ms`, `10s`, `1m`, `1m30s`). A bare number
/// is refused: `10` could mean seconds or milliseconds, and guessing wrong
/// makes a lease 1000 times too short or too long.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err("is empty; give a duration with a unit such as 10s or 500ms".into());
    }
    // Zero is zero in every unit: `--wait 0` reads as "no wait". Whether
    // zero is allowed is each option's own check (a TTL must be positive).
    if trimmed.chars().all(|c| c == '0') {
        return Ok(Duration::ZERO);
    }
    if trimmed.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!(
            "`{trimmed}` has no unit; write it with one, e.g. {trimmed}s or {trimmed}ms"
        ));
    }
    humantime::parse_duration(trimmed).map_err(|e| {
        format!(
            "`{trimmed}` is not a duration ({e}); use a number with a unit, e.g. 500ms, 10s, 1m"
        )
    })
}

/// A POSIX signal by number, with the name the user gave for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signal {
    pub number: i32,
    pub name: &'static str,
}

const SIGNALS: &[(&str, i32)] = &[
    ("SIGTERM", signal_hook::consts::SIGTERM),
    ("SIGINT", signal_hook::consts::SIGINT),
    ("SIGQUIT", signal_hook::consts::SIGQUIT),
    ("SIGHUP", signal_hook::consts::SIGHUP),
    ("SIGUSR1", signal_hook::consts::SIGUSR1),
    ("SIGUSR2", signal_hook::consts::SIGUSR2),
    ("SIGKILL", signal_hook::consts::SIGKILL),
];

#[cfg(test)]
#[test]
fn completions_offer_exactly_the_signals_leaderd_sends() {
    let names: Vec<&str> = SIGNALS.iter().map(|(n, _)| *n).collect();
    assert_eq!(super::options::STOP_SIGNAL.choices, names.as_slice());
}

impl Signal {
    pub const TERM: Signal = Signal {
        number: signal_hook::consts::SIGTERM,
        name: "SIGTERM",
    };
}

/// Parses `SIGTERM`, `TERM` or `term` (and the other stop signals that make sense).
pub fn parse_signal(text: &str) -> Result<Signal, String> {
    let upper = text.trim().to_ascii_uppercase();
    let full = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    SIGNALS
        .iter()
        .find(|(name, _)| *name == full)
        .map(|&(name, number)| Signal { number, name })
        .ok_or_else(|| {
            let names: Vec<&str> = SIGNALS.iter().map(|(n, _)| *n).collect();
            format!(
                "`{text}` is not a signal leaderd can send; use one of {}",
                names.join(", ")
            )
        })
}

/// What to do when the child exits on its own while we lead (PRODUCT §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnChildExit {
    Restart,
    Release,
    Exit,
}

pub fn parse_on_child_exit(text: &str) -> Result<OnChildExit, String> {
    match text.trim() {
        "restart" => Ok(OnChildExit::Restart),
        "release" => Ok(OnChildExit::Release),
        "exit" => Ok(OnChildExit::Exit),
        other => Err(format!(
            "`{other}` is not a policy; use restart, release or exit"
        )),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

pub fn parse_log_format(text: &str) -> Result<LogFormat, String> {
    match text.trim() {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        other => Err(format!("`{other}` is not a log format; use text or json")),
    }
}

/// A level (`info`) or a tracing filter (`info,leaderd=debug`). A bare word
/// that is not a level is refused: tracing would read `verbose` as "only the
/// target named verbose", which silently turns every line off.
pub fn parse_log_level(text: &str) -> Result<String, String> {
    // The levels completions offer are the levels there are.
    let levels = super::options::LOG_LEVEL.choices;
    let hint = "use error, warn, info, debug or trace, or a filter such as info,leaderd=debug";
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(format!("the log level is empty; {hint}"));
    }
    for directive in trimmed.split(',').map(str::trim) {
        let level = match directive.rsplit_once('=') {
            Some((_, level)) => level,
            None => directive,
        };
        if !levels.contains(&level.to_ascii_lowercase().as_str()) {
            return Err(format!(
                "`{directive}` in `{trimmed}` is not a log level; {hint}"
            ));
        }
    }
    tracing_subscriber::EnvFilter::try_new(trimmed)
        .map(|_| trimmed.to_string())
        .map_err(|e| format!("`{trimmed}` is not a log filter ({e}); {hint}"))
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

/// `N/DUR` (at most N restarts within DUR), or `off`.
pub fn parse_restart_limit(text: &str) -> Result<Option<(u32, std::time::Duration)>, String> {
    let trimmed = text.trim();
    if trimmed.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let hint = "use N/DUR such as 5/1m (at most 5 restarts in a minute), or off";
    let (n, window) = trimmed
        .split_once('/')
        .ok_or_else(|| format!("`{trimmed}` is not a restart limit; {hint}"))?;
    let n: u32 = n
        .trim()
        .parse()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("`{n}` in `{trimmed}` is not a positive count; {hint}"))?;
    let window = parse_duration(window).map_err(|e| format!("{e}; {hint}"))?;
    if window.is_zero() {
        return Err(format!("the window in `{trimmed}` is zero; {hint}"));
    }
    Ok(Some((n, window)))
}

/// `off` disables the HTTP server; otherwise an IP address and port.
pub fn parse_http(text: &str) -> Result<Option<SocketAddr>, String> {
    let trimmed = text.trim();
    if trimmed.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    trimmed.parse::<SocketAddr>().map(Some).map_err(|_| {
        format!("`{trimmed}` is not an address; use IP:PORT such as 127.0.0.1:4040 or [::1]:4040, or off")
    })
}

/// Election names end up inside Redis keys (`leaderd:{KEY}:lease`) and file
/// names, so they are kept to a safe alphabet.
pub fn parse_key(text: &str) -> Result<String, String> {
    if text.is_empty() || text.len() > 200 {
        return Err("must be 1 to 200 characters long".into());
    }
    if let Some(bad) = text
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '/')))
    {
        return Err(format!(
            "`{}` contains {bad:?}; use letters, digits and - _ . : / only",
            text.escape_debug()
        ));
    }
    Ok(text.to_string())
}

pub fn parse_id(text: &str) -> Result<String, String> {
    if text.trim().is_empty() || text.len() > 253 {
        return Err("must be 1 to 253 characters long and not blank".into());
    }
    if text.chars().any(char::is_control) {
        return Err(format!(
            "`{}` contains control characters; remove them",
            text.escape_debug()
        ));
    }
    Ok(text.to_string())
}

pub fn parse_webhook_url(text: &str) -> Result<url::Url, String> {
    let redacted = redact_url(text);
    let parsed = url::Url::parse(text.trim())
        .map_err(|e| format!("`{redacted}` is not a valid URL ({e})"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("`{redacted}` must be an http:// or https:// URL"));
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_numbers_are_not_durations() {
        let err = parse_duration("10").unwrap_err();
        assert!(err.contains("no unit") && err.contains("10s"), "{err}");
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_duration("ten seconds").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn redaction_hides_passwords_only() {
        assert_eq!(
            redact_url("redis://user:secret@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(redact_url("redis://:secret@h:1"), "redis://:***@h:1");
        assert_eq!(redact_url("redis://secret@h:1"), "redis://:***@h:1");
        assert_eq!(redact_url("redis://h:1/0"), "redis://h:1/0");
        assert_eq!(redact_url("not a url s3cret"), "not a url s3cret");
        assert_eq!(redact_url("redis://u:p@ss@h"), "redis://u:***@h");
    }

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
    fn signals_by_name() {
        assert_eq!(parse_signal("term").unwrap(), Signal::TERM);
        assert_eq!(parse_signal("SIGUSR1").unwrap().name, "SIGUSR1");
        assert!(parse_signal("SIGFOO").unwrap_err().contains("SIGTERM"));
    }

    #[test]
    fn keys_keep_to_a_safe_alphabet() {
        assert!(parse_key("jobs.nightly-1").is_ok());
        assert!(parse_key("a{b}").is_err());
        assert!(parse_key("").is_err());
        assert!(parse_key("a b").is_err());
    }

    #[test]
    fn http_off_or_socket_address() {
        assert_eq!(parse_http("off"), Ok(None));
        assert!(parse_http("127.0.0.1:4040").unwrap().is_some());
        assert!(parse_http("localhost:4040").is_err());
    }

    #[test]
    fn secrets_do_not_print() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s} {s:?}"), "*** ***");
        assert_eq!(s.expose(), "hunter2");
    }
}
