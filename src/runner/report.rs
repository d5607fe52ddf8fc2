//! What the lease worker reports, turned into the machine's events: the
//! holder it saw, the metrics' labels, the rate-limited backend error log,
//! and the warning for a second candidate with our id.

use super::worker::Report;
use crate::lease::{self, Acquire, Holder, Renew};
use crate::machine::Event;
use crate::status::{Observed, Snapshot};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// Turns a backend report into the machine's event, recording what it told
/// us about the holder.
pub(super) fn absorb(
    report: Report,
    status: &watch::Sender<Snapshot>,
    errors: &mut ErrorLog,
    ttl: Duration,
    held: bool,
) -> Event {
    let now = Instant::now();
    let observe = |holder: Option<Holder>, expires_in: Option<Duration>| {
        status.send_modify(|s| {
            s.observed = holder.map(|h| Observed {
                id: h.id,
                fencing_token: h.fencing_token,
                at: now,
                expires_at: Some(now + expires_in.unwrap_or(ttl)),
            })
        });
    };
    match report {
        Report::Acquire(Ok(Acquire::Won {
            fencing_token,
            sent_at,
        })) => {
            errors.recovered();
            observe(None, None);
            Event::Acquired {
                fencing_token,
                sent_at,
            }
        }
        Report::Acquire(Ok(Acquire::Held { holder, expires_in })) => {
            errors.recovered();
            observe(Some(holder), expires_in);
            Event::Refused { expires_in }
        }
        Report::Acquire(Err(e)) => {
            errors.log("acquire", &e);
            Event::AcquireFailed {
                misconfigured: e.needs_a_person(),
            }
        }
        Report::Renew(Ok(Renew::Renewed { sent_at })) => {
            errors.recovered();
            // Routine renewals are DEBUG; one that ate a tenth of the TTL is
            // worth seeing before it becomes a failed one.
            let took = now.saturating_duration_since(sent_at);
            if took > ttl / 10 {
                tracing::warn!(took = ?took, ttl = ?ttl, "slow renewal: the backend took over a tenth of the TTL to answer");
            }
            Event::Renewed { sent_at }
        }
        Report::Renew(Ok(Renew::Lost { holder })) => {
            tracing::warn!(
                holder = holder.as_ref().and_then(|h| h.id.as_deref()),
                "lease lost: the key no longer holds our token"
            );
            observe(holder, None);
            Event::Lost
        }
        Report::Renew(Err(e)) => {
            errors.log("renew", &e);
            Event::RenewFailed
        }
        Report::Release(result) => {
            match result {
                Ok(true) => tracing::info!("lease released"),
                Ok(false) if held => {
                    tracing::info!("nothing to release: the lease was no longer ours")
                }
                Err(e) if held => {
                    tracing::warn!(error = %e, "release failed; the lease will expire by its TTL")
                }
                Ok(false) => tracing::debug!("nothing to release: we did not hold the lease"),
                Err(e) => tracing::debug!(error = %e, "release check failed; we did not lead"),
            }
            Event::Released
        }
    }
}

/// Another candidate holds the lease under our id: two candidates share an
/// id (the host name of two containers, say), and anything that compares the
/// leader's name with its own (the leader-elector's `GET /`) is fooled.
/// Warned once per change (`/leader` and the metrics derive it from the
/// observed holder).
pub(super) fn notice_duplicate_id(status: &watch::Sender<Snapshot>, id: &str, warned: &mut bool) {
    let duplicate = status
        .borrow()
        .observed
        .as_ref()
        .is_some_and(|o| o.id.as_deref() == Some(id));
    if duplicate == *warned {
        return;
    }
    *warned = duplicate;
    if duplicate {
        tracing::warn!(
            id,
            "another candidate holds the lease under this instance's id: give every candidate a unique --id (in Kubernetes, the pod name)"
        );
    } else {
        tracing::info!(
            id,
            "the lease is no longer held under this instance's id by another candidate"
        );
    }
}

/// Backend errors, logged once per distinct message and then at most every
/// 30 s while they repeat, so an outage is not one line per retry.
#[derive(Default)]
pub(super) struct ErrorLog {
    last: Option<(String, Instant)>,
    suppressed: u32,
}

const REPEAT_LOG_EVERY: Duration = Duration::from_secs(30);

impl ErrorLog {
    pub(super) fn log(&mut self, op: &'static str, e: &lease::Error) {
        let message = e.to_string();
        let now = Instant::now();
        if let Some((last, at)) = &self.last
            && *last == message
            && now.duration_since(*at) < REPEAT_LOG_EVERY
        {
            self.suppressed += 1;
            return;
        }
        let repeats = self.suppressed;
        if e.is_misconfiguration() {
            tracing::error!(op, error = %message, repeats, "backend refused leaderd: fix the configuration; retrying slowly");
        } else if e.needs_a_person() {
            tracing::error!(op, error = %message, repeats, "nobody can lead until the lease's key is fixed; retrying slowly");
        } else {
            tracing::warn!(op, error = %message, repeats, "backend error");
        }
        self.last = Some((message, now));
        self.suppressed = 0;
    }

    pub(super) fn recovered(&mut self) {
        if self.last.take().is_some() {
            tracing::info!(suppressed = self.suppressed, "backend answering again");
            self.suppressed = 0;
        }
    }
}
