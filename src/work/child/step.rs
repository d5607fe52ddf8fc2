//! The child supervisor's decisions, pure: `step(state, event, now)` gives
//! the next state and the actions the driver (`super`) carries out — spawn,
//! signal the group, sweep it for stragglers, arm or dismiss the guard,
//! report to the runner — and [`Supervision::next_timer`] says when to call
//! it with [`Event::Timer`]. No I/O and no clock: `now` is a parameter, so
//! the table and the sweep in `tests.rs` drive it through every state.
//!
//! Two answers come back at once, before any other event: a [`Action::Spawn`]
//! is answered with [`Event::Spawned`] or [`Event::SpawnFailed`], an
//! [`Action::Sweep`] with [`Event::Swept`].

use super::super::WorkEvent;
use super::state::*;
use crate::config::OnChildExit;
use tokio::time::Instant;

/// One step: the state after `event` at `now`, and what to do.
pub fn step(
    s: &Supervision,
    policy: &Policy,
    event: Event,
    now: Instant,
) -> (Supervision, Vec<Action>) {
    let mut next = Step {
        s: s.clone(),
        policy,
        now,
        actions: Vec::new(),
    };
    next.on(event);
    (next.s, next.actions)
}

struct Step<'a> {
    s: Supervision,
    policy: &'a Policy,
    now: Instant,
    actions: Vec<Action>,
}

