//! The child supervisor's vocabulary: its [`Supervision`] state and
//! [`Phase`], the [`Event`]s the driver feeds [`step`](super::step::step)
//! and the [`Action`]s and [`Say`]s it answers with, the [`Policy`] from
//! the configuration, and its timing constants. Data only; the decisions
//! are in `step.rs`.

use super::super::WorkEvent;
use crate::config::{OnChildExit, Signal};
use std::collections::VecDeque;
use std::time::Duration;
use tokio::time::Instant;

/// How often a stopping group is checked for stragglers: members of the
/// group do not all send us SIGCHLD.
pub const STRAGGLER_POLL: Duration = Duration::from_millis(20);
/// Restart backoff: 1 s doubling up to 30 s; reset once a run lasted 30 s.
pub const BACKOFF_FIRST: Duration = Duration::from_secs(1);
pub const BACKOFF_CAP: Duration = Duration::from_secs(30);

/// What the supervisor does with a child's exit, from the configuration.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    pub stop_signal: Signal,
    pub on_exit: OnChildExit,
    /// Under `restart`: at most this many restarts within the window.
    pub restart_limit: Option<(u32, Duration)>,
}

/// What to do once a stop (or the clean-up after an exit) has finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    ReportStopped,
    ReportExited { exit: bool, code: i32 },
    ReportCrashLoop { code: i32 },
    Restart { fencing_token: u64, at: Instant },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Idle,
    /// A spawn was asked for; its answer comes next.
    Starting {
        fencing_token: u64,
    },
    Running {
        child: i32,
        started: Instant,
        fencing_token: u64,
    },
    BackingOff {
        until: Instant,
        fencing_token: u64,
    },
    /// The group is being stopped (or cleaned up after the child exited);
    /// done when the child is reaped and the group swept empty.
    Stopping {
        child: i32,
        child_alive: bool,
        kill_at: Instant,
        killed: bool,
        then: Then,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The machine won a term: run the child with its token.
    Start {
        fencing_token: u64,
    },
    /// The machine stops the work: the child must be gone by `kill_at`.
    Stop {
        kill_at: Instant,
    },
    /// The lease's kill-by instant, for the guard's dead-man's switch.
    Deadline(Option<Instant>),
    Spawned {
        child: i32,
    },
    SpawnFailed,
    /// A process of ours was reaped (`code`: 128+N for signal N).
    Exited {
        pid: i32,
        code: i32,
    },
    /// The sweep's answer: nothing of the group is left but its guard.
    Swept {
        empty: bool,
    },
    /// A timer [`Supervision::next_timer`] asked for came due.
    Timer,
    /// SIGHUP, SIGUSR1 or SIGUSR2 reached leaderd: pass it on.
    Forward {
        signal: i32,
    },
    /// The first SIGTERM/SIGINT: never start a child from now on.
    ShutdownRequested,
    /// A second signal: every stop is a SIGKILL, now.
    Hurry,
}

/// What the driver logs; each names what happened and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Say {
    NotStarting {
        fencing_token: u64,
        why: &'static str,
    },
    AlreadyRunning,
    Started {
        child: i32,
        fencing_token: u64,
    },
    /// leaderd did not act by the kill-by instant: the guard killed the child.
    GuardFired {
        child: i32,
    },
    Stopping {
        child: i32,
        signal: &'static str,
    },
    KillingLate {
        child: i32,
    },
    Forwarding {
        child: i32,
        signal: i32,
    },
    ChildExited {
        child: i32,
        code: i32,
    },
    ChildStopped {
        child: i32,
        code: i32,
    },
    CrashLoop {
        code: i32,
        exits: usize,
        limit: u32,
        window: Duration,
    },
    Restarting {
        code: i32,
        delay: Duration,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Spawn {
        fencing_token: u64,
    },
    /// A signal to the child's process group.
    Signal(i32),
    /// Look for what is left of the group (SIGKILL each one when `kill`).
    Sweep {
        kill: bool,
    },
    /// Give the guard the kill-by instant.
    Arm(Option<Instant>),
    /// The group is gone: the guard may go, and a standby is due.
    DismissGuard,
    Report(WorkEvent),
    Say(Say),
}

/// The supervisor's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supervision {
    pub phase: Phase,
    pub(super) restarts: u32,
    /// Exits under `restart` this term, within the limit's window.
    pub(super) recent_exits: VecDeque<Instant>,
    pub(super) deadline: Option<Instant>,
    pub(super) shutdown: bool,
    pub(super) hurried: bool,
}

impl Default for Supervision {
    fn default() -> Self {
        Supervision {
            phase: Phase::Idle,
            restarts: 0,
            recent_exits: VecDeque::new(),
            deadline: None,
            shutdown: false,
            hurried: false,
        }
    }
}

impl Supervision {
    /// When to send [`Event::Timer`] next, if at all.
    pub fn next_timer(&self, now: Instant) -> Option<Instant> {
        match &self.phase {
            Phase::BackingOff { until, .. } => Some(*until),
            Phase::Stopping {
                kill_at,
                killed,
                child_alive,
                ..
            } => {
                let poll = now + STRAGGLER_POLL;
                Some(if *killed {
                    poll
                } else if *child_alive {
                    *kill_at
                } else {
                    poll.min(*kill_at)
                })
            }
            _ => None,
        }
    }

    pub fn hurried(&self) -> bool {
        self.hurried
    }

    pub fn shutdown(&self) -> bool {
        self.shutdown
    }

    /// The kill-by instant the guard is given.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }
}
