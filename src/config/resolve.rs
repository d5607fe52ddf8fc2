//! Precedence and validation: picks each option from flag > environment >
//! file > default, parses it, then checks the relations between options.

use super::error::ConfigError;
use super::file::At;
use super::options::Spec;
use super::sources::Sources;
use std::fmt;
use std::time::Duration;

/// Where an effective value came from.
#[derive(Debug, Clone)]
pub enum Origin {
    Flag(&'static str),
    Env(&'static str),
    File {
        file: String,
        line: usize,
        key: &'static str,
    },
    Default(&'static str),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Flag(flag) => write!(f, "{flag}"),
            Origin::Env(var) => write!(f, "{var}"),
            Origin::File { file, line, key } => write!(f, "{file} line {line} ({key})"),
            Origin::Default("") => write!(f, "default"),
            Origin::Default(how) => write!(f, "default: {how}"),
        }
    }
}

pub struct Value<T> {
    pub value: T,
    pub origin: Origin,
}

pub struct Resolver<'a> {
    sources: &'a Sources<'a>,
}

impl<'a> Resolver<'a> {
    pub fn new(sources: &'a Sources<'a>) -> Self {
        Resolver { sources }
    }

    /// What the configuration is made from.
    pub fn sources(&self) -> &'a Sources<'a> {
        self.sources
    }

