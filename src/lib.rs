//! leaderd: a leader-election sidecar. Many copies contend for a lease; the
//! winner is the leader, runs the work and says so on `GET /leader`.
//!
//! The map, from the outside in:
//! - [`cli`] (raw flags) → [`config`] (flags ⊕ env ⊕ TOML, validated once;
//!   every option declared once: the common ones in [`config::options`],
//!   each backend's in its own folder, each feature's in its module;
//!   [`catalog`] lists them) → [`app`] (the `run`, `status` and
//!   `check` commands and their exit codes).
//! - [`machine`]: the pure state machine, `step(state, event, now)`, with the
//!   lease rules of [`timing`]. No I/O.
//! - [`runner`]: the one async loop that feeds the machine events and performs
//!   its actions against [`lease`] (the [`lease::LeaseBackend`] trait, and a
//!   folder per backend owning its options, wake-ups and `check`:
//!   `redis/`, `redlock/`, `postgres/`, `etcd/`,
//!   `zookeeper/`, `kubernetes/` the Lease, `file/` the lock file;
//!   [`lease::BACKENDS`] lists them; `lease::herald` what a backend announces
//!   of each term outside leaderd, Kubernetes' Service and Events) and
//!   [`work`] (the child behind its guard, webhooks).
//! - [`health`]: the worker's health check, a driver whose verdicts the
//!   runner feeds to the machine (health gating); [`priority`]: the
//!   candidates' ranks the registry carries.
//! - [`client`]: the stores' clients apart from any lease — Redis (with
//!   Sentinel and Cluster) and PostgreSQL connections, PEM files, and the
//!   [`client::Error`] every store failure is — used by the lease backends
//!   and fencing.
//! - [`fence`]: fencing at the resources the work writes to: the shipped
//!   guards (`leaderd fence install|check`) and the fence each keeps,
//!   raised by `run` as each term starts.
//! - [`private`]: local paths no other user can plant or swap (the lock
//!   file, the admin socket).
//! - [`status`]: the snapshot the runner publishes; [`http`] serves it, with
//!   [`metrics`]; [`admin`]: the local socket `leaderd step-down` talks to.
//! - [`reference`](mod@reference): completions and man pages from the clap definitions.
//! - [`shutdown`]: signals (caught before `main`) → cancellation tokens;
//!   [`telemetry`]: logs through a queue that never blocks the loop.

pub mod admin;
pub mod app;
pub mod cli;
pub mod client;
pub mod config;
pub mod fence;
pub mod health;
pub mod http;
pub mod lease;
pub mod machine;
pub mod metrics;
pub mod priority;
pub mod private;
pub mod reference;
pub mod runner;
pub mod shutdown;
pub mod status;
pub mod telemetry;
pub mod timing;
pub mod work;

/// Everything that declares options besides the common rows: every backend
/// (one is chosen) and every feature, in the order of `--help`, `check` and
/// the docs. A new feature adds its line here and edits nothing else.
pub fn catalog() -> config::Catalog {
    config::Catalog {
        backends: lease::declared(),
        features: vec![
            &priority::FEATURE,
            &work::webhook::FEATURE,
            &health::FEATURE,
            &fence::FEATURE,
            &admin::FEATURE,
        ],
    }
}
