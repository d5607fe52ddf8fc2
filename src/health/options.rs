//! The worker health check as a feature: its rows, each declared once
//! (flag, env, TOML key, default, help), their resolution, and what they
//! resolve to ([`HealthConfig`]); the checks themselves are the rest of
//! `crate::health`'s.

use crate::config::options::{Spec, spec};
use crate::config::{
    Config, ConfigError, Feature, Origin, Resolver, Section, Settings, Value, or_default,
    parse_duration, positive, redact_url, show_duration as show,
};
use std::sync::Arc;
use std::time::Duration;

const HEALTH: &str = "Worker health";

pub const URL: Spec = spec("health_url", "--health", "LEADERD_HEALTH", "health.url")
    .value("URL")
    .under(HEALTH)
    .help("Lead only while this URL answers 2xx to a GET (the worker's readiness endpoint)");
pub const COMMAND: Spec = spec(
    "health_command",
    "--health-command",
    "LEADERD_HEALTH_COMMAND",
    "health.command",
)
.value("CMD")
.under(HEALTH)
.help("Lead only while this command exits 0; split like a shell's words, run without a shell");
pub const INTERVAL: Spec = spec(
    "health_interval",
    "--health-interval",
    "LEADERD_HEALTH_INTERVAL",
    "health.interval",
)
.value("DUR")
.under(HEALTH)
.help("Time between the starts of two health checks")
.default("2s");
pub const TIMEOUT: Spec = spec(
    "health_timeout",
    "--health-timeout",
    "LEADERD_HEALTH_TIMEOUT",
    "health.timeout",
)
.value("DUR")
.under(HEALTH)
.help("A check not answered within this fails (a command is killed, with its process group)")
.default("1s, at most the interval");
pub const FAILURES: Spec = spec(
    "health_failures",
    "--health-failures",
    "LEADERD_HEALTH_FAILURES",
    "health.failures",
)
.value("N")
.under(HEALTH)
.help("Unhealthy after N failed checks in a row")
.default("3");
pub const SUCCESSES: Spec = spec(
    "health_successes",
    "--health-successes",
    "LEADERD_HEALTH_SUCCESSES",
    "health.successes",
)
.value("N")
.under(HEALTH)
.help("Healthy again after N passed checks in a row")
.default("1");
pub const START_PERIOD: Spec = spec(
    "health_start_period",
    "--health-start-period",
    "LEADERD_HEALTH_START_PERIOD",
    "health.start_period",
)
.value("DUR")
.under(HEALTH)
.help("Failures are not counted this long after leaderd (or, with a child, the child) started")
.default("0s");
pub const POLICY: Spec = spec(
    "health_policy",
    "--health-policy",
    "LEADERD_HEALTH_POLICY",
    "health.policy",
)
.value("POLICY")
.under(HEALTH)
.help("gate: an unhealthy worker's candidate does not campaign, and a leader steps down; report: only show it")
.choices(&["gate", "report"])
.default("gate");

pub const TARGET: Spec = spec(
    "health_target",
    "--health-target",
    "LEADERD_HEALTH_TARGET",
    "health.target",
)
.value("WHAT")
.under(HEALTH)
.help("worker: a worker beside leaderd, checked from the start, no campaign before a first pass; child: the child itself, checked only while it runs (standbys count as healthy)")
.choices(&["worker", "child"])
.default("worker");

/// The rows, in the order of `--help`, `check` and the docs.
pub const OPTIONS: [&Spec; 9] = [
    &URL,
    &COMMAND,
    &INTERVAL,
    &TIMEOUT,
    &FAILURES,
    &SUCCESSES,
    &START_PERIOD,
    &POLICY,
    &TARGET,
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    Http(url::Url),
    Command(Vec<String>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Gate,
    Report,
}

impl Policy {
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Gate => "gate",
            Policy::Report => "report",
        }
    }
}

#[derive(Debug, Clone)]
pub struct HealthConfig {
    pub probe: Probe,
    pub interval: Duration,
    pub timeout: Duration,
    pub failures: u32,
    pub successes: u32,
    pub start_period: Duration,
    pub policy: Policy,
    pub target: Checked,
}

/// What the check probes (`--health-target`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checked {
    /// A worker beside leaderd: checked from leaderd's start.
    Worker,
    /// The child itself: checked while it runs.
    Child,
}

impl HealthConfig {
    /// How long a candidate that stepped down for its worker's health stays
    /// out: as long as the checks take to condemn a worker, so a flapping
    /// one cannot take leadership back faster than it can lose it.
    pub fn hold(&self) -> Duration {
        self.interval * self.failures
    }
}

fn parse_url(text: &str) -> Result<url::Url, String> {
    let url = url::Url::parse(text.trim()).map_err(|e| {
        format!(
            "`{}` is not a URL ({e}); give http://HOST:PORT/PATH",
            redact_url(text)
        )
    })?;
    match url.scheme() {
        "http" | "https" if url.host().is_some() => Ok(url),
        _ => Err(format!(
            "`{}` is not an http:// or https:// URL; give the worker's health endpoint, e.g. http://127.0.0.1:8080/ready",
            redact_url(text)
        )),
    }
}

fn parse_command(text: &str) -> Result<Vec<String>, String> {
    let words = shell_words::split(text)
        .map_err(|e| format!("`{text}` cannot be split into words ({e}); check its quotes"))?;
    if words.is_empty() {
        return Err("the command is empty; give a program and its arguments, e.g. `pg_isready -h 127.0.0.1`".into());
    }
    Ok(words)
}

