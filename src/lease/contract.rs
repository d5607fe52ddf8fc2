//! The contract every backend keeps: [`LeaseBackend`] (whose documentation
//! is the contract), what its operations return, its errors, and what it is
//! opened with ([`Common`], [`BackendEntry`]).

use super::registry::Record;
use crate::config::{Backend, Declared};
use crate::timing::Timing;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What every backend is opened with beside its own settings.
#[derive(Debug, Clone)]
pub struct Common {
    /// The election key.
    pub key: String,
    /// This candidate's id.
    pub id: String,
    pub timing: Timing,
}

impl Common {
    /// The same candidate on the scratch election `check` exercises.
    pub fn scratch(&self) -> Common {
        Common {
            key: format!("{}.check", self.key),
            ..self.clone()
        }
    }
}

/// A backend as leaderd knows it: its options (as the configuration sees
/// them), the names its contract scenes run under, and how to open it from
/// the settings it resolved (`None`: not its settings).
pub struct BackendEntry {
    /// Its options and their resolution; `None`: chosen by another
    /// backend's options (Redlock: the Redis options with several URLs).
    pub declared: Option<&'static Declared>,
    pub names: &'static [&'static str],
    pub open: Open,
    /// Log targets of its client library that log every reconnection
    /// attempt themselves, where leaderd says once, rate-limited, that the
    /// backend is unreachable: their errors only, unless the level names
    /// them (`info,zookeeper_client=debug`).
    pub chatty_logs: &'static [&'static str],
}

/// How a backend opens its lease from the settings it resolved (`None`:
/// not its settings).
pub type Open = fn(&Backend, &Common) -> Option<Result<Box<dyn LeaseBackend>, Error>>;

/// The usual [`Open`]: the settings resolved as a `T`, opened by `open`
/// (`None`: they are another backend's).
pub fn open_as<T: 'static, L: LeaseBackend + 'static>(
    backend: &Backend,
    common: &Common,
    open: impl FnOnce(&T, &Common) -> Result<L, Error>,
) -> Option<Result<Box<dyn LeaseBackend>, Error>> {
    let settings = backend.get::<T>()?;
    Some(open(settings, common).map(|l| Box::new(l) as Box<dyn LeaseBackend>))
}

/// How a standby learns that its holder still holds the lease
/// ([`LeaseBackend::standby_reads`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StandbyReads {
    /// From a live watch or subscription: no timed reads.
    Watch,
    /// The watch or subscription is down: timed reads, until it is back.
    Fallback,
    /// This backend's standbys read on their timers (once per TTL).
    Timer,
}

impl StandbyReads {
    pub fn label(self) -> &'static str {
        match self {
            StandbyReads::Watch => "watch",
            StandbyReads::Fallback => "fallback",
            StandbyReads::Timer => "timer",
        }
    }
}

/// Who holds a lease, as far as the backend could tell. `id` is `None` when
/// the backend holds something leaderd did not write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub id: Option<String>,
    pub fencing_token: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    /// The lease is ours. Its validity counts from `sent_at`.
    Won {
        fencing_token: u64,
        sent_at: Instant,
    },
    /// Someone else holds it; `expires_in` is its remaining time when known.
    Held {
        holder: Holder,
        expires_in: Option<Duration>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renew {
    Renewed {
        sent_at: Instant,
    },
    /// The backend holds another token (`Some`) or nothing (`None`).
    Lost {
        holder: Option<Holder>,
    },
}

/// A look at the lease without touching it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Peek {
    pub holder: Option<Holder>,
    pub expires_in: Option<Duration>,
    /// No holder, yet not free either (Redlock: no holder on a majority of
    /// the masters and no majority vacant): an acquire in progress, or the
    /// leftovers of failed ones. `expires_in`: when the first of them lapses.
    pub contested: bool,
}

impl Peek {
    /// The current term as heard, not asked: held, for `left`.
    pub fn heard((holder, left): (Holder, Duration)) -> Peek {
        Peek {
            holder: Some(holder),
            expires_in: Some(left),
            contested: false,
        }
    }

    /// Nobody holds the lease, or its holder's lease has run out (etcd and
    /// Kubernetes show an expired holder until someone takes over): an
    /// acquire could take it now, the vacancy rule permitting.
    pub fn vacant(&self) -> bool {
        self.expires_in == Some(Duration::ZERO) || (self.holder.is_none() && !self.contested)
    }
}

