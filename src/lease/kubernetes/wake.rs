//! Wake-ups: a watch on the one Lease (`fieldSelector=metadata.name=NAME`).
//! A change of holder — cleared by a release, taken over, overwritten from
//! outside — or the object deleted wakes the runner: a waiter tries at
//! once, a holder renews and so learns of a loss at once. Its own renewals
//! (same holder) wake nobody. Only an optimisation: a dropped watch, a 410
//! Gone or a compaction costs latency, never safety; each new watch wakes
//! the runner once, since the lease may have changed while nobody watched.

use super::client::{Client, Failure};
use super::record::Seen;
use crate::lease::contract::Wakeups;
use crate::lease::rewatch::{Failed, Watch};
use futures_util::StreamExt;
use kube::api::WatchParams;
use kube::core::WatchEvent;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub(super) fn watch(client: Client, name: String, wakeups: Wakeups) -> JoinHandle<()> {
    let server = client.shown.clone();
    let state = (client, name, wakeups.notices.clone());
    crate::lease::rewatch::spawn(state, server, &wakeups, |(c, n, notices)| {
        Box::pin(follow(c, n, notices))
    })
}

/// Why a watch failed, for the warning said once.
fn failed(failure: Failure) -> Failed {
    match failure {
        Failure::Other(e) => Failed::from(e),
        Failure::Conflict | Failure::Missing => Failed::from("the watch was refused".to_string()),
    }
}

/// Watches until the stream ends (`Again`) or nobody listens (`Stop`).
async fn follow(
    client: &mut Client,
    name: &str,
    notices: &mpsc::UnboundedSender<()>,
) -> Result<Watch, Failed> {
    let api = client.leases().await.map_err(Failed::from)?;
    let params = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(290);
    let stream = client.call(api.watch(&params, "0")).await.map_err(failed)?;
    let mut stream = std::pin::pin!(stream);
    if notices.send(()).is_err() {
        return Ok(Watch::Stop);
    }
    let mut holder: Option<Option<String>> = None;
    while let Some(event) = stream.next().await {
        let wake = match event.map_err(|e| failed(client.sort(e)))? {
            WatchEvent::Added(lease) | WatchEvent::Modified(lease) => {
                let now = Seen::of(&lease).holder;
                let changed = holder.as_ref() != Some(&now);
                holder = Some(now.clone());
                changed
            }
            WatchEvent::Deleted(_) => {
                holder = None;
                true
            }
            WatchEvent::Bookmark(_) => false,
            // 410 Gone (compacted), or another error: watch again.
            WatchEvent::Error(status) if status.code == 410 => return Ok(Watch::Again),
            WatchEvent::Error(status) => {
                return Err(Failed {
                    refused: matches!(status.code, 401 | 403),
                    text: format!("the watch failed: {} {}", status.code, status.message),
                });
            }
        };
        if wake && notices.send(()).is_err() {
            return Ok(Watch::Stop);
        }
    }
    Ok(Watch::Again)
}
