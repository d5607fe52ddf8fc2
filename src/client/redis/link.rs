//! The connection to one Redis server: made on demand, every call bounded
//! by one timeout, failures classified, and a connection that is broken or
//! keeps timing out replaced. Lease writes can be followed, in the same
//! round trip, by `WAIT` for replica acknowledgements.

use super::classify::{classify, cluster_redirect, connected_replicas, not_a_writable_primary};
use super::dial::{Dial, Dialed};
use super::route::Route;
use super::urls::WaitReplicas;
use crate::client::Error;
use redis::aio::MultiplexedConnection;
use redis::{Cmd, ErrorKind, RedisError, ServerErrorKind, Value};
use std::time::Duration;
use tokio::time::Instant;

/// After this many timeouts in a row the connection is replaced: a Redis that
/// was paused or a black-holed socket never answers on the old one, and
/// redis-rs does not reconnect on timeouts by itself.
const REPLACE_AFTER_TIMEOUTS: u32 = 2;

/// The connection to Redis: made on demand, replaced when broken or when it
/// keeps timing out.
pub(crate) struct Link {
    /// The node to talk to (`None` until a Sentinel master is known).
    /// Replaced when Sentinel names a new master, and signalled when the
    /// node is found no longer a writable primary: the wake-up listener
    /// follows it.
    pub(crate) target: tokio::sync::watch::Sender<Option<redis::Client>>,
    /// How to find the node (the URL's, Sentinel's master, the Cluster
    /// slot's owner), and the one found last.
    pub(crate) route: Route,
    pub(crate) master: Option<(String, u16)>,
    /// Script sources to load on each new connection, so that the first
    /// release or renewal after a (re)connect is one round trip, not three
    /// (EVALSHA → NOSCRIPT → SCRIPT LOAD → EVALSHA).
    pub(crate) preload: Vec<String>,
    pub(crate) conn: Option<MultiplexedConnection>,
    pub(crate) timeout: Duration,
    /// Redlock: once connected, each request has only this long (a node
    /// that is slow must not hold up the majority), while connecting, a TLS
    /// handshake included, keeps `timeout`. `None`: `timeout` bounds both.
    pub(crate) request_timeout: Option<Duration>,
    /// The URL with its password redacted, for messages.
    pub(crate) url: String,
    pub(crate) timeouts_in_a_row: u32,
    /// Replicas that must acknowledge a lease write.
    pub(crate) wait: WaitReplicas,
    /// Replicas the primary reported connected at the last look (`ROLE`),
    /// for `WaitReplicas::Auto`.
    pub(crate) replicas: Option<u32>,
    /// Redlock: when the server started, from `INFO server` on every new
    /// connection (`None` when not tracked, or not known).
    pub(crate) started: Option<super::restarts::Started>,
    pub(crate) track_start: bool,
    /// Redlock: a connection being made in the background. A master that
    /// accepts TCP and never answers (frozen, or far away) must not hold
    /// an operation for the connect timeout: the operation waits for this
    /// only within its own request budget and leaves it running.
    pub(crate) dialing: Option<tokio::task::JoinHandle<Result<Dialed, Error>>>,
}

impl Drop for Link {
    fn drop(&mut self) {
        if let Some(dialing) = self.dialing.take() {
            dialing.abort();
        }
    }
}

/// One try of an operation: done, failed, or sent elsewhere by the cluster.
enum Attempt {
    Failed(Error),
    /// A connection that had worked was found broken (the server restarted,
    /// a proxy reset it): worth one more try on a fresh one.
    Broken(Error),
    Redirected,
}

impl From<Error> for Attempt {
    fn from(e: Error) -> Self {
        Attempt::Failed(e)
    }
}

/// How many replicas acknowledged a lease write, of how many asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Replication {
    pub(crate) asked: u32,
    pub(crate) acknowledged: u32,
}

impl Replication {
    /// The error for a write acknowledged by too few replicas.
    pub(crate) fn shortfall(&self, url: &str) -> Option<Error> {
        (self.acknowledged < self.asked).then(|| Error::UnderReplicated {
            backend: url.to_string(),
            asked: self.asked,
            acknowledged: self.acknowledged,
        })
    }
}

impl Link {
    /// One script call that only reads, or whose durability does not
    /// matter (release: a lost release only delays the next leader).
    pub(crate) async fn invoke(&mut self, call: &Cmd) -> Result<Value, Error> {
        self.exchange(call, false).await.map(|(value, _)| value)
    }

    /// A lease write (acquire, renew), followed in the same round trip by
    /// `WAIT` when replicas must acknowledge it (it cannot run inside the
    /// script, and inside MULTI it would return at once).
    pub(crate) async fn write(&mut self, call: &Cmd) -> Result<(Value, Replication), Error> {
        self.exchange(call, true).await
    }