/// For a backend of several servers: how many answered the last
/// operation, of how many, and how many it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Nodes {
    pub answered: usize,
    pub total: usize,
    pub quorum: usize,
}

/// A backend failure: the stores' clients' error ([`crate::client::Error`]),
/// which the contract's operations return.
pub use crate::client::Error;

/// What a release watcher's single watch returns ([`rewatch`]): boxed, so
/// one loop can drive every backend's, and `Send`, to run on a task.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A lease backend. The contract, which the state machine's safety rests
/// on and the contract suite (`tests/it/contract.rs`) checks for each one:
///
/// - **Ownership.** The backend makes a random ownership token per
///   candidate, keeps it, and never returns, logs or serves it (nor anything
///   from which it can be recovered). Renew and release act only if the
///   stored lease is still ours (an atomic compare with the token); a
///   release that finds another holder, or none, changes nothing.
/// - **Validity and `sent_at`.** A lease won or renewed is valid for the
///   TTL counted from `sent_at`, the instant the request was *sent* (taken
///   before any I/O): the server's expiry is later than that, so the local
///   validity never outlasts the server's.
/// - **Ambiguous outcomes.** After a timeout the outcome is unknown. The
///   backend keeps the token, and the next `acquire` offers the same one, so
///   a request that did win is recognised as ours rather than assumed either
///   way (and taken again as a new term, with a new token: the won attempt's
///   token was never handed to anyone). A `release` after a failed or
///   refused acquire is allowed and is a no-op unless that acquire won.
/// - **Fencing.** Every acquisition returns a fencing token strictly greater
///   than every earlier one for the key, even after the backend lost its
///   data: the backend keeps a floor (the highest token it has seen) and may
///   add one of its own (Redis: the server's clock in ms).
/// - **New terms.** Every acquisition is a new term with a new, larger
///   token, also after a step-down, a failed release, a lost session or a
///   restart of the store: a token an earlier term used is never handed
///   back, whatever the store kept (etcd restores leases after a restart).
/// - **Vacancies.** A waiter takes a lease at once only after a release
///   its holder announced (the holder announces after its work stopped).
///   A lease that disappeared any other way (deleted, revoked, evicted, its
///   file unlinked) may still have a holder at work, which learns of it at
///   its next look at the store: `acquire` answers `Held` until that
///   holder's work must have stopped (at most a TTL after its last renewal;
///   the pure verdict is `vacancy`), and the holder learns of the loss as
///   soon as the store can tell it (a watch wakes it to renew).
/// - **Nodes.** A store that survives losing a node keeps its leader when
///   one node is lost: ask several nodes side by side, decide as soon as
///   enough have answered, and never let one silent node spend the deadline.
/// - **Refusals.** `Held` says who holds the lease and, when known, for how
///   long: waiters sleep until then. A lease nobody can ever take over (a
///   foreign value, no expiry, a wrong type) is [`Error::Blocked`], never
///   overwritten.
/// - **Wake-ups.** [`LeaseBackend::watch_releases`] is an optimisation only:
///   a lost wake-up costs latency, never correctness.
///
/// The methods are `async fn`s made object-safe by `async_trait` (boxed
/// `Send` futures), so the runner holds any backend as a `Box<dyn _>`.
#[async_trait::async_trait]
pub trait LeaseBackend: Send {
    /// A printable name for logs and `status`: secrets redacted.
    fn describe(&self) -> String;

    /// Caveats about this configuration, to log at start-up and print in
    /// `check` (e.g. a lock file coordinates one host only).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }

    /// What a worker compares with its fencing token to fence a write in
    /// this very store (docs/fencing.md), as environment variables for the
    /// child and `fence` in `/leader`: etcd's leader key, whose mod
    /// revision is the token. Fixed for the run; none where the store
    /// offers no such compare.
    fn fence_exports(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }

    /// What a worker compares against in the term the last `Won` began,
    /// and in no other: ZooKeeper's leader's queue node, which exists
    /// exactly as long as this candidate's place at the head of the queue.
    /// Read after each `Won`; the child has them beside
    /// [`LeaseBackend::fence_exports`], and `/leader` shows them while this
    /// candidate leads.
    fn term_exports(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }

    async fn acquire(&mut self) -> Result<Acquire, Error>;

