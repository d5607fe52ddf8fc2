//! ZooKeeper: the election recipe of ZooKeeper's own documentation, with a
//! lease node. Under `PREFIX/KEY` (inside the connect string's chroot):
//!
//! - each candidate queues an ephemeral sequential node `c-NONCE-SEQ` (the
//!   nonce is this candidate's, so after a lost connection it finds its own
//!   node by name and never queues behind itself);
//! - the first in the queue takes `leader`, an ephemeral node created only
//!   if absent; the zxid of the write that began the term (its `mzxid`) is
//!   the fencing token, a cluster-wide counter that never goes back;
//! - each waiter watches only the node before it (no herd: a release wakes
//!   one candidate); the first waits on `leader` itself when someone else
//!   still holds it.
//!
//! Both nodes belong to the candidate's session, whose timeout is the TTL:
//! a leader that dies or freezes loses both when the servers expire the
//! session, which is no sooner than its own validity ended. A lease node
//! deleted from outside does not free the election: its holder is still
//! first in the queue, learns of the loss through its watch, stops its work,
//! and only then leaves the queue or takes the lease again. A leader's
//! queue node deleted from outside does not free it either — the lease node
//! stands — but ends the term (a leader out of line is not protected: the
//! next in line would take the lease the moment it vanished), and the lease
//! node goes once the work stopped. Only both deleted at once can give two
//! leaders (docs/backends.md). Release deletes both in one transaction,
//! after the work stopped, so the next in the queue starts at once.

mod check;
pub mod config;
mod election;
mod registry;
mod session;
mod wake;

use crate::config::Backend;
use crate::lease::contract::Wakeups;
use crate::lease::contract::open_as;
use crate::lease::contract::{
    Acquire, BackendEntry, Common, Error, Holder, LeaseBackend, Peek, Renew, new_token,
};
use crate::lease::registry::Record;
use crate::timing::Timing;
use config::ZkConfig;
use election::id_in;
use session::{Failure, Session};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use zookeeper_client::{CreateMode, Stat};

/// ZooKeeper: a queue of ephemeral sequential nodes and a lease node.
pub const ENTRY: BackendEntry = BackendEntry {
    declared: Some(&config::DECLARED),
    names: &["zookeeper"],
    open,
    chatty_logs: &["zookeeper_client"],
};

fn open(backend: &Backend, common: &Common) -> Option<Result<Box<dyn LeaseBackend>, Error>> {
    open_as(backend, common, |zk: &ZkConfig, common| {
        Ok(ZkLease::open(zk, common))
    })
}

/// The term we hold: the lease node's zxid when it began.
#[derive(Debug, Clone, Copy)]
struct Term {
    zxid: i64,
}

pub struct ZkLease {
    config: ZkConfig,
    /// `PREFIX/KEY`, and the lease node in it.
    base: String,
    leader: String,
    id: String,
    timing: Timing,
    /// Names this candidate's queue nodes: `c-NONCE-`.
    mark: String,
    session: Option<Session>,
    /// Our queue node's name while this session has one.
    queued: Option<String>,
    term: Option<Term>,
    /// The largest token seen or handed out: never again.
    floor: u64,
    /// What the watcher watches now (the node we wait on, or our own lease
    /// node), with the session to watch it through.
    aim: tokio::sync::watch::Sender<Option<wake::Aim>>,
    registry: registry::Registry,
}

impl ZkLease {
    pub fn open(config: &ZkConfig, common: &Common) -> ZkLease {
        let base = format!("{}/{}", config.prefix, common.key);
        let nonce = new_token()[..16].to_string();
        ZkLease {
            registry: registry::Registry::new(&base, &nonce),
            config: config.clone(),
            leader: format!("{base}/leader"),
            base,
            id: common.id.clone(),
            timing: common.timing,
            // Not secret: the session is what owns the nodes.
            mark: format!("c-{nonce}-"),
            session: None,
            queued: None,
            term: None,
            floor: 0,
            aim: tokio::sync::watch::Sender::new(None),
        }
    }

    /// The live session, opened anew when there is none or it is over (then
    /// everything the old one queued or held is gone).
    async fn session(&mut self) -> Result<Session, Error> {
        if let Some(s) = &self.session
            && !s.is_over()
        {
            return Ok(s.clone());
        }
        self.forget_session();
        let s = Session::open(&self.config, self.timing.ttl).await?;
        self.session = Some(s.clone());
        Ok(s)
    }

