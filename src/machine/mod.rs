//! The pure election state machine of PRODUCT §3:
//! `step(state, event, now) -> Transition { next, actions, reason }`.
//!
//! No I/O and no clock of its own: the runner feeds it events (timer ticks,
//! lease results, work reports, signals) with the current instant and performs
//! the actions it returns. States carry the data they need, so "working
//! without a lease" cannot be written, and shutdown is one ordinary event that
//! every state handles.

#[cfg(test)]
mod tests;

use crate::timing::Timing;
use std::fmt;
use std::time::Duration;
use tokio::time::Instant;

/// A lease we hold: its fencing token and when the request that last
/// acquired or renewed it was *sent* (validity counts from there).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lease {
    pub fencing_token: u64,
    pub sent_at: Instant,
}

/// Renewal bookkeeping while we hold a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Renewal {
    /// A renew request is outstanding; its result will come back as an event.
    pub in_flight: bool,
    /// After a failed renewal: when to try again.
    pub retry_at: Option<Instant>,
}

impl Renewal {
    const IN_FLIGHT: Renewal = Renewal {
        in_flight: true,
        retry_at: None,
    };
    const IDLE: Renewal = Renewal {
        in_flight: false,
        retry_at: None,
    };
}

/// What follows once the work has stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AfterPause {
    /// Release the lease (owner-checked), then exit or wait.
    Release { exit: bool },
    /// Release, then stay out of the election for `hold` (a step-down asked
    /// for by an operator, or a crash loop).
    StepDown { hold: Duration },
    /// The lease is someone else's: just wait.
    Wait,
}

/// What follows once the release has been answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AfterRelease {
    Exit,
    Wait,
    Hold { hold: Duration },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    Idle,
    Acquiring {
        /// Shutdown was requested while the request was out: whatever comes
        /// back, release and exit (see [`State::exiting`]).
        shutdown: bool,
        /// A release was announced while the request was out: if it comes
        /// back refused, it may predate the release, so look again at once.
        notified: bool,
        /// The request out is a look ([`Action::Look`]), not an acquire: an
        /// outranked candidate's, which defers only once it has seen the
        /// lease vacant ([`Machine::campaign`]).
        looking: bool,
        /// The worker turned unhealthy while the request was out: a lease
        /// that comes back is handed back, never worked on.
        standing: Standing,
    },
    Working {
        lease: Lease,
    },
    Renewing {
        lease: Lease,
        renewal: Renewal,
    },
    /// Stopping the work. `lease` is `Some` while it may still be ours; it is
    /// kept renewed only on shutdown (`after = Release { exit: true }`), so the
    /// work can stop gracefully without anyone else winning meanwhile.
    Pausing {
        lease: Option<Lease>,
        renewal: Renewal,
        stop_started: Instant,
        kill_at: Instant,
        after: AfterPause,
        standing: Standing,
    },
    Releasing {
        after: AfterRelease,
        standing: Standing,
    },
    Waiting {
        until: Instant,
        /// Held off (a step-down, a crash loop): no acquire before `until`,
        /// not even on a release wake-up.
        hold: bool,
        /// Unhealthy: no acquire until the worker is healthy, whatever the
        /// timer or a release wake-up say. Outranked: defer once (see
        /// [`Standing`]).
        standing: Standing,
    },
}

/// What a candidate that does not lead must remember between states, carried
/// by every state that can lead to an acquire: whether its worker is
/// unhealthy ([`Event::WorkerUnhealthy`], [`Event::WorkerHealthy`]) and
/// whether another candidate outranks it ([`Event::Outranked`]: a
/// registered healthy candidate of higher priority, or the successor the
/// leader named). Working and renewing carry none: a leader whose worker
/// turns unhealthy steps down at once, and a leader that is outranked hands
/// over by a step-down the runner decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Standing {
    /// No campaign until the worker is healthy again.
    pub unhealthy: bool,
    /// How many registered candidates outrank this one (capped at 255): at
    /// a vacancy it holds off once, for that many retry intervals, so the
    /// candidates above it take the lease first, in their order.
    pub outranked: u8,
}

impl Standing {
    pub const CLEAR: Standing = Standing {
        unhealthy: false,
        outranked: 0,
    };
    pub const UNHEALTHY: Standing = Standing {
        unhealthy: true,
        outranked: 0,
    };
}

