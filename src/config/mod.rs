//! Configuration: flags ⊕ environment ⊕ TOML file ⊕ defaults, merged once into
//! a validated [`Config`] (PRODUCT §2).
//!
//! [`Config::from_sources`] is pure (the environment is a lookup function and
//! the file is already read), so precedence and validation are unit-tested
//! without touching the process. [`Config::load`] does the I/O around it.
//! Every error names where the bad value came from: the flag, the environment
//! variable, or the file, line and key.

mod backend;
mod etcd;
mod file;
pub mod options;
mod postgres;
mod resolve;
mod sections;
#[cfg(test)]
mod tests;
mod values;

pub use backend::{BackendConfig, RedisTls};
pub use etcd::EtcdConfig;
pub use file::ConfigFile;
pub use postgres::{PgConfig, PgMode, PgTable, PgTls, PgUrl, SslMode, parse_table};
pub use resolve::show as show_duration;
pub use values::{
    ClusterUrl, LogFormat, OnChildExit, RedisUrl, Secret, SentinelUrl, Signal, WaitReplicas,
    parse_duration, parse_redis_url, parse_restart_limit, redact_url,
};

use crate::cli::ConfigArgs;
use crate::timing::Timing;
use resolve::Resolver;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// A configuration problem. Always exit code 2; the message says what was
/// wrong, where it came from and how to fix it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

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
}

#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// The step-down socket; `None`: no admin endpoint.
    pub socket: Option<PathBuf>,
    /// How long a step-down (or a crash loop) keeps this candidate out.
    pub step_down_hold: Duration,
}

#[derive(Debug, Clone)]
pub struct WebhookConfig {
    pub urls: Vec<url::Url>,
    /// The secret from `LEADERD_WEBHOOK_SECRET`.
    pub secret: Option<Secret>,
    /// The file to read the secret from, when given instead.
    pub secret_file: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct LogConfig {
    pub format: LogFormat,
    pub level: String,
}

/// The validated configuration. Holding one means every value is usable and
/// the timing relations of PRODUCT §2/§4 hold.
#[derive(Debug, Clone)]
pub struct Config {
    pub key: String,
    pub id: String,
    pub backend: BackendConfig,
    pub timing: Timing,
    pub http: Option<SocketAddr>,
    pub child: ChildConfig,
    pub webhook: WebhookConfig,
    pub admin: AdminConfig,
    pub log: LogConfig,
    /// Every option's effective value (secrets redacted) and where it came
    /// from, in a stable order, for `leaderd check`.
    pub effective: Vec<(&'static str, String, String)>,
    /// Accepted, but unwise (a password on the command line, a secret file
    /// others can read): logged by `run`, printed by `check`.
    pub warnings: Vec<String>,
}

/// Everything configuration is made from. The environment is a lookup so
/// tests can supply a map; `hostname` is the fallback id.
pub struct Sources<'a> {
    pub args: &'a ConfigArgs,
    pub command: &'a [String],
    pub file: Option<&'a ConfigFile>,
    pub env: &'a dyn Fn(&str) -> Option<OsString>,
    pub hostname: Option<String>,
    /// Reads a secret file named by an option (`*_FILE`): its text and its
    /// permission bits. A lookup, so tests need no files.
    pub read_secret: &'a dyn Fn(&std::path::Path) -> std::io::Result<(String, u32)>,
}

/// The warning for a secret file that group or others can read (as OpenSSH
/// warns about keys), naming where the file was configured; `None` when
/// its mode is tight.
pub fn loose_secret_file(
    origin: &dyn std::fmt::Display,
    path: &std::path::Path,
    mode: u32,
) -> Option<String> {
    (mode & 0o077 != 0).then(|| {
        format!(
            "{origin}: {} is readable by group or others (mode {:04o}); `chmod 600` it (in Kubernetes, give the Secret volume defaultMode: 0400)",
            path.display(),
            mode & 0o7777
        )
    })
}

/// The process's own secret-file reader for [`Sources::read_secret`].
pub fn read_secret_file(path: &std::path::Path) -> std::io::Result<(String, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)?.permissions().mode();
    if std::fs::metadata(path)?.len() > 64 * 1024 {
        return Err(std::io::Error::other(
            "larger than 64 KiB, which no secret is; check the path",
        ));
    }
    Ok((std::fs::read_to_string(path)?, mode))
}

const MAX_CONFIG_FILE_BYTES: u64 = 1024 * 1024;

/// The kernel's host name, asked with gethostname(2) so it needs no /proc
/// (a chroot, or a unit with ProcSubset=pid, has none).
fn host_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).trim().to_string();
    (!name.is_empty()).then_some(name)
}

impl Config {
    /// Reads the real environment and the config file, then validates.
    pub fn load(args: &ConfigArgs, command: &[String]) -> Result<Config, ConfigError> {
        let env = |name: &str| std::env::var_os(name);
        let file = match config_path(args, &env)? {
            Some(path) => Some(read_config_file(&path)?),
            None => None,
        };
        let hostname = host_name();
        Config::from_sources(Sources {
            args,
            command,
            file: file.as_ref(),
            env: &env,
            hostname,
            read_secret: &read_secret_file,
        })
    }

    /// Merges and validates. Pure: no files, no process environment.
    pub fn from_sources(sources: Sources<'_>) -> Result<Config, ConfigError> {
        resolve::build(Resolver::new(&sources), &sources)
    }

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

/// `-c FILE`, else `LEADERD_CONFIG`, else none.
fn config_path(
    args: &ConfigArgs,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<Option<PathBuf>, ConfigError> {
    if let Some(path) = args.get(&options::CONFIG) {
        return Ok(Some(PathBuf::from(path)));
    }
    match env("LEADERD_CONFIG") {
        None => Ok(None),
        Some(v) if v.is_empty() => Err(ConfigError(
            "LEADERD_CONFIG is set but empty; unset it or give the path of a TOML file".into(),
        )),
        Some(v) => Ok(Some(PathBuf::from(v))),
    }
}

fn read_config_file(path: &std::path::Path) -> Result<ConfigFile, ConfigError> {
    let name = path.display().to_string();
    let meta = std::fs::metadata(path).map_err(|e| {
        ConfigError(format!(
            "config file {name}: {e}; check the path given with --config or LEADERD_CONFIG"
        ))
    })?;
    if meta.is_dir() {
        return Err(ConfigError(format!(
            "config file {name} is a directory; give the path of a TOML file"
        )));
    }
    if meta.len() > MAX_CONFIG_FILE_BYTES {
        return Err(ConfigError(format!(
            "config file {name} is {} bytes; a leaderd config is far smaller than 1 MiB, check the path",
            meta.len()
        )));
    }
    let bytes = std::fs::read(path)
        .map_err(|e| ConfigError(format!("config file {name}: cannot read it: {e}")))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| ConfigError(format!("config file {name} is not valid UTF-8")))?;
    ConfigFile::parse(&name, text.strip_prefix('\u{feff}').unwrap_or(&text)).map_err(ConfigError)
}
