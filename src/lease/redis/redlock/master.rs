//! One Redlock master as a task of its own, so that an operation decides
//! as soon as enough masters answered while a slow or frozen one finishes
//! (or times out) in the background.
//!
//! Each master's task owns its [`Link`] and runs the requests sent to it one
//! at a time, in the order sent: a give-back sent after an acquire reaches
//! that master after the acquire, even when the operation that sent the
//! acquire stopped waiting for it. Every answer comes back on one channel
//! shared by all masters, tagged with the operation that asked; an answer
//! that comes after its operation decided is read by the next one and can
//! only make it safer (a higher fencing token seen, a restart noticed).
//!
//! A request that waited in a master's queue past its operation's deadline
//! is not sent at all when it may be dropped (a lease read or write): the
//! operation was already decided without it, and a queue behind a frozen
//! master must not grow. Releases are always sent.

use super::super::Error;
use super::super::link::Link;
use super::super::restarts::Started;
use super::super::script::{Reply, parse_reply};
use super::Redlock;
use super::enough::{self, Heard, Until};
use redis::{Cmd, Value};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// A handle on one master's task.
pub(super) struct Master {
    /// The master's URL, password redacted, for messages.
    pub(super) url: String,
    /// Connecting is bounded by this (`--redis-timeout`).
    pub(super) timeout: Duration,
    /// The master's client, for the wake-up listener.
    pub(super) target: watch::Receiver<Option<redis::Client>>,
    requests: mpsc::UnboundedSender<Request>,
}

/// One request for a master.
struct Request {
    op: u64,
    call: Cmd,
    /// Past this, a request still queued is dropped unsent (`None`: always
    /// sent).
    drop_after: Option<Instant>,
}

/// A master's answer to one operation's request.
pub(super) struct Answered {
    pub(super) op: u64,
    pub(super) master: usize,
    /// `None`: dropped unsent, its operation already decided.
    pub(super) result: Option<Result<Value, Error>>,
    /// When the master started, as known after the request.
    pub(super) started: Option<Started>,
}

impl Master {
    /// Starts master `index`'s task on `link`; answers go to `answers`.
    pub(super) fn start(
        index: usize,
        link: Link,
        answers: mpsc::UnboundedSender<Answered>,
    ) -> Self {
        let (requests, queue) = mpsc::unbounded_channel();
        let (url, timeout, target) = (link.url.clone(), link.timeout, link.target.subscribe());
        // Not aborted when the lease is dropped: the task ends once its
        // queue is empty (a release still queued is sent), each request
        // bounded by the node timeout.
        tokio::spawn(serve(index, link, queue, answers));
        Master {
            url,
            timeout,
            target,
            requests,
        }
    }

    /// Queues `call` as part of operation `op`.
    pub(super) fn send(&self, op: u64, call: &Cmd, drop_after: Option<Instant>) {
        let request = Request {
            op,
            call: call.clone(),
            drop_after,
        };
        // The task ends only when this handle is dropped.
        drop(self.requests.send(request));
    }
}

async fn serve(
    master: usize,
    mut link: Link,
    mut queue: mpsc::UnboundedReceiver<Request>,
    answers: mpsc::UnboundedSender<Answered>,
) {
    while let Some(request) = queue.recv().await {
        let stale = request.drop_after.is_some_and(|at| Instant::now() >= at);
        let result = if stale {
            None
        } else {
            Some(link.invoke(&request.call).await)
        };
        let answered = Answered {
            op: request.op,
            master,
            result,
            started: link.started.clone(),
        };
        // The lease may be gone (leaderd exiting): the rest is still sent.
        drop(answers.send(answered));
    }
}

impl Redlock {
    /// Sends `call` to every master at once; see [`Redlock::ask`].
    pub(super) async fn on_all(&mut self, call: &Cmd, until: Until) -> Vec<Result<Value, Error>> {
        let every = vec![true; self.nodes.len()];
        self.ask(call, &every, until).await
    }