/// The state names of PRODUCT §3, as spelled in logs, `/leader` and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StateName {
    Idle,
    Acquiring,
    Working,
    Renewing,
    Pausing,
    Releasing,
    Waiting,
}

impl StateName {
    pub const ALL: [StateName; 7] = [
        StateName::Idle,
        StateName::Acquiring,
        StateName::Working,
        StateName::Renewing,
        StateName::Pausing,
        StateName::Releasing,
        StateName::Waiting,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StateName::Idle => "idle",
            StateName::Acquiring => "acquiring",
            StateName::Working => "working",
            StateName::Renewing => "renewing",
            StateName::Pausing => "pausing",
            StateName::Releasing => "releasing",
            StateName::Waiting => "waiting",
        }
    }
}

impl fmt::Display for StateName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl State {
    pub fn name(&self) -> StateName {
        match self {
            State::Idle => StateName::Idle,
            State::Acquiring { .. } => StateName::Acquiring,
            State::Working { .. } => StateName::Working,
            State::Renewing { .. } => StateName::Renewing,
            State::Pausing { .. } => StateName::Pausing,
            State::Releasing { .. } => StateName::Releasing,
            State::Waiting { .. } => StateName::Waiting,
        }
    }

    /// On the way out: shutdown was requested (or the child's exit policy
    /// says exit), so the only way on is stopping the work, releasing the
    /// lease and exiting. Carried by the states' own data, so no later event
    /// can forget it.
    pub fn exiting(&self) -> bool {
        matches!(
            self,
            State::Acquiring { shutdown: true, .. }
                | State::Pausing {
                    after: AfterPause::Release { exit: true },
                    ..
                }
                | State::Releasing {
                    after: AfterRelease::Exit,
                    ..
                }
        )
    }

    /// Whether this state remembers an unhealthy worker (see
    /// [`Event::WorkerUnhealthy`]): no campaign until it is healthy.
    pub fn worker_unhealthy(&self) -> bool {
        self.standing().unhealthy
    }

    /// What this state remembers of the worker's health and the other
    /// candidates; leading states remember nothing (leading implies a
    /// healthy worker, and outranking is the runner's to act on).
    pub fn standing(&self) -> Standing {
        match *self {
            State::Acquiring { standing, .. }
            | State::Pausing { standing, .. }
            | State::Releasing { standing, .. }
            | State::Waiting { standing, .. } => standing,
            _ => Standing::CLEAR,
        }
    }

    /// The lease we hold and run the work under: only while working or
    /// renewing. Pausing is already stepping down.
    pub fn leading(&self) -> Option<Lease> {
        match self {
            State::Working { lease } | State::Renewing { lease, .. } => Some(*lease),
            _ => None,
        }
    }
}

/// Something that happened. Past tense; the runner reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Started,
    /// A deadline from [`Machine::next_deadline`] may have passed.
    Tick,
    Acquired {
        fencing_token: u64,
        sent_at: Instant,
    },
    /// Someone else holds the lease; `expires_in` is its remaining time when known.
    Refused {
        expires_in: Option<Duration>,
    },
    /// The backend failed; `misconfigured` for errors retrying cannot fix
    /// soon (wrong password, missing permission), which are retried slowly.
    AcquireFailed {
        misconfigured: bool,
    },
    Renewed {
        sent_at: Instant,
    },
    RenewFailed,
    /// A renewal found another token, or no lease, in the key.
    Lost,
    Released,
    /// The work has stopped completely (child reaped).
    WorkStopped,
    /// The child exited on its own and the policy says step down: release
    /// and wait (`exit: false`) or release and exit (`exit: true`).
    WorkExited {
        exit: bool,
    },
    /// A release was announced by the holder: worth trying now.
    ReleaseNotified,
    /// A look ([`Action::Look`]) found the lease vacant: nobody holds it,
    /// or its holder's lease has run out. (Held, it answers `Refused`.)
    Vacant,
    /// Give the lease up and stay out of the election for `hold` (an
    /// operator's `leaderd step-down`, or a child in a crash loop).
    StepDown {
        hold: Duration,
        reason: Reason,
    },
    /// The worker's health check passed `--health-successes` times in a row.
    WorkerHealthy,
    /// The worker's health check failed `--health-failures` times in a row:
    /// a standby stops campaigning, a leader steps down.
    WorkerUnhealthy,
    /// How many registered healthy candidates of higher priority outrank
    /// this one, from the registry (0: none).
    Outranked(u8),
    ShutdownRequested,
}

