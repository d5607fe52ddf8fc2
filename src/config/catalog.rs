//! Everything that declares options besides the common rows, without naming
//! any: the backends (one of them is chosen, see [`Declared`]) and the
//! features ([`Feature`]: the worker's health checks, priorities, webhooks,
//! the admin socket), each in its own module, as `crate::catalog` lists
//! them. A feature's settings are its own type, opaque here; it takes them
//! back from the [`Config`](super::Config) with [`Features::get`].

use super::backend::{Declared, Resolving, Settings};
use super::error::ConfigError;
use super::options::{self, Spec};
use std::any::Any;
use std::sync::Arc;

/// The backends and features to configure.
#[derive(Clone)]
pub struct Catalog {
    pub backends: Vec<&'static Declared>,
    pub features: Vec<&'static Feature>,
}

/// A feature as the configuration sees it.
pub struct Feature {
    /// How messages name it: "the health check".
    pub name: &'static str,
    /// Where its rows stand in `--help`, the manual, `check` and the docs.
    pub section: Section,
    /// Its option rows, in the order `--help` shows them.
    pub options: &'static [&'static Spec],
    /// Resolves its options, after the common ones, the backend's and the
    /// child's: its settings, or `None` when it is off.
    pub resolve: ResolveFeature,
}

/// How a feature resolves its options into its settings.
pub type ResolveFeature = fn(&mut Resolving<'_>) -> Result<Option<Arc<dyn Settings>>, ConfigError>;

/// Where a feature's rows stand among the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    /// With the election's (key, id), before the backends'.
    Election,
    /// With the work's, after the child's and before the logs'.
    Work,
}

/// Every option: the common ones, each backend's and each feature's, in the
/// order `--help` shows them.
pub fn all_options(catalog: &Catalog) -> Vec<&'static Spec> {
    let features = |section: Section| {
        catalog
            .features
            .iter()
            .filter(move |f| f.section == section)
            .flat_map(|f| f.options.iter().copied())
    };
    let mut all: Vec<&'static Spec> = options::HEAD.to_vec();
    all.extend(features(Section::Election));
    for backend in &catalog.backends {
        all.extend_from_slice(backend.options);
    }
    all.extend_from_slice(options::TAIL);
    all.extend(features(Section::Work));
    all.extend_from_slice(options::END);
    all
}

/// The features' resolved settings: those that are on.
#[derive(Clone, Debug, Default)]
pub struct Features(Vec<Arc<dyn Settings>>);

impl Features {
    /// Every feature of `catalog`, resolved in its order.
    pub(super) fn resolve(
        catalog: &Catalog,
        x: &mut Resolving<'_>,
    ) -> Result<Features, ConfigError> {
        let mut on = Vec::new();
        for feature in &catalog.features {
            on.extend((feature.resolve)(x)?);
        }
        Ok(Features(on))
    }

    /// The settings of type `T`, if that feature is on.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.0.iter().find_map(|s| {
            let any: &dyn Any = s.as_ref();
            any.downcast_ref()
        })
    }
}
