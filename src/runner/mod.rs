//! The one async loop: an input (a signal, a timer, the lease worker's
//! answer, the work, the admin socket, the health checks) → the runner's
//! handler → the machine's event → its actions. Lease requests run one at a
//! time on a worker task, so a slow store never blocks timers, signals or
//! the work; their results come back as inputs.

mod decide;
mod election;
mod health;
mod log;
mod registry;
mod report;
mod step_down;
mod succession;
mod worker;

pub use decide::EXIT_NOT_LEADER;

use crate::config::Config;
use crate::lease::{LeaseBackend, Wakeups};
use crate::metrics::Metrics;
use crate::status::{Changes, Snapshot};
use crate::work::{Work, WorkEvent};
use election::{Input, Runner, Waits};
use std::sync::Arc;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Where the runner reports what happens: the snapshot `/leader` reads, the
/// change stream `/leader/events` relays, and the metrics.
pub struct Outputs {
    pub status: watch::Sender<Snapshot>,
    pub changes: Changes,
    pub metrics: Arc<Metrics>,
    /// The backend's exports for the term just won
    /// ([`crate::lease::LeaseBackend::term_exports`]), set before the
    /// machine hears of the term, so the child and `/leader` read this
    /// term's.
    pub term_exports: watch::Sender<Vec<(&'static str, String)>>,
}

/// What the runner listens to besides the lease and its timers.
pub struct Inputs {
    pub work_events: mpsc::UnboundedReceiver<WorkEvent>,
    pub admin: mpsc::UnboundedReceiver<crate::admin::Request>,
    /// The worker's health check, built (`None`: not configured).
    pub health: Option<crate::health::probe::Prober>,
}

/// Who we are, for log lines.
struct Ident<'a> {
    id: &'a str,
    key: &'a str,
}

/// Runs the election until shutdown has released the lease. Returns the
/// child's exit code when `on_child_exit = exit` ended the run.
pub async fn run(
    config: &Config,
    backend: Box<dyn LeaseBackend>,
    work: Work,
    inputs: Inputs,
    outputs: Outputs,
    shutdown: CancellationToken,
) -> Option<i32> {
    let (notice_tx, notices) = mpsc::unbounded_channel();
    let stop_watching = CancellationToken::new();
    let watcher = backend.watch_releases(Wakeups {
        notices: notice_tx,
        retry: config.timing.retry_interval,
        stop: stop_watching.clone(),
    });
    let herald = backend.herald();
    if let Some(started) = &herald {
        outputs.metrics.announcements(started.herald.tally());
    }
    let fence = crate::fence::FenceConfig::of(config).cloned();
    let lease = worker::Lease {
        backend,
        fence,
        term_exports: outputs.term_exports.clone(),
        ttl: config.timing.ttl,
        herald: herald.as_ref().map(|h| h.herald.clone()),
        term: None,
    };
    let (ops, answers, worker) = worker::spawn(lease, outputs.metrics.clone());
    let mut channels = Channels {
        answers,
        notices,
        work_events: inputs.work_events,
        admin: inputs.admin,
        shutdown: shutdown.clone(),
    };
    let mut runner = Runner::new(config, work, inputs.health, ops, outputs, shutdown);
    runner.herald = herald.as_ref().map(|h| h.herald.clone());
    let mut next = Some(runner.first());
    while !runner.done() {
        if let Some(event) = next.take().or_else(|| runner.pending()) {
            runner.apply(event, Instant::now());
            continue;
        }
        let waits = runner.waits(Instant::now());
        let input = channels.next(waits, &mut runner.health).await;
        next = runner.on(input, Instant::now());
    }
    // The worker ends once its queue is empty (the release answered): the
    // runner held the only sender, dropped here.
    let (work, health, exit_code) = runner.finish();
    let _ = worker.await;
    if let Some(herald) = herald {
        herald.finish().await;
    }
    stop_watching.cancel();
    if let Some(watcher) = watcher {
        let _ = watcher.await;
    }
    work.finish().await;
    if let Some(health) = health {
        health.finish().await;
    }
    exit_code
}

/// The loop's channels.
struct Channels {
    answers: worker::Answers,
    notices: mpsc::UnboundedReceiver<()>,
    work_events: mpsc::UnboundedReceiver<WorkEvent>,
    admin: mpsc::UnboundedReceiver<crate::admin::Request>,
    shutdown: CancellationToken,
}

impl Channels {
    /// The next input: whichever comes first.
    async fn next(&mut self, waits: Waits, health: &mut Option<health::Health>) -> Input {
        let Waits {
            shutdown,
            register,
            handover,
            once,
            wake,
        } = waits;
        tokio::select! {
            _ = self.shutdown.cancelled(), if shutdown => Input::Shutdown,
            _ = sleep_until(register), if register.is_some() => Input::RegisterDue,
            Some(r) = self.answers.registered.recv() => Input::Registered(r),
            Some(r) = self.answers.reports.recv() => Input::Report(r),
            Some(e) = self.work_events.recv() => Input::Work(e),
            Some(r) = self.admin.recv() => Input::Admin(r),
            _ = sleep_until(handover), if handover.is_some() => Input::HandoverDue,
            _ = sleep_until(once), if once.is_some() => Input::OnceDeadline,
            Some(()) = self.notices.recv() => Input::ReleaseNotice,
            Some(v) = next_verdict(health) => Input::Health(v),
            _ = sleep_until(wake), if wake.is_some() => Input::Tick,
        }
    }
}

async fn next_verdict(health: &mut Option<health::Health>) -> Option<crate::health::Verdict> {
    match health {
        Some(h) => h.next().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