/// Something to do. Imperative; the runner performs them in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Acquire,
    /// Look at the lease without taking it (an outranked candidate, before
    /// it defers): answered `Vacant`, `Refused` or `AcquireFailed`.
    Look,
    Renew,
    Release,
    StartWork {
        fencing_token: u64,
    },
    /// Give up any place in line the store keeps (deferring to a candidate
    /// of higher priority; see `LeaseBackend::step_aside`).
    StepAside,
    /// Stop the work; SIGKILL no later than `kill_at`. Sent again with an
    /// updated `kill_at` when the lease's validity moves.
    StopWork {
        kill_at: Instant,
    },
    Exit,
}

/// Why a transition happened, spelled as in the logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Start,
    Acquired,
    HeldByOther,
    BackendError,
    RenewDue,
    Renewed,
    RenewFailed,
    LeaseLost,
    RenewDeadlinePassed,
    Shutdown,
    WorkStopped,
    Released,
    RetryDue,
    ReleaseNotified,
    ChildExited,
    StepDownRequested,
    CrashLoop,
    HoldOver,
    WorkerHealthy,
    WorkerUnhealthy,
    FirstHealthCheck,
    Outranked,
    Deferred,
    Vacant,
    HandOver,
    HandOverTo,
    Ignored,
}

impl Reason {
    /// Transitions that happen all the time in a steady state (a leader's
    /// renewals, a standby's re-checks, retries whose error is logged on its
    /// own): logged at DEBUG, so the default level is quiet until leadership
    /// changes or something goes wrong. Every transition still reaches
    /// `/leader/events` and the metrics.
    pub fn routine(self) -> bool {
        matches!(
            self,
            Reason::RenewDue
                | Reason::Renewed
                | Reason::RetryDue
                | Reason::HeldByOther
                | Reason::ReleaseNotified
                | Reason::BackendError
                | Reason::Outranked
                | Reason::Deferred
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Start => "start",
            Reason::Acquired => "lease acquired",
            Reason::HeldByOther => "lease held by another candidate",
            Reason::BackendError => "backend error",
            Reason::RenewDue => "renewal due",
            Reason::Renewed => "lease renewed",
            Reason::RenewFailed => "renewal failed",
            Reason::LeaseLost => "lease lost to another token",
            Reason::RenewDeadlinePassed => "renew deadline passed without a successful renewal",
            Reason::Shutdown => "shutdown requested",
            Reason::WorkStopped => "work stopped",
            Reason::Released => "lease released",
            Reason::RetryDue => "retry due",
            Reason::ReleaseNotified => "release notified",
            Reason::ChildExited => "child exited",
            Reason::StepDownRequested => "step-down requested",
            Reason::CrashLoop => "child in a crash loop",
            Reason::HoldOver => "hold-off over",
            Reason::WorkerHealthy => "worker healthy",
            Reason::WorkerUnhealthy => "worker unhealthy",
            Reason::FirstHealthCheck => "waiting for the worker's first passing health check",
            Reason::Outranked => "outranked: another candidate leads first",
            Reason::Deferred => "deferring to a candidate of higher priority",
            Reason::Vacant => "lease vacant",
            Reason::HandOver => "handing over to a candidate of higher priority",
            Reason::HandOverTo => "handing over to the candidate step-down --to named",
            Reason::Ignored => "event does not apply in this state",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub next: State,
    pub actions: Vec<Action>,
    pub reason: Reason,
}

/// The machine's fixed parameters.
#[derive(Debug, Clone, Copy)]
pub struct Machine {
    pub timing: Timing,
    /// Grace for the work to stop before SIGKILL (shortened to fit the lease).
    pub stop_timeout: Duration,
    /// Health gating (`--health-policy gate`); `None`: the worker's health
    /// never reaches the machine.
    pub health: Option<HealthGate>,
}

/// How the worker's health gates the election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthGate {
    /// Campaign only once a first check has passed: the worker is checked
    /// from the start (a worker beside leaderd). `false` when the check
    /// probes the child, which runs only while leading.
    pub wait_for_first_check: bool,
    /// After a step-down for an unhealthy worker, stay out at least this
    /// long (`--health-failures × --health-interval`), so a flapping worker
    /// cannot bounce leadership around the fleet faster than its checks
    /// can condemn it.
    pub hold: Duration,
}

mod standing;
mod step;
mod stopping;
