//! Redlock: the lease held on a majority (the quorum, ⌊N/2⌋ + 1) of N ≥ 3
//! independent Redis masters, so that no single server is a point of
//! failure and no replication lag can hand the lease to two holders. Every
//! master has the single-server layout (`leaderd:{KEY}:lease`, `:fence`,
//! `:wake`); every operation runs on all masters at once, each under
//! `--redis-node-timeout`, and the answers are judged by [`tally`].
//!
//! Fencing is two-phase. Phase one, the acquire, makes each master propose
//! `max(counter + 1, seen + 1, its clock in ms)`; the token T is the largest
//! proposal and of every token seen in refusals among the answers the win
//! was decided on (a quorum at least: any earlier committed token sits on a
//! quorum that shares a master with it); phase two commits T on every
//! master that is ours (the lease carries T, the counter rises to at
//! least T), and leadership counts only after a quorum committed. Any later
//! quorum shares a master with this one, so it proposes more than T, unless
//! a quorum of masters lost their data in between: then the tokens rest on
//! the masters' clocks and the candidate's own highest-seen token.
//!
//! Each master runs its requests on a task of its own ([`master`]): a win
//! is decided as soon as a quorum says the lease is ours, anything else
//! over every master's answer ([`enough`]), and no operation waits past two
//! node timeouts whatever a slow or frozen master does.

mod acquire;
mod ask;
mod check;
mod enough;
mod master;
mod tally;

