//! The one async loop: events in → `Machine::step` → log the transition →
//! perform the actions. Lease requests run one at a time on a worker task, so
//! a slow Redis never blocks timers, signals or the work; their results come
//! back as events.

mod health;
mod log;
mod modes;
mod registry;
mod report;
mod succession;

pub use modes::EXIT_NOT_LEADER;

use health::Health;
use log::{Line, log_transition};
use modes::{Asked, Once, step_down};
use registry::Registration;
use report::{ErrorLog, absorb, notice_duplicate_id};
use succession::{Succession, Verdict};

use crate::config::Config;
use crate::config::Priority;
use crate::lease::registry::Record;
use crate::lease::{self, Acquire, LeaseBackend, Renew};
use crate::machine::{Action, Event, Machine, Reason, State, StateName};
use crate::metrics::Metrics;
use crate::status::{Change, Changes, HeldLease, Snapshot};
use crate::work::{Work, WorkEvent};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

#[derive(Debug)]
enum Op {
    Acquire,
    Renew,
    Release,
    Register(Record),
    StepAside,
}

enum Report {
    Acquire(Result<Acquire, lease::Error>),
    Renew(Result<Renew, lease::Error>),
    Release(Result<bool, lease::Error>),
}

/// A registration's answer: everyone's records. Reported apart from the
/// lease's operations: it is no event of the machine.
type Registered = Result<Vec<Record>, lease::Error>;

