//! Release notifications: a subscription to `leaderd:{KEY}:released`, on
//! which the releaser publishes in the same atomic step as its release, so
//! waiting candidates try at once instead of at their next timer.
//!
//! Only an optimisation: a missed message (reconnect, slow subscriber) costs
//! latency, never correctness, because every waiter also has a timer. After
//! every re-subscription a notification is sent anyway, since a release may
//! have happened while the subscription was down.

use futures_util::StreamExt;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub struct ReleaseChannel {
    pub client: redis::Client,
    pub channel: String,
    pub timeout: Duration,
    /// Releases announced with this id are our own: a candidate that just
    /// stepped down must not race to take the lease straight back.
    pub own_id: String,
}

/// Watches the release channel until `stop`, sending `()` for every release.
pub fn watch(
    source: ReleaseChannel,
    retry: Duration,
    notices: mpsc::UnboundedSender<()>,
    stop: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut resubscribing = false;
        loop {
            let outcome = tokio::select! {
                _ = stop.cancelled() => return,
                outcome = listen(&source, &notices, resubscribing) => outcome,
            };
            resubscribing = true;
            match outcome {
                Ok(()) => return, // nobody listens any more
                Err(e) => tracing::debug!(error = %e, "release subscription lost; resubscribing"),
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(retry) => {}
            }
        }
    })
}

async fn listen(
    source: &ReleaseChannel,
    notices: &mpsc::UnboundedSender<()>,
    resubscribing: bool,
) -> Result<(), String> {
    let connect = tokio::time::timeout(source.timeout, source.client.get_async_pubsub());
    let mut pubsub = connect
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| e.to_string())?;
    tokio::time::timeout(source.timeout, pubsub.subscribe(&source.channel))
        .await
        .map_err(|_| "subscribe timed out".to_string())?
        .map_err(|e| e.to_string())?;
    if resubscribing && notices.send(()).is_err() {
        return Ok(());
    }
    let mut messages = pubsub.into_on_message();
    while let Some(message) = messages.next().await {
        if message.get_payload_bytes() == source.own_id.as_bytes() {
            continue;
        }
        if notices.send(()).is_err() {
            return Ok(());
        }
    }
    Err("subscription closed".to_string())
}