    /// Connects if needed, sends `call` (and for a write `WAIT`, and `ROLE`
    /// to keep the replica count current under `auto`), all bounded by the
    /// timeout; classifies failures, and drops a connection that is broken
    /// or keeps timing out so the next call starts on a fresh one.
    async fn exchange(&mut self, call: &Cmd, write: bool) -> Result<(Value, Replication), Error> {
        // Redlock: connecting and the request share one budget, so no
        // master holds an operation past `--redis-node-timeout`.
        let deadline = Instant::now() + self.request_timeout.unwrap_or(self.timeout);
        let mut first = self.attempt(call, write, deadline).await;
        if let Err(Attempt::Broken(e)) = first {
            // Found broken on its first use since the server went away: a
            // request that never reached the server. Once more, on a fresh
            // connection, within the same deadline.
            tracing::debug!(error = %e, server = %self.url, "connection found broken; retrying once on a new one");
            first = if Instant::now() < deadline {
                self.attempt(call, write, deadline).await
            } else {
                Err(Attempt::Failed(e))
            };
        }
        match first {
            // The slot moved (a Cluster failover or resharding): once more,
            // on the owner found afresh, if there is time.
            Err(Attempt::Redirected) if Instant::now() < deadline => {
                match self.attempt(call, write, deadline).await {
                    Ok(sent) => Ok(sent),
                    Err(Attempt::Failed(e) | Attempt::Broken(e)) => Err(e),
                    Err(Attempt::Redirected) => Err(self.moving(
                        "the cluster keeps moving the election's slot (MOVED/ASK); retrying",
                    )),
                }
            }
            Err(Attempt::Redirected) => {
                Err(self.moving("the cluster moved the election's slot; following it"))
            }
            Err(Attempt::Failed(e) | Attempt::Broken(e)) => Err(e),
            Ok(sent) => Ok(sent),
        }
    }

    fn moving(&self, detail: &str) -> Error {
        Error::Connection {
            backend: self.url.clone(),
            detail: detail.to_string(),
        }
    }

    async fn attempt(
        &mut self,
        call: &Cmd,
        write: bool,
        deadline: Instant,
    ) -> Result<(Value, Replication), Attempt> {
        self.follow(deadline).await?;
        let reused = self.conn.is_some();
        let mut conn = match self.conn.clone() {
            Some(conn) => conn,
            None => match self.connection(deadline).await {
                Ok(conn) => conn,
                Err(e) => {
                    // A slot owner that cannot be reached (down, frozen) may
                    // have been replaced by a promoted replica: look it up
                    // again at the next attempt rather than retry it.
                    if self.route.is_cluster() {
                        self.master = None;
                    }
                    return Err(e.into());
                }
            },
        };
        // After connecting: `auto` counts the replicas the primary reported
        // then (or at the previous call).
        let asked = match (write, self.wait) {
            (false, _) => 0,
            (true, WaitReplicas::Count(n)) => n,
            (true, WaitReplicas::Auto) => self.replicas.unwrap_or(0).min(1),
        };
        let mut result = self.send(&mut conn, call, write, asked, deadline).await;
        if let Err(e) = &result
            && e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
        {
            // SCRIPT FLUSH, or a node that never had them: load and resend.
            let loaded = super::dial::load_scripts(&self.preload, &mut conn, deadline).await;
            result = match loaded {
                Ok(()) => self.send(&mut conn, call, write, asked, deadline).await,
                Err(e) => Err(e),
            };
        }
        let (result, timed_out_now, broken) = match result {
            Ok(sent) => (Ok(sent), false, false),
            Err(e) => {
                let moved = not_a_writable_primary(&e);
                if moved {
                    // A managed failover moves the DNS name to the new
                    // primary; this connection still reaches the old one.
                    tracing::warn!(error = %e, "Redis is not a writable primary on this connection; reconnecting to follow a failover");
                    self.target.send_modify(|_| {});
                }
                let broken = moved
                    || e.is_connection_dropped()
                    || e.is_io_error()
                    || e.is_unrecoverable_error();
                let timed_out = e.is_timeout();
                if self.route.is_cluster() && (broken || timed_out || cluster_redirect(&e)) {
                    // Find the slot's owner afresh at the next attempt.
                    self.master = None;
                    self.conn = None;
                    if cluster_redirect(&e) {
                        tracing::info!(error = %e, "the cluster moved the election's slot; following it");
                        return Err(Attempt::Redirected);
                    }
                }
                let budget = self.request_timeout.unwrap_or(self.timeout);
                (Err(classify(e, &self.url, budget)), timed_out, broken)
            }
        };
        self.timeouts_in_a_row = if timed_out_now {
            self.timeouts_in_a_row + 1
        } else {
            0
        };
        if broken || self.timeouts_in_a_row >= REPLACE_AFTER_TIMEOUTS {
            self.conn = None;
            self.timeouts_in_a_row = 0;
        }
        let dropped = broken && !timed_out_now;
        result.map_err(|e| {
            if reused && dropped {
                Attempt::Broken(e)
            } else {
                Attempt::Failed(e)
            }
        })
    }

