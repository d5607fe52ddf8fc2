//! The health driver as the runner sees it: started beside the election,
//! its verdicts turned into the machine's events (policy `gate`), the
//! snapshot `/leader` reads, one log line and one `/leader/events` entry per
//! change, and stopped with the rest.

use super::Ident;
use crate::health::probe::Prober;
use crate::health::{self, Checked, HealthConfig, Policy, Target, Verdict};
use crate::machine::{Event, HealthGate, State};
use crate::metrics::Metrics;
use crate::status::{Change, Changes, Snapshot, Worker};
use crate::work::Work;
use std::sync::Arc;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub(super) struct Health {
    verdicts: mpsc::UnboundedReceiver<Verdict>,
    task: JoinHandle<()>,
    stop: CancellationToken,
    policy: Policy,
    /// The verdict in force (`None` before the first one).
    healthy: Option<bool>,
}

impl Health {
    /// Starts the checks, and says how the machine is to be gated.
    pub(super) fn start(
        config: &HealthConfig,
        prober: Prober,
        work: &Work,
        metrics: Arc<Metrics>,
        status: &watch::Sender<Snapshot>,
    ) -> (Health, Option<HealthGate>) {
        let target = match (config.target, work.child_running()) {
            (Checked::Child, Some(running)) => Target::Child(running),
            _ => Target::Worker,
        };
        let checks_child = matches!(target, Target::Child(_));
        status.send_modify(|s| {
            s.worker = Some(Worker {
                // A child is checked only while it runs: until then, nothing
                // stands against leading.
                healthy: checks_child.then_some(true),
                last_failure: None,
            })
        });
        tracing::info!(
            check = %prober.describe(),
            interval = ?config.interval,
            policy = config.policy.as_str(),
            "checking the {} health",
            if checks_child { "child's" } else { "worker's" }
        );
        let (tx, verdicts) = mpsc::unbounded_channel();
        let stop = CancellationToken::new();
        let task = tokio::spawn(health::drive(
            config.clone(),
            prober,
            target,
            tx,
            metrics,
            stop.clone(),
        ));
        let gate = (config.policy == Policy::Gate).then_some(HealthGate {
            wait_for_first_check: !checks_child,
            hold: config.hold(),
        });
        let health = Health {
            verdicts,
            task,
            stop,
            policy: config.policy,
            healthy: checks_child.then_some(true),
        };
        (health, gate)
    }

    /// The verdict in force: what this candidate's record says.
    pub(super) fn healthy(&self) -> Option<bool> {
        self.healthy
    }

    /// The next change of verdict.
    pub(super) async fn next(&mut self) -> Option<Verdict> {
        self.verdicts.recv().await
    }

    /// Records a change: the snapshot, one log line, one `/leader/events`
    /// entry; and the machine's event under `gate`.
    pub(super) fn absorb(
        &mut self,
        verdict: Verdict,
        state: &State,
        status: &watch::Sender<Snapshot>,
        changes: &Changes,
        ident: &Ident<'_>,
    ) -> Option<Event> {
        let Verdict { healthy, reason } = verdict;
        self.healthy = Some(healthy);
        status.send_modify(|s| {
            let worker = s.worker.get_or_insert(Worker {
                healthy: None,
                last_failure: None,
            });
            worker.healthy = Some(healthy);
            if !healthy {
                worker.last_failure = Some(reason.clone());
            }
        });
        let gate = self.policy == Policy::Gate;
        match (healthy, gate, state.leading().is_some()) {
            (true, _, _) => tracing::info!(%reason, "worker healthy"),
            (false, true, true) => {
                tracing::warn!(%reason, "worker unhealthy: stepping down so a healthy candidate leads")
            }
            (false, true, false) => {
                tracing::warn!(%reason, "worker unhealthy: not campaigning until it is healthy again")
            }
            (false, false, _) => tracing::warn!(
                %reason,
                "worker unhealthy (--health-policy report: leadership is not affected)"
            ),
        }
        let view = status
            .borrow()
            .leader_view(ident.id, ident.key, Instant::now());
        let why = if healthy {
            "worker healthy"
        } else {
            "worker unhealthy"
        };
        let mut change = Change::now(&view, Some(state.name()), Some(why));
        change.event = "health";
        changes.publish(change);
        gate.then_some(if healthy {
            Event::WorkerHealthy
        } else {
            Event::WorkerUnhealthy
        })
    }

    pub(super) async fn finish(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}
