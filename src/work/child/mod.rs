//! The child supervisor: one task that starts the command when leadership is
//! won, stops it (stop signal to the group, SIGKILL by the deadline the
//! machine gives), reaps everything, restarts it under `on_exit = restart`,
//! and forwards SIGHUP/SIGUSR1/SIGUSR2 to it.

use super::WorkEvent;
use super::process::{self, Group, Spec};
use crate::config::{OnChildExit, Signal};
use crate::metrics::Metrics;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How often a stopping group is checked for stragglers: members of the
/// group do not all send us SIGCHLD.
const STRAGGLER_POLL: Duration = Duration::from_millis(20);
/// Restart backoff: 1 s doubling up to 30 s; reset once a run lasted 30 s.
const BACKOFF_FIRST: Duration = Duration::from_secs(1);
const BACKOFF_CAP: Duration = Duration::from_secs(30);
/// How long leaderd waits, on exit, for what it killed to be reaped: SIGKILL
/// takes effect at once unless a process is stuck in the kernel.
const EXIT_REAP_LIMIT: Duration = Duration::from_secs(2);
/// How long after start-up or a term's end the next guard is spawned.
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

/// What to do once a stop (or a clean-up after an exit) has finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    ReportStopped,
    ReportExited { exit: bool, code: i32 },
    ReportCrashLoop { code: i32 },
    Restart { fencing_token: u64, at: Instant },
}

#[derive(Debug)]
enum Phase {
    Idle,
    Running {
        group: Group,
        started: Instant,
        fencing_token: u64,
    },
    BackingOff {
        until: Instant,
        fencing_token: u64,
    },
    Stopping {
        group: Group,
        child_alive: bool,
        kill_at: Instant,
        killed: bool,
        then: Then,
    },
}

struct Supervisor {
    spec: ChildSpec,
    /// A guard spawned ahead of time for the next child.
    standby: Option<process::Guard>,
    /// When to spawn the standby guard: a moment after a term ends or
    /// leaderd starts, so its exec never competes with a handover.
    standby_due: Option<Instant>,
    metrics: Arc<Metrics>,
    events: mpsc::UnboundedSender<WorkEvent>,
    phase: Phase,
    restarts: u32,
    /// When the child exited this term under `restart`, within the limit's
    /// window: more than the limit is a crash loop.
    recent_exits: std::collections::VecDeque<Instant>,
    /// The latest kill-by instant from the runner (see [`Command::Deadline`]).
    deadline: Option<Instant>,
    /// Set by the first SIGTERM/SIGINT: from then on no child is started,
    /// even one the machine asked for just before the signal came.
    shutdown: CancellationToken,
    /// Set by a second signal: every stop is a SIGKILL, now.
    hurried: bool,
}

