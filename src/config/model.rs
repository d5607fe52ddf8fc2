//! The validated configuration: holding a [`Config`] means every value is
//! usable and the timing relations of PRODUCT §2/§4 hold.

use super::backend::Backend;
use super::catalog::Features;
use super::values::{LogFormat, OnChildExit, Signal};
use crate::timing::Timing;
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct ChildConfig {
    /// Empty when no command is configured (elect-only or webhook-only).
    pub command: Vec<String>,
    pub stop_signal: Signal,
    pub stop_timeout: Duration,
    pub on_exit: OnChildExit,
    /// With `on_exit = restart`: at most this many restarts within the
    /// window before the lease is released (`None`: no limit).
    pub restart_limit: Option<(u32, Duration)>,
    /// Run-once mode: campaign for at most this long, run the command
    /// once, release and exit.
    pub wait: Option<Duration>,
    /// Environment variables the child does not inherit: those of every
    /// secret option row (`Spec::secret`), the store's credentials.
    pub scrub: Vec<&'static str>,
}

#[derive(Debug, Clone)]
pub struct LogConfig {
    pub format: LogFormat,
    pub level: String,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub key: String,
    pub id: String,
    /// The chosen backend's own settings (see `lease::open`).
    pub backend: Backend,
    pub timing: Timing,
    pub http: Option<SocketAddr>,
    pub child: ChildConfig,
    /// The features' settings, each taken back by its feature.
    pub features: Features,
    pub log: LogConfig,
    /// Every option's effective value (secrets redacted) and where it came
    /// from, in a stable order, for `leaderd check`.
    pub effective: Vec<(&'static str, String, String)>,
    /// Accepted, but unwise (a password on the command line, a secret file
    /// others can read): logged by `run`, printed by `check`.
    pub warnings: Vec<String>,
}

impl Config {
    /// The effective configuration as TOML-like lines with each value's
    /// origin, secrets redacted.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (name, value, origin) in &self.effective {
            out.push_str(&format!("{name} = {value}  # {origin}\n"));
        }
        out
    }
}
