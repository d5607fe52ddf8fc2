//! The TOML configuration file: its schema is the TOML keys of every option
//! ([`super::options::all`]; any other key is an error naming its line), and
//! its values are kept raw with their byte spans, so errors can cite the line.

use super::options::{self, Spec};
use std::collections::BTreeMap;
use std::ops::Range;
use toml::de::{DeTable, DeValue};

/// A value as written in the file, with where it was written.
#[derive(Debug, Clone)]
pub struct At<T> {
    pub value: T,
    pub span: Range<usize>,
}

/// A scalar option: written as a TOML string.
#[derive(Debug, Clone)]
pub struct Text(pub String);

#[derive(Debug, Clone)]
enum Raw {
    Text(Text),
    List(Vec<String>),
}

/// A loaded configuration file: its name (for messages), text and values by
/// TOML key.
#[derive(Debug)]
pub struct ConfigFile {
    pub name: String,
    text: String,
    values: BTreeMap<&'static str, At<Raw>>,
}

impl ConfigFile {
    /// Parses `text` against the options `all`; every error names the file
    /// and the line.
    pub fn parse(name: &str, text: &str, all: &[&'static Spec]) -> Result<Self, String> {
        let table = DeTable::parse(text).map_err(|e| format!("{name}: {e}"))?;
        let mut file = ConfigFile {
            name: name.to_string(),
            text: text.to_string(),
            values: BTreeMap::new(),
        };
        file.walk("", table.get_ref(), all)?;
        Ok(file)
    }

    /// The scalar at `spec`'s key, if the file sets it.
    pub fn scalar(&self, spec: &Spec) -> Option<At<Text>> {
        match self.values.get(spec.key?)? {
            At {
                value: Raw::Text(t),
                span,
            } => Some(At {
                value: t.clone(),
                span: span.clone(),
            }),
            At { .. } => None,
        }
    }

    /// The array at `spec`'s key, if the file sets it.
    pub fn list(&self, spec: &Spec) -> Option<At<Vec<String>>> {
        match self.values.get(spec.key?)? {
            At {
                value: Raw::List(items),
                span,
            } => Some(At {
                value: items.clone(),
                span: span.clone(),
            }),
            At { .. } => None,
        }
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

    fn walk(
        &mut self,
        prefix: &str,
        table: &DeTable<'_>,
        all: &[&'static Spec],
    ) -> Result<(), String> {
        for (key, value) in table {
            let path = if prefix.is_empty() {
                key.get_ref().to_string()
            } else {
                format!("{prefix}.{}", key.get_ref())
            };
            let span = value.span();
            let at =
                |msg: String| format!("{} line {} ({path}): {msg}", self.name, self.line_of(&span));
            match (options::by_key(all, &path), value.get_ref()) {
                (None, DeValue::Table(inner)) if is_section(all, &path) => {
                    self.walk(&path, inner, all)?
                }
                (None, _) => {
                    return Err(format!(
                        "{} line {}: unknown key `{path}`; the keys are {}",
                        self.name,
                        self.line_of(&key.span()),
                        known_keys(all)
                    ));
                }
                (Some(spec), value) => {
                    let raw = if spec.list {
                        Raw::List(strings(value).map_err(at)?)
                    } else {
                        Raw::Text(Text(text(spec, value).map_err(at)?))
                    };
                    let key = spec.key.expect("found by its key");
                    self.values.insert(key, At { value: raw, span });
                }
            }
        }
        Ok(())
    }
}

/// A table that holds option keys (`[lease]`, `[redis]`, ...).
fn is_section(all: &[&Spec], path: &str) -> bool {
    all.iter()
        .filter_map(|s| s.key)
        .any(|k| k.starts_with(&format!("{path}.")))
}

fn known_keys(all: &[&Spec]) -> String {
    let keys: Vec<&str> = all.iter().filter_map(|s| s.key).collect();
    keys.join(", ")
}

/// A scalar option is written as a string; a bare number gets a hint,
/// since `ttl = 10` is the most common mistake. Counts (`N`, `N|auto`) may
/// be bare integers.
fn text(spec: &Spec, value: &DeValue<'_>) -> Result<String, String> {
    match value {
        DeValue::String(s) => Ok(s.to_string()),
        DeValue::Integer(n)
            if spec.value_name.starts_with('N') && !spec.value_name.contains('/') =>
        {
            Ok(n.to_string())
        }
        DeValue::Integer(n) => Err(format!(
            "a bare number ({n}) is not accepted; write a quoted value with a unit, e.g. \"{n}s\" or \"{n}ms\""
        )),
        DeValue::Float(n) => Err(format!(
            "a bare number ({n}) is not accepted; write a quoted value with a unit, e.g. \"{n}s\""
        )),
        DeValue::Boolean(b) if spec.switch => Ok(b.to_string()),
        DeValue::Boolean(b) => Err(format!("`{b}` is not accepted here; write a quoted string")),
        _ => Err("expected a quoted string".into()),
    }
}

fn strings(value: &DeValue<'_>) -> Result<Vec<String>, String> {
    let DeValue::Array(items) = value else {
        return Err("expected an array of strings, e.g. [\"a\", \"b\"]".into());
    };
    items
        .iter()
        .map(|item| match item.get_ref() {
            DeValue::String(s) => Ok(s.to_string()),
            _ => Err("expected an array of strings, e.g. [\"a\", \"b\"]".into()),
        })
        .collect()
}
