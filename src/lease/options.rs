//! What resolving a store's options shares, whatever the store: a request
//! timeout that follows the renew interval, and a URL that may carry a
//! password and so may come from a file. The configuration knows no store;
//! the backends' `config.rs` files call these on their [`Resolving`].

use crate::config::options::Spec;
use crate::config::{
    ConfigError, Layer, Origin, Resolving, Value, loose_secret_file, show_duration as show,
};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A store's request timeout unless the renew interval is shorter.
const STORE_TIMEOUT: Duration = Duration::from_millis(500);

/// The store options' resolution, on the configuration's [`Resolving`].
pub trait StoreOptions {
    /// A store's request timeout (`spec`): 500 ms by default, but at most
    /// half the renew interval, so a short TTL alone needs no timeout of its
    /// own; a given one is refused unless shorter than the renew interval.
    fn store_timeout(&mut self, spec: &'static Spec) -> Result<Value<Duration>, ConfigError>;

    /// Refuses a store timeout that is not shorter than the renew interval:
    /// a renewal has to be able to time out and be retried in time.
    fn shorter_than_renewal(
        &self,
        spec: &'static Spec,
        timeout: &Value<Duration>,
    ) -> Result<(), ConfigError>;

    /// A URL option that may carry a password, so it may also come from a
    /// file: the flag (warned about: `ps` shows it), else the env var or
    /// the file its `file` option's env var names, else the TOML key or
    /// the file its `file` key names. A list option's file holds one URL a
    /// line (or comma-separated); a scalar's holds one URL.
    fn url_or_file<T>(
        &mut self,
        spec: &'static Spec,
        file: &'static Spec,
        parse: fn(&str) -> Result<T, String>,
        has_password: fn(&T) -> bool,
    ) -> Result<Option<Value<Vec<T>>>, ConfigError>;
}

impl StoreOptions for Resolving<'_> {
    fn store_timeout(&mut self, spec: &'static Spec) -> Result<Value<Duration>, ConfigError> {
        let half = Duration::from_millis((self.renew_interval.value / 2).as_millis() as u64);
        let value = self.duration_or(
            spec,
            STORE_TIMEOUT.min(half),
            "500ms, at most half the renew interval",
        )?;
        self.shorter_than_renewal(spec, &value)?;
        Ok(value)
    }

    fn shorter_than_renewal(
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

    fn url_or_file<T>(
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
            return urls_in(self, spec, &PathBuf::from(path), origin, parse).map(Some);
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
        urls_in(self, spec, &PathBuf::from(&at.value.0), origin, parse).map(Some)
    }
}

/// The URLs in the file `path` names.
fn urls_in<T>(
    x: &mut Resolving<'_>,
    spec: &Spec,
    path: &Path,
    origin: Origin,
    parse: fn(&str) -> Result<T, String>,
) -> Result<Value<Vec<T>>, ConfigError> {
    let (text, mode) = x.read(path, &origin)?;
    x.warnings.extend(loose_secret_file(&origin, path, mode));
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
