//! Configuration: flags ⊕ environment ⊕ TOML file ⊕ defaults, merged once into
//! a validated [`Config`] (PRODUCT §2). This layer knows no store and no
//! feature by name: each backend declares its options and their resolution
//! in its own folder under `lease/` ([`Declared`]), each feature in its own
//! module ([`Feature`]: health, priorities, webhooks, the admin socket), and
//! `crate::catalog` lists them.
//!
//! [`Config::from_sources`] is pure (the environment is a lookup function and
//! the file is already read), so precedence and validation are unit-tested
//! without touching the process. [`Config::load`] does the I/O around it.
//! Every error names where the bad value came from: the flag, the environment
//! variable, or the file, line and key.
//!
//! - `options`: the option-row type and the common rows; `args`: the flags
//!   as given; `file`: the TOML file; `sources`: all of it as plain values;
//! - `resolve`: precedence (flag > env > file > default) and origins;
//!   `values`: parsers for single values;
//! - `backend`: what a backend declares and resolves with; `catalog`: the
//!   backends and features, and every option in order; `sections`: the
//!   child's options; `build`: the whole merge; `model`: the result.

mod args;
mod backend;
mod build;
mod catalog;
mod commas;
mod error;
mod file;
#[cfg(test)]
mod list_tests;
mod model;
pub mod options;
mod resolve;
mod sections;
mod sources;
#[cfg(test)]
pub(crate) mod tests;
mod values;

pub use args::ConfigArgs;
pub use backend::{Backend, Declared, Fallback, Resolve, Resolving, Settings};
pub use catalog::{Catalog, Feature, Features, ResolveFeature, Section, all_options};
pub use error::ConfigError;
pub use file::ConfigFile;
pub use model::{ChildConfig, Config, LogConfig};
pub use resolve::{
    Layer, Origin, Resolver, Value, or_default, parse_bool, positive, show as show_duration,
};
pub use sources::{Sources, loose_secret_file, read_secret_file};
pub use values::{
    LogFormat, OnChildExit, Secret, Signal, parse_duration, parse_restart_limit, redact_url,
};
