//! The one async loop: events in → `Machine::step` → log the transition →
//! perform the actions. Lease requests run one at a time on a worker task, so
//! a slow Redis never blocks timers, signals or the work; their results come
//! back as events.

use crate::config::Config;
use crate::lease::{self, Acquire, Holder, LeaseBackend, Renew};
use crate::machine::{Action, Event, Machine, Reason, State, StateName};
use crate::metrics::Metrics;
use crate::status::{Change, Changes, HeldLease, Observed, Snapshot};
use crate::work::{Work, WorkEvent};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Copy)]
enum Op {
    Acquire,
    Renew,
    Release,
}

enum Report {
    Acquire(Result<Acquire, lease::Error>),
    Renew(Result<Renew, lease::Error>),
    Release(Result<bool, lease::Error>),
}

/// Where the runner reports what happens: the snapshot `/leader` reads, the
/// change stream `/leader/events` relays, and the metrics.
pub struct Outputs {
    pub status: watch::Sender<Snapshot>,
    pub changes: Changes,
    pub metrics: Arc<Metrics>,
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
    mut work: Work,
    mut work_events: mpsc::UnboundedReceiver<WorkEvent>,
    outputs: Outputs,
    mut admin: mpsc::UnboundedReceiver<crate::admin::Request>,
    shutdown: CancellationToken,
) -> Option<i32> {
    let Outputs {
        status,
        changes,
        metrics,
    } = outputs;
    let machine = Machine {
        timing: config.timing,
        stop_timeout: config.child.stop_timeout,
    };
    let ident = Ident {
        id: &config.id,
        key: &config.key,
    };
    let (ops, op_rx) = mpsc::unbounded_channel();
    let (report_tx, mut reports) = mpsc::unbounded_channel();
    let (notice_tx, mut notices) = mpsc::unbounded_channel();
    let stop_watching = CancellationToken::new();
    let watcher = backend.watch_releases(
        config.timing.retry_interval,
        notice_tx,
        stop_watching.clone(),
    );
    let worker = tokio::spawn(lease_worker(backend, op_rx, report_tx, metrics.clone()));
    let mut errors = ErrorLog::default();
    let mut state = State::Idle;
    let mut exit = false;
    let mut shutdown_seen = shutdown.is_cancelled();
    let mut exit_code = None;
    let mut work_deadline = None;
    // The holder a standby last named at INFO: a standby says once who
    // leads, not at every re-check.
    let mut announced: Option<Option<String>> = None;
    // Whether we led since the last release: a standby's release on the way
    // out (owner-checked, in case an unanswered acquire did land) is not
    // news, whatever its outcome.
    let mut held = false;
    let mut once = config.child.wait.map(|wait| Once {
        deadline: Instant::now() + wait,
        answered: false,
        started: false,
    });
    let hold = config.admin.step_down_hold;
    status.send_modify(|s| {
        s.ready = true;
        s.shutting_down = shutdown_seen;
    });
    // A signal during start-up: exit without campaigning.
    let mut next = Some(if shutdown_seen {
        Event::ShutdownRequested
    } else {
        Event::Started
    });
    while !exit {
        if let Some(event) = next.take() {
            let tr = machine.step(&state, event, Instant::now());
            let from = state.name();
            if tr.next.name() != from {
                let mut quiet = tr.reason.routine();
                if tr.reason == Reason::HeldByOther {
                    let holder = status.borrow().observed.as_ref().and_then(|o| o.id.clone());
                    quiet = announced.as_ref() == Some(&holder);
                    announced = Some(holder);
                } else if tr.next.leading().is_some() {
                    announced = None;
                }
                let holder = announced.clone().flatten();
                let line = Line {
                    reason: tr.reason.as_str(),
                    holder: holder.as_deref(),
                    quiet,
                };
                log_transition(&ident, &state, &tr.next, line);
                metrics.transition(from, tr.next.name());
            }
            state = tr.next;
            held |= state.leading().is_some();
            // Before the actions, so a child starts with its guard armed.
            let deadline = machine.work_deadline(&state);
            if deadline != work_deadline {
                work_deadline = deadline;
                work.set_deadline(deadline);
            }
            publish(&status, &machine, &state);
            if state.name() != from {
                let view = status
                    .borrow()
                    .leader_view(ident.id, ident.key, Instant::now());
                changes.publish(Change::now(&view, Some(from), Some(tr.reason.as_str())));
            }
            for action in tr.actions {
                match action {
                    Action::Acquire => drop(ops.send(Op::Acquire)),
                    Action::Renew => drop(ops.send(Op::Renew)),
                    Action::Release => drop(ops.send(Op::Release)),
                    Action::StartWork { fencing_token } => {
                        if let Some(once) = &mut once {
                            once.started = true;
                        }
                        work.start(fencing_token, tr.reason.as_str())
                    }
                    Action::StopWork { kill_at } => work.stop(kill_at, tr.reason.as_str()),
                    Action::Exit => exit = true,
                }
            }
            if let Some(code) = once.as_mut().and_then(|o| o.verdict(&state, shutdown_seen)) {
                exit_code = Some(code);
                shutdown.cancel();
            }
            continue;
        }
        let wake = machine
            .next_deadline(&state)
            .map(|d| with_jitter(d, &state));
        next = tokio::select! {
            _ = shutdown.cancelled(), if !shutdown_seen => {
                shutdown_seen = true;
                status.send_modify(|s| s.shutting_down = true);
                Some(Event::ShutdownRequested)
            }
            Some(report) = reports.recv() => {
                let released = matches!(report, Report::Release(_));
                if let Some(once) = &mut once {
                    once.answered |= matches!(report, Report::Acquire(_));
                }
                let event = absorb(report, &status, &mut errors, config.timing.ttl, held);
                if released {
                    held = false;
                }
                notice_duplicate_id(&status, &metrics, ident.id);
                Some(event)
            }
            Some(event) = work_events.recv() => Some(match event {
                WorkEvent::Stopped => Event::WorkStopped,
                WorkEvent::Exited { exit, code } => {
                    if exit {
                        exit_code = Some(code);
                    }
                    Event::WorkExited { exit }
                }
                WorkEvent::CrashLoop { .. } => Event::StepDown { hold, reason: Reason::CrashLoop },
            }),
            Some(request) = admin.recv() => step_down(&state, request, hold),
            _ = sleep_until(once.as_ref().map(|o| o.deadline)), if once.as_ref().is_some_and(|o| !o.started) => Some(Event::Tick),
            Some(()) = notices.recv() => Some(Event::ReleaseNotified),
            _ = sleep_until(wake), if wake.is_some() => Some(Event::Tick),
        };
    }
    drop(ops);
    // The worker ends once its queue is empty; the release has been answered.
    let _ = worker.await;
    stop_watching.cancel();
    if let Some(watcher) = watcher {
        let _ = watcher.await;
    }
    work.finish().await;
    exit_code
}

