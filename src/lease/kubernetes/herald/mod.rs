//! What the Kubernetes backend announces of each term (issue #48), on a
//! task of its own with a client of its own, so a slow write never delays
//! a renewal: the Service that follows the leader ([`service`]) and the
//! Events on the Lease ([`events`]). The news comes in order from the
//! runner ([`crate::lease::herald`]); the slice is made to say the latest
//! want, and tried again every retry interval while the API server does
//! not take it. A failure is logged (once per kind until it clears) and
//! never reaches the election.

pub mod events;
pub mod options;
pub mod service;

use super::client::Client;
use super::config::KubernetesConfig;
use crate::lease::herald::{self, Desk, News, Started, Tally, Told};
use options::ServiceConfig;
use service::{Outcome, Want};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Everything the task needs, moved onto it.
struct Task {
    client: Client,
    lease: String,
    id: String,
    service: Option<ServiceConfig>,
    events: Option<events::Budget>,
    retry: Duration,
    /// What the slice should say, until it does.
    want: Option<Want>,
    /// The term whose start was told and whose end is not yet: an end is
    /// recorded only for it (a lease won during shutdown and given back
    /// at once never began a term anyone was told of).
    open: Option<u64>,
    /// What was last said about each kind of failure, so a long outage
    /// logs once rather than at every try.
    slice_failing: bool,
    events_failing: bool,
    /// What the writes came to, for the metrics.
    tally: Arc<Tally>,
}

/// Starts the task when the configuration asks for anything.
pub fn start(config: &KubernetesConfig, id: &str, retry: Duration) -> Option<Started> {
    let announce = &config.announce;
    if announce.service.is_none() && !announce.events {
        return None;
    }
    // A term's end is a read and a write of the slice: what the worker
    // waits for before it releases.
    let (herald, desk) = herald::channel(config.timeout * 3);
    let task = Task {
        client: Client::new(config),
        lease: config.lease.clone(),
        id: id.to_string(),
        service: announce.service.clone(),
        events: announce.events.then(|| events::Budget::new(Instant::now())),
        retry,
        want: None,
        open: None,
        slice_failing: false,
        events_failing: false,
        tally: desk.tally.clone(),
    };
    Some(Started {
        herald,
        task: tokio::spawn(task.run(desk)),
    })
}

impl Task {
    async fn run(mut self, mut desk: Desk) {
        loop {
            let news = if self.want.is_some() {
                // A write is owed: try again at the retry interval, or at
                // once on news.
                match tokio::time::timeout(self.retry, desk.news.recv()).await {
                    Ok(news) => news,
                    Err(_) => {
                        self.write_slice().await;
                        continue;
                    }
                }
            } else {
                desk.news.recv().await
            };
            let Some(told) = news else { break };
            self.hear(told).await;
            desk.handled();
        }
    }

    async fn hear(&mut self, told: Told) {
        match told.news {
            News::Began { token } => {
                self.open = Some(token);
                self.want_slice(Want::Lead(token));
            }
            News::Ending { token } => self.want_slice(Want::Empty(token)),
            News::Released { token } | News::Lost { token } => {
                if self.open.take_if(|t| *t == token).is_none() {
                    return;
                }
            }
        }
        // The slice first: the address matters more than the story.
        if self.want.is_some() {
            self.write_slice().await;
        }
        self.record(told).await;
    }

    fn want_slice(&mut self, want: Want) {
        if self.service.is_some() {
            self.want = Some(want);
        }
    }

    async fn write_slice(&mut self) {
        let (Some(config), Some(want)) = (&self.service, self.want) else {
            return;
        };
        match service::apply(&mut self.client, config, &self.id, want).await {
            Ok(outcome) => {
                self.want = None;
                self.slice_failing = false;
                let result = match outcome {
                    Outcome::Written | Outcome::Unchanged => "written",
                    Outcome::Refused { .. } => "refused",
                };
                self.tally.count("endpointslice", result);
                match outcome {
                    Outcome::Written => tracing::info!(
                        service = %config.name,
                        slice = %config.slice,
                        address = %config.address,
                        leads = matches!(want, Want::Lead(_)),
                        "the Service's EndpointSlice {}",
                        if matches!(want, Want::Lead(_)) { "names this leader" } else { "is emptied: this term ended" }
                    ),
                    Outcome::Unchanged => {}
                    Outcome::Refused { newer } => tracing::warn!(
                        service = %config.name,
                        slice = %config.slice,
                        newer_token = newer,
                        "the Service's EndpointSlice was written by a newer term: this candidate no longer leads, so it leaves the slice alone"
                    ),
                }
            }
            Err(e) => {
                self.tally.count("endpointslice", "failed");
                if !std::mem::replace(&mut self.slice_failing, true) {
                    tracing::warn!(
                        service = %config.name,
                        error = %e,
                        "cannot write the Service's EndpointSlice; trying again every retry interval (the election goes on)"
                    );
                }
            }
        }
    }

    async fn record(&mut self, Told { news, at }: Told) {
        let Some(budget) = &mut self.events else {
            return;
        };
        let Some((reason, kind, mut message)) = events::describe(news, &self.id, &self.lease)
        else {
            return;
        };
        let Some(skipped) = budget.take(Instant::now()) else {
            self.tally.count("event", "skipped");
            tracing::debug!(reason, "an Event left out: over the rate limit");
            return;
        };
        if skipped > 0 {
            message.push_str(&format!(
                " ({skipped} earlier Events of this candidate left out by the rate limit)"
            ));
        }
        // A request that timed out (a busy API server) is tried twice more,
        // under the same name, so one that had landed is not told twice:
        // an Event is worth a second or so of this task's time, never the
        // election's.
        let mut recorded = Ok(());
        for _ in 0..3 {
            let event = (reason, kind, message.clone());
            recorded = events::record(&mut self.client, &self.lease, &self.id, at, event).await;
            if !recorded
                .as_ref()
                .is_err_and(crate::lease::Error::is_transient)
            {
                break;
            }
        }
        let result = if recorded.is_ok() {
            "written"
        } else {
            "failed"
        };
        self.tally.count("event", result);
        match recorded {
            Ok(()) => self.events_failing = false,
            Err(e) => {
                if !std::mem::replace(&mut self.events_failing, true) {
                    tracing::warn!(
                        reason,
                        error = %e,
                        "cannot record an Event on the Lease (the election goes on)"
                    );
                }
            }
        }
    }
}
