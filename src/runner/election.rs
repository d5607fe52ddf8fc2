//! What one run of the election carries between turns of the loop, and the
//! two things a turn does: [`Runner::on`] turns an input into the machine's
//! event (one handler per input), and [`Runner::apply`] steps the machine
//! and performs its actions (log, metrics, `/leader`, the lease worker, the
//! work). The decisions either takes are pure, in `decide`.

use super::decide::{Announced, Handover, Once, standing_news};
use super::health::Health;
use super::log::{Line, log_transition};
use super::registry::{Due, Registration};
use super::report::{ErrorLog, absorb, notice_duplicate_id};
use super::step_down::{Asked, step_down};
use super::succession::Succession;
use super::worker::{Op, Registered, Report};
use super::{Ident, Outputs};
use crate::admin::AdminConfig;
use crate::config::Config;
use crate::health::HealthConfig;
use crate::lease::herald::{Herald, News};
use crate::machine::{Action, Event, Machine, Reason, State, StateName};
use crate::metrics::Metrics;
use crate::priority::Ranking;
use crate::status::{Change, Changes, HeldLease, Snapshot};
use crate::work::{Work, WorkEvent};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What woke the loop.
pub(super) enum Input {
    Shutdown,
    RegisterDue,
    Registered(Registered),
    Report(Report),
    Work(WorkEvent),
    Admin(crate::admin::Request),
    HandoverDue,
    OnceDeadline,
    ReleaseNotice,
    Health(crate::health::Verdict),
    Tick,
}

/// What the loop waits for, besides its channels: each `None` is never.
pub(super) struct Waits {
    pub(super) shutdown: bool,
    pub(super) register: Option<Instant>,
    pub(super) handover: Option<Instant>,
    pub(super) once: Option<Instant>,
    pub(super) wake: Option<Instant>,
}

/// How long past one renew interval a targeted handover waits before it
/// releases: every candidate has read the registry once since the
/// announcement, its answer included.
const ANNOUNCED: Duration = Duration::from_millis(250);

pub(super) struct Runner<'c> {
    config: &'c Config,
    machine: Machine,
    state: State,
    work: Work,
    pub(super) health: Option<Health>,
    ops: mpsc::UnboundedSender<Op>,
    status: watch::Sender<Snapshot>,
    changes: Changes,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    shutdown_seen: bool,
    exit: bool,
    exit_code: Option<i32>,
    work_deadline: Option<Instant>,
    errors: ErrorLog,
    announced: Announced,
    /// Whether we led since the last release: a standby's release on the
    /// way out (owner-checked, in case an unanswered acquire did land) is
    /// not news, whatever its outcome.
    held: bool,
    once: Option<Once>,
    registration: Registration,
    /// What the machine hears once the records being read afresh are
    /// judged: a release wake-up.
    after_read: Option<Event>,
    succession: Succession,
    /// How many registered candidates outrank this one.
    outranked: u8,
    handover: Handover,
    duplicate_warned: bool,
    /// Where the term's start and end are announced outside leaderd, and
    /// the term being announced.
    pub(super) herald: Option<Herald>,
    term: Option<u64>,
}