    async fn renew(&mut self) -> Result<Renew, Error>;

    /// Releases the lease if it is still ours. `Ok(false)`: it was not, or
    /// we never held it (then nothing is sent).
    async fn release(&mut self) -> Result<bool, Error>;

    async fn peek(&mut self) -> Result<Peek, Error>;

    /// A standby's look before it defers (an outranked candidate woken by
    /// its timer): [`LeaseBackend::peek`], unless the backend can answer
    /// from what it heard of the current term, as its acquire does
    /// ([`heard`](super::heard)), so outranked standbys cost the store no
    /// more than the others.
    async fn look(&mut self) -> Result<Peek, Error> {
        self.peek().await
    }

    /// Starts a task that wakes the runner whenever a release makes the
    /// lease worth trying now, until `wakeups.stop`. `None`: waiters rely on
    /// their timers.
    fn watch_releases(&self, _wakeups: Wakeups) -> Option<JoinHandle<()>> {
        None
    }

    /// Starts the task that announces this candidate's terms outside
    /// leaderd ([`herald`](super::herald): Kubernetes' Service and Events),
    /// fed by the runner until every handle is dropped; it then finishes
    /// what it was told and ends. `None`: nothing to announce.
    fn herald(&self) -> Option<super::herald::Started> {
        None
    }

    /// What `run` (and `check`) verify before campaigning, where a problem
    /// no retry can fix shows up locally (a lock file's directory that does
    /// not exist). Never touches the network: a backend that is down is
    /// retried, not refused.
    fn preflight(&mut self) -> Result<(), Error> {
        Ok(())
    }

    /// What `run` and `check` verify over the network before campaigning.
    /// Refuses only on evidence of a configuration no retry can fix (Redlock:
    /// two URLs that reach one server); a backend that is down passes.
    async fn vet(&mut self) -> Result<(), Error> {
        Ok(())
    }

    /// What a standby's timed acquire costs the store now (issue #47):
    /// answered from a live watch or subscription, read on a timer because
    /// that watch is down, or read on a timer because this backend has no
    /// such watch. `/leader` and a metric show it, so an operator sees a
    /// candidate that fell back to polling.
    fn standby_reads(&self) -> StandbyReads {
        StandbyReads::Timer
    }

    /// For a backend of several servers, how many answered the last
    /// operation (`/leader`, metrics).
    fn nodes(&self) -> Option<Nodes> {
        None
    }

    /// Writes this candidate's record in the registry beside the lease,
    /// live for a TTL from now unless written again (`None`: removes it),
    /// and returns every live record, ours included, in no order. One round
    /// trip where the store allows: every candidate calls it every renew
    /// interval, leader or not.
    async fn register(&mut self, me: Option<&Record>) -> Result<Vec<Record>, Error>;

    /// Every live record, without writing ours (`status`).
    async fn candidates(&mut self) -> Result<Vec<Record>, Error>;

    /// This candidate defers to one of higher priority: give up any place
    /// the store keeps for it in line (ZooKeeper's queue, where only the
    /// first may take the lease), so the other can lead; the next acquire
    /// queues again. Nothing where the first to ask wins.
    async fn step_aside(&mut self) -> Result<(), Error> {
        Ok(())
    }

    /// Ends what the backend keeps open before leaderd exits, after any
    /// release (a ZooKeeper session, whose place in the queue would
    /// otherwise hold up the candidates behind it for a session timeout).
    async fn close(&mut self) {}

    /// `leaderd check`, beyond `peek`: exercise what `run` will do (as the
    /// configured user, on a scratch lease) and return one line per thing
    /// checked.
    async fn self_check(&mut self) -> Result<Vec<String>, Error>;
}

/// A fresh 128-bit random ownership token, hex-encoded.
pub(crate) fn new_token() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the OS random source is available on Linux");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What a release watcher is handed: where its wake-ups go, how long it
/// waits before watching again after a failure, and when it stops.
#[derive(Clone, Debug)]
pub struct Wakeups {
    pub notices: mpsc::UnboundedSender<()>,
    pub retry: Duration,
    pub stop: CancellationToken,
}

impl Wakeups {
    /// Wakes the runner; `false`: nobody listens any more.
    pub fn wake(&self) -> bool {
        self.notices.send(()).is_ok()
    }
}
