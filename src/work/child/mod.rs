//! The child supervisor: one task that starts the command when leadership is
//! won, stops it (stop signal to the group, SIGKILL by the deadline the
//! machine gives), reaps everything, restarts it under `on_exit = restart`,
//! and forwards SIGHUP/SIGUSR1/SIGUSR2 to it.
//!
//! Its decisions are [`step`]'s, a pure function table-tested and swept in
//! `tests.rs`; this file is the driver: it turns signals, commands and
//! timers into events, and carries out the actions — spawning behind a
//! guard, signalling the group, sweeping it for stragglers, reporting to
//! the runner, logging.

mod state;
mod step;
#[cfg(test)]
mod sweep;
#[cfg(test)]
mod tests;

use super::WorkEvent;
use super::process::{self, Group, Spec};
use crate::config::{OnChildExit, Signal};
use crate::metrics::Metrics;
use state::{Action, Event, Policy, Say, Supervision};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long leaderd waits, on exit, for what it killed to be reaped: SIGKILL
/// takes effect at once unless a process is stuck in the kernel.
const EXIT_REAP_LIMIT: Duration = Duration::from_secs(2);
/// While a child runs, and while it is stopped, its exit is also looked for
/// this often, should the SIGCHLD that reports it never come: a stop must
/// not wait forever on one signal's delivery.
const REAP_POLL: Duration = Duration::from_secs(1);
const REAP_POLL_STOPPING: Duration = Duration::from_millis(100);
/// How long after start-up, or after the spare guard was used for a child,
/// the next spare guard is spawned.
const STANDBY_DELAY: Duration = Duration::from_millis(250);

const GUARD_FIRED: &str = "leaderd did not act by the lease's kill-by instant (it was stopped, blocked or starved): the guard killed the child";

#[derive(Debug, Clone)]
pub struct ChildSpec {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub id: String,
    pub key: String,
    pub ttl: Duration,
    pub stop_signal: Signal,
    pub on_exit: OnChildExit,
    /// Under `restart`: at most this many restarts within the window, then
    /// [`WorkEvent::CrashLoop`].
    pub restart_limit: Option<(u32, Duration)>,
    /// Set in the child's environment beside the term's: what it fences
    /// its writes with in the store (`LeaseBackend::fence_exports`).
    pub fence_exports: Vec<(&'static str, String)>,
    /// The same for the term being started, read as it starts
    /// (`LeaseBackend::term_exports`).
    pub term_exports: tokio::sync::watch::Receiver<Vec<(&'static str, String)>>,
    /// Environment variables taken out of the child's environment (the
    /// store's credentials: every secret option row's).
    pub scrub: Vec<&'static str>,
}

#[derive(Debug)]
pub enum Command {
    Start {
        fencing_token: u64,
    },
    Stop {
        kill_at: Instant,
    },
    /// The instant by which the work must be dead whatever leaderd does
    /// next: handed to the guard's dead-man's switch.
    Deadline(Option<Instant>),
}

struct Supervisor {
    spec: ChildSpec,
    policy: Policy,
    state: Supervision,
    /// The running (or stopping) child's group, behind its guard.
    group: Option<Group>,
    /// A guard spawned ahead of time for the next child. One is kept ready
    /// at all times, also while a child runs: a leader that restarts its
    /// child or leads again right after losing its lease pays only for the
    /// child's `posix_spawn`, and the spare is always there to be told
    /// apart from the work's stragglers, not only when timing allowed it.
    standby: Option<process::Guard>,
    /// When to spawn the standby guard: a moment after leaderd starts or the
    /// last one was used, so its exec never competes with a handover.
    standby_due: Option<Instant>,
    metrics: Arc<Metrics>,
    events: mpsc::UnboundedSender<WorkEvent>,
    /// Cancelled by the first SIGTERM/SIGINT: from then on no child is
    /// started, even one the machine asked for just before the signal came.
    shutdown: CancellationToken,
    /// When the running child started (`None` while none runs), for the
    /// health check that follows the child.
    running: watch::Sender<Option<Instant>>,
}

/// Runs the supervisor until `commands` closes, then kills whatever is left.
pub async fn supervise(
    spec: ChildSpec,
    mut commands: mpsc::UnboundedReceiver<Command>,
    events: mpsc::UnboundedSender<WorkEvent>,
    metrics: Arc<Metrics>,
    signals: crate::shutdown::Signals,
    running: watch::Sender<Option<Instant>>,
) {
    process::become_subreaper();
    let (Ok(mut chld), Ok(mut hup), Ok(mut usr1), Ok(mut usr2)) = (
        signal(SignalKind::child()),
        signal(SignalKind::hangup()),
        signal(SignalKind::user_defined1()),
        signal(SignalKind::user_defined2()),
    ) else {
        tracing::error!("cannot install signal handlers for the child; the child will not be run");
        return;
    };
    let mut s = Supervisor {
        policy: Policy {
            stop_signal: spec.stop_signal,
            on_exit: spec.on_exit,
            restart_limit: spec.restart_limit,
        },
        spec,
        state: Supervision::default(),
        group: None,
        standby: None,
        standby_due: Some(Instant::now() + STANDBY_DELAY),
        metrics,
        events,
        shutdown: signals.requested,
        running,
    };
    let hurry = signals.hurry;
    loop {
        let timer = s.next_timer();
        tokio::select! {
            command = commands.recv() => match command {
                Some(Command::Start { fencing_token }) => s.feed(Event::Start { fencing_token }),
                Some(Command::Stop { kill_at }) => s.feed(Event::Stop { kill_at }),
                Some(Command::Deadline(deadline)) => s.feed(Event::Deadline(deadline)),
                None => break,
            },
            _ = chld.recv() => s.reap(false),
            _ = hup.recv() => s.feed(Event::Forward { signal: libc::SIGHUP }),
            _ = usr1.recv() => s.feed(Event::Forward { signal: libc::SIGUSR1 }),
            _ = usr2.recv() => s.feed(Event::Forward { signal: libc::SIGUSR2 }),
            _ = sleep_until(timer), if timer.is_some() => s.on_timer(),
            _ = hurry.cancelled(), if !s.state.hurried() => s.feed(Event::Hurry),
        }
    }
    s.kill_everything();
}

async fn sleep_until(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at).await;
    }
}

