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

use crate::client::redis::link::Link;
use crate::client::redis::restarts::Started;
use crate::lease::contract::Error;
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
