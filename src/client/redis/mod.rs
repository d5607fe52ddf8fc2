//! A Redis client: a `Link` to the server that takes writes, found
//! through the URL's `Route` (one server, a Sentinel deployment's
//! current primary, or a Cluster's node for a key), dialled with a deadline
//! and its scripts loaded ([`dial`]), over TLS when asked ([`tls`]); its
//! failures sorted into what the caller branches on ([`classify`]) and a
//! server restart noticed ([`restarts`]). The URLs and their forms are
//! [`urls`]. The Redis lease, Redlock and the fence use it.

pub mod classify;
mod cluster;
pub mod dial;
pub mod link;
pub mod restarts;
pub mod route;
mod sentinel;
pub mod tls;
pub mod urls;