impl Step<'_> {
    fn say(&mut self, say: Say) {
        self.actions.push(Action::Say(say));
    }

    fn report(&mut self, event: WorkEvent) {
        self.actions.push(Action::Report(event));
    }

    fn deadline_missed(&self) -> bool {
        self.s.deadline.is_some_and(|d| self.now >= d)
    }

    fn on(&mut self, event: Event) {
        let s = &mut self.s;
        match (event, s.phase) {
            // The driver answers a spawn before anything else.
            (Event::Spawned { child }, Phase::Starting { fencing_token }) => {
                s.phase = Phase::Running {
                    child,
                    started: self.now,
                    fencing_token,
                };
                self.say(Say::Started {
                    child,
                    fencing_token,
                });
            }
            (Event::SpawnFailed, Phase::Starting { fencing_token }) => {
                s.phase = Phase::Idle;
                self.after_exit(127, self.now, fencing_token);
            }
            (_, Phase::Starting { .. }) | (Event::Spawned { .. } | Event::SpawnFailed, _) => {}
            (Event::Start { fencing_token }, phase) => {
                // A new term starts with a clean record.
                s.recent_exits.clear();
                match phase {
                    Phase::Idle => self.spawn(fencing_token),
                    // Still stopping the last one: start once it is gone.
                    Phase::Stopping { .. } => self.set_then(Then::Restart {
                        fencing_token,
                        at: self.now,
                    }),
                    _ => self.say(Say::AlreadyRunning),
                }
            }
            (Event::Stop { kill_at }, _) => self.stop(kill_at),
            (Event::Deadline(deadline), phase) => {
                s.deadline = deadline;
                if matches!(phase, Phase::Running { .. } | Phase::Stopping { .. }) {
                    self.actions.push(Action::Arm(deadline));
                }
            }
            (Event::Exited { pid, code }, phase) => self.exited(pid, code, phase),
            (Event::Swept { empty }, _) => self.swept(empty),
            (Event::Timer, _) => self.timer(),
            (Event::Forward { signal }, Phase::Running { child, .. }) => {
                self.say(Say::Forwarding { child, signal });
                self.actions.push(Action::Signal(signal));
            }
            (Event::Forward { .. }, _) => {}
            (Event::ShutdownRequested, _) => s.shutdown = true,
            (Event::Hurry, phase) => {
                s.hurried = true;
                if let Phase::Stopping { kill_at, .. } = &mut s.phase {
                    *kill_at = self.now;
                }
                if matches!(phase, Phase::Stopping { .. }) {
                    self.timer();
                }
            }
        }
    }

    fn set_then(&mut self, new: Then) {
        if let Phase::Stopping { then, .. } = &mut self.s.phase {
            *then = new;
        }
    }

    fn spawn(&mut self, fencing_token: u64) {
        // After a shutdown request, or past the lease's kill-by instant (a
        // restart after leaderd was frozen, say), the machine is about to
        // stop the work: never start it. It finds the phase idle.
        let refused = if self.s.shutdown {
            Some("shutdown requested")
        } else if self.deadline_missed() {
            Some("the lease's kill-by instant has passed")
        } else {
            None
        };
        if let Some(why) = refused {
            self.s.phase = Phase::Idle;
            self.say(Say::NotStarting { fencing_token, why });
            return;
        }
        self.s.phase = Phase::Starting { fencing_token };
        self.actions.push(Action::Spawn { fencing_token });
    }

    fn stop(&mut self, kill_at: Instant) {
        let kill_at = if self.s.hurried { self.now } else { kill_at };
        match self.s.phase {
            Phase::Idle | Phase::BackingOff { .. } | Phase::Starting { .. } => {
                self.s.phase = Phase::Idle;
                self.report(WorkEvent::Stopped);
            }
            Phase::Running { child, .. } => {
                if self.deadline_missed() {
                    self.say(Say::GuardFired { child });
                }
                let signal = self.policy.stop_signal;
                self.say(Say::Stopping {
                    child,
                    signal: signal.name,
                });
                self.actions.push(Action::Signal(signal.number));
                self.s.phase = Phase::Stopping {
                    child,
                    child_alive: true,
                    kill_at,
                    killed: false,
                    then: Then::ReportStopped,
                };
                self.timer();
            }
            Phase::Stopping {
                child,
                child_alive,
                killed,
                ..
            } => {
                // A new deadline (the lease moved), and whatever was planned
                // after the stop is now just "stopped".
                self.s.phase = Phase::Stopping {
                    child,
                    child_alive,
                    kill_at,
                    killed,
                    then: Then::ReportStopped,
                };
                self.timer();
            }
        }
    }

    fn exited(&mut self, pid: i32, code: i32, phase: Phase) {
        match phase {
            Phase::Running {
                child,
                started,
                fencing_token,
            } if child == pid => {
                if self.deadline_missed() {
                    self.say(Say::GuardFired { child });
                }
                self.say(Say::ChildExited { child, code });
                // Clean up what it left in its group before acting on the exit.
                self.actions.push(Action::Signal(libc::SIGKILL));
                let then = self.exit_plan(code, started, fencing_token);
                self.s.phase = Phase::Stopping {
                    child,
                    child_alive: false,
                    kill_at: self.now,
                    killed: true,
                    then,
                };
                self.timer();
            }
            Phase::Stopping { child, .. } if child == pid => {
                self.say(Say::ChildStopped { child, code });
                if let Phase::Stopping { child_alive, .. } = &mut self.s.phase {
                    *child_alive = false;
                }
                self.timer();
            }
            // A descendant, or the standby guard: the driver's business.
            _ => {}
        }
    }

    fn timer(&mut self) {
        match self.s.phase {
            Phase::BackingOff {
                until,
                fencing_token,
            } if self.now >= until => self.spawn(fencing_token),
            Phase::Stopping {
                child,
                child_alive,
                kill_at,
                killed,
                ..
            } => {
                let mut killed = killed;
                if !killed && self.now >= kill_at {
                    self.say(Say::KillingLate { child });
                    self.actions.push(Action::Signal(libc::SIGKILL));
                    killed = true;
                    if let Phase::Stopping { killed, .. } = &mut self.s.phase {
                        *killed = true;
                    }
                }
                // While the child lives and no SIGKILL is due, there is
                // nothing to sweep for: the stop signal went to the group.
                if child_alive && !killed {
                    return;
                }
                self.actions.push(Action::Sweep { kill: killed });
            }
            _ => {}
        }
    }

    /// The sweep found the group empty (or not): done once the child is
    /// reaped too.
    fn swept(&mut self, empty: bool) {
        let Phase::Stopping {
            child_alive, then, ..
        } = self.s.phase
        else {
            return;
        };
        if child_alive || !empty {
            return;
        }
        self.actions.push(Action::DismissGuard);
        self.s.phase = Phase::Idle;
        match then {
            Then::ReportStopped => self.report(WorkEvent::Stopped),
            Then::ReportExited { exit, code } => self.report(WorkEvent::Exited { exit, code }),
            Then::ReportCrashLoop { code } => self.report(WorkEvent::CrashLoop { code }),
            Then::Restart { fencing_token, at } if at <= self.now => self.spawn(fencing_token),
            Then::Restart { fencing_token, at } => {
                self.s.phase = Phase::BackingOff {
                    until: at,
                    fencing_token,
                }
            }
        }
    }

    /// Under `restart`, a restart after a capped backoff unless the exits
    /// exceed the limit; otherwise report the exit.
    fn exit_plan(&mut self, code: i32, started: Instant, fencing_token: u64) -> Then {
        let now = self.now;
        match self.policy.on_exit {
            OnChildExit::Restart => {
                if let Some((limit, window)) = self.policy.restart_limit {
                    let exits = &mut self.s.recent_exits;
                    exits.push_back(now);
                    while exits
                        .front()
                        .is_some_and(|&at| now.duration_since(at) > window)
                    {
                        exits.pop_front();
                    }
                    if exits.len() > limit as usize {
                        let exits = exits.len();
                        self.say(Say::CrashLoop {
                            code,
                            exits,
                            limit,
                            window,
                        });
                        return Then::ReportCrashLoop { code };
                    }
                }
                if now.duration_since(started) >= BACKOFF_CAP {
                    self.s.restarts = 0;
                }
                let delay = (BACKOFF_FIRST * 2u32.saturating_pow(self.s.restarts)).min(BACKOFF_CAP);
                self.s.restarts = self.s.restarts.saturating_add(1);
                self.say(Say::Restarting { code, delay });
                Then::Restart {
                    fencing_token,
                    at: now + delay,
                }
            }
            OnChildExit::Release => Then::ReportExited { exit: false, code },
            OnChildExit::Exit => Then::ReportExited { exit: true, code },
        }
    }

    fn after_exit(&mut self, code: i32, started: Instant, fencing_token: u64) {
        match self.exit_plan(code, started, fencing_token) {
            Then::Restart { fencing_token, at } => {
                self.s.phase = Phase::BackingOff {
                    until: at,
                    fencing_token,
                }
            }
            Then::ReportExited { exit, code } => self.report(WorkEvent::Exited { exit, code }),
            Then::ReportCrashLoop { code } => self.report(WorkEvent::CrashLoop { code }),
            Then::ReportStopped => self.report(WorkEvent::Stopped),
        }
    }
}
