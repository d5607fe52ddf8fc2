//! The configuration side of a backend, without naming any: what a backend
//! declares ([`Declared`]: its option rows, the options that choose it, how
//! they resolve), what resolving it may use ([`Resolving`]: the resolver,
//! the key and timing, warnings, `check`'s printout, and helpers for the
//! shapes every backend's options share) and what it resolves to
//! ([`Backend`]: its own settings type, opaque here). The backends
//! themselves declare all this in their folders under `lease/`.

use super::error::ConfigError;
use super::options::Spec;
use super::resolve::{Layer, Origin, Resolver, Value, or_default, positive, show};
use super::sources::loose_secret_file;
use super::values::{self, Secret};
use std::any::Any;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// A store's request timeout unless the renew interval is shorter.
const STORE_TIMEOUT: Duration = Duration::from_millis(500);

/// A backend as the configuration sees it.
pub struct Declared {
    /// How messages name it: "Redis", "PostgreSQL", "etcd", "a lock file".
    pub name: &'static str,
    /// Its option rows, in the order `--help` shows them.
    pub options: &'static [&'static Spec],
    /// The options whose presence chooses it (at most one backend may be
    /// chosen).
    pub selectors: &'static [&'static Spec],
    /// Resolves its options once chosen.
    pub resolve: Resolve,
    /// For the one backend used when none is chosen: resolves its default.
    pub fallback: Option<Resolve>,
}

/// How a backend resolves its options into its settings.
pub type Resolve = fn(&mut Resolving<'_>) -> Result<Backend, ConfigError>;

/// A backend's resolved settings: any type of its own.
pub trait Settings: Any + fmt::Debug + Send + Sync {}
impl<T: Any + fmt::Debug + Send + Sync> Settings for T {}

/// The chosen backend's settings, opaque to the configuration; the backend
/// that resolved them takes them back with [`Backend::get`].
#[derive(Clone, Debug)]
pub struct Backend {
    settings: Arc<dyn Settings>,
}

impl Backend {
    pub fn new(settings: impl Settings) -> Backend {
        Backend {
            settings: Arc::new(settings),
        }
    }

    /// The settings, if they are a `T`.
    pub fn get<T: Any>(&self) -> Option<&T> {
        let any: &dyn Any = self.settings.as_ref();
        any.downcast_ref()
    }
}

/// What a backend's resolution may use and report into.
pub struct Resolving<'a> {
    pub r: &'a Resolver<'a>,
    /// The election key.
    pub key: &'a str,
    pub ttl: &'a Value<Duration>,
    pub renew_interval: &'a Value<Duration>,
    /// A command is configured (the child can be a feature's target).
    pub has_child: bool,
    /// Accepted but unwise: logged by `run`, printed by `check`.
    pub warnings: &'a mut Vec<String>,
    /// `check`'s printout: TOML key, value as shown, origin.
    pub effective: &'a mut Vec<(&'static str, String, String)>,
}

