//! Renewal notices on Redis (issue #47): the renew script publishes every
//! renewal on `leaderd:{KEY}:renewed` (`TOKEN TTL_MS ID_JSON`), and every
//! candidate keeps one subscription to it, feeding what it heard
//! ([`crate::lease::heard`]): a standby answers its timed acquires from
//! it. A wake-up from the wake list ([`super::wake`]) forgets the term.
//!
//! Not the release channel, nor a new term's start: a message there would
//! wake every subscriber at the very moment the winner needs the CPU (a
//! hundred candidates on two cores slowed a handover from 9 ms to 84 ms),
//! which is what the wake list avoids. A standby that was not woken keeps
//! believing the old term until that term's renewal is spent; the new
//! term's first renewal (a third of a TTL after it began, before that)
//! replaces it, so it asks nothing either way.

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
    crate::lease::rewatch::spawn(source, server, wakeups, |s| {
        Box::pin(async move {
            let outcome = listen(s).await;
            s.renewals.set_live(false);
            outcome
        })
    })
}

async fn listen(s: &mut Source) -> Result<Watch, Failed> {
    let client = loop {
        if let Some(client) = s.target.borrow_and_update().clone() {
            break client;
        }
        if s.target.changed().await.is_err() {
            return Ok(Watch::Stop); // the lease side is gone: shutting down
        }
    };
    let classify = |e| {
        Failed::from(crate::client::redis::classify::classify(
            e, &s.shown, s.timeout,
        ))
    };
    let connect = client.get_async_pubsub();
    let mut pubsub = tokio::time::timeout(s.timeout, connect)
        .await
        .map_err(|_| Failed::from("connect timed out".to_string()))?
        .map_err(classify)?;
    let subscribed = pubsub.subscribe(s.renewed.as_str());
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
        let payload = String::from_utf8_lossy(message.get_payload_bytes());
        if let Some((token, ms, id)) = parse(&payload) {
            s.renewals.renewed(token, ms, id, Instant::now(), 0);
        }
    }
}
