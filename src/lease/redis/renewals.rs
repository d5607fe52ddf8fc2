//! Renewal notices on Redis (issue #47): the acquire and renew scripts
//! publish each term's start and every renewal on `leaderd:{KEY}:renewed`
//! (`TOKEN TTL_MS ID_JSON`), and every candidate keeps one subscription to
//! that channel and to `leaderd:{KEY}:released`, feeding what it heard
//! ([`crate::lease::heard`]): a standby answers its timed acquires from
//! it. The release's message forgets the term; so does a wake-up from the
//! wake list ([`super::wake`]).

use crate::lease::contract::Wakeups;
use crate::lease::heard::{Heard, parse};
use crate::lease::rewatch::{Failed, Watch};
use futures_util::StreamExt;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Where the subscription connects, and what it hears.
pub struct Source {
    /// The lease connection's node, as the wake list follows it.
    pub target: tokio::sync::watch::Receiver<Option<redis::Client>>,
    pub renewed: String,
    pub released: String,
    pub timeout: Duration,
    pub shown: String,
    pub renewals: Heard,
}

/// One subscription as the configured user, so `leaderd check` reports a
/// missing `+subscribe` now: without it standbys work, but ask on timers.
pub async fn probe(s: &Source) -> Result<(), redis::RedisError> {
    let client = s.target.borrow().clone().ok_or_else(|| {
        redis::RedisError::from((redis::ErrorKind::Io, "the master is not known yet"))
    })?;
    let timed_out = || redis::RedisError::from((redis::ErrorKind::Io, "timed out"));
    let mut pubsub = tokio::time::timeout(s.timeout, client.get_async_pubsub())
        .await
        .map_err(|_| timed_out())??;
    tokio::time::timeout(s.timeout, pubsub.subscribe(s.renewed.as_str()))
        .await
        .map_err(|_| timed_out())?
}

/// Keeps the subscription until `stop`, feeding [`Heard`].
pub fn subscribe(source: Source, wakeups: &Wakeups) -> JoinHandle<()> {
    let server = source.shown.clone();
    let state = (source, wakeups.released.clone());
    crate::lease::rewatch::spawn(state, server, wakeups, |(s, released)| {
        Box::pin(async move {
            let outcome = listen(s, released).await;
            s.renewals.set_live(false);
            outcome
        })
    })
}

/// `released`: where a release heard here is told to the runner (every
/// subscriber hears it; the wake list wakes only a few).
async fn listen(
    s: &mut Source,
    released: &tokio::sync::mpsc::UnboundedSender<()>,
) -> Result<Watch, Failed> {
    let client = loop {
        if let Some(client) = s.target.borrow_and_update().clone() {
            break client;
        }
        if s.target.changed().await.is_err() {
            return Ok(Watch::Stop); // the lease side is gone: shutting down
        }
    };
    let classify = |e| Failed::from(super::classify::classify(e, &s.shown, s.timeout));
    let connect = client.get_async_pubsub();
    let mut pubsub = tokio::time::timeout(s.timeout, connect)
        .await
        .map_err(|_| Failed::from("connect timed out".to_string()))?
        .map_err(classify)?;
    let channels = [s.renewed.as_str(), s.released.as_str()];
    let subscribed = pubsub.subscribe(&channels);
    tokio::time::timeout(s.timeout, subscribed)
        .await
        .map_err(|_| Failed::from("no answer to SUBSCRIBE".to_string()))?
        .map_err(classify)?;
    s.renewals.set_live(true);
    let mut messages = pubsub.on_message();
    loop {
        let message = tokio::select! {
            m = messages.next() => m,
            moved = s.target.changed() => return match moved {
                Ok(()) => Err("the lease connection followed a failover".to_string().into()),
                Err(_) => Ok(Watch::Stop),
            },
        };
        let Some(message) = message else {
            return Err("the subscription ended".to_string().into());
        };
        if message.get_channel_name() == s.released {
            s.renewals.released();
            if released.send(()).is_err() {
                return Ok(Watch::Stop);
            }
            continue;
        }
        let payload = String::from_utf8_lossy(message.get_payload_bytes());
        if let Some((token, ms, id)) = parse(&payload) {
            s.renewals.renewed(token, ms, id, Instant::now(), 0);
        }
    }
}
