//! Redis Cluster: which primary owns the election's slot. leaderd's keys
//! share one hash tag, so every script runs on one slot, on one primary,
//! over a plain connection to it; `MOVED` (a failover, a resharding) sends
//! leaderd back here to find the new owner, and so does a connection to it
//! that fails or times out (a frozen owner is replaced by its replica within
//! the cluster's node timeout, and only a fresh look finds the new one).

use super::tls::RedisTls;
use super::urls::ClusterUrl;
use crate::client::Error;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Value};
use tokio::time::Instant;

pub(crate) struct Cluster {
    pub(crate) url: ClusterUrl,
    seeds: Vec<redis::Client>,
    /// A key of the election: its slot is the one to find.
    key: String,
    slot: Option<u16>,
    /// For messages: `cluster://h1:p1,h2:p2`.
    pub(crate) shown: String,
}

impl Cluster {
    pub(crate) fn new(url: ClusterUrl, tls: &RedisTls, key: &str) -> Result<Self, Error> {
        let shown = format!(
            "cluster://{}",
            url.seeds
                .iter()
                .map(|(h, p)| format!("{h}:{p}"))
                .collect::<Vec<_>>()
                .join(",")
        );
        let mut seeds = Vec::new();
        for (host, port) in &url.seeds {
            let node =
                super::urls::parse_redis_url(&url.node_url(host, *port)).map_err(|detail| {
                    Error::Unexpected {
                        backend: shown.clone(),
                        detail,
                    }
                })?;
            seeds.push(super::tls::client(&node, tls)?);
        }
        Ok(Cluster {
            url,
            seeds,
            key: key.to_string(),
            slot: None,
            shown,
        })
    }

    /// The primary that owns the election's slot, by the first seed that
    /// answers `CLUSTER SLOTS`. The seeds are asked side by side: asked one
    /// after another, a frozen first seed would spend the whole deadline.
    pub(crate) async fn owner(&mut self, deadline: Instant) -> Result<(String, u16), Error> {
        let (key, slot) = (&self.key, self.slot);
        let mut pending: FuturesUnordered<_> = self
            .seeds
            .iter()
            .zip(&self.url.seeds)
            .map(|(seed, named)| async move { (named, ask(seed, key, slot, deadline).await) })
            .collect();
        let mut errors = Vec::new();
        let mut found = None;
        while let Some(((host, port), answer)) = pending.next().await {
            match answer {
                Ok((slot, owner)) => {
                    // A node that does not know its own address says "".
                    let ip = if owner.0.is_empty() {
                        host.clone()
                    } else {
                        owner.0
                    };
                    found = Some((slot, (ip, owner.1)));
                    break;
                }
                Err(e) if e.contains("cluster support disabled") => {
                    return Err(Error::WrongKind {
                        backend: self.shown.clone(),
                        detail: format!(
                            "{host}:{port} is not a Redis Cluster node ({e}); use redis:// for a standalone Redis"
                        ),
                    });
                }
                Err(e) => errors.push(format!("{host}:{port}: {e}")),
            }
        }
        drop(pending);
        if let Some((slot, owner)) = found {
            self.slot = Some(slot);
            return Ok(owner);
        }
        Err(Error::Connection {
            backend: self.shown.clone(),
            detail: format!(
                "no node told which primary owns the election's slot: {}",
                errors.join("; ")
            ),
        })
    }
}

async fn ask(
    seed: &redis::Client,
    key: &str,
    slot: Option<u16>,
    deadline: Instant,
) -> Result<(u16, (String, u16)), String> {
    let left = deadline.saturating_duration_since(Instant::now());
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(left))
        .set_response_timeout(Some(left));
    let connecting = seed.get_multiplexed_async_connection_with_config(&config);
    let mut conn: MultiplexedConnection = tokio::time::timeout_at(deadline, connecting)
        .await
        .map_err(|_| "no answer in time".to_string())?
        .map_err(|e| e.to_string())?;
    let slot = match slot {
        Some(slot) => slot,
        None => {
            let mut keyslot = redis::cmd("CLUSTER");
            keyslot.arg("KEYSLOT").arg(key);
            let asked = tokio::time::timeout_at(deadline, keyslot.query_async::<u16>(&mut conn));
            asked
                .await
                .map_err(|_| "no answer in time".to_string())?
                .map_err(|e| e.to_string())?
        }
    };
    let mut slots = redis::cmd("CLUSTER");
    slots.arg("SLOTS");
    let reply = tokio::time::timeout_at(deadline, slots.query_async::<Value>(&mut conn))
        .await
        .map_err(|_| "no answer in time".to_string())?
        .map_err(|e| e.to_string())?;
    let owner = owner_of(&reply, slot)
        .ok_or_else(|| format!("no node serves slot {slot} (CLUSTER SLOTS: {reply:?})"))?;
    Ok((slot, owner))
}

/// In a `CLUSTER SLOTS` reply (ranges, each: start, end, primary, replicas…),
/// the primary `[ip, port, …]` of the range holding `slot`.
fn owner_of(reply: &Value, slot: u16) -> Option<(String, u16)> {
    let Value::Array(ranges) = reply else {
        return None;
    };
    ranges.iter().find_map(|range| {
        let Value::Array(fields) = range else {
            return None;
        };
        match fields.as_slice() {
            [
                Value::Int(start),
                Value::Int(end),
                Value::Array(primary),
                ..,
            ] if (*start..=*end).contains(&i64::from(slot)) => match primary.as_slice() {
                [Value::BulkString(ip), Value::Int(port), ..] => Some((
                    String::from_utf8_lossy(ip).into_owned(),
                    u16::try_from(*port).ok()?,
                )),
                _ => None,
            },
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_is_the_primary_of_the_range_holding_the_slot() {
        let b = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let node = |ip: &str, port: i64| Value::Array(vec![b(ip), Value::Int(port), b("id")]);
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("10.0.0.1", 7000),
                node("10.0.0.4", 7003),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(10922),
                node("10.0.0.2", 7001),
            ]),
        ]);
        assert_eq!(owner_of(&reply, 5460), Some(("10.0.0.1".into(), 7000)));
        assert_eq!(owner_of(&reply, 5461), Some(("10.0.0.2".into(), 7001)));
        assert_eq!(owner_of(&reply, 16000), None);
    }
}
