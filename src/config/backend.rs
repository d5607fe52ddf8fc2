//! The configuration side of a backend, without naming any: what a backend
//! declares ([`Declared`]: its option rows, the options that choose it, how
//! they resolve), what resolving it may use ([`Resolving`]: the resolver,
//! the key and timing, warnings, `check`'s printout, and helpers for the
//! shapes every backend's options share) and what it resolves to
//! ([`Backend`]: its own settings type, opaque here). The backends
//! themselves declare all this in their folders under `lease/`.

use super::error::ConfigError;
use super::options::Spec;
use super::resolve::{Origin, Resolver, Value, or_default, positive, show};
use super::sources::loose_secret_file;
use super::values::{self, Secret};
use std::any::Any;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

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
    /// For a backend used when none is chosen: resolves its default where
    /// it applies (the first that applies is used, in [`BACKENDS`] order).
    ///
    /// [`BACKENDS`]: crate::lease::BACKENDS
    pub fallback: Option<Fallback>,
}

/// How a backend resolves its options into its settings.
pub type Resolve = fn(&mut Resolving<'_>) -> Result<Backend, ConfigError>;

/// How a backend resolves its default when none is chosen; `None`: its
/// default does not apply here (the Kubernetes Lease outside a pod).
pub type Fallback = fn(&mut Resolving<'_>) -> Option<Result<Backend, ConfigError>>;

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
    pub fn duration_or(
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
}
