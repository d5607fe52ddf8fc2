//! The lease worker: the backend's operations run one at a time on a task
//! of their own, so a slow store never blocks timers, signals or the work;
//! their answers come back on channels, with each one's metrics recorded.

use crate::fence::FenceConfig;
use crate::lease::herald::{Herald, News};
use crate::lease::registry::Record;
use crate::lease::{self, Acquire, LeaseBackend, Peek, Renew};
use crate::metrics::Metrics;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

#[derive(Debug)]
pub(super) enum Op {
    Acquire,
    /// Looks at the lease without taking it: an outranked standby, before
    /// it defers.
    Look,
    Renew,
    Release,
    Register(Record),
    /// Reads the registry, writing nothing: a standby woken by a release
    /// whose copy is old.
    ReadRegistry,
    StepAside,
}

pub(super) enum Report {
    Acquire(Result<Acquire, lease::Error>),
    Look(Result<Peek, lease::Error>),
    Renew(Result<Renew, lease::Error>),
    Release(Result<bool, lease::Error>),
}

/// A registration's answer: everyone's records. Reported apart from the
/// lease's operations: it is no event of the machine.
#[derive(Debug)]
pub(super) struct Registered {
    pub(super) result: Result<Vec<Record>, lease::Error>,
    /// The answer to a write ([`Op::Register`]), not to a read.
    pub(super) wrote: bool,
}

/// Where the worker's answers arrive.
pub(super) struct Answers {
    pub(super) reports: mpsc::UnboundedReceiver<Report>,
    pub(super) registered: mpsc::UnboundedReceiver<Registered>,
}

/// Starts the worker. It ends once the sender is dropped and its queue is
/// empty, after taking this candidate off the registry and closing the
/// backend.
pub(super) fn spawn(
    lease: Lease,
    metrics: Arc<Metrics>,
) -> (mpsc::UnboundedSender<Op>, Answers, JoinHandle<()>) {
    let (ops, op_rx) = mpsc::unbounded_channel();
    let (report_tx, reports) = mpsc::unbounded_channel();
    let (registered_tx, registered) = mpsc::unbounded_channel();
    let task = tokio::spawn(work(lease, op_rx, report_tx, registered_tx, metrics));
    let answers = Answers {
        reports,
        registered,
    };
    (ops, answers, task)
}

/// The backend, the fence raised as each term starts, and where the
/// term's exports go.
pub(super) struct Lease {
    pub(super) backend: Box<dyn LeaseBackend>,
    pub(super) fence: Option<FenceConfig>,
    pub(super) term_exports: watch::Sender<Vec<(&'static str, String)>>,
    /// The lease's TTL: how long a release that does not come back is
    /// worth trying again.
    pub(super) ttl: Duration,
    /// Where a term's end is announced ([`crate::lease::herald`]), and the
    /// term won last whose end is not yet told.
    pub(super) herald: Option<Herald>,
    pub(super) term: Option<u64>,
}

/// Between two tries of a release the store did not answer: often enough
/// that the waiters hear of it soon after the store is back.
const RELEASE_RETRY: Duration = Duration::from_millis(200);

impl Lease {
    /// Releases, and tries again while the store does not answer, until it
    /// answers or a TTL has passed: by then the term has lapsed anyway (its
    /// last renewal came before the first try), and waiters take the lease
    /// by its expiry. A release that lands spares them that wait.
    async fn release(&mut self) -> Result<bool, lease::Error> {
        let result = self.release_retried().await;
        let news = match &result {
            Ok(true) => |token| News::Released { token },
            _ => |token| News::Lost { token },
        };
        self.tell_end(news);
        result
    }

    /// The herald's last news of the term, once.
    fn tell_end(&mut self, news: fn(u64) -> News) {
        if let (Some(herald), Some(token)) = (&self.herald, self.term.take()) {
            herald.tell(news(token));
        }
    }

    /// [`Lease::release`]: after the herald announced the term's end (a
    /// Service no longer names us), then again while the store does not
    /// answer.
    async fn release_retried(&mut self) -> Result<bool, lease::Error> {
        if let Some(herald) = &self.herald {
            herald.settle().await;
        }
        let until = Instant::now() + self.ttl;
        loop {
            let result = self.backend.release().await;
            let retry = result.as_ref().is_err_and(lease::Error::is_transient);
            if !retry || Instant::now() + RELEASE_RETRY >= until {
                return result;
            }
            if let Err(e) = &result {
                tracing::debug!(error = %e, "the release did not come back; trying again");
            }
            tokio::time::sleep(RELEASE_RETRY).await;
        }
    }

