//! Wake-ups: a watch on the one Lease (`fieldSelector=metadata.name=NAME`),
//! which also feeds every event into what this candidate knows of the Lease
//! (`observe.rs`): a standby on a healthy watch sees each renewal as it
//! happens, and reads nothing on a timer while the holder renews.
//!
//! Any change a holder's renewal does not make — the holder changed or
//! cleared, the duration edited, a new term (`acquireTime`), other owner
//! annotations, the object deleted or put back — wakes the runner: a
//! waiter judges at once, a holder renews and so learns at once that its
//! record is no longer its own. Renewals (only `renewTime` moved) wake
//! nobody. Only an optimisation for safety: a dropped watch, a 410 Gone or
//! a compaction costs latency, never safety; each new watch wakes the
//! runner once, since the lease may have changed while nobody watched.
//! A watch quiet for longer than it could be is taken for half-open and
//! replaced: while the Lease is held, two thirds of its duration and a
//! second (its holder renews every third, and steps down at two thirds
//! when it cannot); while it is not, `idle` and a little, since the API
//! server ends a healthy watch at `idle` itself.

use super::client::{Client, Failure};
use super::observe::Shared;
use super::record::{OWNER, Seen, annotation, revision};
use crate::lease::contract::Wakeups;
use crate::lease::rewatch::{Failed, Watch};
use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::WatchParams;
use kube::core::WatchEvent;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A watch's life: the API server ends a healthy watch after it, and the
/// candidate opens a new one (a request, and a look). Long, since each
/// standby pays that once per `idle` (issue #47: at four TTLs, 100 idle
/// standbys at a 15 s lease opened 1.7 watches a second); a half-open
/// watch is not what bounds it — while the Lease is held the quiet bound
/// is its renewals', and while it is free candidates campaign anyway.
pub(super) fn idle(ttl: Duration) -> Duration {
    (ttl * 20).clamp(Duration::from_secs(10), Duration::from_secs(290))
}

struct Follow {
    client: Client,
    name: String,
    observer: Shared,
    idle: Duration,
    notices: mpsc::UnboundedSender<()>,
}

pub(super) fn watch(
    client: Client,
    name: String,
    observer: Shared,
    ttl: Duration,
    wakeups: Wakeups,
) -> JoinHandle<()> {
    let server = client.shown.clone();
    let state = Follow {
        client,
        name,
        observer,
        idle: idle(ttl),
        notices: wakeups.notices.clone(),
    };
    crate::lease::rewatch::spawn(state, server, &wakeups, |f| Box::pin(follow(f)))
}

/// Why a watch failed, for the warning said once.
fn failed(failure: Failure) -> Failed {
    match failure {
        Failure::Other(e) => Failed::from(e),
        Failure::Conflict | Failure::Missing => Failed::from("the watch was refused".to_string()),
    }
}

/// What a renewal leaves alone: a change to any of it wakes the runner.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Shape {
    holder: Option<String>,
    duration: Duration,
    acquired: Option<String>,
    transitions: i32,
    owner: Option<String>,
}

fn shape(lease: Option<&Lease>) -> Option<Shape> {
    let lease = lease?;
    let seen = Seen::of(lease);
    Some(Shape {
        holder: seen.holder,
        duration: seen.duration,
        acquired: seen.acquired.map(|t| t.to_string()),
        transitions: seen.transitions,
        owner: annotation(lease, OWNER),
    })
}

/// How long the watch may stay silent after `last` (the state it saw
/// last, if any) before it is taken for half-open. Before its first event
/// the bound is `known`'s, what the candidate knew of the Lease when the
/// watch opened: a watch from version 0 starts with the object as it
/// stands, so one that stays silent from the start is as dead as one that
/// went silent later (cut then, a standby heard nothing for `idle`: 125 s
/// at a 6 s lease, in the eighth loaded run).
fn quiet(idle: Duration, last: Option<&Option<Shape>>, known: Option<&Shape>) -> Duration {
    let server_ends = idle + Duration::from_secs(5);
    let judged = match last {
        Some(seen) => seen.as_ref(),
        None => known,
    };
    match judged {
        Some(s) if s.holder.is_some() => {
            (s.duration * 2 / 3 + Duration::from_secs(1)).min(server_ends)
        }
        _ => server_ends,
    }
}

/// Whether the change from `before` (the last state this watch saw; `None`
/// before its first event, which the wake-up at its start covers) to
/// `after` (`None`: deleted) wakes the runner.
fn wakes(before: Option<&Option<Shape>>, after: &Option<Shape>) -> bool {
    before.is_some_and(|before| before != after)
}

/// Watches until the stream ends or goes quiet (`Again`), or nobody
/// listens (`Stop`).
async fn follow(f: &mut Follow) -> Result<Watch, Failed> {
    let outcome = watch_once(f).await;
    f.observer.lock().set_live(false);
    outcome
}

