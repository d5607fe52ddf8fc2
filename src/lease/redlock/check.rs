//! `leaderd check` for Redlock, and the independence probe `run` makes
//! too. Are the masters independent? Each master gets a probe key of its own
//! (`leaderd:{KEY}:probe:NONCE`, a random nonce per master and per look),
//! then every master is asked for every probe key: a master that holds
//! another's is the same server (listed twice, as `127.0.0.1` and
//! `localhost`), a replica of it, or a proxy to it, and would count two
//! votes for one failure domain.

use super::Redlock;
use super::enough::Until;
use crate::client::redis::classify::classify;
use crate::client::redis::tls;
use crate::lease::contract::LeaseBackend;
use crate::lease::contract::{Acquire, Error, new_token};
use crate::lease::redis::wake;

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
pub(super) async fn probe(lease: &mut Redlock, prefix: &str) -> Result<Independence, Error> {
    let probe_keys: Vec<String> = lease
        .nodes
        .iter()
        .map(|_| format!("{prefix}:probe:{}", new_token()))
        .collect();
    let sets: Vec<redis::Cmd> = probe_keys
        .iter()
        .map(|key| {
            let mut set = redis::cmd("SET");
            set.arg(key).arg("1").arg("PX").arg(PROBE_TTL_MS);
            set
        })
        .collect();
    let each: Vec<Option<&redis::Cmd>> = sets.iter().map(Some).collect();
    let wrote: Vec<bool> = lease
        .ask_each(&each, Until::All)
        .await
        .iter()
        .map(Result::is_ok)
        .collect();
    let mut mget = redis::cmd("MGET");
    mget.arg(&probe_keys);
    let seen: Vec<Option<Vec<bool>>> = lease
        .on_all(&mget, Until::All)
        .await
        .into_iter()
        .map(|reply| match reply {
            Ok(redis::Value::Array(values)) if values.len() == probe_keys.len() => Some(
                values
                    .iter()
                    .map(|v| !matches!(v, redis::Value::Nil))
                    .collect(),
            ),
            _ => None,
        })
        .collect();
    let mut del = redis::cmd("DEL");
    del.arg(&probe_keys);
    lease.on_all(&del, Until::All).await;

    let urls: Vec<&str> = lease.nodes.iter().map(|n| n.url.as_str()).collect();
    let mut answered = 0;
    for (i, seen_here) in seen.iter().enumerate() {
        let Some(seen_here) = seen_here else { continue };
        answered += usize::from(wrote[i]);
        if let Some(j) = (0..urls.len()).find(|&j| j != i && wrote[j] && seen_here[j]) {
            return Err(Error::WrongKind {
                backend: urls[i].to_string(),
                detail: format!(
                    "Redlock needs independent masters, but {} and {} share their data (one holds the other's probe key): the same server under two names, a replica, or a proxy to it. It would count two votes for one failure; list each master once",
                    urls[i], urls[j]
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
    let independent = probe(lease, &prefix).await?;
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
            target: node.target.clone(),
            key: scratch.keys.wake.clone(),
            timeout: node.timeout,
            own_id: String::new(),
            shown: node.url.clone(),
            // Redlock's standbys ask on their timers: no notices heard.
            renewals: Default::default(),
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
