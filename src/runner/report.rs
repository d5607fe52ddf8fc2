//! What the lease worker reports, turned into the machine's events: the
//! holder it saw, the metrics' labels, the rate-limited backend error log,
//! and the warning for a second candidate with our id.

use super::worker::Report;
use crate::lease::{self, Acquire, Holder, Peek, Renew};
use crate::machine::Event;
use crate::status::{Observed, Snapshot};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// What a report means, decided without side effects ([`judge`]): the
/// machine's event, what it says of the holder, and what to log.
#[derive(Debug)]
pub(super) struct Judged {
    pub(super) event: Event,
    pub(super) holder: Seen,
    pub(super) note: Note,
}

/// What a report says of the holder `/leader` shows.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Seen {
    /// Nothing new.
    Same,
    /// Ours now, or unknown: no other holder to show.
    Nobody,
    /// Another holds it, for this long (`None`: a TTL, for all we know).
    Other(Holder, Option<Duration>),
    /// A renewal found the lease lost, to this holder if known.
    LostTo(Option<Holder>),
}

/// What to log about a report.
#[derive(Debug)]
pub(super) enum Note {
    /// The backend answered: an error streak, if any, ended.
    Answered,
    /// A backend error, rate-limited by [`ErrorLog`].
    Failed(&'static str, lease::Error),
    /// A renewal that ate over a tenth of the TTL: worth seeing before it
    /// becomes a failed one (routine renewals are DEBUG).
    SlowRenewal(Duration),
    /// The lease was lost: the key no longer holds our token.
    Lost,
    /// A release's outcome, and whether we led (a standby's is not news).
    Release(Result<bool, lease::Error>, bool),
}

/// The pure rule: `report` at `now`, with the lease's `ttl`, and `held`
/// whether we led since the last release.
pub(super) fn judge(report: Report, ttl: Duration, held: bool, now: Instant) -> Judged {
    let (event, holder, note) = match report {
        Report::Acquire(Ok(Acquire::Won {
            fencing_token,
            sent_at,
        })) => (
            Event::Acquired {
                fencing_token,
                sent_at,
            },
            Seen::Nobody,
            Note::Answered,
        ),
        Report::Acquire(Ok(Acquire::Held { holder, expires_in })) => (
            Event::Refused { expires_in },
            Seen::Other(holder, expires_in),
            Note::Answered,
        ),
        Report::Acquire(Err(e)) => (
            Event::AcquireFailed {
                misconfigured: e.needs_a_person(),
            },
            Seen::Same,
            Note::Failed("acquire", e),
        ),
        Report::Look(Ok(peek)) if peek.vacant() => (Event::Vacant, Seen::Nobody, Note::Answered),
        Report::Look(Ok(Peek {
            holder: Some(holder),
            expires_in,
            ..
        })) => (
            Event::Refused { expires_in },
            Seen::Other(holder, expires_in),
            Note::Answered,
        ),
        // Contested: no holder to show, but not vacant either.
        Report::Look(Ok(Peek { expires_in, .. })) => {
            (Event::Refused { expires_in }, Seen::Same, Note::Answered)
        }
        Report::Look(Err(e)) => (
            Event::AcquireFailed {
                misconfigured: e.needs_a_person(),
            },
            Seen::Same,
            Note::Failed("look", e),
        ),
        Report::Renew(Ok(Renew::Renewed { sent_at })) => {
            let took = now.saturating_duration_since(sent_at);
            let note = if took > ttl / 10 {
                Note::SlowRenewal(took)
            } else {
                Note::Answered
            };
            (Event::Renewed { sent_at }, Seen::Same, note)
        }
        Report::Renew(Ok(Renew::Lost { holder })) => {
            (Event::Lost, Seen::LostTo(holder), Note::Lost)
        }
        Report::Renew(Err(e)) => (Event::RenewFailed, Seen::Same, Note::Failed("renew", e)),
        Report::Release(result) => (Event::Released, Seen::Same, Note::Release(result, held)),
    };
    Judged {
        event,
        holder,
        note,
    }
}

/// Turns a backend report into the machine's event ([`judge`]), recording
/// what it told us about the holder and logging what it says.
pub(super) fn absorb(
    report: Report,
    status: &watch::Sender<Snapshot>,
    errors: &mut ErrorLog,
    ttl: Duration,
    held: bool,
) -> Event {
    let now = Instant::now();
    let Judged {
        event,
        holder,
        note,
    } = judge(report, ttl, held, now);
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
    match holder {
        Seen::Same => {}
        Seen::Nobody => observe(None, None),
        Seen::Other(holder, expires_in) => observe(Some(holder), expires_in),
        Seen::LostTo(holder) => {
            tracing::warn!(
                holder = holder.as_ref().and_then(|h| h.id.as_deref()),
                "lease lost: the key no longer holds our token"
            );
            observe(holder, None);
        }
    }
    match note {
        Note::Answered => errors.recovered(),
        Note::Lost => {}
        Note::Failed(op, e) => errors.log(op, &e),
        Note::SlowRenewal(took) => {
            errors.recovered();
            tracing::warn!(took = ?took, ttl = ?ttl, "slow renewal: the backend took over a tenth of the TTL to answer");
        }
        Note::Release(result, held) => match result {
            Ok(true) => tracing::info!("lease released"),
            Ok(false) if held => {
                tracing::info!("nothing to release: the lease was no longer ours")
            }
            Err(e) if held => {
                tracing::warn!(error = %e, "release failed; the lease will expire by its TTL")
            }
            Ok(false) => tracing::debug!("nothing to release: we did not hold the lease"),
            Err(e) => tracing::debug!(error = %e, "release check failed; we did not lead"),
        },
    }
    event
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_report_gives_its_event_what_it_says_of_the_holder_and_its_note() {
        let now = Instant::now();
        let ttl = Duration::from_secs(10);
        let other = Holder {
            id: Some("b".into()),
            fencing_token: Some(9),
        };
        let refused = || lease::Error::Connection {
            backend: "x".into(),
            detail: "refused".into(),
        };
        let at = |ago_ms| now - Duration::from_millis(ago_ms);
        type Row = (Report, bool, Event, Seen, &'static str);
        #[rustfmt::skip]
        let rows: Vec<Row> = vec![
            (Report::Acquire(Ok(Acquire::Won { fencing_token: 3, sent_at: at(5) })), false,
                Event::Acquired { fencing_token: 3, sent_at: at(5) }, Seen::Nobody, "answered"),
            (Report::Acquire(Ok(Acquire::Held { holder: other.clone(), expires_in: None })), false,
                Event::Refused { expires_in: None }, Seen::Other(other.clone(), None), "answered"),
            (Report::Acquire(Err(refused())), false,
                Event::AcquireFailed { misconfigured: false }, Seen::Same, "failed acquire"),
            // A look: vacant when nobody holds it or its holder's lease has
            // run out; contested (Redlock's leftovers) is held by nobody known.
            (Report::Look(Ok(Peek::default())), false, Event::Vacant, Seen::Nobody, "answered"),
            (Report::Look(Ok(Peek { holder: Some(other.clone()), expires_in: Some(Duration::ZERO), contested: false })), false,
                Event::Vacant, Seen::Nobody, "answered"),
            (Report::Look(Ok(Peek { holder: Some(other.clone()), expires_in: Some(ttl), contested: false })), false,
                Event::Refused { expires_in: Some(ttl) }, Seen::Other(other.clone(), Some(ttl)), "answered"),
            (Report::Look(Ok(Peek { holder: None, expires_in: Some(ttl), contested: true })), false,
                Event::Refused { expires_in: Some(ttl) }, Seen::Same, "answered"),
            (Report::Look(Err(refused())), false,
                Event::AcquireFailed { misconfigured: false }, Seen::Same, "failed look"),
            // A renewal is slow past a tenth of the TTL, not at it.
            (Report::Renew(Ok(Renew::Renewed { sent_at: at(1000) })), true,
                Event::Renewed { sent_at: at(1000) }, Seen::Same, "answered"),
            (Report::Renew(Ok(Renew::Renewed { sent_at: at(1001) })), true,
                Event::Renewed { sent_at: at(1001) }, Seen::Same, "slow"),
            (Report::Renew(Ok(Renew::Lost { holder: Some(other.clone()) })), true,
                Event::Lost, Seen::LostTo(Some(other.clone())), "lost"),
            (Report::Renew(Err(refused())), true, Event::RenewFailed, Seen::Same, "failed renew"),
            (Report::Release(Ok(true)), true, Event::Released, Seen::Same, "release ok, held"),
            (Report::Release(Ok(false)), false, Event::Released, Seen::Same, "release not ours, not held"),
            (Report::Release(Err(refused())), true, Event::Released, Seen::Same, "release failed, held"),
        ];
        for (i, (report, held, event, holder, note)) in rows.into_iter().enumerate() {
            let got = judge(report, ttl, held, now);
            let shown = match &got.note {
                Note::Answered => "answered".to_string(),
                Note::Failed(op, _) => format!("failed {op}"),
                Note::SlowRenewal(_) => "slow".to_string(),
                Note::Lost => "lost".to_string(),
                Note::Release(Ok(true), h) => {
                    format!("release ok, {}", if *h { "held" } else { "not held" })
                }
                Note::Release(Ok(false), h) => {
                    format!("release not ours, {}", if *h { "held" } else { "not held" })
                }
                Note::Release(Err(_), h) => {
                    format!("release failed, {}", if *h { "held" } else { "not held" })
                }
            };
            assert_eq!(
                (&got.event, &got.holder, shown.as_str()),
                (&event, &holder, note),
                "row {i}"
            );
        }
    }
}
