//! The supervisor's step swept through random event sequences against a
//! model of the processes (the kernel's answers to its actions), checking
//! its invariants after every step: never two children, a stop always ends
//! with the group empty and SIGKILL sent by the kill-by instant, no child
//! after a shutdown request, and a crash loop always gives the lease up.
//! Each invariant is shown to fail on a planted bug (see the commit that
//! added it).

use super::super::WorkEvent;
use super::state::*;
use super::step::step;
use super::tests::{ms, policy};
use crate::config::OnChildExit;
use std::time::Duration;
use tokio::time::Instant;

/// A tiny deterministic generator (xorshift), so a failing sweep replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The processes as the kernel sees them, answering the supervisor's
/// actions, and the invariants over what it does.
struct World {
    s: Supervision,
    p: Policy,
    now: Instant,
    /// The live child, if any, and whether it was signalled to stop.
    alive: Option<i32>,
    /// Others left in the group (the child's own children).
    stragglers: bool,
    /// Exits the kernel will report (SIGCHLD not yet handled).
    pending: Vec<(i32, i32)>,
    next_pid: i32,
    shutdown: bool,
    /// A crash loop was reported and no start came since.
    gave_up: bool,
    /// The last stop asked for while a child lived, not yet reported done.
    stop_pending: bool,
    /// When the child exited on its own this term.
    exits: Vec<Instant>,
    /// A child that keeps crashing, and few starts and stops.
    crashy: bool,
    rng: Rng,
    trace: Vec<String>,
}

impl World {
    fn feed(&mut self, event: Event) {
        let mut queue = vec![event];
        while let Some(event) = queue.pop() {
            self.trace.push(format!("{event:?}"));
            match (event, self.s.phase) {
                (Event::Start { .. }, _) => self.exits.clear(),
                (Event::Exited { pid, .. }, Phase::Running { child, .. }) if pid == child => {
                    self.exits.push(self.now)
                }
                _ => {}
            }
            let (next, actions) = step(&self.s, &self.p, event, self.now);
            self.s = next;
            if let (
                Event::Timer,
                Phase::Stopping {
                    killed: false,
                    kill_at,
                    ..
                },
            ) = (event, self.s.phase)
            {
                assert!(
                    self.now < kill_at,
                    "past the kill-by instant without SIGKILL: {:#?}",
                    self.trace
                );
            }
            for action in actions {
                if let Some(answer) = self.act(action) {
                    queue.push(answer);
                }
            }
        }
    }

    fn act(&mut self, action: Action) -> Option<Event> {
        match action {
            Action::Spawn { .. } => {
                assert!(
                    self.alive.is_none() && !self.stragglers,
                    "two children at once: {:#?}",
                    self.trace
                );
                assert!(
                    !self.shutdown,
                    "a child after the shutdown request: {:#?}",
                    self.trace
                );
                assert!(
                    !self.gave_up,
                    "a restart after a crash loop: {:#?}",
                    self.trace
                );
                if let (OnChildExit::Restart, Some((limit, window)), Some(last)) =
                    (self.p.on_exit, self.p.restart_limit, self.exits.last())
                {
                    let recent = self
                        .exits
                        .iter()
                        .filter(|e| last.duration_since(**e) <= window);
                    assert!(
                        recent.count() <= limit as usize,
                        "more exits than the limit, and no crash loop: {:#?}",
                        self.trace
                    );
                }
                if self.rng.below(10) == 0 {
                    return Some(Event::SpawnFailed);
                }
                self.next_pid += 1;
                self.alive = Some(self.next_pid);
                self.stragglers = self.rng.below(3) == 0;
                Some(Event::Spawned {
                    child: self.next_pid,
                })
            }
            Action::Signal(signal) => {
                if let Some(child) = self.alive {
                    // SIGKILL always works; the stop signal, usually.
                    if signal == libc::SIGKILL || (signal == libc::SIGTERM && self.rng.below(3) > 0)
                    {
                        self.alive = None;
                        self.pending.push((child, 128 + signal));
                    }
                }
                if signal == libc::SIGKILL {
                    self.stragglers = false;
                }
                None
            }
            Action::Sweep { kill } => {
                let empty = self.alive.is_none() && !self.stragglers && self.pending.is_empty();
                if kill {
                    self.stragglers = false;
                }
                Some(Event::Swept { empty })
            }
            Action::Report(WorkEvent::Stopped) => {
                assert!(
                    self.alive.is_none() && !self.stragglers,
                    "stopped with the group alive: {:#?}",
                    self.trace
                );
                self.stop_pending = false;
                None
            }
            Action::Report(WorkEvent::CrashLoop { .. }) => {
                self.gave_up = true;
                None
            }
            Action::Report(WorkEvent::Exited { .. })
            | Action::Arm(_)
            | Action::DismissGuard
            | Action::Say(_) => None,
        }
    }