    fn forget_session(&mut self) {
        self.session = None;
        self.queued = None;
        self.term = None;
        self.aim.send_replace(None);
    }

    fn aim_at(&self, s: &Session, path: Option<String>) {
        self.aim.send_replace(path.map(|path| wake::Aim {
            client: s.client.clone(),
            paths: vec![path],
        }));
    }

    /// A leader watches its lease node and its queue node: either deleted
    /// from outside, it stops its work at once.
    fn aim_as_leader(&self, s: &Session) {
        let mut paths = vec![self.leader.clone()];
        paths.extend(self.queued.as_ref().map(|q| format!("{}/{q}", self.base)));
        self.aim.send_replace(Some(wake::Aim {
            client: s.client.clone(),
            paths,
        }));
    }

    fn data(&self) -> Vec<u8> {
        serde_json::json!({ "id": self.id })
            .to_string()
            .into_bytes()
    }

    /// Who the lease node's data and stat name.
    fn holder(&mut self, data: &[u8], stat: &Stat) -> Holder {
        let token = stat.mzxid as u64;
        self.floor = self.floor.max(token);
        Holder {
            id: id_in(data),
            fencing_token: Some(token),
        }
    }

    fn won(&mut self, stat: &Stat, sent_at: Instant) -> Acquire {
        // The zxid, unless the ensemble lost its data and counts again from
        // below what we saw: then the next number above it.
        let token = (stat.mzxid as u64).max(self.floor + 1);
        self.floor = token;
        self.term = Some(Term { zxid: stat.mzxid });
        Acquire::Won {
            fencing_token: token,
            sent_at,
        }
    }

    /// A failure on the session: an expired one is dropped (the next
    /// acquire opens another).
    fn failed(&mut self, f: Failure) -> Error {
        if matches!(f, Failure::Expired) {
            self.forget_session();
        }
        f.into_error()
    }
}

#[async_trait::async_trait]
impl LeaseBackend for ZkLease {
    fn describe(&self) -> String {
        format!(
            "ZooKeeper {}, election {}",
            self.config.connect.text(),
            self.base
        )
    }

    /// The leader's queue node (inside the connect string's chroot): it
    /// exists from before this term began until its holder leaves the
    /// queue — release, expiry, or a deletion that ends the term — and no
    /// one else can lead while it exists (they queue behind it), while a
    /// new leader's is another node. So a worker's `multi(check(NODE, -1),
    /// write…)` commits only while this candidate is still first in line
    /// (docs/fencing.md). The lease node cannot serve: a new leader's is
    /// the same path, at the same version.
    fn term_exports(&self) -> Vec<(&'static str, String)> {
        self.queued
            .iter()
            .map(|q| ("LEADERD_ZOOKEEPER_FENCE_NODE", format!("{}/{q}", self.base)))
            .collect()
    }

    async fn acquire(&mut self) -> Result<Acquire, Error> {
        let sent_at = Instant::now();
        // Whatever we held before is over: an acquisition is a new term.
        self.term = None;
        let s = self.session().await?;
        match self.try_acquire(&s, sent_at).await {
            Ok(outcome) => Ok(outcome),
            Err(f) => Err(self.failed(f)),
        }
    }