    /// Acquires, then raises the fence (if any) to the new term's token
    /// before the machine hears of the term. A term whose fence cannot be
    /// raised is given back and reported as the fence's error: its work
    /// never starts unfenced, and the machine retries as for any failed
    /// acquisition (slowly, when a person must act).
    async fn acquire(&mut self) -> Result<Acquire, lease::Error> {
        let won = self.backend.acquire().await?;
        let Acquire::Won { fencing_token, .. } = &won else {
            return Ok(won);
        };
        let raised = match &self.fence {
            Some(fence) => fence.raise(*fencing_token).await,
            None => Ok(()),
        };
        match raised {
            Ok(()) => {
                if self.fence.is_some() {
                    tracing::debug!(fencing_token, "fence raised");
                }
                self.term_exports.send_replace(self.backend.term_exports());
                self.term = Some(*fencing_token);
                Ok(won)
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot raise the fence for the new term; giving the lease back, so that no work runs unfenced");
                if let Err(released) = self.backend.release().await {
                    tracing::debug!(error = %released, "could not give the lease back; it lapses at its TTL");
                }
                Err(e)
            }
        }
    }
}

async fn work(
    lease: Lease,
    mut ops: mpsc::UnboundedReceiver<Op>,
    reports: mpsc::UnboundedSender<Report>,
    registered: mpsc::UnboundedSender<Registered>,
    metrics: Arc<Metrics>,
) {
    let mut lease = lease;
    while let Some(op) = ops.recv().await {
        let started = Instant::now();
        let report = match op {
            Op::Acquire => Report::Acquire(lease.acquire().await),
            Op::Look => Report::Look(lease.backend.look().await),
            Op::Renew => {
                let renewed = lease.backend.renew().await;
                if let Ok(Renew::Lost { .. }) = renewed {
                    lease.tell_end(|token| News::Lost { token });
                }
                Report::Renew(renewed)
            }
            Op::Register(_) | Op::ReadRegistry => {
                let (result, wrote) = match &op {
                    Op::Register(me) => (lease.backend.register(Some(me)).await, true),
                    _ => (lease.backend.candidates().await, false),
                };
                let outcome = result.as_ref().map_or_else(lease::Error::label, |_| "ok");
                let name = if wrote { "register" } else { "read_registry" };
                metrics.lease_op(name, outcome, started.elapsed());
                metrics.backend_nodes(lease.backend.nodes());
                if registered.send(Registered { result, wrote }).is_err() {
                    break;
                }
                continue;
            }
            Op::StepAside => {
                if let Err(e) = lease.backend.step_aside().await {
                    tracing::debug!(error = %e, "could not step aside; the lease may go to this candidate");
                }
                continue;
            }
            Op::Release => Report::Release(lease.release().await),
        };
        let (name, result) = report.outcome();
        metrics.lease_op(name, result, started.elapsed());
        metrics.backend_nodes(lease.backend.nodes());
        metrics.standby_reads(lease.backend.standby_reads());
        if reports.send(report).is_err() {
            break;
        }
    }
    // Off the registry, so the others do not list us for another TTL.
    let _ = lease.backend.register(None).await;
    lease.backend.close().await;
}

impl Report {
    /// The operation and its result, as metric labels.
    pub(super) fn outcome(&self) -> (&'static str, &'static str) {
        let failed = lease::Error::label;
        match self {
            Report::Acquire(Ok(Acquire::Won { .. })) => ("acquire", "ok"),
            Report::Acquire(Ok(Acquire::Held { .. })) => ("acquire", "held"),
            Report::Acquire(Err(e)) => ("acquire", failed(e)),
            Report::Look(Ok(peek)) if peek.vacant() => ("look", "vacant"),
            Report::Look(Ok(_)) => ("look", "held"),
            Report::Look(Err(e)) => ("look", failed(e)),
            Report::Renew(Ok(Renew::Renewed { .. })) => ("renew", "ok"),
            Report::Renew(Ok(Renew::Lost { .. })) => ("renew", "lost"),
            Report::Renew(Err(e)) => ("renew", failed(e)),
            Report::Release(Ok(true)) => ("release", "ok"),
            Report::Release(Ok(false)) => ("release", "lost"),
            Report::Release(Err(e)) => ("release", failed(e)),
        }
    }
}