impl Supervisor {
    fn next_timer(&self) -> Option<Instant> {
        let now = Instant::now();
        let poll = self.group.as_ref().map(|_| {
            let stopping = matches!(self.state.phase, state::Phase::Stopping { .. });
            now + if stopping {
                REAP_POLL_STOPPING
            } else {
                REAP_POLL
            }
        });
        [self.state.next_timer(now), self.standby_due, poll]
            .into_iter()
            .flatten()
            .min()
    }

    /// Steps the machine with `event` and carries out its actions, with the
    /// answers (a spawn's, a sweep's) fed back at once.
    fn feed(&mut self, event: Event) {
        // The shutdown token is read as the event arrives, as a direct check
        // would: a start that races the first signal is refused.
        if self.shutdown.is_cancelled() && !self.state.shutdown() {
            self.step(Event::ShutdownRequested);
        }
        self.step(event);
    }

    fn step(&mut self, event: Event) {
        let mut queue = vec![event];
        while let Some(event) = queue.pop() {
            let (next, actions) = step::step(&self.state, &self.policy, event, Instant::now());
            self.state = next;
            for action in actions {
                if let Some(answer) = self.act(action) {
                    queue.push(answer);
                }
            }
        }
    }

    /// Carries out one action; a spawn and a sweep answer with an event.
    fn act(&mut self, action: Action) -> Option<Event> {
        match action {
            Action::Spawn { fencing_token } => Some(self.spawn(fencing_token)),
            Action::Signal(signal) => {
                if let Some(group) = &self.group {
                    process::signal_group(group.pgid, signal);
                }
                None
            }
            Action::Sweep { kill } => {
                let group = self.group.as_ref()?;
                let stragglers = process::stragglers(group, self.standby.as_ref());
                if kill {
                    for pid in &stragglers {
                        process::signal_process(*pid, libc::SIGKILL);
                    }
                }
                Some(Event::Swept {
                    empty: stragglers.is_empty(),
                })
            }
            Action::Arm(deadline) => {
                if let Some(group) = &self.group {
                    group.arm(deadline);
                }
                None
            }
            Action::DismissGuard => {
                if let Some(mut group) = self.group.take() {
                    group.dismiss_guard();
                }
                if self.standby.is_none() {
                    self.standby_due
                        .get_or_insert(Instant::now() + STANDBY_DELAY);
                }
                None
            }
            Action::Report(event) => {
                let _ = self.events.send(event);
                None
            }
            Action::Say(say) => {
                self.say(say);
                None
            }
        }
    }