/// Where the runner reports what happens: the snapshot `/leader` reads, the
/// change stream `/leader/events` relays, and the metrics.
pub struct Outputs {
    pub status: watch::Sender<Snapshot>,
    pub changes: Changes,
    pub metrics: Arc<Metrics>,
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
    mut work: Work,
    inputs: Inputs,
    outputs: Outputs,
    shutdown: CancellationToken,
) -> Option<i32> {
    let Outputs {
        status,
        changes,
        metrics,
    } = outputs;
    let Inputs {
        mut work_events,
        mut admin,
        health,
    } = inputs;
    let (mut health, gate) = match (&config.health, health) {
        (Some(c), Some(prober)) => {
            let (health, gate) = Health::start(c, prober, &work, metrics.clone(), &status);
            (Some(health), gate)
        }
        _ => (None, None),
    };
    let machine = Machine {
        timing: config.timing,
        stop_timeout: config.child.stop_timeout,
        health: gate,
    };
    let ident = Ident {
        id: &config.id,
        key: &config.key,
    };
    let (ops, op_rx) = mpsc::unbounded_channel();
    let (report_tx, mut reports) = mpsc::unbounded_channel();
    let (registered_tx, mut registered) = mpsc::unbounded_channel();
    let (notice_tx, mut notices) = mpsc::unbounded_channel();
    let stop_watching = CancellationToken::new();
    let watcher = backend.watch_releases(
        config.timing.retry_interval,
        notice_tx,
        stop_watching.clone(),
    );
    let worker = tokio::spawn(lease_worker(
        backend,
        op_rx,
        report_tx,
        registered_tx,
        metrics.clone(),
    ));
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
    let mut registration = Registration::new(
        &config.id,
        config.priority.clone(),
        config.timing.renew_interval,
        config.timing.refused_backoff(),
    );
    let mut succession =
        Succession::new(&config.id, config.priority.clone(), config.handover_delay);
    // Whether the registry says another candidate outranks this one; the
    // machine is told whenever its state does not remember it so.
    let mut outranked = 0;
    // A targeted handover under way: when to release, and the hold after.
    let mut handover: Option<(Instant, Duration)> = None;
    let mut duplicate_warned = false;
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
                    Action::StepAside => drop(ops.send(Op::StepAside)),
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
                once = None;
            }
            continue;
        }
        if carries_standing(&state) && state.standing().outranked != outranked {
            next = Some(Event::Outranked(outranked));
            continue;
        }
        let wake = machine
            .next_deadline(&state)
            .map(|d| with_jitter(d, &state));
        let healthy = health.as_ref().and_then(Health::healthy);
        let register_at = registration.due(healthy).filter(|_| !shutdown_seen);
        next = tokio::select! {
            _ = shutdown.cancelled(), if !shutdown_seen => {
                shutdown_seen = true;
                status.send_modify(|s| s.shutting_down = true);
                Some(Event::ShutdownRequested)
            }
            _ = sleep_until(register_at), if register_at.is_some() => {
                drop(ops.send(Op::Register(registration.record(healthy))));
                None
            }
            Some(result) = registered.recv() => {
                let records = registration.answered(result, &status, &metrics);
                records.and_then(|records| {
                    let verdict = succession.judge(&records, state.leading().map(|l| l.fencing_token), Instant::now());
                    outranked = verdict.outranked;
                    hand_over(verdict, succession.priority(), config.timing.retry_interval)
                })
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
                notice_duplicate_id(&status, ident.id, &mut duplicate_warned);
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
            Some(request) = admin.recv() => {
                let candidates = registration.records.clone();
                let after = config.timing.renew_interval + ANNOUNCED;
                match step_down(&state, request, hold, (ident.id, &candidates, after)) {
                    Asked::StepDown(event) => Some(event),
                    Asked::HandOver { to, hold } => {
                        registration.successor = Some(to);
                        registration.soon();
                        handover = Some((Instant::now() + after, hold));
                        None
                    }
                    Asked::Nothing => None,
                }
            }
            _ = sleep_until(handover.map(|(at, _)| at)), if handover.is_some() => {
                let (_, hold) = handover.take().expect("armed");
                registration.successor = None;
                state.leading().map(|_| Event::StepDown { hold, reason: Reason::HandOverTo })
            }
            // Once, at the deadline (a deadline in the past would fire at
            // every turn of the loop); an answer after it is judged as it
            // comes.
            _ = sleep_until(once.as_ref().map(|o| o.deadline)), if once.as_ref().is_some_and(|o| !o.started && o.deadline > Instant::now()) => Some(Event::Tick),
            Some(()) = notices.recv() => Some(Event::ReleaseNotified),
            Some(verdict) = next_verdict(&mut health) => health
                .as_mut()
                .and_then(|h| h.absorb(verdict, &state, &status, &changes, &ident)),
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
    if let Some(health) = health {
        health.finish().await;
    }
    exit_code
}

/// How long past one renew interval a targeted handover waits before it
/// releases: every candidate has read the registry once since the
/// announcement, its answer included.
const ANNOUNCED: Duration = Duration::from_millis(250);

/// A state that remembers its standing (not idle, not leading, not on the
/// way out, where [`Event::Outranked`] changes nothing).
fn carries_standing(state: &State) -> bool {
    !state.exiting()
        && matches!(
            state.name(),
            StateName::Acquiring | StateName::Pausing | StateName::Releasing | StateName::Waiting
        )
}

/// The leader's step-down to the candidate that outranks it, once seen for
/// the handover delay; it holds off a retry interval, by when the other has
/// taken the lease.
fn hand_over(verdict: Verdict, mine: &Priority, hold: Duration) -> Option<Event> {
    let (to, theirs) = verdict.hand_over?;
    tracing::info!(successor = %to, priority = %theirs, own_priority = %mine, "handing over to a candidate of higher priority");
    Some(Event::StepDown {
        hold,
        reason: Reason::HandOver,
    })
}

async fn next_verdict(health: &mut Option<Health>) -> Option<crate::health::Verdict> {
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
    registered: mpsc::UnboundedSender<Registered>,
    metrics: Arc<Metrics>,
) {
    while let Some(op) = ops.recv().await {
        let started = Instant::now();
        let report = match op {
            Op::Acquire => Report::Acquire(backend.acquire().await),
            Op::Renew => Report::Renew(backend.renew().await),
            Op::Register(me) => {
                let result = backend.register(Some(&me)).await;
                let outcome = result.as_ref().map_or_else(report::failure, |_| "ok");
                metrics.lease_op("register", outcome, started.elapsed());
                metrics.backend_nodes(backend.nodes());
                if registered.send(result).is_err() {
                    break;
                }
                continue;
            }
            Op::StepAside => {
                if let Err(e) = backend.step_aside().await {
                    tracing::debug!(error = %e, "could not step aside; the lease may go to this candidate");
                }
                continue;
            }
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
        metrics.backend_nodes(backend.nodes());
        if reports.send(report).is_err() {
            break;
        }
    }
    // Off the registry, so the others do not list us for another TTL.
    let _ = backend.register(None).await;
    backend.close().await;
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
