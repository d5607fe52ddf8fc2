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

/// A value of a secret row as `check` may show it: every URL in it with
/// its password masked, anything else masked whole. The backends already
/// show their URLs redacted; this is the row's own guarantee on top.
pub fn redact_secret(shown: &str) -> String {
    if !shown.contains("://") {
        return "\"***\"".to_string();
    }
    let mut out = String::new();
    let mut token = String::new();
    for c in shown.chars() {
        if matches!(c, '"' | ',' | '[' | ']' | ' ') {
            out.push_str(&redact_url(&token));
            token.clear();
            out.push(c);
        } else {
            token.push(c);
        }
    }
    out.push_str(&redact_url(&token));
    out
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