async fn watch_once(f: &mut Follow) -> Result<Watch, Failed> {
    let api = f.client.leases().await.map_err(Failed::from)?;
    let params = WatchParams::default()
        .fields(&format!("metadata.name={}", f.name))
        .timeout(f.idle.as_secs() as u32);
    let stream = f
        .client
        .call(api.watch(&params, "0"))
        .await
        .map_err(failed)?;
    let mut stream = std::pin::pin!(stream);
    if f.notices.send(()).is_err() {
        return Ok(Watch::Stop);
    }
    let known = f
        .observer
        .lock()
        .present()
        .and_then(|s| shape(Some(&s.lease)));
    let mut last: Option<Option<Shape>> = None;
    loop {
        let silence = quiet(f.idle, last.as_ref(), known.as_ref());
        let event = match tokio::time::timeout(silence, stream.next()).await {
            Err(_) => {
                tracing::debug!(lease = %f.name, "the Lease's watch went quiet; watching again");
                return Ok(Watch::Again);
            }
            Ok(None) => return Ok(Watch::Again),
            Ok(Some(event)) => event.map_err(|e| failed(f.client.sort(e)))?,
        };
        let now = Instant::now();
        let after = match event {
            WatchEvent::Added(lease) | WatchEvent::Modified(lease) => {
                let mut observer = f.observer.lock();
                observer.look(Some(&lease), now);
                observer.set_live(true);
                shape(Some(&lease))
            }
            WatchEvent::Deleted(lease) => {
                let mut observer = f.observer.lock();
                observer.deleted(revision(&lease));
                observer.set_live(true);
                None
            }
            WatchEvent::Bookmark(_) => continue,
            // 410 Gone (compacted), or another error: watch again.
            WatchEvent::Error(status) if status.code == 410 => return Ok(Watch::Again),
            WatchEvent::Error(status) => {
                return Err(Failed {
                    refused: matches!(status.code, 401 | 403),
                    text: format!("the watch failed: {} {}", status.code, status.message),
                });
            }
        };
        let wake = wakes(last.as_ref(), &after);
        if last.is_none() {
            tracing::debug!(lease = %f.name, "the Lease's watch is following it");
        }
        last = Some(after);
        if wake && f.notices.send(()).is_err() {
            return Ok(Watch::Stop);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::kubernetes::record::{acquisition, release, renewal};
    use k8s_openapi::jiff::Timestamp;

    #[test]
    fn every_change_but_a_renewal_wakes() {
        let t = |s| Timestamp::from_second(s).unwrap();
        let held = acquisition(None, "job", "a", "d1", 15, t(0));
        let renewed = renewal(held.clone(), 15, t(5));
        let shortened = renewal(held.clone(), 1, t(5));
        let mut cleared = held.clone();
        cleared.spec.as_mut().unwrap().holder_identity = None;
        let taken = acquisition(Some(&held), "job", "b", "d2", 15, t(6));
        let again = acquisition(Some(&held), "job", "a", "d1", 15, t(7));
        let mut restored_by_another = held.clone();
        let notes = restored_by_another.metadata.annotations.as_mut().unwrap();
        notes.insert(OWNER.into(), "d9".into());
        let s = |l: &Lease| shape(Some(l));
        // (the state before, or none yet; the state after; wakes)
        type Row = (Option<Option<Shape>>, Option<Shape>, bool);
        let rows: &[Row] = &[
            (None, s(&held), false),
            (Some(s(&held)), s(&renewed), false),
            (Some(s(&held)), s(&shortened), true),
            (Some(s(&held)), s(&cleared), true),
            (Some(s(&held)), s(&taken), true),
            (Some(s(&held)), s(&again), true),
            (Some(s(&held)), s(&restored_by_another), true),
            (Some(s(&held)), s(&release(held.clone(), t(8))), true),
            (Some(s(&held)), None, true),
            (Some(None), s(&held), true),
        ];
        for (i, (before, after, wake)) in rows.iter().enumerate() {
            assert_eq!(wakes(before.as_ref(), after), *wake, "row {i}");
        }
    }

    #[test]
    fn a_quiet_watch_is_replaced_within_bounds() {
        let secs = Duration::from_secs;
        assert_eq!(idle(secs(2)), secs(40));
        assert_eq!(idle(secs(15)), secs(290));
        assert_eq!(idle(secs(600)), secs(290));
        let t = |s| Timestamp::from_second(s).unwrap();
        let held = shape(Some(&acquisition(None, "job", "a", "d1", 15, t(0))));
        let free = shape(Some(&release(
            acquisition(None, "job", "a", "d1", 15, t(0)),
            t(1),
        )));
        // Held: a renewal is due every 5 s, a step-down at 10 s.
        assert_eq!(quiet(secs(60), Some(&held), None), secs(11));
        // Nothing seen yet by this watch, but known held when it opened.
        assert_eq!(quiet(secs(60), None, held.as_ref()), secs(11));
        // Not held, deleted, or nothing seen and nothing known held: the
        // server ends it first. What the watch saw outranks what was known.
        let known = [None, held.as_ref(), free.as_ref()];
        for (last, known) in [
            (Some(&free), known[1]),
            (Some(&None), known[1]),
            (None, known[0]),
            (None, known[2]),
        ] {
            assert_eq!(quiet(secs(60), last, known), secs(65));
        }
        assert_eq!(quiet(secs(10), Some(&held), None), secs(11));
    }
}
