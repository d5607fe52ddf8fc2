//! Events on the Lease, as client-go's recorder makes them for its
//! elector: one as each term begins (`LeaderElected`) and ends
//! (`LeaseReleased`, or `LeaderLost` when it ended without our release),
//! with the candidate id and the fencing token in the message, so
//! `kubectl get events --field-selector involvedObject.name=LEASE` and
//! `kubectl describe lease` tell the election's story.
//!
//! A flapping election must not flood the API server: a [`Budget`] of
//! [`BURST`] Events, refilled one per [`REFILL`], the same shape as
//! client-go's spam filter. Events over it are not sent; the next one sent
//! says how many were left out. Recording never affects the election.

use super::super::client::{Client, Failure};
use crate::lease::contract::Error;
use crate::lease::herald::News;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// Events sent back to back before the budget holds them.
pub const BURST: u32 = 10;
/// One more Event's worth of budget per this much time.
pub const REFILL: Duration = Duration::from_secs(30);

/// The rate limit: a token bucket, pure (`now` is a parameter).
#[derive(Debug, Clone)]
pub struct Budget {
    left: u32,
    /// When the bucket last gained (or was full).
    since: Instant,
    /// Events not sent since the last one sent.
    skipped: u32,
}

impl Budget {
    pub fn new(now: Instant) -> Budget {
        Budget {
            left: BURST,
            since: now,
            skipped: 0,
        }
    }

    /// Whether an Event may go now; `Some(n)`: yes, and `n` were left out
    /// before it.
    pub fn take(&mut self, now: Instant) -> Option<u32> {
        let gained =
            (now.saturating_duration_since(self.since).as_millis() / REFILL.as_millis()) as u32;
        if gained > 0 {
            self.left = (self.left + gained).min(BURST);
            self.since += REFILL * gained;
        }
        if self.left == BURST {
            self.since = now;
        }
        if self.left == 0 {
            self.skipped += 1;
            return None;
        }
        self.left -= 1;
        Some(std::mem::take(&mut self.skipped))
    }
}

/// The reason, type and message of `news`' Event (`None`: no Event).
pub fn describe(news: News, id: &str, lease: &str) -> Option<(&'static str, &'static str, String)> {
    match news {
        News::Began { token } => Some((
            "LeaderElected",
            "Normal",
            format!("{id} became leader of Lease {lease} (fencing token {token})"),
        )),
        News::Released { token } => Some((
            "LeaseReleased",
            "Normal",
            format!("{id} released Lease {lease} after its work stopped (fencing token {token})"),
        )),
        News::Lost { token } => Some((
            "LeaderLost",
            "Warning",
            format!(
                "{id} lost Lease {lease} without releasing it (fencing token {token}): another holder took it, it was deleted or cleared, or the API server did not answer in time"
            ),
        )),
        News::Ending { .. } => None,
    }
}

/// Records one Event on the Lease `lease` (read first for its uid, so
/// `kubectl describe lease` lists it), stamped with `at`, when the news
/// was told: its name (client-go's form, the Lease's name and the moment
/// in hex nanoseconds) makes the API server list a term's Events in the
/// order they happened, however late one was written.
pub(super) async fn record(
    client: &mut Client,
    lease: &str,
    id: &str,
    at: SystemTime,
    (reason, kind, message): (&'static str, &'static str, String),
) -> Result<(), Error> {
    let found: Option<Lease> = client
        .request_in(|api: kube::Api<Lease>| {
            let name = lease.to_string();
            async move { api.get_opt(&name).await }
        })
        .await
        .map_err(|f| client.sorted(f))?;
    let now = Timestamp::try_from(at).unwrap_or_else(|_| Timestamp::now());
    let event = Event {
        metadata: ObjectMeta {
            // client-go's form: the object's name and a unique suffix.
            name: Some(format!("{lease}.{:x}", now.as_nanosecond())),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("coordination.k8s.io/v1".into()),
            kind: Some("Lease".into()),
            name: Some(lease.to_string()),
            namespace: Some(client.namespace.clone()),
            uid: found.and_then(|l| l.metadata.uid),
            ..ObjectReference::default()
        },
        reason: Some(reason.into()),
        message: Some(message),
        type_: Some(kind.into()),
        count: Some(1),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        source: Some(EventSource {
            component: Some("leaderd".into()),
            host: None,
        }),
        reporting_component: Some("leaderd".into()),
        reporting_instance: Some(id.to_string()),
        ..Event::default()
    };
    client
        .request_in(|api: kube::Api<Event>| {
            let event = event.clone();
            async move { api.create(&PostParams::default(), &event).await }
        })
        .await
        .map(|_| ())
        // The same name exists: an earlier try that timed out had landed.
        .or_else(|f| match f {
            Failure::Conflict => Ok(()),
            f => Err(f),
        })
        .map_err(|f| match client.sorted(f) {
            Error::Misconfigured { backend, detail, .. } if detail.starts_with("403") => {
                Error::Misconfigured {
                    backend,
                    detail,
                    hint: "give leaderd's identity create on events in the Lease's namespace (the Role in docs/kubernetes.md), or turn Events off with --kubernetes-events=false",
                }
            }
            e => e,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_lets_a_burst_through_then_one_per_refill_and_counts_the_rest() {
        let t0 = Instant::now();
        let mut b = Budget::new(t0);
        for _ in 0..BURST {
            assert_eq!(b.take(t0), Some(0));
        }
        assert_eq!(b.take(t0), None);
        assert_eq!(b.take(t0 + REFILL / 2), None);
        // One refill later: one more, saying two were left out.
        assert_eq!(b.take(t0 + REFILL), Some(2));
        assert_eq!(b.take(t0 + REFILL), None);
        // A long quiet refills to the burst, never beyond.
        let later = t0 + REFILL * 100;
        for _ in 0..BURST {
            assert!(b.take(later).is_some());
        }
        assert_eq!(b.take(later), None);
        // Over any window, at most BURST + window / REFILL get through.
        let mut b = Budget::new(t0);
        let sent = (0..1000)
            .filter(|i| b.take(t0 + Duration::from_millis(i * 300)).is_some())
            .count();
        assert!(sent <= BURST as usize + 300 / 30, "{sent}");
    }

    #[test]
    fn every_term_end_but_the_stop_of_its_work_has_an_event_with_its_token() {
        let (reason, _, message) = describe(News::Began { token: 7 }, "a", "jobs").unwrap();
        assert_eq!(reason, "LeaderElected");
        assert!(message.contains("a became leader") && message.contains("token 7"));
        assert_eq!(
            describe(News::Released { token: 7 }, "a", "jobs")
                .unwrap()
                .0,
            "LeaseReleased"
        );
        assert_eq!(
            describe(News::Lost { token: 7 }, "a", "jobs").unwrap().1,
            "Warning"
        );
        assert!(describe(News::Ending { token: 7 }, "a", "jobs").is_none());
    }
}
