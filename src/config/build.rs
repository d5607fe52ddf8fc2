//! Building a [`Config`]: the I/O around it ([`Config::load`]: the real
//! environment, the file, the host name) and the pure merge
//! ([`Config::from_sources`]): the common options, the timing relations,
//! the one backend chosen among those declared, and the work's options.

use super::args::ConfigArgs;
use super::backend::{Backend, Declared, Resolving};
use super::catalog::{Catalog, Features, all_options};
use super::error::ConfigError;
use super::file::ConfigFile;
use super::model::{Config, LogConfig};
use super::options;
use super::resolve::{Origin, Resolver, Value, or_default, positive, show};
use super::sections::child;
use super::sources::{Sources, read_secret_file};
use super::values::{self, LogFormat};
use crate::timing::Timing;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

const MAX_CONFIG_FILE_BYTES: u64 = 1024 * 1024;

impl Config {
    /// Reads the real environment and the config file, then validates,
    /// with `catalog`'s backends to choose from and features to resolve.
    pub fn load(
        args: &ConfigArgs,
        command: &[String],
        catalog: &Catalog,
    ) -> Result<Config, ConfigError> {
        let env = |name: &str| std::env::var_os(name);
        let file = match config_path(args, &env)? {
            Some(path) => Some(read_config_file(&path, &all_options(catalog))?),
            None => None,
        };
        Config::from_sources(
            Sources {
                args,
                command,
                file: file.as_ref(),
                env: &env,
                hostname: host_name(),
                read_secret: &read_secret_file,
            },
            catalog,
        )
    }

    /// Merges and validates. Pure: no files, no process environment.
    pub fn from_sources(sources: Sources<'_>, catalog: &Catalog) -> Result<Config, ConfigError> {
        build(&Resolver::new(&sources), &sources, catalog)
    }
}

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

fn read_config_file(
    path: &Path,
    all: &[&'static options::Spec],
) -> Result<ConfigFile, ConfigError> {
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
    ConfigFile::parse(&name, text.strip_prefix('\u{feff}').unwrap_or(&text), all)
        .map_err(ConfigError)
}

fn whole_millis(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}

fn build(r: &Resolver<'_>, s: &Sources<'_>, catalog: &Catalog) -> Result<Config, ConfigError> {
    let mut effective: Vec<(&'static str, String, String)> = Vec::new();
    let mut warnings = Vec::new();
    let mut note = |key: &'static str, value: String, origin: &Origin| {
        effective.push((key, value, origin.to_string()));
    };

    let key = r.scalar(&options::KEY, values::parse_key)?;
    let key = or_default(key, "leaderd".to_string(), "");
    note("key", format!("{:?}", key.value), &key.origin);

    let id = match r.scalar(&options::ID, values::parse_id)? {
        Some(id) => id,
        None => default_id(r, s)?,
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
    let heartbeat = r.scalar(
        &options::REGISTRY_HEARTBEAT,
        positive(values::parse_duration),
    )?;
    let heartbeat = or_default(heartbeat, Duration::from_secs(120), "");
    for (name, v) in [
        ("lease.ttl", &ttl),
        ("lease.renew_interval", &renew_interval),
        ("lease.renew_deadline", &renew_deadline),
        ("lease.retry_interval", &retry_interval),
        ("lease.registry_heartbeat", &heartbeat),
    ] {
        note(name, format!("{:?}", show(v.value)), &v.origin);
    }
    let timing = Timing {
        ttl: ttl.value,
        renew_interval: renew_interval.value,
        renew_deadline: renew_deadline.value,
        retry_interval: retry_interval.value,
        registry_heartbeat: heartbeat.value,
    };
    check_timing(&timing, &ttl, &renew_interval, &renew_deadline)?;
    let http = r.scalar(&options::HTTP, values::parse_http)?;
    let http = or_default(http, Some(([127, 0, 0, 1], 4040).into()), "");
    let shown = http.value.map_or("off".to_string(), |a| a.to_string());
    note("http.listen", format!("{shown:?}"), &http.origin);
    let mut child = child(r, s, &mut note)?;
    let all = all_options(catalog);
    child.scrub = options::secret_envs(&all);

    let mut x = Resolving {
        r,
        key: &key.value,
        ttl: &ttl,
        renew_interval: &renew_interval,
        has_child: !child.command.is_empty(),
        warnings: &mut warnings,
        effective: &mut effective,
    };
    let backend = choose(&catalog.backends, &mut x)?;
    let features = Features::resolve(catalog, &mut x)?;
    let mut note = |key: &'static str, value: String, origin: &Origin| {
        effective.push((key, value, origin.to_string()));
    };

    let format = r.scalar(&options::LOG_FORMAT, values::parse_log_format)?;
    let format = or_default(format, LogFormat::Text, "");
    let shown = format!("{:?}", format.value).to_lowercase();
    note("log.format", format!("{shown:?}"), &format.origin);
    let level = r.scalar(&options::LOG_LEVEL, values::parse_log_level)?;
    let level = or_default(level, "info".to_string(), "");
    note("log.level", format!("{:?}", level.value), &level.origin);

    // Whatever a backend or feature noted for a secret row, shown redacted.
    for (name, value, _) in &mut effective {
        if all.iter().any(|s| s.secret && s.key == Some(*name)) {
            *value = values::redact_secret(value);
        }
    }
    Ok(Config {
        key: key.value,
        id: id.value,
        backend,
        timing,
        http: http.value,
        child,
        features,
        log: LogConfig {
            format: format.value,
            level: level.value,
        },
        effective,
        warnings,
    })
}

/// The one backend whose options are given, resolved; none: the fallback.
/// Another backend's options, given too, are ignored with a warning.
fn choose(backends: &[&'static Declared], x: &mut Resolving<'_>) -> Result<Backend, ConfigError> {
    let chosen: Vec<(&Declared, Origin)> = backends
        .iter()
        .filter_map(|b| x.r.given(b.selectors).map(|origin| (*b, origin)))
        .collect();
    let (one, resolved) = match chosen.as_slice() {
        [(one, _)] => (*one, (one.resolve)(x)),
        [] => backends
            .iter()
            .find_map(|b| Some((*b, (b.fallback?)(x)?)))
            .ok_or_else(|| ConfigError("no backend configured".into()))?,
        many => {
            let named: Vec<_> = many
                .iter()
                .map(|(b, o)| format!("{} ({o})", b.name))
                .collect();
            return Err(ConfigError(format!(
                "more than one backend is configured: {}; choose one",
                named.join(" and ")
            )));
        }
    };
    for other in backends.iter().filter(|b| !std::ptr::eq(**b, one)) {
        let (of, backend) = (other.name, one.name);
        for origin in other.options.iter().filter_map(|o| x.r.given(&[o])) {
            let warning = format!("{origin}: an option of {of}, but the backend is {backend}");
            x.warnings.push(format!("{warning}; it is ignored"));
        }
    }
    resolved
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
