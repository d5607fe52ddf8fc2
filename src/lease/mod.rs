//! Lease backends (PRODUCT §4–§5): acquire, renew and release a lease by
//! ownership token, and peek at who holds it, behind one trait,
//! [`LeaseBackend`], whose documentation is the contract.
//!
//! Each backend is one module: [`file`](mod@file) (the embedded lock file),
//! [`redis`] (one Redis server, or its Sentinel or Cluster deployment),
//! [`redlock`] (a majority of several independent Redis masters, chosen by
//! the Redis options with several URLs and sharing the Redis client code),
//! [`postgres`] (a lease table, optionally with a session advisory lock),
//! [`etcd`] (a key bound to an etcd lease, its revision the fencing token)
//! and [`zookeeper`] (a queue of ephemeral sequential nodes and a lease
//! node, a zxid the fencing token) and [`kubernetes`] (a
//! `coordination.k8s.io/v1` Lease, as client-go writes it; the default in a
//! pod). A backend owns its connections, its
//! wake-ups, its errors and their hints, and its part of `leaderd check`.
//! [`open`] is the one place that opens a backend from the configuration;
//! the runner, `app` and the HTTP layer only see the trait.
//!
//! [`contract`] holds the trait and its types; this file is the map: the
//! backends' modules and [`BACKENDS`], the one list of them. Beside them,
//! what several backends share: [`registry`] (the candidates' records),
//! `vacancy` (the vacancy rule's verdict), [`heard`] (a standby's answer
//! from the holder's own renewal notices, on Redis and PostgreSQL) and
//! `rewatch` (the loop every watcher runs in) and [`herald`] (what a
//! backend announces of each term outside leaderd: Kubernetes' Service and
//! Events).
//!
//! A new backend is a folder here: a module implementing [`LeaseBackend`],
//! its options and their resolution (a [`crate::config::Declared`]), a
//! [`BackendEntry`] and its tests. Two lines in this file make it part of
//! leaderd — its `mod` and its entry in [`BACKENDS`] — and with them the
//! command line, the config file's schema, `check`'s printout and the
//! contract suite's list of backends. Its integration tests: a `Scene` in
//! `tests/it/support/backends.rs` and a line in the contract suite's
//! `SCENES`.

pub mod contract;
pub mod etcd;
pub mod file;
pub mod heard;
pub mod herald;
pub mod kubernetes;
pub mod options;
pub mod postgres;
pub mod redis;
pub mod redlock;
pub mod registry;
mod rewatch;
pub mod scratch;
pub(crate) mod vacancy;
pub mod zookeeper;

pub(crate) use contract::new_token;
pub use contract::{
    Acquire, BackendEntry, BoxFuture, Common, Error, Holder, LeaseBackend, Nodes, Peek, Renew,
    StandbyReads, Wakeups,
};

use crate::config::{Config, Declared};

/// Every backend, in the order `--help` lists their options.
pub const BACKENDS: &[&BackendEntry] = &[
    &redis::ENTRY,
    &redlock::ENTRY,
    &postgres::ENTRY,
    &etcd::ENTRY,
    &zookeeper::ENTRY,
    &kubernetes::ENTRY,
    &file::ENTRY,
];

/// Every backend's chatty client log targets (see
/// [`BackendEntry::chatty_logs`]), for the logger.
pub fn chatty_logs() -> Vec<&'static str> {
    BACKENDS
        .iter()
        .flat_map(|b| b.chatty_logs.iter().copied())
        .collect()
}

/// Every backend's options and their resolution, for the configuration.
pub fn declared() -> Vec<&'static Declared> {
    BACKENDS.iter().filter_map(|r| r.declared).collect()
}

/// Every backend by the names its contract scenes run under.
pub fn names() -> Vec<&'static str> {
    BACKENDS
        .iter()
        .flat_map(|r| r.names.iter().copied())
        .collect()
}

/// The configured backend, opened by the backend that resolved its
/// settings.
pub fn open(config: &Config) -> Result<Box<dyn LeaseBackend>, Error> {
    let common = Common {
        key: config.key.clone(),
        id: config.id.clone(),
        timing: config.timing,
    };
    BACKENDS
        .iter()
        .find_map(|r| (r.open)(&config.backend, &common))
        .expect("a configured backend's settings come from a registered backend")
}

#[cfg(test)]
mod tests {
    /// The client library that logs each reconnection itself is quieted by
    /// the backend that uses it, not by a list in the logger.
    #[test]
    fn backends_name_their_chatty_client_logs() {
        assert_eq!(super::chatty_logs(), ["zookeeper_client"]);
    }
}