    /// One random happening.
    fn happen(&mut self, token: &mut u64) {
        let roll = if self.crashy && !self.pending.is_empty() {
            7
        } else if self.crashy && self.s.phase == Phase::Idle {
            0
        } else if self.crashy {
            [6, 11][self.rng.below(2) as usize]
        } else {
            self.rng.below(12)
        };
        match roll {
            0 | 1 => {
                *token += 1;
                self.gave_up = false;
                self.feed(Event::Start {
                    fencing_token: *token,
                });
            }
            2 | 3 => {
                self.stop_pending = true;
                let kill_at = self.now + ms(self.rng.below(3000));
                self.feed(Event::Stop { kill_at });
            }
            4 => {
                let d = (self.rng.below(2) == 0).then(|| self.now + ms(self.rng.below(5000)));
                self.feed(Event::Deadline(d));
            }
            5 => self.feed(Event::Forward {
                signal: libc::SIGUSR1,
            }),
            6 => {
                if let Some(child) = self.alive.take() {
                    self.pending.push((child, self.rng.below(3) as i32));
                }
            }
            7 | 8 => {
                if let Some((pid, code)) = self.pending.pop() {
                    self.feed(Event::Exited { pid, code });
                }
            }
            9 if self.rng.below(20) == 0 => {
                self.shutdown = true;
                self.feed(Event::ShutdownRequested);
            }
            9 if self.rng.below(20) == 0 => self.feed(Event::Hurry),
            _ => {
                let next = self.s.next_timer(self.now);
                self.now = next.map_or(self.now + ms(self.rng.below(2000)), |t| t.max(self.now));
                self.feed(Event::Timer);
            }
        }
    }

    /// Let everything run out: exits delivered, timers fired.
    fn settle(&mut self) {
        for _ in 0..1000 {
            if let Some((pid, code)) = self.pending.pop() {
                self.feed(Event::Exited { pid, code });
                continue;
            }
            match self.s.next_timer(self.now) {
                Some(t) => {
                    self.now = t.max(self.now);
                    self.feed(Event::Timer);
                }
                None => return,
            }
        }
        panic!("never settled: {:#?}", self.trace);
    }
}

#[test]
fn random_sequences_keep_every_invariant() {
    for seed in 1..=400u64 {
        for on_exit in [
            OnChildExit::Release,
            OnChildExit::Restart,
            OnChildExit::Exit,
        ] {
            let limit = (seed % 2 == 0).then_some((2, Duration::from_secs(10)));
            let mut w = World {
                s: Supervision::default(),
                p: policy(on_exit, limit),
                now: Instant::now(),
                alive: None,
                stragglers: false,
                pending: Vec::new(),
                next_pid: 100,
                shutdown: false,
                gave_up: false,
                stop_pending: false,
                exits: Vec::new(),
                crashy: seed % 3 == 0,
                rng: Rng(seed * 7919 + 1),
                trace: Vec::new(),
            };
            let mut token = 0;
            for _ in 0..200 {
                w.happen(&mut token);
            }
            // The last word is a stop: it ends with the group empty.
            w.stop_pending = true;
            let kill_at = w.now + ms(1000);
            w.feed(Event::Stop { kill_at });
            w.settle();
            assert!(
                !w.stop_pending,
                "seed {seed}: a stop that never finished: {:#?}",
                w.trace
            );
            assert!(
                w.alive.is_none() && !w.stragglers,
                "seed {seed}: left alive"
            );
            assert_eq!(w.s.phase, Phase::Idle, "seed {seed}");
        }
    }
}
