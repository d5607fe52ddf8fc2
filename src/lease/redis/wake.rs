//! Release wake-ups: each candidate keeps one `BLPOP` waiting on the list
//! `leaderd:{KEY}:wake`; the release script pushes [`WAKE_COPIES`] entries
//! in the same atomic step as the release, and Redis hands each entry to one
//! blocked client, oldest first. So a release wakes a few waiters, not all
//! of them: with a hundred candidates on two cores, waking every waiter at
//! once (as a pub/sub message does) delays the one that wins by the time it
//! takes to schedule all the others.
//!
//! Only an optimisation: a lost wake-up (reconnect, a waiter frozen while
//! blocked) costs latency, never correctness, because every waiter also has
//! a timer. After every reconnection that works a wake-up is sent anyway,
//! since a release may have happened while the connection was down. The release is
//! still published on `leaderd:{KEY}:released` for observers.

use crate::lease::contract::Wakeups;
use crate::lease::rewatch::{Failed, Watch};
use redis::AsyncConnectionConfig;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Entries pushed per release: more than one, so that a waiter that is frozen
/// or just leaving, or the releaser's own `BLPOP`, cannot swallow the only
/// wake-up; few, so that a release does not wake a crowd.
pub const WAKE_COPIES: usize = 3;

/// How long unclaimed entries stay: long enough for a waiter that was busy
/// looking at the lease to block again and find one, short enough that a
/// later waiter does not wake for an old release.
pub const WAKE_LINGER: Duration = Duration::from_secs(2);

/// How long one `BLPOP` blocks. Each one that times out is an idle command,
/// so it is long; a connection that died silently is noticed after this.
const BLOCK: Duration = Duration::from_secs(100);

pub struct WakeQueue {
    /// The node to wait on: the lease connection's, replaced when it
    /// follows a failover (or, under Sentinel, a new master), and signalled
    /// when it finds its node no longer a writable primary; `None` until a
    /// Sentinel master is known.
    pub target: tokio::sync::watch::Receiver<Option<redis::Client>>,
    pub key: String,
    pub timeout: Duration,
    /// Entries pushed by our own release: a candidate that just stepped down
    /// must not race to take the lease straight back.
    pub own_id: String,
    /// The server, as logs show it.
    pub shown: String,
    /// What this candidate heard of the term: a wake-up forgets it, so the
    /// acquire it causes asks Redis ([`super::renewals`]).
    pub renewals: crate::lease::heard::Heard,
}

/// Waits on the wake list until `stop`, sending `()` for every wake-up.
pub fn watch(source: WakeQueue, wakeups: Wakeups) -> JoinHandle<()> {
    let server = source.shown.clone();
    let state = Watcher {
        source,
        notices: wakeups.notices.clone(),
        reconnecting: false,
    };
    crate::lease::rewatch::spawn(state, server, &wakeups, |w| {
        Box::pin(async move {
            let outcome = listen(&mut w.source, &w.notices, w.reconnecting).await;
            w.reconnecting = true;
            match outcome {
                Ok(()) => Ok(Watch::Stop), // nobody listens any more
                Err(e) => Err(e),
            }
        })
    })
}

/// What the wake-up loop carries from one connection to the next.
struct Watcher {
    source: WakeQueue,
    notices: mpsc::UnboundedSender<()>,
    /// A connection came before: the next one sends a catch-up wake-up.
    reconnecting: bool,
}

/// One short `BLPOP` as the configured user, so `leaderd check` can report
/// a missing permission for it now.
pub async fn probe(source: &WakeQueue) -> Result<(), redis::RedisError> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(source.timeout))
        .set_response_timeout(Some(source.timeout));
    let client = source.target.borrow().clone();
    let client = client.ok_or_else(|| {
        redis::RedisError::from((redis::ErrorKind::Io, "the master is not known yet"))
    })?;
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    redis::cmd("BLPOP")
        .arg(&source.key)
        .arg(0.01)
        .query_async::<Option<(String, String)>>(&mut conn)
        .await
        .map(drop)
}

async fn listen(
    source: &mut WakeQueue,
    notices: &mpsc::UnboundedSender<()>,
    reconnecting: bool,
) -> Result<(), Failed> {
    // No response timeout from redis-rs: a BLPOP is meant to wait. Each one
    // is bounded below instead.
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(source.timeout))
        .set_response_timeout(None);
    // Seen now: a change from here on makes this connection follow it.
    // Under Sentinel and Cluster the node is known after the first lease
    // operation: wait for it rather than report a failure.
    let client = loop {
        if let Some(client) = source.target.borrow_and_update().clone() {
            break client;
        }
        if source.target.changed().await.is_err() {
            return Ok(()); // the lease side is gone: shutting down
        }
    };
    let connect = client.get_multiplexed_async_connection_with_config(&config);
    let mut conn = tokio::time::timeout(source.timeout, connect)
        .await
        .map_err(|_| Failed::from("connect timed out".to_string()))?
        .map_err(|e| refusal(e, source))?;
    // After a reconnection a catch-up wake-up is sent, but only once a
    // BLPOP that hardly blocks has proved the connection can wait
    // (credentials, ACL): a node that refuses us must not wake its waiters
    // at every retry. The first connection has nothing to catch up on, and
    // goes straight to its place in the queue of waiters.
    if reconnecting {
        let mut probe = redis::cmd("BLPOP");
        probe.arg(&source.key).arg(0.01);
        let first = probe.query_async::<Option<(String, String)>>(&mut conn);
        tokio::time::timeout(source.timeout + Duration::from_millis(10), first)
            .await
            .map_err(|_| Failed::from("no answer to BLPOP".to_string()))?
            .map_err(|e| refusal(e, source))?;
        // Woken or not, the catch-up wake-up covers it.
        source.renewals.released();
        if notices.send(()).is_err() {
            return Ok(());
        }
    }
    let mut blpop = redis::cmd("BLPOP");
    blpop.arg(&source.key).arg(BLOCK.as_secs());
    loop {
        let waiting = blpop.query_async::<Option<(String, String)>>(&mut conn);
        let popped = tokio::select! {
            popped = tokio::time::timeout(BLOCK + source.timeout, waiting) => popped,
            moved = source.target.changed() => return match moved {
                Ok(()) => Err("the lease connection followed a failover".to_string().into()),
                // The lease side is gone: leaderd is shutting down.
                Err(_) => Ok(()),
            },
        };
        let popped = popped
            .map_err(|_| {
                Failed::from("no answer to BLPOP; the connection is presumed dead".to_string())
            })?
            .map_err(|e| refusal(e, source))?;
        // None: the BLPOP timed out in Redis; block again.
        let woken = popped.is_some_and(|(_, releaser)| releaser != source.own_id);
        if woken {
            source.renewals.released();
        }
        if woken && notices.send(()).is_err() {
            return Ok(());
        }
    }
}

/// A Redis error as a watch failure: a refused password or permission is
/// the lease's back-off too, not the retry interval.
fn refusal(e: redis::RedisError, source: &WakeQueue) -> Failed {
    crate::client::redis::classify::classify(e, &source.shown, source.timeout).into()
}
