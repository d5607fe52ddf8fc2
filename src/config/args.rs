//! The flags as given: raw text by option, before any validation. `cli`
//! fills it from clap (one flag per option row); tests and callers that
//! build a configuration in code fill it with [`ConfigArgs::set`].

use super::options::Spec;
use std::collections::BTreeMap;

/// Every configuration flag as given, unvalidated: the raw text of each
/// option that has a flag, by its id.
#[derive(Debug, Default, Clone)]
pub struct ConfigArgs {
    values: BTreeMap<&'static str, Vec<String>>,
}

impl ConfigArgs {
    /// A single-valued flag's text, if given.
    pub fn get(&self, spec: &Spec) -> Option<&str> {
        self.values.get(spec.id)?.last().map(String::as_str)
    }

    /// A repeatable flag's values (empty when not given).
    pub fn list(&self, spec: &Spec) -> &[String] {
        self.values.get(spec.id).map_or(&[], Vec::as_slice)
    }

    /// Sets a flag as if given on the command line (for tests and callers
    /// that build a configuration in code).
    pub fn set(&mut self, spec: &Spec, value: &str) {
        self.values
            .entry(spec.id)
            .or_default()
            .push(value.to_string());
    }
}
