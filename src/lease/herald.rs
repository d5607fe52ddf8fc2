//! What a backend tells the world outside leaderd about this candidate's
//! terms, apart from the lease itself (issue #48): on Kubernetes, the
//! Service that follows the leader and an Event for each term. The runner
//! and the lease worker send [`News`] as terms begin and end; the backend's
//! task ([`LeaseBackend::herald`](super::LeaseBackend::herald)) turns it
//! into writes, in order, on a task of its own, so a slow API server never
//! delays a renewal. Nothing the herald does, or fails to do, changes the
//! election: the lease alone decides who leads.
//!
//! One ordering is kept on purpose: the lease worker waits, a bounded
//! while, for the herald to have handled a term's end before it releases
//! ([`Herald::settle`]), so a Service stops naming the leader before
//! anyone else can win.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// A term's news, in the order it happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum News {
    /// The term with this fencing token began: its work is starting.
    Began { token: u64 },
    /// The term is ending: its work is being stopped (the release, if
    /// any, comes after).
    Ending { token: u64 },
    /// The term's lease was released by us, its work stopped.
    Released { token: u64 },
    /// The term ended without our release: another holder has it, or it is
    /// gone, or the store did not answer the release.
    Lost { token: u64 },
}

/// A piece of news and the wall-clock moment it was told: what an
/// announcement is stamped with, so one written late (a busy API server, a
/// process paused mid-write) still tells when the term began or ended and
/// sorts among the others as it happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Told {
    pub news: News,
    pub at: SystemTime,
}

/// What the herald's writes came to, by what was written (`endpointslice`,
/// `event`) and how it went (`written`, `refused`, `failed`, `skipped`):
/// counted by the backend's task, read by the metrics
/// (`leaderd_announcements_total`), so an announcement that keeps failing
/// shows on a dashboard and not only in a log line said once.
#[derive(Debug, Default)]
pub struct Tally(Mutex<BTreeMap<(&'static str, &'static str), u64>>);

impl Tally {
    pub fn count(&self, target: &'static str, result: &'static str) {
        *self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((target, result))
            .or_default() += 1;
    }

    /// Every (target, result) counted so far, with its count.
    pub fn counts(&self) -> Vec<((&'static str, &'static str), u64)> {
        let counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        counts.iter().map(|(k, v)| (*k, *v)).collect()
    }
}

/// The runner's and the worker's handle on a backend's herald task.
#[derive(Clone)]
pub struct Herald {
    news: mpsc::UnboundedSender<Told>,
    tally: Arc<Tally>,
    /// How many pieces of news were sent, and how many the task handled.
    sent: Arc<AtomicU64>,
    handled: watch::Receiver<u64>,
    /// The longest [`Herald::settle`] waits: what the task's writes for one
    /// piece of news may take.
    bound: Duration,
}

/// The backend's end: where news arrives and where it says it is done.
pub struct Desk {
    pub news: mpsc::UnboundedReceiver<Told>,
    handled: watch::Sender<u64>,
    pub tally: Arc<Tally>,
}

impl Desk {
    /// One more piece of news handled (written, or given up on).
    pub fn handled(&self) {
        self.handled.send_modify(|n| *n += 1);
    }
}

/// A herald and its desk; `bound` is how long the worker waits for a
/// term's end to be handled before it releases anyway.
pub fn channel(bound: Duration) -> (Herald, Desk) {
    let (news, rx) = mpsc::unbounded_channel();
    let (handled_tx, handled) = watch::channel(0);
    let tally = Arc::new(Tally::default());
    let herald = Herald {
        news,
        tally: tally.clone(),
        sent: Arc::new(AtomicU64::new(0)),
        handled,
        bound,
    };
    (
        herald,
        Desk {
            news: rx,
            handled: handled_tx,
            tally,
        },
    )
}

impl Herald {
    /// What the task's writes came to so far.
    pub fn tally(&self) -> Arc<Tally> {
        self.tally.clone()
    }

    /// Sends `news`; never waits, never fails (a herald that stopped
    /// listening changes nothing).
    pub fn tell(&self, news: News) {
        let told = Told {
            news,
            at: SystemTime::now(),
        };
        if self.news.send(told).is_ok() {
            self.sent.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Waits until everything sent so far was handled, or the bound passed.
    pub async fn settle(&self) {
        let target = self.sent.load(Ordering::SeqCst);
        let mut handled = self.handled.clone();
        let caught_up = handled.wait_for(|n| *n >= target);
        if tokio::time::timeout(self.bound, caught_up).await.is_err() {
            tracing::debug!(
                bound = ?self.bound,
                "the herald has not finished announcing the term's end; releasing anyway"
            );
        }
    }
}

/// A started herald: the handle to feed and the task to await at exit.
pub struct Started {
    pub herald: Herald,
    pub task: JoinHandle<()>,
}

impl Started {
    /// Once the runner and the worker dropped theirs: drops this handle,
    /// so the task finishes what it was told and ends, and waits for it a
    /// few bounds at most (a term's last Event; an API server that stopped
    /// answering must not hold up the exit).
    pub async fn finish(self) {
        let Started { herald, mut task } = self;
        let bound = herald.bound * 3;
        drop(herald);
        if tokio::time::timeout(bound, &mut task).await.is_err() {
            tracing::debug!("the herald did not finish in time; leaving its news unsaid");
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tally_counts_each_target_and_result_apart() {
        let tally = Tally::default();
        tally.count("event", "written");
        tally.count("endpointslice", "failed");
        tally.count("event", "written");
        assert_eq!(
            tally.counts(),
            [(("endpointslice", "failed"), 1), (("event", "written"), 2)]
        );
    }

    #[tokio::test]
    async fn settle_waits_for_what_was_sent_and_no_longer_than_its_bound() {
        let (herald, mut desk) = channel(Duration::from_millis(50));
        herald.tell(News::Began { token: 1 });
        herald.tell(News::Ending { token: 1 });
        let started = tokio::time::Instant::now();
        herald.settle().await;
        assert!(
            started.elapsed() >= Duration::from_millis(50),
            "not bounded"
        );
        let first = desk.news.recv().await.unwrap();
        assert_eq!(first.news, News::Began { token: 1 });
        desk.handled();
        let second = desk.news.recv().await.unwrap();
        assert_eq!(second.news, News::Ending { token: 1 });
        assert!(first.at <= second.at, "told out of order");
        desk.handled();
        let started = tokio::time::Instant::now();
        herald.settle().await;
        assert!(started.elapsed() < Duration::from_millis(50), "did not see");
    }
}