fn parse_target(text: &str) -> Result<Checked, String> {
    match text.trim() {
        "worker" => Ok(Checked::Worker),
        "child" => Ok(Checked::Child),
        other => Err(format!(
            "`{other}` is not a health target; use worker or child"
        )),
    }
}

fn parse_count(text: &str) -> Result<u32, String> {
    text.trim()
        .parse::<u32>()
        .ok()
        .filter(|&n| (1..=1000).contains(&n))
        .ok_or_else(|| format!("`{}` is not a count from 1 to 1000", text.trim()))
}

fn parse_policy(text: &str) -> Result<Policy, String> {
    match text.trim() {
        "gate" => Ok(Policy::Gate),
        "report" => Ok(Policy::Report),
        other => Err(format!(
            "`{other}` is not a health policy; use gate or report"
        )),
    }
}

pub static FEATURE: Feature = Feature {
    name: "the health check",
    section: Section::Work,
    options: &OPTIONS,
    resolve: |x| {
        let (r, has_child) = (x.r, x.has_child);
        let mut note = |key, value, origin: &Origin| x.note(key, value, origin);
        let health = resolve(r, has_child, &mut note)?;
        Ok(health.map(|h| Arc::new(h) as Arc<dyn Settings>))
    },
};

impl HealthConfig {
    /// The configured health check, if any.
    pub fn of(config: &Config) -> Option<&HealthConfig> {
        config.features.get::<HealthConfig>()
    }
}

/// The health check, if one is configured; the other health options alone
/// are an error (they would silently do nothing).
/// `has_child`: a command is configured (the child can be the target).
fn resolve(
    r: &Resolver<'_>,
    has_child: bool,
    note: &mut impl FnMut(&'static str, String, &Origin),
) -> Result<Option<HealthConfig>, ConfigError> {
    let url = r.scalar(&URL, parse_url)?;
    let command = r.scalar(&COMMAND, parse_command)?;
    let probe = match (url, command) {
        (Some(u), Some(c)) => {
            return Err(ConfigError(format!(
                "both a health URL ({}) and a health command ({}) are set; choose one",
                u.origin, c.origin
            )));
        }
        (Some(u), None) => {
            note(
                "health.url",
                format!("{:?}", redact_url(u.value.as_str())),
                &u.origin,
            );
            Probe::Http(u.value)
        }
        (None, Some(c)) => {
            note(
                "health.command",
                format!("{:?}", shell_words::join(&c.value)),
                &c.origin,
            );
            Probe::Command(c.value)
        }
        (None, None) => {
            let others = &OPTIONS[2..];
            if let Some(origin) = r.given(others) {
                return Err(ConfigError(format!(
                    "{origin}: a health option, but no health check is configured; give --health URL or --health-command CMD, or remove it"
                )));
            }
            note(
                "health.url",
                "\"none (no gating)\"".into(),
                &Origin::Default("none"),
            );
            return Ok(None);
        }
    };
    let duration =
        |spec: &'static Spec, default: Duration| -> Result<Value<Duration>, ConfigError> {
            Ok(or_default(
                r.scalar(spec, positive(parse_duration))?,
                default,
                "",
            ))
        };
    let interval = duration(&INTERVAL, Duration::from_secs(2))?;
    // The default follows a short interval: `--health-interval 500ms` alone
    // must not be refused for a timeout nobody gave.
    let timeout = or_default(
        r.scalar(&TIMEOUT, positive(parse_duration))?,
        Duration::from_secs(1).min(interval.value),
        "1s, at most the interval",
    );
    let start_period = or_default(r.scalar(&START_PERIOD, parse_duration)?, Duration::ZERO, "");
    let failures = or_default(r.scalar(&FAILURES, parse_count)?, 3, "");
    let successes = or_default(r.scalar(&SUCCESSES, parse_count)?, 1, "");
    let policy = or_default(r.scalar(&POLICY, parse_policy)?, Policy::Gate, "");
    let target = or_default(r.scalar(&TARGET, parse_target)?, Checked::Worker, "");
    if target.value == Checked::Child && !has_child {
        return Err(ConfigError(format!(
            "health.target = child ({}), but no command is configured; give the command after -- (leaderd run --health-target child ... -- COMMAND), or check a worker beside leaderd (health.target = worker)",
            target.origin
        )));
    }
    if timeout.value > interval.value {
        return Err(ConfigError(format!(
            "health.timeout = {} ({}) is longer than health.interval = {} ({}): a check would still run when the next is due; shorten the timeout or lengthen the interval",
            show(timeout.value),
            timeout.origin,
            show(interval.value),
            interval.origin
        )));
    }
    for (name, v) in [
        ("health.interval", &interval),
        ("health.timeout", &timeout),
        ("health.start_period", &start_period),
    ] {
        note(name, format!("{:?}", show(v.value)), &v.origin);
    }
    note(
        "health.failures",
        failures.value.to_string(),
        &failures.origin,
    );
    note(
        "health.successes",
        successes.value.to_string(),
        &successes.origin,
    );
    note(
        "health.policy",
        format!("{:?}", policy.value.as_str()),
        &policy.origin,
    );
    let shown = match target.value {
        Checked::Worker => "worker",
        Checked::Child => "child",
    };
    note("health.target", format!("{shown:?}"), &target.origin);
    Ok(Some(HealthConfig {
        probe,
        interval: interval.value,
        timeout: timeout.value,
        failures: failures.value,
        successes: successes.value,
        start_period: start_period.value,
        policy: policy.value,
        target: target.value,
    }))
}

#[cfg(test)]
#[path = "options_tests.rs"]
mod tests;