    async fn renew(&mut self) -> Result<Renew, Error> {
        let (Some(term), Some(s)) = (self.term, self.session.clone()) else {
            return Ok(Renew::Lost { holder: None });
        };
        if s.is_over() {
            self.forget_session();
            return Ok(Renew::Lost { holder: None });
        }
        let sent_at = Instant::now();
        let leader = self.leader.clone();
        let base = self.base.clone();
        // A read after a sync sees every write committed before it: the
        // lease node, and the queue, as the quorum has them. The holder must
        // be first in line. It always is (it took the lease first in a
        // listing made after its node existed, and nothing queues ahead of
        // a standing node) unless its node was deleted from outside, or a
        // node was put ahead of it by hand or by a bug: then whoever is
        // first would take the lease the moment it vanished, so the term
        // ends here and the lease node goes once the work stopped.
        let read = async {
            s.client.sync(&leader).await?;
            let lease = s.client.get_data(&leader);
            let queue = s.client.list_children(&base);
            Ok((lease.await?, queue.await?))
        };
        match s.call(&leader, read).await {
            Ok(((data, stat), queue)) => {
                let ours = stat.ephemeral_owner == s.id() && stat.mzxid == term.zxid;
                let queue = election::sorted(&queue);
                let mine = self.queued.as_ref();
                if ours && mine.is_some() && queue.first() == mine {
                    return Ok(Renew::Renewed { sent_at });
                }
                if ours && mine.is_some_and(|m| queue.contains(m)) {
                    tracing::warn!(
                        ahead = %queue[0],
                        "a queue node stands ahead of ours in the election (made outside leaderd?): ending the term, the first in line leads next"
                    );
                }
                self.term = None;
                let holder = self.holder(&data, &stat);
                Ok(Renew::Lost {
                    holder: Some(holder),
                })
            }
            Err(Failure::NoNode) => {
                self.term = None;
                Ok(Renew::Lost { holder: None })
            }
            Err(Failure::Expired) => {
                self.forget_session();
                Ok(Renew::Lost { holder: None })
            }
            Err(f) => Err(f.into_error()),
        }
    }

    async fn release(&mut self) -> Result<bool, Error> {
        let term = self.term.take();
        let Some(s) = self.session.clone().filter(|s| !s.is_over()) else {
            self.forget_session();
            return Ok(false);
        };
        self.aim_at(&s, None);
        match self.let_go(&s).await {
            Ok(released) => Ok(released),
            Err(f) => {
                self.term = term;
                Err(self.failed(f))
            }
        }
    }

    async fn peek(&mut self) -> Result<Peek, Error> {
        let s = self.session().await?;
        let leader = self.leader.clone();
        match s.call(&leader, s.client.get_data(&leader)).await {
            Ok((data, stat)) => Ok(Peek {
                holder: Some(self.holder(&data, &stat)),
                expires_in: None,
                contested: false,
            }),
            Err(Failure::NoNode) => Ok(Peek::default()),
            Err(f) => Err(self.failed(f)),
        }
    }

    async fn register(&mut self, me: Option<&Record>) -> Result<Vec<Record>, Error> {
        // Off the registry on the way out: a session that is over took our
        // ephemeral record with it, and opening one now would only delay
        // the exit.
        if me.is_none() && self.session.as_ref().is_none_or(Session::is_over) {
            return Ok(Vec::new());
        }
        let s = self.session().await?;
        match self.registry.register(&s, me).await {
            Ok(records) => Ok(records),
            Err(f) => Err(self.failed(f)),
        }
    }

    async fn candidates(&mut self) -> Result<Vec<Record>, Error> {
        let s = self.session().await?;
        match self.registry.read(&s).await {
            Ok(records) => Ok(records),
            Err(f) => Err(self.failed(f)),
        }
    }

    fn watch_releases(&self, wakeups: Wakeups) -> Option<JoinHandle<()>> {
        Some(wake::spawn(self.aim.subscribe(), wakeups))
    }

    /// The session (its negotiated timeout), and whether this identity may
    /// create and delete in the election: a node written and deleted.
    async fn vet(&mut self) -> Result<(), Error> {
        let probe = async {
            let s = self.session().await?;
            s.parents(&self.base).await?;
            let path = format!("{}/probe-{}", self.base, &new_token()[..16]);
            let options = s.options(CreateMode::Ephemeral);
            s.call(&path, s.client.create(&path, b"", &options)).await?;
            s.call(&path, s.client.delete(&path, None)).await?;
            Ok::<_, Error>(())
        };
        match probe.await {
            Err(e) if e.is_misconfiguration() => Err(e),
            // Down or slow: retried, not refused.
            _ => Ok(()),
        }
    }

    async fn step_aside(&mut self) -> Result<(), Error> {
        let Some(s) = self.session.clone().filter(|s| !s.is_over()) else {
            return Ok(());
        };
        match self.leave(&s).await {
            Ok(()) => Ok(()),
            Err(f) => Err(self.failed(f)),
        }
    }

    async fn close(&mut self) {
        let _ = self.release().await;
    }

    async fn self_check(&mut self) -> Result<Vec<String>, Error> {
        self.report().await
    }
}