/// `leaderd step-down`: the leader steps down; anyone else says so.
fn step_down(state: &State, request: crate::admin::Request, hold: Duration) -> Option<Event> {
    use crate::admin::Reply;
    let hold = request.hold.unwrap_or(hold);
    match state.leading() {
        Some(lease) => {
            tracing::info!(hold = ?hold, fencing_token = lease.fencing_token, "step-down requested over the admin socket");
            let _ = request.reply.send(Reply::SteppingDown {
                fencing_token: lease.fencing_token,
                hold,
            });
            Some(Event::StepDown {
                hold,
                reason: Reason::StepDownRequested,
            })
        }
        None => {
            let _ = request.reply.send(Reply::NotLeader {
                state: state.name().as_str(),
            });
            None
        }
    }
}

/// Run-once mode (`--wait`): lead within the deadline and run the command
/// once, or give up.
struct Once {
    deadline: Instant,
    /// An acquire has been answered (so `--wait 0` is one real try).
    answered: bool,
    /// The command was started: from now on its exit ends the run.
    started: bool,
}

/// Not leader within `--wait`: the command never ran (EX_TEMPFAIL).
pub const EXIT_NOT_LEADER: i32 = 75;

impl Once {
    /// The exit code to end the run with, if the run-once outcome is known.
    fn verdict(&mut self, state: &State, shutdown_seen: bool) -> Option<i32> {
        if shutdown_seen {
            return None;
        }
        if !self.started {
            if self.answered
                && Instant::now() >= self.deadline
                && state.leading().is_none()
                && state.name() != StateName::Acquiring
            {
                tracing::info!("not leader within --wait: exiting without running the command");
                self.started = true; // decided: nothing more to judge
                return Some(EXIT_NOT_LEADER);
            }
            return None;
        }
        if state.name() == StateName::Waiting {
            tracing::error!(
                "the lease was lost while the command ran; it was stopped and is not run again"
            );
            return Some(1);
        }
        None
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Waiting candidates wake a little apart, so a crowd does not retry in step.
fn with_jitter(deadline: Instant, state: &State) -> Instant {
    if state.name() != StateName::Waiting {
        return deadline;
    }
    let mut byte = [0u8; 1];
    let spread = getrandom::fill(&mut byte).map_or(0, |_| u64::from(byte[0]) * 20 / 255);
    deadline + Duration::from_millis(spread)
}

async fn lease_worker(
    mut backend: Box<dyn LeaseBackend>,
    mut ops: mpsc::UnboundedReceiver<Op>,
    reports: mpsc::UnboundedSender<Report>,
    metrics: Arc<Metrics>,
) {
    while let Some(op) = ops.recv().await {
        let started = Instant::now();
        let report = match op {
            Op::Acquire => Report::Acquire(backend.acquire().await),
            Op::Renew => Report::Renew(backend.renew().await),
            Op::Release => {
                let mut result = backend.release().await;
                if matches!(
                    result,
                    Err(lease::Error::Timeout { .. } | lease::Error::Connection { .. })
                ) {
                    // One more try: a release that lands spares the others a
                    // wait of a whole TTL.
                    result = backend.release().await;
                }
                Report::Release(result)
            }
        };
        let (name, result) = report.outcome();
        metrics.lease_op(name, result, started.elapsed());
        if reports.send(report).is_err() {
            break;
        }
    }
}

impl Report {
    /// The operation and its result, as metric labels.
    fn outcome(&self) -> (&'static str, &'static str) {
        fn failed(e: &lease::Error) -> &'static str {
            match e {
                lease::Error::Timeout { .. } => "timeout",
                _ => "error",
            }
        }
        match self {
            Report::Acquire(Ok(Acquire::Won { .. })) => ("acquire", "ok"),
            Report::Acquire(Ok(Acquire::Held { .. })) => ("acquire", "held"),
            Report::Acquire(Err(e)) => ("acquire", failed(e)),
            Report::Renew(Ok(Renew::Renewed { .. })) => ("renew", "ok"),
            Report::Renew(Ok(Renew::Lost { .. })) => ("renew", "lost"),
            Report::Renew(Err(e)) => ("renew", failed(e)),
            Report::Release(Ok(true)) => ("release", "ok"),
            Report::Release(Ok(false)) => ("release", "lost"),
            Report::Release(Err(e)) => ("release", failed(e)),
        }
    }
}

/// Turns a backend report into the machine's event, recording what it told
/// us about the holder.
fn absorb(
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
/// Warned once per change, shown in `/leader` and the metrics.
fn notice_duplicate_id(status: &watch::Sender<Snapshot>, metrics: &Metrics, id: &str) {
    let duplicate = status
        .borrow()
        .observed
        .as_ref()
        .is_some_and(|o| o.id.as_deref() == Some(id));
    let changed = status.send_if_modified(|s| {
        let changed = s.duplicate_id != duplicate;
        s.duplicate_id = duplicate;
        changed
    });
    if !changed {
        return;
    }
    metrics.set_duplicate_id(duplicate);
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

fn publish(status: &watch::Sender<Snapshot>, machine: &Machine, state: &State) {
    let lease = state.leading().map(|l| HeldLease {
        fencing_token: l.fencing_token,
        valid_until: machine.timing.validity_end(l.sent_at),
    });
    status.send_if_modified(|s| {
        let changed = s.state != state.name() || s.lease != lease;
        if s.state != state.name() {
            s.state = state.name();
            s.state_since = SystemTime::now();
        }
        match (&s.lease, &lease) {
            (None, Some(_)) => s.leading_since = Some(SystemTime::now()),
            (_, None) => s.leading_since = None,
            _ => {}
        }
        s.lease = lease;
        changed
    });
}

fn fencing_of(state: &State) -> Option<u64> {
    match state {
        State::Working { lease } | State::Renewing { lease, .. } => Some(lease.fencing_token),
        State::Pausing {
            lease: Some(lease), ..
        } => Some(lease.fencing_token),
        _ => None,
    }
}

/// How a transition is logged.
struct Line<'a> {
    reason: &'static str,
    /// The other holder a standby names, when it knows one.
    holder: Option<&'a str>,
    /// DEBUG rather than INFO (see [`Reason::routine`]).
    quiet: bool,
}

/// One log event per transition: from, to, reason, id, key, fencing token
/// (and the holder a standby saw).
fn log_transition(ident: &Ident<'_>, from: &State, to: &State, line: Line<'_>) {
    let fencing_token = fencing_of(to).or_else(|| fencing_of(from));
    let (id, key) = (ident.id, ident.key);
    let (from, to) = (from.name().as_str(), to.name().as_str());
    let Line {
        reason,
        holder,
        quiet,
    } = line;
    // `tracing` fixes an event's level at the call site.
    if quiet {
        tracing::debug!(
            from,
            to,
            reason,
            id,
            key,
            fencing_token,
            holder,
            "transition"
        );
    } else {
        tracing::info!(
            from,
            to,
            reason,
            id,
            key,
            fencing_token,
            holder,
            "transition"
        );
    }
}

/// Backend errors, logged once per distinct message and then at most every
/// 30 s while they repeat, so an outage is not one line per retry.
#[derive(Default)]
struct ErrorLog {
    last: Option<(String, Instant)>,
    suppressed: u32,
}

const REPEAT_LOG_EVERY: Duration = Duration::from_secs(30);

impl ErrorLog {
    fn log(&mut self, op: &'static str, e: &lease::Error) {
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

    fn recovered(&mut self) {
        if self.last.take().is_some() {
            tracing::info!(suppressed = self.suppressed, "backend answering again");
            self.suppressed = 0;
        }
    }
}
