//! The nemesis's generator: a fault schedule drawn from a seed. Pure: the
//! same seed, backend and length give the same schedule, which is how a
//! failing run is replayed (`--seed S --backend B`).
//!
//! Store faults that last (the store cut off, one node frozen, every server
//! crashed) never overlap one another: each heals before the next, since
//! thawing one node of a store that is cut would half-heal the cut. Instant
//! store faults (the lease deleted, the data lost, one node restarted) come
//! only while no lasting store fault is in force (a frozen server cannot be
//! told to delete). Faults of leaderd itself (SIGSTOP, SIGKILL, SIGTERM of a
//! candidate, its child crashing, its worker failing its health check) and
//! of one candidate's way to the store (cut off, slowed, its connections
//! reset) overlap everything, at random. Half the
//! faults a store tolerates (one node frozen) come alone, with a quiet
//! stretch before them: only then can C6 say whether the store kept
//! electing through them, and C7 whether the leader kept its term.

use std::time::Duration;

/// splitmix64: small, seedable, and the same everywhere.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)` milliseconds.
    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next() % (hi - lo).max(1))
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// The whole store unreachable (every node frozen, or the proxy cut).
    Cut,
    /// One node of a store that survives losing one (tolerated), the one
    /// that matters most (which may need the store's own failover).
    FreezeOne,
    /// One node whose loss the store rides out without a failover of the
    /// lease's own server (a Redlock master, a sentinel, a follower): the
    /// leader keeps its term.
    FreezeFollower,
    /// kill -9 of every server, started again with what it persists.
    Crash,
    /// The lease deleted or revoked from outside.
    Delete,
    /// Every lease and counter forgotten (restart without persistence).
    LoseData,
    /// kill -9 and restart of one node.
    RestartOne,
    /// A candidate frozen (SIGSTOP), then continued.
    LeaderdStop,
    /// A candidate killed (SIGKILL), then started again.
    LeaderdKill,
    /// A candidate stopped (SIGTERM), then started again.
    LeaderdTerm,
    /// The leader's child killed (SIGKILL) under it.
    ChildCrash,
    /// Another holder's lease written over the lease from outside, removed
    /// again at the heal.
    Overwrite,
    /// One candidate cut off from the store (its own proxies frozen).
    Isolate,
    /// One candidate's way to the store slowed (latency on its proxies).
    Slow,
    /// One candidate's connections to the store closed under it.
    Reset,
    /// One candidate's worker failing its health check, healthy again at
    /// the heal (the leader's, when `pick` is even: a health step-down).
    Sick,
    /// The lease's record written from outside as an operator or a restore
    /// would (its holder cleared, re-pointed at another candidate, its
    /// duration shortened, an old copy put back), where the store keeps
    /// such a record: a term only its holder may write, in a store anyone
    /// can write (issue #46).
    Outside,
    /// Every candidate stopped (SIGTERM) at once, all started again at once
    /// (every pod restarted, a fleet-wide deploy): the last leader released,
    /// so they join the election together with the lease free, where one's
    /// view of the others can miss an arrival.
    Herd,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Cut => "cut",
            Kind::FreezeOne => "freeze-one",
            Kind::FreezeFollower => "freeze-follower",
            Kind::Crash => "crash",
            Kind::Delete => "delete",
            Kind::LoseData => "lose-data",
            Kind::RestartOne => "restart-one",
            Kind::LeaderdStop => "leaderd-stop",
            Kind::LeaderdKill => "leaderd-kill",
            Kind::LeaderdTerm => "leaderd-term",
            Kind::ChildCrash => "child-crash",
            Kind::Overwrite => "overwrite",
            Kind::Isolate => "isolate",
            Kind::Slow => "slow",
            Kind::Reset => "reset",
            Kind::Sick => "sick-worker",
            Kind::Herd => "herd-restart",
            Kind::Outside => "outside-write",
        }
    }

    /// A store fault that lasts (and excludes the others while it does).
    pub fn lasting_store(self) -> bool {
        matches!(
            self,
            Kind::Cut | Kind::FreezeOne | Kind::FreezeFollower | Kind::Crash | Kind::Overwrite
        )
    }

    pub fn of_store(self) -> bool {
        self.lasting_store()
            || matches!(
                self,
                Kind::Delete | Kind::LoseData | Kind::RestartOne | Kind::Outside
            )
    }
}

/// A fault to inject: when (from the start of the run), what, for how long
/// (zero for an instant fault; for a kill or term: until the restart), and
/// at whom (`pick`: a candidate, the leader when `pick` is even, or a node).
#[derive(Debug, Clone)]
pub struct Planned {
    pub at: Duration,
    pub kind: Kind,
    pub lasts: Duration,
    pub pick: u64,
}

/// The quiet stretch before a fault that comes alone: longer than any
/// checker's bound, so nothing before it still matters.
pub const QUIET: Duration = Duration::from_millis(7000);