use crate::client::redis::link::Link;
use crate::client::redis::restarts::Started;
use crate::client::redis::urls::{RedisUrl, WaitReplicas};
use crate::client::redis::{route, tls};
use crate::lease::contract::Wakeups;
use crate::lease::contract::{
    Acquire, BackendEntry, Common, Error, LeaseBackend, Nodes, Peek, Renew, open_as,
};
use crate::lease::redis::config::{RedisTls, RedlockConfig};
use crate::lease::redis::keys::{Keys, blocked, keys};
use crate::lease::redis::script::{Reply, Scripts, eval, parse_reply};
use crate::lease::redis::{registry, wake};
use crate::lease::registry::Record;
use crate::timing::Timing;
use enough::Until;
use futures_util::future::join_all;
use master::{Answered, Master};
use redis::{Cmd, Value};
use std::time::Duration;
use tally::{Answer, Renewed, Standing};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Redlock, chosen by the Redis options with several URLs (their
/// resolution is the Redis backend's, to `RedlockConfig`).
pub const ENTRY: BackendEntry = BackendEntry {
    declared: None,
    names: &["redlock"],
    open: |backend, common| open_as(backend, common, Redlock::open),
    chatty_logs: &[],
};

pub struct Redlock {
    /// One task per master, in the order given.
    nodes: Vec<Master>,
    /// Every master's answers, to the operation under way or, late, to an
    /// earlier one.
    answers: mpsc::UnboundedReceiver<Answered>,
    /// The number of the operation under way.
    op: u64,
    /// The number of the last renewal: a master that answers it late may
    /// still say it had lost the key.
    renewal: u64,
    /// When each master started, as its last answer knew it.
    started: Vec<Option<Started>>,
    /// Whether each master's last answer was one (not an error).
    answering: Vec<bool>,
    quorum: usize,
    keys: Keys,
    registry_key: String,
    id_json: String,
    timing: Timing,
    /// The ownership token of the lease we hold or may hold on some master
    /// (kept while a master may still hold it: a timeout, a failed release).
    token: Option<String>,
    /// The fencing token committed for the lease we hold (0: none).
    fencing: u64,
    /// Highest fencing token seen: a floor for the next proposals.
    highest_fencing: u64,
    /// Our lease's validity by our own clock, from the last quorum won or
    /// renewed: a master that lost the key gets it back only before this.
    valid_until: Option<Instant>,
    /// Each master's request timeout (`--redis-node-timeout`).
    node_timeout: Duration,
    scripts: Scripts,
    /// What it was opened from, for `check`'s scratch election.
    config: RedlockConfig,
    common: Common,
}

impl Redlock {
    /// The lease of `common.key` on the masters `config` names.
    pub fn open(config: &RedlockConfig, common: &Common) -> Result<Self, Error> {
        let RedlockConfig {
            urls,
            timeout,
            node_timeout,
            tls,
        } = config;
        let scripts = Scripts::new();
        let links = urls
            .iter()
            .map(|url| link(url, tls, *timeout, *node_timeout, &scripts))
            .collect::<Result<Vec<_>, _>>()?;
        let (answered, answers) = mpsc::unbounded_channel();
        let nodes: Vec<Master> = links
            .into_iter()
            .enumerate()
            .map(|(i, link)| Master::start(i, link, answered.clone()))
            .collect();
        Ok(Redlock {
            quorum: tally::quorum(nodes.len()),
            answers,
            op: 0,
            renewal: 0,
            started: vec![None; nodes.len()],
            answering: vec![false; nodes.len()],
            nodes,
            keys: keys(&common.key),
            registry_key: registry::key(&common.key),
            id_json: serde_json::to_string(&common.id).expect("a string always serialises"),
            timing: common.timing,
            token: None,
            fencing: 0,
            highest_fencing: 0,
            valid_until: None,
            node_timeout: *node_timeout,
            scripts,
            config: config.clone(),
            common: common.clone(),
        })
    }

    /// For each master, how long it still counts as restarted (it started
    /// less than a TTL ago), or `None` when it is warm or not known.
    fn cold(&self) -> Vec<Option<Duration>> {
        let now = Instant::now();
        self.started
            .iter()
            .map(|started| {
                let started = started.as_ref()?;
                (started.at + self.timing.ttl)
                    .checked_duration_since(now)
                    .filter(|left| !left.is_zero())
            })
            .collect()
    }

    fn ttl_ms(&self) -> u64 {
        self.timing.ttl_ms()
    }

    /// Reads the masters' replies; a lease nobody can take over on so many
    /// masters that no quorum is possible is an error for a person.
    fn answers(&mut self, replies: Vec<Result<Value, Error>>) -> Result<Judged, Error> {
        let mut judged = Judged::default();
        let mut blocked_on = Vec::new();
        for (node, reply) in self.nodes.iter().zip(replies) {
            let answer = match reply.and_then(|v| parse_reply(&v, &node.url)) {
                Ok(Reply::Ours(token)) => Answer::Ours(token),
                Ok(Reply::Held(holder, left)) => {
                    if let Some(e) = blocked(&node.url, &self.keys.lease, &holder, left) {
                        blocked_on.push(e);
                    }
                    Answer::Other(holder, left)
                }
                Err(e) => {
                    judged.errors.push(e);
                    Answer::Failed
                }
            };
            judged.answers.push(answer);
        }
        for seen in judged.answers.iter().filter_map(|a| match a {
            Answer::Other(Some(h), _) => h.fencing_token,
            _ => None,
        }) {
            self.highest_fencing = self.highest_fencing.max(seen);
        }
        if blocked_on.len() > self.nodes.len() - self.quorum {
            return Err(blocked_on.remove(0));
        }
        Ok(judged)
    }

    /// Fewer than a quorum answered: a person's error if one of them needs
    /// a person (credentials on every master, say), else a connection error
    /// naming each master's failure.
    fn unreachable(&self, mut errors: Vec<Error>) -> Error {
        if let Some(i) = errors.iter().position(Error::needs_a_person) {
            return errors.swap_remove(i);
        }
        let details: Vec<String> = errors.iter().map(ToString::to_string).collect();
        Error::Connection {
            backend: self.describe_short(),
            detail: format!(
                "only {} of {} masters answered, {} needed ({})",
                self.nodes.len().saturating_sub(errors.len()),
                self.nodes.len(),
                self.quorum,
                details.join("; ")
            ),
        }
    }

    /// How many masters answered their last request.
    fn answered(&self) -> usize {
        self.answering.iter().filter(|a| **a).count()
    }

    fn describe_short(&self) -> String {
        format!("Redlock over {} Redis masters", self.nodes.len())
    }

    /// The release script: owner-checked, pushing `wake_copies` wake-ups
    /// (0: a quiet give-back).
    fn release_call(&self, token: &str, wake_copies: usize) -> Cmd {
        eval(
            &self.scripts.release,
            &[
                &self.keys.lease,
                &self.keys.wake,
                &self.keys.term,
                &self.keys.ended,
            ],
            &[
                &token,
                &self.keys.channel,
                &wake_copies,
                &(wake::WAKE_LINGER.as_millis() as u64),
            ],
        )
    }

    /// Gives back whatever an attempt took: owner-checked, on every master
    /// that may hold it (all but those that answered with another holder),
    /// those that did not answer included, each after the attempt's own
    /// request. Not waited for: what stays expires. Quiet unless `wake`: a
    /// refused attempt ended no one's leadership, and two refused
    /// candidates that woke each other would never stop.
    fn give_back(&mut self, answers: Option<&[Answer]>, wake: bool) {
        let Some(token) = self.token.clone() else {
            return;
        };
        let on: Vec<bool> = match answers {
            Some(answers) => answers
                .iter()
                .map(|a| !matches!(a, Answer::Other(..)))
                .collect(),
            None => vec![true; self.nodes.len()],
        };
        self.valid_until = None;
        self.fencing = 0;
        let copies = if wake { wake::WAKE_COPIES } else { 0 };
        let call = self.release_call(&token, copies);
        self.tell(&call, &on);
    }
}

/// Answers of every master to one operation, and the errors of those that
/// failed.
#[derive(Default)]
struct Judged {
    answers: Vec<Answer>,
    errors: Vec<Error>,
}

/// The connection to one master: connecting bounded by `timeout` (TLS
/// included), each request by `node_timeout`.
fn link(
    url: &RedisUrl,
    tls: &RedisTls,
    timeout: Duration,
    node_timeout: Duration,
    scripts: &Scripts,
) -> Result<Link, Error> {
    Ok(Link {
        target: tokio::sync::watch::Sender::new(Some(tls::client(url, tls)?)),
        route: route::Route::Direct,
        master: None,
        preload: scripts.sources.clone(),
        conn: None,
        timeout,
        request_timeout: Some(node_timeout),
        url: url.redacted().to_string(),
        timeouts_in_a_row: 0,
        wait: WaitReplicas::Count(0),
        replicas: None,
        started: None,
        dialing: None,
        track_start: true,
    })
}

#[async_trait::async_trait]
impl LeaseBackend for Redlock {
    fn describe(&self) -> String {
        let urls: Vec<&str> = self.nodes.iter().map(|n| n.url.as_str()).collect();
        format!(
            "Redlock over {} Redis masters, quorum {} ({})",
            self.nodes.len(),
            self.quorum,
            urls.join(", ")
        )
    }

    async fn acquire(&mut self) -> Result<Acquire, Error> {
        self.acquire_op().await
    }

    async fn renew(&mut self) -> Result<Renew, Error> {
        let Some(token) = self.token.clone() else {
            return Ok(Renew::Lost { holder: None });
        };
        let sent_at = Instant::now();
        // A master that lost the key gets it back only while our own
        // clock says the lease is still ours.
        let restore = match self.valid_until {
            Some(valid) if sent_at < valid => self.fencing,
            _ => 0,
        };
        let call = eval(
            &self.scripts.reclaim,
            &[&self.keys.lease, &self.keys.counter, &self.keys.term],
            &[&token, &self.ttl_ms(), &self.id_json, &restore],
        );
        self.hear_late();
        let replies = self.on_all(&call, Until::Quorum).await;
        self.renewal = self.op;
        let judged = self.answers(replies)?;
        match tally::renew(&judged.answers, self.quorum) {
            Renewed::Yes { restored } => {
                if restored > 0 {
                    tracing::info!(
                        restored,
                        "the lease was gone from {restored} master(s) (restarted empty, or the key expired early); re-created it there"
                    );
                }
                self.valid_until = Some(self.timing.validity_end(sent_at));
                Ok(Renew::Renewed { sent_at })
            }
            Renewed::Lost(standing) => {
                let holder = match standing {
                    Standing::Held { holder, .. } => Some(holder),
                    _ => None,
                };
                // Our leadership ended: wake the waiters of any master
                // where it did.
                self.give_back(Some(&judged.answers), true);
                Ok(Renew::Lost { holder })
            }
            Renewed::Failed { ours, failed } => Err(Error::Connection {
                backend: self.describe_short(),
                detail: format!(
                    "renewed on {ours} master(s) and {failed} did not answer; {} needed",
                    self.quorum
                ),
            }),
        }
    }

    /// Releases on every master (each wakes its own waiters: a waiter
    /// acts on the first wake-up, so a slow master does not delay the
    /// handover). The token is forgotten only once every master answered,
    /// so the next acquire recognises a key a silent master may still hold.
    async fn release(&mut self) -> Result<bool, Error> {
        let Some(token) = self.token.clone() else {
            return Ok(false);
        };
        self.hear_late();
        self.valid_until = None;
        self.fencing = 0;
        let call = self.release_call(&token, wake::WAKE_COPIES);
        let replies = self.on_all(&call, Until::All).await;
        let mut errors = Vec::new();
        let mut released = false;
        for reply in replies {
            match reply {
                Ok(Value::Int(n)) => released |= n == 1,
                Ok(other) => errors.push(crate::lease::redis::script::unexpected(
                    &self.describe_short(),
                    &other,
                )),
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            self.token = None;
        }
        if errors.len() == self.nodes.len() {
            return Err(self.unreachable(errors));
        }
        Ok(released)
    }

    async fn peek(&mut self) -> Result<Peek, Error> {
        let call = eval(
            &self.scripts.peek,
            &[
                &self.keys.lease,
                &self.keys.term,
                &self.keys.counter,
                &self.keys.ended,
            ],
            &[&self.ttl_ms()],
        );
        self.hear_late();
        let replies = self.on_all(&call, Until::All).await;
        let judged = self.answers(replies)?;
        Ok(match tally::standing(&judged.answers, self.quorum) {
            Standing::Unreachable { .. } => return Err(self.unreachable(judged.errors)),
            Standing::Vacant => Peek::default(),
            Standing::Held { holder, expires_in } => Peek {
                holder: Some(holder),
                expires_in,
                contested: false,
            },
            Standing::Contested { expires_in, .. } => Peek {
                holder: None,
                expires_in,
                contested: true,
            },
        })
    }

    async fn register(&mut self, me: Option<&Record>) -> Result<Vec<Record>, Error> {
        let id: String = serde_json::from_str(&self.id_json).expect("id_json is a JSON string");
        let ttl_ms = self.timing.registry_lapse().as_millis() as u64;
        let entry = crate::lease::registry::entry(&id);
        let call = registry::register(&self.scripts, &self.registry_key, &entry, me, ttl_ms);
        self.hear_late();
        // A majority's records are everyone's: each candidate writes its
        // own on every master.
        let replies = self.on_all(&call, Until::Answers(self.quorum)).await;
        let urls: Vec<&str> = self.nodes.iter().map(|n| n.url.as_str()).collect();
        registry::union(replies, &urls)
    }

    async fn candidates(&mut self) -> Result<Vec<Record>, Error> {
        let call = registry::candidates(&self.scripts, &self.registry_key);
        self.hear_late();
        let replies = self.on_all(&call, Until::Answers(self.quorum)).await;
        let urls: Vec<&str> = self.nodes.iter().map(|n| n.url.as_str()).collect();
        registry::union(replies, &urls)
    }

    fn nodes(&self) -> Option<Nodes> {
        Some(Nodes {
            answered: self.answered(),
            total: self.nodes.len(),
            quorum: self.quorum,
        })
    }

    /// One waiter per master: a release wakes waiters on every master, and
    /// the first wake-up from any of them starts an attempt.
    fn watch_releases(&self, wakeups: Wakeups) -> Option<JoinHandle<()>> {
        let own_id: String = serde_json::from_str(&self.id_json).expect("id_json is a JSON string");
        let watchers: Vec<JoinHandle<()>> = self
            .nodes
            .iter()
            .map(|node| {
                let queue = wake::WakeQueue {
                    target: node.target.clone(),
                    key: self.keys.wake.clone(),
                    timeout: node.timeout,
                    own_id: own_id.clone(),
                    shown: node.url.clone(),
                    // Redlock's standbys ask on their timers: no notices heard.
                    renewals: Default::default(),
                };
                wake::watch(queue, wakeups.clone())
            })
            .collect();
        Some(tokio::spawn(async move {
            join_all(watchers).await;
        }))
    }

    async fn vet(&mut self) -> Result<(), Error> {
        let prefix = format!("leaderd:{{{}}}", self.common.key);
        check::probe(self, &prefix).await.map(drop)
    }

    /// The independence probe, then acquire, renew and release on a
    /// scratch election (`KEY.check`) and a short `BLPOP` on every master.
    async fn self_check(&mut self) -> Result<Vec<String>, Error> {
        check::report(self).await
    }
}
