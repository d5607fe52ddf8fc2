//! The TOML configuration file: its schema (unknown keys are errors) and the
//! raw values with their byte spans, so errors can cite the line.

use serde::{Deserialize, Deserializer};
use std::ops::Range;

/// A value as written in the file, with where it was written.
#[derive(Debug, Clone)]
pub struct At<T> {
    pub value: T,
    pub span: Range<usize>,
}

/// A scalar option: written as a TOML string. A bare number is refused here
/// with a hint, since `ttl = 10` is the most common mistake.
#[derive(Debug, Clone)]
pub struct Text(pub String);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Int(i64),
            Float(f64),
            Bool(bool),
        }
        match Raw::deserialize(d)? {
            Raw::Text(s) => Ok(Text(s)),
            Raw::Int(n) => Err(serde::de::Error::custom(format!(
                "a bare number ({n}) is not accepted; write a quoted value with a unit, e.g. \"{n}s\" or \"{n}ms\""
            ))),
            Raw::Float(n) => Err(serde::de::Error::custom(format!(
                "a bare number ({n}) is not accepted; write a quoted value with a unit, e.g. \"{n}s\""
            ))),
            Raw::Bool(b) => Err(serde::de::Error::custom(format!(
                "`{b}` is not accepted here; write a quoted string"
            ))),
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for At<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let spanned = toml::Spanned::<T>::deserialize(d)?;
        let span = spanned.span();
        Ok(At {
            value: spanned.into_inner(),
            span,
        })
    }
}

type Scalar = Option<At<Text>>;
type List = Option<At<Vec<String>>>;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub key: Scalar,
    pub id: Scalar,
    pub lock_file: Scalar,
    #[serde(default)]
    pub redis: RedisSection,
    #[serde(default)]
    pub lease: LeaseSection,
    #[serde(default)]
    pub http: HttpSection,
    #[serde(default)]
    pub child: ChildSection,
    #[serde(default)]
    pub webhook: WebhookSection,
    #[serde(default)]
    pub log: LogSection,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisSection {
    pub urls: List,
    pub url_file: Scalar,
    pub tls_ca: Scalar,
    pub tls_cert: Scalar,
    pub tls_key: Scalar,
    pub timeout: Scalar,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseSection {
    pub ttl: Scalar,
    pub renew_interval: Scalar,
    pub renew_deadline: Scalar,
    pub retry_interval: Scalar,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSection {
    pub listen: Scalar,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChildSection {
    pub command: List,
    pub stop_signal: Scalar,
    pub stop_timeout: Scalar,
    pub on_exit: Scalar,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSection {
    pub urls: List,
    pub secret_file: Scalar,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSection {
    pub format: Scalar,
    pub level: Scalar,
}

/// A loaded configuration file: its name (for messages), text and parsed values.
#[derive(Debug)]
pub struct ConfigFile {
    pub name: String,
    text: String,
    pub values: FileConfig,
}

impl ConfigFile {
    /// Parses `text`; the error names the file and carries toml's line and column.
    pub fn parse(name: &str, text: &str) -> Result<Self, String> {
        let values = toml::from_str(text).map_err(|e| format!("{name}: {e}"))?;
        Ok(ConfigFile {
            name: name.to_string(),
            text: text.to_string(),
            values,
        })
    }

    /// 1-based line of a byte offset.
    pub fn line_of(&self, span: &Range<usize>) -> usize {
        let end = span.start.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }
}