    /// Moves to the node the route names when it is not the one we talk
    /// to: a new connection, and the wake-up listener with it. Under
    /// Sentinel no majority means no operation: nothing is ever sent to a
    /// node the sentinels no longer name.
    pub(crate) async fn follow(&mut self, deadline: Instant) -> Result<(), Error> {
        let Some(target) = self.route.locate(self.master.as_ref(), deadline).await? else {
            return Ok(());
        };
        self.url = target.shown;
        self.master = Some(target.addr);
        self.conn = None;
        self.replicas = None;
        self.target.send_replace(Some(target.client));
        Ok(())
    }

    /// A connection within `deadline`: made here, or under Redlock's
    /// request budget awaited from the background dial (started if none
    /// runs), which goes on past `deadline` within the connect timeout and
    /// serves the next request.
    async fn connection(&mut self, deadline: Instant) -> Result<MultiplexedConnection, Error> {
        if self.request_timeout.is_none() {
            return self.connect(deadline).await;
        }
        let dialing = match &mut self.dialing {
            Some(dialing) => dialing,
            None => {
                let dial = self.dial()?;
                let until = Instant::now() + self.timeout;
                self.dialing.insert(tokio::spawn(dial.run(until)))
            }
        };
        let dialed = match tokio::time::timeout_at(deadline, dialing).await {
            Err(_) => {
                return Err(Error::Connection {
                    backend: self.url.clone(),
                    detail: format!(
                        "still connecting (no answer within {:?}); the connection is being made in the background",
                        self.request_timeout.unwrap_or(self.timeout)
                    ),
                });
            }
            Ok(joined) => {
                self.dialing = None;
                joined.map_err(|e| Error::Unexpected {
                    backend: self.url.clone(),
                    detail: format!("the connecting task ended: {e}"),
                })??
            }
        };
        Ok(self.install(dialed))
    }

    pub(crate) async fn connect(
        &mut self,
        deadline: Instant,
    ) -> Result<MultiplexedConnection, Error> {
        let dialed = self.dial()?.run(deadline).await?;
        Ok(self.install(dialed))
    }

    fn dial(&self) -> Result<Dial, Error> {
        let Some(client) = self.target.borrow().clone() else {
            return Err(Error::Connection {
                backend: self.url.clone(),
                detail: "no master known yet".into(),
            });
        };
        Ok(Dial {
            client,
            url: self.url.clone(),
            timeout: self.timeout,
            preload: self.preload.clone(),
            track_start: self.track_start,
            role: self.wait == WaitReplicas::Auto,
        })
    }

    fn install(&mut self, dialed: Dialed) -> MultiplexedConnection {
        if let Some(start) = dialed.start {
            super::restarts::note(&mut self.started, start);
        }
        if let Some(replicas) = dialed.replicas {
            self.replicas = replicas;
        }
        self.timeouts_in_a_row = 0;
        self.conn.insert(dialed.conn).clone()
    }

    async fn send(
        &mut self,
        conn: &mut MultiplexedConnection,
        call: &Cmd,
        write: bool,
        asked: u32,
        deadline: Instant,
    ) -> Result<(Value, Replication), RedisError> {
        let timed_out = || RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        // `ROLE` rides along only with writes under `auto`: reads (peek,
        // release) stay one command.
        let auto = write && self.wait == WaitReplicas::Auto;
        if asked == 0 && !auto {
            return match tokio::time::timeout_at(deadline, call.query_async::<Value>(conn)).await {
                Ok(result) => result.map(|v| (v, Replication::default())),
                Err(_) => Err(timed_out()),
            };
        }
        let mut pipe = redis::pipe();
        pipe.add_command(call.clone());
        if asked > 0 {
            // Out of the backend timeout: WAIT's reply must arrive in time.
            let left = deadline.saturating_duration_since(Instant::now());
            let wait_ms = (left.as_millis() as u64 * 3 / 4).max(1);
            pipe.cmd("WAIT").arg(asked).arg(wait_ms);
        }
        if auto {
            pipe.cmd("ROLE");
        }
        let replies =
            match tokio::time::timeout_at(deadline, pipe.query_async::<Vec<Value>>(conn)).await {
                Ok(result) => result?,
                Err(_) => return Err(timed_out()),
            };
        let mut replies = replies.into_iter();
        let value = replies.next().unwrap_or(Value::Nil);
        let acknowledged = if asked > 0 {
            match replies.next() {
                Some(Value::Int(n)) => u32::try_from(n).unwrap_or(0),
                _ => 0,
            }
        } else {
            0
        };
        if let Some(role) = replies.next() {
            self.replicas = connected_replicas(&role);
        }
        Ok((
            value,
            Replication {
                asked,
                acknowledged,
            },
        ))
    }

    pub(crate) fn timed_out(&self) -> Error {
        Error::Timeout {
            backend: self.url.clone(),
            timeout: self.timeout,
        }
    }
}