    fn say(&self, say: Say) {
        let command = self.spec.program.display();
        match say {
            Say::NotStarting { fencing_token, why } => {
                tracing::info!(fencing_token, "not starting the child: {why}")
            }
            Say::AlreadyRunning => {
                tracing::warn!("start requested while the child is already running; ignored")
            }
            Say::Started {
                child,
                fencing_token,
            } => {
                self.running.send_replace(Some(Instant::now()));
                tracing::info!(pid = child, fencing_token, command = %command, "child started")
            }
            Say::GuardFired { child } => tracing::error!(pid = child, "{GUARD_FIRED}"),
            Say::Stopping { child, signal } => {
                tracing::info!(pid = child, signal, "stopping the child")
            }
            Say::KillingLate { child } => tracing::warn!(
                pid = child,
                "child did not stop in time: SIGKILL to its process group"
            ),
            Say::Forwarding { child, signal } => tracing::info!(
                signal = signal_name(signal),
                pid = child,
                "forwarding signal to the child's process group"
            ),
            Say::ChildExited { child, code } => {
                self.running.send_replace(None);
                tracing::info!(pid = child, code, "child exited");
                self.metrics.child_exited();
            }
            Say::ChildStopped { child, code } => {
                self.running.send_replace(None);
                tracing::info!(pid = child, code, "child stopped");
                self.metrics.child_exited();
            }
            Say::CrashLoop {
                code,
                exits,
                limit,
                window,
            } => tracing::error!(
                code,
                exits,
                window = ?window,
                "the child keeps failing (restart limit {limit} in {window:?}): releasing the lease so another candidate can try"
            ),
            Say::Restarting { code, delay } => tracing::info!(
                code,
                delay = ?delay,
                "restarting the child after a backoff (on_child_exit = restart)"
            ),
        }
    }

    /// Starts the child behind the standby guard (or a fresh one).
    fn spawn(&mut self, fencing_token: u64) -> Event {
        let mut env_set = vec![
            ("LEADERD_ID", self.spec.id.clone()),
            ("LEADERD_KEY", self.spec.key.clone()),
            ("LEADERD_FENCING_TOKEN", fencing_token.to_string()),
            (
                "LEADERD_LEASE_TTL_MS",
                self.spec.ttl.as_millis().to_string(),
            ),
        ];
        env_set.extend(self.spec.fence_exports.iter().cloned());
        env_set.extend(self.spec.term_exports.borrow().iter().cloned());
        let spec = Spec {
            program: &self.spec.program,
            args: &self.spec.args,
            env_set: &env_set,
            env_remove: &self.spec.scrub,
        };
        // A standby guard that died meanwhile (its group is gone) is replaced.
        let deadline = self.state.deadline();
        let fresh = || process::spawn_guard().and_then(|g| process::spawn(&spec, g, deadline));
        let spawned = match self.standby.take() {
            Some(standby) => process::spawn(&spec, standby, deadline).or_else(|_| fresh()),
            None => fresh(),
        };
        self.standby_due
            .get_or_insert(Instant::now() + STANDBY_DELAY);
        match spawned {
            Ok(group) => {
                let child = group.child;
                self.group = Some(group);
                Event::Spawned { child }
            }
            Err(e) => {
                tracing::error!(error = %e, command = %self.spec.program.display(), "cannot start the child");
                Event::SpawnFailed
            }
        }
    }

    /// Reaps what has exited; `polled` when no SIGCHLD asked for it.
    fn reap(&mut self, polled: bool) {
        for (pid, code) in super::reap::reap_unclaimed() {
            if self.standby.as_ref().is_some_and(|g| g.pid() == pid) {
                tracing::warn!(pid, "the standby guard process died; starting another");
                self.standby = None;
                self.standby_due = Some(Instant::now() + STANDBY_DELAY);
            } else if self.group.as_ref().is_some_and(|g| g.child == pid) {
                if polled {
                    tracing::info!(
                        pid,
                        "the child's exit was found by the periodic check, before any SIGCHLD for it was handled"
                    );
                }
                self.feed(Event::Exited { pid, code });
            } else {
                tracing::debug!(pid, code, "reaped a descendant");
            }
        }
    }

    fn on_timer(&mut self) {
        if self.group.is_some() {
            self.reap(true);
        }
        if self.standby_due.is_some_and(|due| Instant::now() >= due) {
            self.standby_due = None;
            self.prepare_standby();
        }
        self.feed(Event::Timer);
    }

    /// Spawns the guard for the next child now, while nothing waits for it.
    fn prepare_standby(&mut self) {
        if self.standby.is_none() {
            match process::spawn_guard() {
                Ok(guard) => self.standby = Some(guard),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start a standby guard; will try when the child starts")
                }
            }
        }
    }

    /// On the way out: nothing may survive leaderd. Kills the group, the
    /// standby guard and anything adopted, and reaps them all, so that when
    /// leaderd has exited every process it started is gone too (also as PID
    /// 1 of a namespace, whose exit would otherwise leave them to the kernel).
    fn kill_everything(&mut self) {
        if let Some(mut group) = self.group.take() {
            process::signal_group(group.pgid, libc::SIGKILL);
            group.dismiss_guard();
        }
        self.state = Supervision::default();
        if let Some(standby) = self.standby.take() {
            process::signal_group(standby.pid(), libc::SIGKILL);
        }
        if !super::reap::kill_and_reap_all_children(EXIT_REAP_LIMIT) {
            tracing::warn!(
                "some processes leaderd started were not reaped within {EXIT_REAP_LIMIT:?} of exit"
            );
        }
    }
}

/// The name of a signal leaderd forwards, for its log line.
fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        _ => "a signal",
    }
}
