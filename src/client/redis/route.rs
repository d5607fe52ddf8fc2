//! Where the lease's node is: the URL's one server, the master a majority
//! of the sentinels names (asked before every operation), or the primary
//! that owns the election's slot in a Cluster (asked when not known, after
//! a `MOVED` or a failed connection).

use super::cluster::Cluster;
use super::sentinel::Sentinels;
use super::tls::RedisTls;
use super::urls::RedisUrl;
use crate::client::Error;
use crate::config::Secret;
use tokio::time::Instant;

pub(crate) enum Route {
    Direct,
    Sentinel(Sentinels, RedisTls),
    Cluster(Cluster, RedisTls),
}

/// A node to move to: its address, a client for it, and how to show it.
pub(crate) struct Target {
    pub(crate) addr: (String, u16),
    pub(crate) client: redis::Client,
    pub(crate) shown: String,
}

impl Route {
    pub(crate) fn open(
        url: &RedisUrl,
        tls: &RedisTls,
        key: &str,
        sentinel_password: &Option<Secret>,
    ) -> Result<Route, Error> {
        if let Some(sentinel) = url.sentinel() {
            let sentinels = Sentinels::new(sentinel, tls, sentinel_password.as_ref())?;
            return Ok(Route::Sentinel(sentinels, tls.clone()));
        }
        if let Some(cluster) = url.cluster() {
            return Ok(Route::Cluster(
                Cluster::new(cluster, tls, key)?,
                tls.clone(),
            ));
        }
        Ok(Route::Direct)
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Route::Cluster(..))
    }

    /// The node to talk to now, when it is not `current`.
    pub(crate) async fn locate(
        &mut self,
        current: Option<&(String, u16)>,
        deadline: Instant,
    ) -> Result<Option<Target>, Error> {
        let (addr, node_url, shown, tls) = match self {
            Route::Direct => return Ok(None),
            Route::Sentinel(sentinels, tls) => {
                let named = sentinels.master(deadline).await?;
                if current == Some(&named.addr) {
                    return Ok(None);
                }
                let (host, port) = &named.addr;
                tracing::info!(
                    master = %format!("{host}:{port}"),
                    config_epoch = named.config_epoch,
                    previous = ?current.map(|(h, p)| format!("{h}:{p}")),
                    "following the master a majority of the sentinels names"
                );
                let url = sentinels.url.node_url(host, *port);
                let shown = format!("{} (master {host}:{port})", sentinels.shown);
                (named.addr, url, shown, &*tls)
            }
            Route::Cluster(cluster, tls) => {
                if current.is_some() {
                    return Ok(None);
                }
                let (host, port) = cluster.owner(deadline).await?;
                tracing::info!(
                    primary = %format!("{host}:{port}"),
                    "following the cluster primary that owns the election's slot"
                );
                let url = cluster.url.node_url(&host, port);
                let shown = format!("{} (slot owner {host}:{port})", cluster.shown);
                ((host, port), url, shown, &*tls)
            }
        };
        let node = super::urls::parse_redis_url(&node_url).map_err(|detail| Error::Unexpected {
            backend: shown.clone(),
            detail,
        })?;
        Ok(Some(Target {
            addr,
            client: super::tls::client(&node, tls)?,
            shown,
        }))
    }
}