    /// Whether any of `specs` is given (flag, env var or file key), and
    /// where the first one is: what chooses a backend.
    pub fn given(&self, specs: &[&'static Spec]) -> Option<Origin> {
        specs.iter().find_map(|spec| {
            if let Some(flag) = spec.flag
                && !self.sources.args.list(spec).is_empty()
            {
                return Some(Origin::Flag(flag));
            }
            if let Some(env) = spec.env
                && (self.sources.env)(env).is_some()
            {
                return Some(Origin::Env(env));
            }
            let file = self.sources.file?;
            let at = file
                .scalar(spec)
                .map(|at| at.span)
                .or_else(|| file.list(spec).map(|at| at.span))?;
            Some(Origin::File {
                file: file.name.clone(),
                line: file.line_of(&at),
                key: spec.key?,
            })
        })
    }

    /// An environment variable: unset is `None`; empty or non-UTF-8 is an error.
    pub fn env(&self, name: &'static str) -> Result<Option<String>, ConfigError> {
        match (self.sources.env)(name) {
            None => Ok(None),
            Some(v) if v.is_empty() => Err(ConfigError(format!(
                "{name} is set but empty; unset it to use the default, or give it a value"
            ))),
            Some(v) => v.into_string().map(Some).map_err(|_| {
                ConfigError(format!(
                    "{name} is not valid UTF-8; give it a plain text value"
                ))
            }),
        }
    }

    pub fn file_origin<T>(&self, spec: &Spec, at: &At<T>) -> Origin {
        let file = self.sources.file.expect("a file value implies a file");
        Origin::File {
            file: file.name.clone(),
            line: file.line_of(&at.span),
            key: spec.key.expect("read from the file by its key"),
        }
    }

    /// One scalar option through flag > env > file; `None` when not set anywhere.
    pub fn scalar<T>(
        &self,
        spec: &'static Spec,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Option<Value<T>>, ConfigError> {
        self.scalar_from(spec, [Layer::Flag, Layer::Env, Layer::File], parse)
    }

    /// A single-valued option from the first of `layers` that sets it.
    pub fn scalar_from<T, const N: usize>(
        &self,
        spec: &'static Spec,
        layers: [Layer; N],
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Option<Value<T>>, ConfigError> {
        let mut found = None;
        for layer in layers {
            found = match layer {
                Layer::Flag => self.sources.args.get(spec).map(|v| {
                    (
                        v.to_string(),
                        Origin::Flag(spec.flag.expect("given as a flag")),
                    )
                }),
                Layer::Env => self.env_of(spec)?.map(|(v, name)| (v, Origin::Env(name))),
                Layer::File => self.sources.file.and_then(|f| f.scalar(spec)).map(|at| {
                    let origin = self.file_origin(spec, &at);
                    (at.value.0, origin)
                }),
            };
            if found.is_some() {
                break;
            }
        }
        let Some((text, origin)) = found else {
            return Ok(None);
        };
        let value = parse(&text).map_err(|msg| ConfigError(format!("{origin}: {msg}")))?;
        Ok(Some(Value { value, origin }))
    }

    /// A list option: repeated flag > comma-separated env > TOML array.
    pub fn list<T>(
        &self,
        spec: &'static Spec,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Option<Value<Vec<T>>>, ConfigError> {
        self.list_from(spec, [Layer::Flag, Layer::Env, Layer::File], parse)
    }

    /// A list option from the first of `layers` that sets it.
    pub fn list_from<T, const N: usize>(
        &self,
        spec: &'static Spec,
        layers: [Layer; N],
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Option<Value<Vec<T>>>, ConfigError> {
        let mut found = None;
        for layer in layers {
            found = match layer {
                Layer::Flag => {
                    let given = self.sources.args.list(spec);
                    (!given.is_empty())
                        .then(|| (given.to_vec(), Origin::Flag(spec.flag.expect("a flag"))))
                }
                Layer::Env => self
                    .env_of(spec)?
                    .map(|(v, name)| (vec![v], Origin::Env(name))),
                Layer::File => self.sources.file.and_then(|f| f.list(spec)).map(|at| {
                    let origin = self.file_origin(spec, &at);
                    (at.value, origin)
                }),
            };
            if found.is_some() {
                break;
            }
        }
        let Some((given, origin)) = found else {
            return Ok(None);
        };
        let from_env = matches!(origin, Origin::Env(_));
        let mut parsed = Vec::new();
        for text in &given {
            let items = spec
                .split(text, from_env)
                .map_err(|msg| ConfigError(format!("{origin}: {msg}")))?;
            for item in items {
                parsed.push(parse(&item).map_err(|msg| ConfigError(format!("{origin}: {msg}")))?);
            }
        }
        Ok(Some(Value {
            value: parsed,
            origin,
        }))
    }

    /// `spec`'s environment variable, if it has one and it is set.
    fn env_of(&self, spec: &Spec) -> Result<Option<(String, &'static str)>, ConfigError> {
        match spec.env {
            Some(name) => Ok(self.env(name)?.map(|v| (v, name))),
            None => Ok(None),
        }
    }
}

/// Where a value may come from, in precedence order.
#[derive(Debug, Clone, Copy)]
pub enum Layer {
    Flag,
    Env,
    File,
}

/// A switch's value: `true`/`1`/`yes` or `false`/`0`/`no`.
pub fn parse_bool(text: &str) -> Result<bool, String> {
    match text {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        other => Err(format!("`{other}` is not true or false")),
    }
}

pub fn or_default<T>(value: Option<Value<T>>, default: T, how: &'static str) -> Value<T> {
    value.unwrap_or(Value {
        value: default,
        origin: Origin::Default(how),
    })
}

/// Formats a duration the way a user would write it.
pub fn show(d: Duration) -> String {
    let ms = d.as_millis();
    if !d.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{:.3}ms", d.as_secs_f64() * 1000.0)
    } else if ms.is_multiple_of(1000) && ms > 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

pub fn positive(
    parse: fn(&str) -> Result<Duration, String>,
) -> impl Fn(&str) -> Result<Duration, String> {
    move |text| {
        let d = parse(text)?;
        if d.is_zero() {
            return Err(format!("`{text}` must be greater than zero"));
        }
        if d > Duration::from_secs(24 * 3600) {
            return Err(format!(
                "`{text}` is longer than 24h; leases are meant to be seconds long"
            ));
        }
        Ok(d)
    }
}
