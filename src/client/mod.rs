//! Clients of the stores, apart from the leases kept in them (issue #49):
//! what it takes to reach a server and talk to it — its URLs, TLS,
//! topology (Sentinel, Cluster), dialling, error classes and restart
//! detection — and nothing of the election. The lease backends
//! ([`crate::lease`]) and the fence ([`crate::fence`]) use them through
//! their public surface; a client room imports nothing of a lease but the
//! contract's error type, [`crate::client::Error`], the one every failure
//! is reported as.
//!
//! - [`redis`]: one Redis server, its Sentinel deployment or its Cluster;
//! - [`postgres`]: a PostgreSQL database, its URL and TLS;
//! - [`pem`]: the PEM files of every TLS client (Redis, PostgreSQL, etcd,
//!   ZooKeeper), read at start-up.

mod error;
pub mod pem;
pub mod postgres;
pub mod redis;

pub use error::Error;
