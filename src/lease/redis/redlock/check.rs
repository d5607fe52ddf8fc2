//! `leaderd check` for Redlock, and the independence probe `run` makes
//! too. Are the masters independent? Each master gets a probe key of its own
//! (`leaderd:{KEY}:probe:NONCE`, a random nonce per master and per look),
//! then every master is asked for every probe key: a master that holds
//! another's is the same server (listed twice, as `127.0.0.1` and
//! `localhost`), a replica of it, or a proxy to it, and would count two
//! votes for one failure domain.

use super::super::link::{Link, classify};
use super::super::{tls, wake};
use super::Redlock;
use crate::lease::contract::LeaseBackend;
use crate::lease::contract::{Acquire, Error, new_token};
use futures_util::future::join_all;

/// How long a probe key lives if leaderd dies before deleting it.
const PROBE_TTL_MS: u64 = 30_000;

/// What the look found.
pub(super) struct Independence {
    /// Masters that took part (answered the write and the reads).
    pub(super) answered: usize,
}

/// Probes the masters that answer; the rest cannot be judged now and are
/// not held against the configuration. Errs only on evidence: two masters
/// that share data.
pub(super) async fn probe(nodes: &mut [Link], prefix: &str) -> Result<Independence, Error> {
    let probe_keys: Vec<String> = nodes
        .iter()
        .map(|_| format!("{prefix}:probe:{}", new_token()))
        .collect();
    let writes = nodes.iter_mut().zip(&probe_keys).map(|(node, key)| {
        let mut set = redis::cmd("SET");
        set.arg(key).arg("1").arg("PX").arg(PROBE_TTL_MS);
        async move { node.invoke(&set).await.is_ok() }
    });
    let wrote = join_all(writes).await;
    let reads = nodes.iter_mut().map(|node| {
        let keys = &probe_keys;
        async move {
            let mut seen = Vec::new();
            for key in keys {
                let mut get = redis::cmd("GET");
                get.arg(key);
                match node.invoke(&get).await {
                    Ok(redis::Value::Nil) => seen.push(false),
                    Ok(_) => seen.push(true),
                    Err(_) => return None,
                }
            }
            Some(seen)
        }
    });
    let seen = join_all(reads).await;
    let deletes = nodes.iter_mut().zip(&probe_keys).map(|(node, key)| {
        let mut del = redis::cmd("DEL");
        del.arg(key);
        async move {
            let _ = node.invoke(&del).await;
        }
    });
    join_all(deletes).await;

    let mut answered = 0;
    for (i, seen_here) in seen.iter().enumerate() {
        let Some(seen_here) = seen_here else { continue };
        answered += usize::from(wrote[i]);
        if let Some(j) = (0..nodes.len()).find(|&j| j != i && wrote[j] && seen_here[j]) {
            return Err(Error::WrongKind {
                backend: nodes[i].url.clone(),
                detail: format!(
                    "Redlock needs independent masters, but {} and {} share their data (one holds the other's probe key): the same server under two names, a replica, or a proxy to it. It would count two votes for one failure; list each master once",
                    nodes[i].url, nodes[j].url
                ),
            });
        }
    }
    Ok(Independence { answered })
}

/// The independence probe, then acquire (both phases), renew and release on
/// a scratch election (`KEY.check`) and a short `BLPOP` on every master:
/// one line per thing checked.
pub(super) async fn report(lease: &mut Redlock) -> Result<Vec<String>, Error> {
    let mut lines = Vec::new();
    let prefix = format!("leaderd:{{{}}}", lease.common.key);
    let independent = probe(&mut lease.nodes, &prefix).await?;
    lines.push(format!(
        "{} of {} masters answered the independence probe and share no data (quorum {})",
        independent.answered,
        lease.nodes.len(),
        lease.quorum
    ));
    let mut scratch = Redlock::open(&lease.config, &lease.common.scratch())?;
    if let Acquire::Won { .. } = scratch.acquire_op().await? {
        scratch.renew().await?;
        scratch.release().await?;
    }
    let mut blocking = 0;
    for node in &scratch.nodes {
        let queue = wake::WakeQueue {
            target: node.target.subscribe(),
            key: scratch.keys.wake.clone(),
            timeout: node.timeout,
            own_id: String::new(),
            shown: node.url.clone(),
        };
        match wake::probe(&queue)
            .await
            .map_err(|e| classify(e, &node.url, node.timeout))
        {
            Ok(()) => blocking += 1,
            // A refused BLPOP is a missing permission: say so now.
            Err(e) if e.needs_a_person() => return Err(e),
            Err(_) => {}
        }
    }
    lines.push(format!(
        "{blocking} of {} masters let waiters block on the wake list",
        scratch.nodes.len()
    ));
    let config = &lease.config;
    for url in config.urls.iter().filter(|u| u.is_tls()) {
        lines.extend(tls::report(url, &config.tls, config.timeout).await?);
    }
    lines.push(format!(
        "acquire (both phases), renew and release ran on a quorum as the configured user (scratch key {})",
        scratch.keys.lease
    ));
    Ok(lines)
}