/// How the catalogue is weighted; store faults count double, since they are
/// where the backends differ.
const WEIGHTS: &[(Kind, u64)] = &[
    (Kind::Cut, 3),
    (Kind::FreezeOne, 3),
    (Kind::FreezeFollower, 3),
    (Kind::Crash, 2),
    (Kind::Delete, 4),
    (Kind::LoseData, 1),
    (Kind::RestartOne, 3),
    (Kind::LeaderdStop, 2),
    (Kind::LeaderdKill, 2),
    (Kind::LeaderdTerm, 2),
    (Kind::ChildCrash, 2),
    (Kind::Overwrite, 2),
    (Kind::Isolate, 2),
    (Kind::Slow, 2),
    (Kind::Reset, 2),
    (Kind::Sick, 2),
    (Kind::Herd, 2),
    // The class issue #46 is about, on every backend: as often as a delete.
    (Kind::Outside, 4),
];

/// The schedule for a run of `length` with lease `ttl`: faults from
/// `warmup` until `length - settle`, each healed by then.
pub fn plan(
    seed: u64,
    length: Duration,
    ttl: Duration,
    warmup: Duration,
    settle: Duration,
) -> Vec<Planned> {
    let mut rng = Rng::new(seed);
    let ttl_ms = ttl.as_millis() as u64;
    let end = length.saturating_sub(settle);
    let total: u64 = WEIGHTS.iter().map(|(_, w)| w).sum();
    let mut plan = Vec::new();
    let mut at = warmup;
    let mut store_busy_until = Duration::ZERO;
    while at < end {
        let mut roll = rng.below(total);
        let mut kind = Kind::Cut;
        for &(k, w) in WEIGHTS {
            if roll < w {
                kind = k;
                break;
            }
            roll -= w;
        }
        if kind.of_store() && at < store_busy_until {
            // The store is busy: a fault of leaderd's instead.
            kind = [Kind::LeaderdStop, Kind::LeaderdKill, Kind::ChildCrash][rng.below(3) as usize];
        }
        let lasts = match kind {
            Kind::Cut | Kind::Crash | Kind::Isolate => rng.millis(ttl_ms / 4, ttl_ms * 5 / 2),
            Kind::Overwrite | Kind::Slow | Kind::Sick => rng.millis(ttl_ms / 4, ttl_ms * 2),
            // Past the TTL, and past C6's bound (the TTL, the retry interval
            // and the store's failover): the store must keep electing.
            Kind::FreezeOne | Kind::FreezeFollower => rng.millis(ttl_ms * 3, ttl_ms * 5),
            Kind::LeaderdStop => rng.millis(ttl_ms / 4, ttl_ms * 2),
            Kind::LeaderdKill | Kind::LeaderdTerm | Kind::Herd => rng.millis(100, ttl_ms),
            _ => Duration::ZERO,
        };
        let alone = matches!(kind, Kind::FreezeOne | Kind::FreezeFollower) && rng.below(2) == 0;
        if alone {
            let last_end = plan.iter().map(|p: &Planned| p.at + p.lasts).max();
            at = at.max(last_end.map_or(Duration::ZERO, |e| e + QUIET));
            if at + lasts > end {
                break;
            }
        }
        let lasts = lasts.min(end.saturating_sub(at));
        if kind.lasting_store() {
            store_busy_until = at + lasts + Duration::from_millis(200);
        }
        plan.push(Planned {
            at,
            kind,
            lasts,
            pick: rng.next(),
        });
        if alone {
            // Nothing else until it heals.
            at += lasts;
        }
        // Gaps from overlapping (50 ms) to a quiet stretch (a TTL and a half).
        at += rng.millis(50, ttl_ms * 3 / 2);
    }
    plan
}

/// Checks the generator's promises, for `--sanity`: the same seed gives the
/// same schedule, and lasting store faults never overlap.
pub fn self_test() -> Result<(), String> {
    let (len, ttl) = (Duration::from_secs(60), Duration::from_secs(2));
    let a = plan(7, len, ttl, Duration::from_secs(3), Duration::from_secs(8));
    let b = plan(7, len, ttl, Duration::from_secs(3), Duration::from_secs(8));
    if format!("{a:?}") != format!("{b:?}") {
        return Err("one seed gave two schedules".into());
    }
    let lasting: Vec<&Planned> = a.iter().filter(|p| p.kind.lasting_store()).collect();
    for pair in lasting.windows(2) {
        if pair[0].at + pair[0].lasts > pair[1].at {
            return Err(format!("overlapping store faults: {pair:?}"));
        }
    }
    if a.iter()
        .any(|p| p.at + p.lasts > len - Duration::from_secs(8))
    {
        return Err("a fault outlasts the run's settling time".into());
    }
    Ok(())
}
