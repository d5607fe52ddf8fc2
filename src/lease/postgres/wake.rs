//! Release wake-ups: a session of its own `LISTEN`s on the key's channel;
//! the release statement's `pg_notify` reaches every listener when it
//! commits. Only an optimisation, as with Redis: a lost wake-up costs
//! latency, never correctness. The same session listens to the renewals'
//! channel, whose notices a standby answers its timed looks from
//! ([`crate::lease::heard`], issue #47): one session, so a release's
//! notice always comes after the renewals before it. Through a transaction pooler `LISTEN` cannot
//! work (the session that listens is not the one the notifications reach),
//! so when [`advisory::pooled`](super::advisory::pooled) finds one, waiters
//! rely on their timers, and it is said once.

use super::config::PgConfig;
use super::{Conn, advisory, connect};
use crate::lease::contract::Wakeups;
use crate::lease::rewatch::Watch;
use futures_util::future::poll_fn;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_postgres::AsyncMessage;

pub(super) struct Listener {
    pub pg: PgConfig,
    pub shown: String,
    pub channel: String,
    pub renewed: String,
    /// Our own releases' notifications carry our id: not a reason to try.
    pub own_id: String,
    pub heard: crate::lease::heard::Heard,
}

/// Listens until `stop`, sending `()` for every release by another
/// candidate, and once each time the session starts listening (a release
/// may have happened before).
pub(super) fn watch(listener: Listener, wakeups: Wakeups) -> JoinHandle<()> {
    let server = listener.shown.clone();
    let state = (listener, wakeups.notices.clone());
    crate::lease::rewatch::spawn(state, server, &wakeups, |(l, n)| {
        Box::pin(async move {
            let outcome = listen(l, n).await;
            l.heard.set_live(false);
            outcome.map_err(Into::into)
        })
    })
}

async fn listen(
    listener: &Listener,
    notices: &mpsc::UnboundedSender<()>,
) -> Result<Watch, crate::lease::contract::Error> {
    if advisory::pooled(&listener.pg, &listener.shown).await? {
        tracing::warn!(server = %listener.shown, "a transaction pooler is in the path to PostgreSQL: LISTEN/NOTIFY cannot work through it, so waiting candidates take over when the lease expires rather than at once on release (connect to the server directly, or through a session pooler, for instant handovers)");
        return Ok(Watch::Stop);
    }
    let (client, conn) = connect(&listener.pg, &listener.shown).await?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let driver = tokio::spawn(drive(conn, tx));
    let listened = tokio::time::timeout(
        listener.pg.connect.timeout,
        client.batch_execute(&format!(
            "LISTEN \"{}\"; LISTEN \"{}\"",
            listener.channel, listener.renewed
        )),
    )
    .await;
    match listened {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            driver.abort();
            return Err(super::classify(&e, &listener.shown, &listener.pg));
        }
        Err(_) => {
            driver.abort();
            return Err(crate::lease::contract::Error::Timeout {
                backend: listener.shown.clone(),
                timeout: listener.pg.connect.timeout,
            });
        }
    }
    // Listening now: a release since the candidate last looked (while this
    // session was down, or before it was first up: connecting takes a while
    // with SCRAM and TLS) would otherwise go unnoticed until expiry.
    listener.heard.set_live(true);
    if notices.send(()).is_err() {
        driver.abort();
        return Ok(Watch::Stop);
    }
    while let Some((channel, payload)) = rx.recv().await {
        if channel == listener.renewed {
            if let Some((token, ms, id)) = crate::lease::heard::parse(&payload) {
                listener.heard.renewed(token, ms, id, Instant::now(), 0);
            }
            continue;
        }
        listener.heard.released();
        if payload != listener.own_id && notices.send(()).is_err() {
            driver.abort();
            return Ok(Watch::Stop);
        }
    }
    // The connection ended (the driver dropped its sender).
    drop(client);
    Ok(Watch::Again)
}

/// Drives the connection, passing on each notification's channel and
/// payload (a releaser's id, or a renewal) until the connection ends.
async fn drive(mut conn: Conn, tx: mpsc::UnboundedSender<(String, String)>) {
    loop {
        match poll_fn(|cx| conn.poll_message(cx)).await {
            Some(Ok(AsyncMessage::Notification(n))) => {
                let note = (n.channel().to_string(), n.payload().to_string());
                if tx.send(note).is_err() {
                    return;
                }
            }
            Some(Ok(_)) => {}
            Some(Err(_)) | None => return,
        }
    }
}