impl Resolving<'_> {
    /// One line of `check`'s printout (the value already redacted).
    pub fn note(&mut self, key: &'static str, value: String, origin: &Origin) {
        self.effective.push((key, value, origin.to_string()));
    }

    /// A positive duration option with its default, noted under its key.
    pub fn duration(
        &mut self,
        spec: &'static Spec,
        default: Duration,
    ) -> Result<Value<Duration>, ConfigError> {
        self.duration_or(spec, default, "")
    }

    /// [`Resolving::duration`] with a default that `how` describes ("500ms,
    /// at most half the renew interval"), shown as its origin.
    fn duration_or(
        &mut self,
        spec: &'static Spec,
        default: Duration,
        how: &'static str,
    ) -> Result<Value<Duration>, ConfigError> {
        let value = self.r.scalar(spec, positive(values::parse_duration))?;
        let value = or_default(value, default, how);
        self.note(
            spec.key.expect("declared"),
            format!("{:?}", show(value.value)),
            &value.origin,
        );
        Ok(value)
    }

    /// A store's request timeout (`spec`): 500 ms by default, but at most
    /// half the renew interval, so a short TTL alone needs no timeout of its
    /// own; a given one is refused unless shorter than the renew interval.
    pub fn store_timeout(&mut self, spec: &'static Spec) -> Result<Value<Duration>, ConfigError> {
        let half = Duration::from_millis((self.renew_interval.value / 2).as_millis() as u64);
        let value = self.duration_or(
            spec,
            STORE_TIMEOUT.min(half),
            "500ms, at most half the renew interval",
        )?;
        self.shorter_than_renewal(spec, &value)?;
        Ok(value)
    }

    /// Refuses a store timeout that is not shorter than the renew interval:
    /// a renewal has to be able to time out and be retried in time.
    pub fn shorter_than_renewal(
        &self,
        spec: &'static Spec,
        timeout: &Value<Duration>,
    ) -> Result<(), ConfigError> {
        let ri = self.renew_interval;
        if timeout.value >= ri.value {
            return Err(ConfigError(format!(
                "{} = {} ({}) must be shorter than lease.renew_interval = {} ({}): a renewal has to be able to time out and be retried before the next one is due; lower the timeout or raise the renew interval",
                spec.key.expect("declared"),
                show(timeout.value),
                timeout.origin,
                show(ri.value),
                ri.origin
            )));
        }
        Ok(())
    }

    /// Reads a file named by an option now, so a wrong path fails at start-up.
    pub fn read(&self, path: &Path, origin: &Origin) -> Result<(String, u32), ConfigError> {
        (self.r.sources().read_secret)(path)
            .map_err(|e| ConfigError(format!("{origin}: cannot read {}: {e}", path.display())))
    }

    /// A secret given either itself in `env`'s variable or in the file
    /// named by `file` (flag, env var or TOML key), never both; `what`
    /// names the file in the refusal ("an etcd password file").
    pub fn secret(
        &mut self,
        env: &'static Spec,
        file: &'static Spec,
        what: &str,
    ) -> Result<Option<Value<Secret>>, ConfigError> {
        let name = env.env.expect("declared");
        let given = self.r.env(name)?.map(|p| Value {
            value: Secret::new(p),
            origin: Origin::Env(name),
        });
        let path = self.r.scalar(file, |p| Ok(PathBuf::from(p)))?;
        match (given, path) {
            (Some(_), Some(path)) => Err(ConfigError(format!(
                "both {name} and {what} ({}) are set; choose one",
                path.origin
            ))),
            (Some(given), None) => Ok(Some(given)),
            (None, Some(path)) => {
                let (text, mode) = self.read(&path.value, &path.origin)?;
                self.warnings
                    .extend(loose_secret_file(&path.origin, &path.value, mode));
                Ok(Some(Value {
                    value: Secret::new(text.trim_end_matches(['\n', '\r'])),
                    origin: path.origin,
                }))
            }
            (None, None) => Ok(None),
        }
    }

    /// A URL option that may carry a password, so it may also come from a
    /// file: the flag (warned about: `ps` shows it), else the env var or
    /// the file its `file` option's env var names, else the TOML key or
    /// the file its `file` key names. A list option's file holds one URL a
    /// line (or comma-separated); a scalar's holds one URL.
    pub fn url_or_file<T>(
        &mut self,
        spec: &'static Spec,
        file: &'static Spec,
        parse: fn(&str) -> Result<T, String>,
        has_password: fn(&T) -> bool,
    ) -> Result<Option<Value<Vec<T>>>, ConfigError> {
        let (file_env, file_key) = (file.env.expect("declared"), file.key.expect("declared"));
        let r = self.r;
        let layer = |layer: Layer| -> Result<Option<Value<Vec<T>>>, ConfigError> {
            if spec.list {
                r.list_from(spec, [layer], parse)
            } else {
                Ok(r.scalar_from(spec, [layer], parse)?.map(|v| Value {
                    value: vec![v.value],
                    origin: v.origin,
                }))
            }
        };
        if let Some(given) = layer(Layer::Flag)? {
            if given.value.iter().any(has_password) {
                self.warnings.push(format!(
                    "{}: the URL's password is visible to every user of this host in `ps`; give the URL in {} or in a file named by {file_env} (or {file_key})",
                    spec.flag.expect("declared"),
                    spec.env.expect("declared")
                ));
            }
            return Ok(Some(given));
        }
        let env = layer(Layer::Env)?;
        if let Some(path) = self.r.env(file_env)? {
            if let Some(env) = env {
                return Err(ConfigError(format!(
                    "both {} and {file_env} are set; choose one",
                    env.origin
                )));
            }
            let origin = Origin::Env(file_env);
            return self
                .urls_in(spec, &PathBuf::from(path), origin, parse)
                .map(Some);
        }
        if env.is_some() {
            return Ok(env);
        }
        let in_file = layer(Layer::File)?;
        let Some(at) = self.r.sources().file.and_then(|f| f.scalar(file)) else {
            return Ok(in_file);
        };
        let origin = self.r.file_origin(file, &at);
        if in_file.is_some() {
            return Err(ConfigError(format!(
                "{origin}: both {} and {file_key} are set; choose one",
                spec.key.expect("declared")
            )));
        }
        self.urls_in(spec, &PathBuf::from(&at.value.0), origin, parse)
            .map(Some)
    }

    fn urls_in<T>(
        &mut self,
        spec: &Spec,
        path: &Path,
        origin: Origin,
        parse: fn(&str) -> Result<T, String>,
    ) -> Result<Value<Vec<T>>, ConfigError> {
        let (text, mode) = self.read(path, &origin)?;
        self.warnings.extend(loose_secret_file(&origin, path, mode));
        let shown = path.display();
        let lines: Vec<&str> = if spec.list {
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect()
        } else {
            vec![text.trim()]
        };
        let at = |msg: String| ConfigError(format!("{origin} ({shown}): {msg}"));
        let mut value = Vec::new();
        for line in lines {
            // A file, like the env var, holds every URL at once: its
            // lines and the commas the option's rule allows separate them.
            let items = if spec.list {
                spec.split(line, true).map_err(at)?
            } else {
                vec![line.to_string()]
            };
            for item in items {
                value.push(parse(&item).map_err(at)?);
            }
        }
        Ok(Value { value, origin })
    }
}