/// Runs the supervisor until `commands` closes, then kills whatever is left.
pub async fn supervise(
    spec: ChildSpec,
    mut commands: mpsc::UnboundedReceiver<Command>,
    events: mpsc::UnboundedSender<WorkEvent>,
    metrics: Arc<Metrics>,
    signals: crate::shutdown::Signals,
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
        spec,
        standby: None,
        standby_due: Some(Instant::now() + STANDBY_DELAY),
        metrics,
        events,
        phase: Phase::Idle,
        restarts: 0,
        recent_exits: std::collections::VecDeque::new(),
        deadline: None,
        shutdown: signals.requested,
        hurried: false,
    };
    let hurry = signals.hurry;
    loop {
        let timer = s.next_timer();
        tokio::select! {
            command = commands.recv() => match command {
                Some(Command::Start { fencing_token }) => s.start(fencing_token),
                Some(Command::Stop { kill_at }) => s.stop(kill_at),
                Some(Command::Deadline(deadline)) => s.set_deadline(deadline),
                None => break,
            },
            _ = chld.recv() => s.reap(),
            _ = hup.recv() => s.forward(libc::SIGHUP, "SIGHUP"),
            _ = usr1.recv() => s.forward(libc::SIGUSR1, "SIGUSR1"),
            _ = usr2.recv() => s.forward(libc::SIGUSR2, "SIGUSR2"),
            _ = sleep_until(timer), if timer.is_some() => s.on_timer(),
            _ = hurry.cancelled(), if !s.hurried => s.hurry(),
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
        let phase = match &self.phase {
            Phase::BackingOff { until, .. } => Some(*until),
            Phase::Stopping {
                kill_at,
                killed,
                child_alive,
                ..
            } => {
                let poll = Instant::now() + STRAGGLER_POLL;
                Some(if *killed {
                    poll
                } else if *child_alive {
                    *kill_at
                } else {
                    poll.min(*kill_at)
                })
            }
            _ => None,
        };
        match (phase, self.standby_due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn emit(&self, event: WorkEvent) {
        let _ = self.events.send(event);
    }

    fn start(&mut self, fencing_token: u64) {
        // A new term starts with a clean record.
        self.recent_exits.clear();
        match self.phase {
            Phase::Idle => self.spawn(fencing_token),
            // A start while a previous stop is still in progress: start once it is done.
            Phase::Stopping { ref mut then, .. } => {
                *then = Then::Restart {
                    fencing_token,
                    at: Instant::now(),
                }
            }
            _ => tracing::warn!("start requested while the child is already running; ignored"),
        }
    }

    fn set_deadline(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
        if let Phase::Running { group, .. } | Phase::Stopping { group, .. } = &self.phase {
            group.arm(deadline);
        }
    }

    /// The kill-by instant the guard holds has passed: the guard has killed
    /// (or is killing) the group.
    fn deadline_missed(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    fn spawn(&mut self, fencing_token: u64) {
        // After a shutdown request, or past the lease's kill-by instant (a
        // restart after leaderd was frozen, say), the machine is about to
        // stop the work: never start it. It finds the phase idle.
        let refused = if self.shutdown.is_cancelled() {
            Some("shutdown requested")
        } else if self.deadline_missed() {
            Some("the lease's kill-by instant has passed")
        } else {
            None
        };
        if let Some(why) = refused {
            tracing::info!(fencing_token, "not starting the child: {why}");
            self.phase = Phase::Idle;
            return;
        }
        let env_set = [
            ("LEADERD_ID", self.spec.id.clone()),
            ("LEADERD_KEY", self.spec.key.clone()),
            ("LEADERD_FENCING_TOKEN", fencing_token.to_string()),
            (
                "LEADERD_LEASE_TTL_MS",
                self.spec.ttl.as_millis().to_string(),
            ),
        ];
        let spec = Spec {
            program: &self.spec.program,
            args: &self.spec.args,
            env_set: &env_set,
            env_remove: &["LEADERD_REDIS_URL", "LEADERD_WEBHOOK_SECRET"],
        };
        // A standby guard that died meanwhile (its group is gone) is replaced.
        let deadline = self.deadline;
        let fresh = || process::spawn_guard().and_then(|g| process::spawn(&spec, g, deadline));
        let spawned = match self.standby.take() {
            Some(standby) => process::spawn(&spec, standby, deadline).or_else(|_| fresh()),
            None => fresh(),
        };
        match spawned {
            Ok(group) => {
                tracing::info!(pid = group.child, fencing_token, command = %self.spec.program.display(), "child started");
                self.phase = Phase::Running {
                    group,
                    started: Instant::now(),
                    fencing_token,
                };
            }
            Err(e) => {
                tracing::error!(error = %e, command = %self.spec.program.display(), "cannot start the child");
                self.phase = Phase::Idle;
                self.after_exit(127, Instant::now(), fencing_token);
            }
        }
    }

    /// A second signal: a stop under way becomes a SIGKILL now, and so does
    /// any stop asked for later.
    fn hurry(&mut self) {
        self.hurried = true;
        if let Phase::Stopping { kill_at, .. } = &mut self.phase {
            *kill_at = Instant::now();
            self.on_timer();
        }
    }

    fn stop(&mut self, kill_at: Instant) {
        let kill_at = if self.hurried {
            Instant::now()
        } else {
            kill_at
        };
        match std::mem::replace(&mut self.phase, Phase::Idle) {
            Phase::Idle | Phase::BackingOff { .. } => self.emit(WorkEvent::Stopped),
            Phase::Running { group, .. } => {
                if self.deadline_missed() {
                    tracing::error!(pid = group.child, "{GUARD_FIRED}");
                }
                let signal = self.spec.stop_signal;
                tracing::info!(
                    pid = group.child,
                    signal = signal.name,
                    "stopping the child"
                );
                process::signal_group(group.pgid, signal.number);
                self.phase = Phase::Stopping {
                    group,
                    child_alive: true,
                    kill_at,
                    killed: false,
                    then: Then::ReportStopped,
                };
                self.on_timer();
            }
            Phase::Stopping {
                group,
                child_alive,
                killed,
                ..
            } => {
                // A new deadline (the lease moved), and whatever was planned
                // after the stop is now just "stopped".
                self.phase = Phase::Stopping {
                    group,
                    child_alive,
                    kill_at,
                    killed,
                    then: Then::ReportStopped,
                };
                self.on_timer();
            }
        }
    }

    fn forward(&self, signal: i32, name: &str) {
        if let Phase::Running { group, .. } = &self.phase {
            tracing::info!(
                signal = name,
                pid = group.child,
                "forwarding signal to the child's process group"
            );
            process::signal_group(group.pgid, signal);
        }
    }

    fn reap(&mut self) {
        for (pid, code) in process::reap_all() {
            match &mut self.phase {
                Phase::Running {
                    group,
                    started,
                    fencing_token,
                } if group.child == pid => {
                    let (started, fencing_token) = (*started, *fencing_token);
                    if self.deadline_missed() {
                        tracing::error!(pid, code, "{GUARD_FIRED}");
                    }
                    tracing::info!(pid, code, "child exited");
                    self.metrics.child_exited();
                    let Phase::Running { group, .. } =
                        std::mem::replace(&mut self.phase, Phase::Idle)
                    else {
                        unreachable!()
                    };
                    // Clean up what it left in its group before acting on the exit.
                    process::signal_group(group.pgid, libc::SIGKILL);
                    let then = self.exit_plan(code, started, fencing_token);
                    self.phase = Phase::Stopping {
                        group,
                        child_alive: false,
                        kill_at: Instant::now(),
                        killed: true,
                        then,
                    };
                }
                Phase::Stopping {
                    group, child_alive, ..
                } if group.child == pid => {
                    tracing::info!(pid, code, "child stopped");
                    self.metrics.child_exited();
                    *child_alive = false;
                }
                _ if self.standby.as_ref().is_some_and(|g| g.pid() == pid) => {
                    tracing::warn!(pid, "the standby guard process died; starting another");
                    self.standby = None;
                    self.standby_due = Some(Instant::now() + STANDBY_DELAY);
                }
                _ => tracing::debug!(pid, code, "reaped a descendant"),
            }
        }
        self.on_timer();
    }

    /// Under `restart` with capped backoff; otherwise report the exit.
    fn exit_plan(&mut self, code: i32, started: Instant, fencing_token: u64) -> Then {
        match self.spec.on_exit {
            OnChildExit::Restart => {
                if let Some((limit, window)) = self.spec.restart_limit {
                    let now = Instant::now();
                    self.recent_exits.push_back(now);
                    while self
                        .recent_exits
                        .front()
                        .is_some_and(|&at| now.duration_since(at) > window)
                    {
                        self.recent_exits.pop_front();
                    }
                    if self.recent_exits.len() > limit as usize {
                        tracing::error!(
                            code,
                            exits = self.recent_exits.len(),
                            window = ?window,
                            "the child keeps failing (restart limit {limit} in {window:?}): releasing the lease so another candidate can try"
                        );
                        return Then::ReportCrashLoop { code };
                    }
                }
                if started.elapsed() >= BACKOFF_CAP {
                    self.restarts = 0;
                }
                let delay = (BACKOFF_FIRST * 2u32.saturating_pow(self.restarts)).min(BACKOFF_CAP);
                self.restarts = self.restarts.saturating_add(1);
                tracing::info!(code, delay = ?delay, "restarting the child after a backoff (on_child_exit = restart)");
                Then::Restart {
                    fencing_token,
                    at: Instant::now() + delay,
                }
            }
            OnChildExit::Release => Then::ReportExited { exit: false, code },
            OnChildExit::Exit => Then::ReportExited { exit: true, code },
        }
    }

    fn after_exit(&mut self, code: i32, started: Instant, fencing_token: u64) {
        match self.exit_plan(code, started, fencing_token) {
            Then::Restart { fencing_token, at } => {
                self.phase = Phase::BackingOff {
                    until: at,
                    fencing_token,
                }
            }
            Then::ReportExited { exit, code } => self.emit(WorkEvent::Exited { exit, code }),
            Then::ReportCrashLoop { code } => self.emit(WorkEvent::CrashLoop { code }),
            Then::ReportStopped => self.emit(WorkEvent::Stopped),
        }
    }

    fn on_timer(&mut self) {
        let now = Instant::now();
        if self.standby_due.is_some_and(|due| now >= due) {
            self.standby_due = None;
            self.prepare_standby();
        }
        match &mut self.phase {
            Phase::BackingOff {
                until,
                fencing_token,
            } if now >= *until => {
                let fencing_token = *fencing_token;
                self.spawn(fencing_token);
            }
            Phase::Stopping {
                group,
                child_alive,
                kill_at,
                killed,
                then,
            } => {
                if !*killed && now >= *kill_at {
                    tracing::warn!(
                        pid = group.child,
                        "child did not stop in time: SIGKILL to its process group"
                    );
                    process::signal_group(group.pgid, libc::SIGKILL);
                    *killed = true;
                }
                // While the child lives and no SIGKILL is due, there is nothing
                // to scan for: the stop signal went to the whole group.
                if *child_alive && !*killed {
                    return;
                }
                let stragglers = process::stragglers(group, self.standby.as_ref());
                if *killed {
                    for pid in &stragglers {
                        process::signal_process(*pid, libc::SIGKILL);
                    }
                }
                if *child_alive || !stragglers.is_empty() {
                    return;
                }
                group.dismiss_guard();
                let then = *then;
                self.phase = Phase::Idle;
                self.standby_due = Some(now + STANDBY_DELAY);
                match then {
                    Then::ReportStopped => self.emit(WorkEvent::Stopped),
                    Then::ReportExited { exit, code } => {
                        self.emit(WorkEvent::Exited { exit, code })
                    }
                    Then::ReportCrashLoop { code } => self.emit(WorkEvent::CrashLoop { code }),
                    Then::Restart { fencing_token, at } if at <= now => self.spawn(fencing_token),
                    Then::Restart { fencing_token, at } => {
                        self.phase = Phase::BackingOff {
                            until: at,
                            fencing_token,
                        }
                    }
                }
            }
            _ => {}
        }
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
        if let Phase::Running { group, .. } | Phase::Stopping { group, .. } = &mut self.phase {
            process::signal_group(group.pgid, libc::SIGKILL);
            group.dismiss_guard();
        }
        self.phase = Phase::Idle;
        if let Some(standby) = self.standby.take() {
            process::signal_group(standby.pid(), libc::SIGKILL);
        }
        if !process::kill_and_reap_all_children(EXIT_REAP_LIMIT) {
            tracing::warn!(
                "some processes leaderd started were not reaped within {EXIT_REAP_LIMIT:?} of exit"
            );
        }
    }
}