    /// Sends `call` to the masters marked in `on` and gathers their answers
    /// until `until` says the rest cannot change the outcome, or for two
    /// node timeouts (one for a request of an earlier operation still ahead
    /// in a slow master's queue, one for this one). A master not heard from
    /// by then counts as timed out; its answer is read later by
    /// [`Redlock::hear`].
    pub(super) async fn ask(
        &mut self,
        call: &Cmd,
        on: &[bool],
        until: Until,
    ) -> Vec<Result<Value, Error>> {
        let calls: Vec<Option<&Cmd>> = on.iter().map(|on| on.then_some(call)).collect();
        self.ask_each(&calls, until).await
    }

    /// [`Redlock::ask`] with a call of its own for each master (`None`:
    /// that master is not asked).
    pub(super) async fn ask_each(
        &mut self,
        calls: &[Option<&Cmd>],
        until: Until,
    ) -> Vec<Result<Value, Error>> {
        self.op += 1;
        let deadline = Instant::now() + self.node_timeout * 2;
        let mut replies: Vec<Option<Result<Value, Error>>> = calls.iter().map(|_| None).collect();
        let mut heard: Vec<Heard> = calls
            .iter()
            .map(|c| {
                if c.is_some() {
                    Heard::Pending
                } else {
                    Heard::NotAsked
                }
            })
            .collect();
        for (node, call) in self.nodes.iter().zip(calls) {
            if let Some(call) = call {
                node.send(self.op, call, Some(deadline));
            }
        }
        let cold = self.cold();
        while !enough::enough(&heard, until, self.quorum) {
            let Ok(Some(answer)) = tokio::time::timeout_at(deadline, self.answers.recv()).await
            else {
                break;
            };
            let Some(reply) = self.hear(answer, self.op) else {
                continue;
            };
            let (i, reply) = reply;
            // A restarted master's "ours" is no vote (see `acquire`).
            let vote = cold[i].is_none()
                && matches!(&reply, Ok(Value::Array(v)) if v.first() == Some(&Value::Int(1)));
            heard[i] = if vote { Heard::Vote } else { Heard::Other };
            replies[i] = Some(reply);
        }
        replies
            .into_iter()
            .zip(&self.nodes)
            .map(|(reply, node)| {
                reply.unwrap_or_else(|| {
                    Err(Error::Timeout {
                        backend: node.url.clone(),
                        timeout: self.node_timeout,
                    })
                })
            })
            .collect()
    }

    /// Sends `call` to the masters marked in `on` without waiting: each
    /// runs it after what it was sent before; their answers are heard
    /// later.
    pub(super) fn tell(&mut self, call: &Cmd, on: &[bool]) {
        self.op += 1;
        for (node, _) in self.nodes.iter().zip(on).filter(|(_, on)| **on) {
            node.send(self.op, call, None);
        }
    }

    /// Takes in what a master's answer says of it (started, answering, a
    /// higher token seen), and returns it when it belongs to operation
    /// `collecting` (0: none), the one gathering answers now.
    fn hear(&mut self, answer: Answered, collecting: u64) -> Option<(usize, Result<Value, Error>)> {
        let i = answer.master;
        self.started[i] = answer.started;
        let reply = answer.result?;
        self.answering[i] = reply.is_ok();
        if answer.op != collecting
            && answer.op == self.renewal
            && let Ok(value) = &reply
            && let Ok(Reply::Ours(restored)) = parse_reply(value, "")
            && restored > 0
        {
            tracing::info!(
                master = %self.nodes[i].url,
                "the lease was gone from a master that answered the renewal late (restarted empty, or the key expired early); re-created it there"
            );
        }
        if let Ok(value) = &reply
            && let Ok(Reply::Held(Some(holder), _)) = parse_reply(value, "")
            && let Some(seen) = holder.fencing_token
        {
            self.highest_fencing = self.highest_fencing.max(seen);
        }
        (answer.op == collecting).then_some((i, reply))
    }

    /// Reads the answers that came in since the last operation, so that
    /// what they say counts for the next one.
    pub(super) fn hear_late(&mut self) {
        while let Ok(answer) = self.answers.try_recv() {
            self.hear(answer, 0);
        }
    }
}