impl<'c> Runner<'c> {
    pub(super) fn new(
        config: &'c Config,
        work: Work,
        prober: Option<crate::health::probe::Prober>,
        ops: mpsc::UnboundedSender<Op>,
        outputs: Outputs,
        shutdown: CancellationToken,
    ) -> Runner<'c> {
        let Outputs {
            status,
            changes,
            metrics,
            term_exports: _,
        } = outputs;
        let (health, gate) = match (HealthConfig::of(config), prober) {
            (Some(c), Some(prober)) => {
                let (health, gate) = Health::start(c, prober, &work, metrics.clone(), &status);
                (Some(health), gate)
            }
            _ => (None, None),
        };
        let timing = config.timing;
        let ranking = Ranking::of(config);
        let shutdown_seen = shutdown.is_cancelled();
        status.send_modify(|s| {
            s.ready = true;
            s.shutting_down = shutdown_seen;
        });
        Runner {
            config,
            machine: Machine {
                timing,
                stop_timeout: config.child.stop_timeout,
                health: gate,
            },
            state: State::Idle,
            work,
            health,
            ops,
            status,
            changes,
            metrics,
            shutdown,
            shutdown_seen,
            exit: false,
            exit_code: None,
            work_deadline: None,
            errors: ErrorLog::default(),
            announced: Announced::default(),
            held: false,
            once: config
                .child
                .wait
                .map(|wait| Once::new(Instant::now(), wait)),
            registration: Registration::new(&config.id, ranking.priority.clone(), timing),
            after_read: None,
            succession: Succession::new(&config.id, ranking.priority, ranking.handover_delay),
            outranked: 0,
            handover: Handover::default(),
            duplicate_warned: false,
            herald: None,
            term: None,
        }
    }

    /// The first event: a signal during start-up exits without campaigning.
    pub(super) fn first(&self) -> Event {
        if self.shutdown_seen {
            Event::ShutdownRequested
        } else {
            Event::Started
        }
    }

    /// The machine said exit, or run-once mode's verdict did.
    pub(super) fn done(&self) -> bool {
        self.exit
    }

    /// The run is over: the work and the health checks to wind down, and
    /// the child's exit code when `on_child_exit = exit` ended the run. The
    /// lease worker's queue closes here.
    pub(super) fn finish(self) -> (Work, Option<Health>, Option<i32>) {
        (self.work, self.health, self.exit_code)
    }

    /// What the machine must hear before the loop waits again.
    pub(super) fn pending(&mut self) -> Option<Event> {
        standing_news(&self.state, self.outranked).or_else(|| {
            if self.registration.reading {
                return None;
            }
            self.after_read.take()
        })
    }

    /// Reads the registry, then lets the machine hear `event`.
    fn read_first(&mut self, event: Event) {
        if !self.registration.reading {
            self.registration.reading = true;
            drop(self.ops.send(Op::ReadRegistry));
        }
        self.after_read = Some(event);
    }

    pub(super) fn waits(&self, now: Instant) -> Waits {
        let healthy = self.health.as_ref().and_then(Health::healthy);
        Waits {
            shutdown: !self.shutdown_seen,
            register: self
                .registration
                .due(healthy, self.state.leading().is_some(), now)
                .filter(|_| !self.shutdown_seen),
            handover: self.handover.at(),
            once: self.once.as_ref().and_then(|o| o.wake(now)),
            // While the records are read before a campaign, the machine's
            // deadline (already due) waits for their answer.
            wake: self
                .machine
                .next_deadline(&self.state)
                .filter(|_| self.after_read.is_none())
                .map(|d| with_jitter(d, &self.state)),
        }
    }

    /// One input, handled: the machine's event it means, if any.
    pub(super) fn on(&mut self, input: Input, now: Instant) -> Option<Event> {
        let config = self.config;
        match input {
            Input::Shutdown => {
                self.shutdown_seen = true;
                self.status.send_modify(|s| s.shutting_down = true);
                Some(Event::ShutdownRequested)
            }
            Input::RegisterDue => {
                let healthy = self.health.as_ref().and_then(Health::healthy);
                let leading = self.state.leading().is_some();
                match self.registration.take_due(healthy, leading, now) {
                    Some(Due::Write(me)) => drop(self.ops.send(Op::Register(me))),
                    Some(Due::Read) => drop(self.ops.send(Op::ReadRegistry)),
                    None => {}
                }
                None
            }
            Input::Registered(result) => {
                let leading = self.state.leading().is_some();
                let records = self.registration.answered(
                    result,
                    (leading, now),
                    &self.status,
                    &self.metrics,
                )?;
                let leading = self.state.leading().map(|l| l.fencing_token);
                let verdict = self.succession.judge(&records, leading, now);
                self.outranked = verdict.outranked;
                if verdict.chosen {
                    tracing::info!(
                        "leading as the successor step-down --to named: this term is not handed over to a candidate of higher priority"
                    );
                }
                let (to, theirs) = verdict.hand_over?;
                let mine = self.succession.priority();
                tracing::info!(successor = %to, priority = %theirs, own_priority = %mine, "handing over to a candidate of higher priority");
                Some(Event::StepDown {
                    hold: config.timing.retry_interval,
                    reason: Reason::HandOver,
                })
            }
            Input::Report(report) => {
                let released = matches!(report, Report::Release(_));
                if let Some(once) = &mut self.once {
                    once.answered |= matches!(report, Report::Acquire(_));
                }
                let ttl = config.timing.ttl;
                let event = absorb(report, &self.status, &mut self.errors, ttl, self.held);
                self.held &= !released;
                notice_duplicate_id(&self.status, &config.id, &mut self.duplicate_warned);
                Some(event)
            }
            Input::Work(WorkEvent::Stopped) => Some(Event::WorkStopped),
            Input::Work(WorkEvent::Exited { exit, code }) => {
                if exit {
                    self.exit_code = Some(code);
                }
                Some(Event::WorkExited { exit })
            }
            Input::Work(WorkEvent::CrashLoop { .. }) => Some(Event::StepDown {
                hold: AdminConfig::of(config).step_down_hold,
                reason: Reason::CrashLoop,
            }),
            Input::Admin(request) => {
                let candidates = self.registration.records.clone();
                let after = config.timing.renew_interval + ANNOUNCED;
                let hold = AdminConfig::of(config).step_down_hold;
                match step_down(&self.state, request, hold, (&config.id, &candidates, after)) {
                    Asked::StepDown(event) => Some(event),
                    Asked::HandOver { to, hold } => {
                        self.registration.name_successor(to);
                        self.handover.announce(now, after, hold);
                        None
                    }
                    Asked::Nothing => None,
                }
            }
            Input::HandoverDue => {
                self.registration
                    .successor_named_until(now + config.timing.ttl);
                self.handover.due(self.state.leading().is_some())
            }
            Input::OnceDeadline | Input::Tick => Some(Event::Tick),
            Input::ReleaseNotice => {
                // A standby's copy of the registry may be a heartbeat old,
                // and a newcomer may have registered a moment before the
                // release: read it before campaigning (one read per woken
                // standby per release, none while idle), so it defers to
                // whom it must.
                if self.state.leading().is_some() {
                    return Some(Event::ReleaseNotified);
                }
                self.read_first(Event::ReleaseNotified);
                None
            }
            Input::Health(verdict) => {
                let ident = Ident {
                    id: &config.id,
                    key: &config.key,
                };
                let health = self.health.as_mut()?;
                health.absorb(verdict, &self.state, &self.status, &self.changes, &ident)
            }
        }
    }

    /// Steps the machine and performs what it decided.
    pub(super) fn apply(&mut self, event: Event, now: Instant) {
        let config = self.config;
        let ident = Ident {
            id: &config.id,
            key: &config.key,
        };
        let tr = self.machine.step(&self.state, event, now);
        let from = self.state.name();
        if tr.next.name() != from {
            let holder = self
                .status
                .borrow()
                .observed
                .as_ref()
                .and_then(|o| o.id.clone());
            let leads = tr.next.leading().is_some();
            let (quiet, holder) = self.announced.line(tr.reason, leads, holder);
            let line = Line {
                reason: tr.reason.as_str(),
                holder: holder.as_deref(),
                quiet,
            };
            log_transition(&ident, &self.state, &tr.next, line);
            self.metrics.transition(from, tr.next.name());
        }
        self.state = tr.next;
        self.held |= self.state.leading().is_some();
        // Before the actions, so a child starts with its guard armed.
        let deadline = self.machine.work_deadline(&self.state);
        if deadline != self.work_deadline {
            self.work_deadline = deadline;
            self.work.set_deadline(deadline);
        }
        publish(&self.status, &self.machine, &self.state);
        if self.state.name() != from {
            let view = self.status.borrow().leader_view(ident.id, ident.key, now);
            let change = Change::now(&view, Some(from), Some(tr.reason.as_str()));
            self.changes.publish(change);
        }
        for action in tr.actions {
            let op = match action {
                Action::Acquire => Op::Acquire,
                Action::Look => Op::Look,
                Action::Renew => Op::Renew,
                Action::Release => Op::Release,
                Action::StepAside => Op::StepAside,
                Action::StartWork { fencing_token } => {
                    if let Some(once) = &mut self.once {
                        once.started = true;
                    }
                    self.work.start(fencing_token, tr.reason.as_str());
                    self.term = Some(fencing_token);
                    self.tell(|token| News::Began { token });
                    continue;
                }
                Action::StopWork { kill_at } => {
                    self.work.stop(kill_at, tr.reason.as_str());
                    self.tell(|token| News::Ending { token });
                    self.term = None;
                    continue;
                }
                Action::Exit => {
                    self.exit = true;
                    continue;
                }
            };
            drop(self.ops.send(op));
        }
        let once = self.once.as_ref();
        if let Some(end) = once.and_then(|o| o.verdict(&self.state, self.shutdown_seen, now)) {
            end.log();
            self.exit_code = Some(end.code());
            self.shutdown.cancel();
            self.once = None;
        }
    }
}

impl Runner<'_> {
    /// Tells the herald, if any, of the current term's news.
    fn tell(&self, news: impl Fn(u64) -> News) {
        if let (Some(herald), Some(token)) = (&self.herald, self.term) {
            herald.tell(news(token));
        }
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

/// The snapshot `/leader` reads: the state, since when, and the lease held.
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
