//! The worker's health (issue #27): lead only while the worker beside us can
//! do the job. A driver task runs the check every interval and reports each
//! *change* of verdict to the runner, which hands it to the pure machine as
//! `WorkerHealthy` / `WorkerUnhealthy` (`--health-policy gate`) or only
//! shows it (`report`). The driver never blocks the control loop: a check
//! runs on its own task, bounded by its timeout.
//!
//! What is checked (`--health-target`) decides when: a worker beside
//! leaderd (the default, with or without a child) is checked from the start
//! and is not trusted before a first pass, so a candidate whose worker is
//! not up yet does not campaign. The child itself is checked only while it
//! runs — standbys have none to check and count as healthy — and the start
//! period counts from each start of the child.
//!
//! - `options`: the feature's rows, their resolution and [`HealthConfig`];
//!   `tally`: results → verdict (pure); `probe`: one HTTP or command check.

pub mod options;
pub mod probe;
pub mod tally;

use crate::metrics::Metrics;
pub use options::{Checked, FEATURE, HealthConfig, Policy, Probe};
use probe::Prober;
use std::sync::Arc;
use std::time::Duration;
use tally::{Outcome, Tally};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A change of verdict, for the runner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub healthy: bool,
    /// The last check's finding, in words (a failure's reason, or why a
    /// child's health is not checked now).
    pub reason: String,
}

/// What the checks follow.
pub enum Target {
    /// A worker beside leaderd: checked from the start.
    Worker,
    /// The child: checked while it runs. The receiver holds when the running
    /// child started (`None` while none runs).
    Child(watch::Receiver<Option<Instant>>),
}

/// `check`'s line: one check run now, and what `run` would make of it. A
/// failing check is a warning, not an error: the configuration is fine,
/// the worker is not (yet).
/// With a child, the check follows the child, which `check` does not start.
pub async fn check_once(prober: &Prober, config: &HealthConfig, checks_child: bool) -> String {
    if checks_child {
        return format!(
            "# ok: health check {} follows the child: run while it runs, failures not counted for {:?} after each start (not run now: no child runs)",
            prober.describe(),
            config.start_period
        );
    }
    let finding = prober.check(config.timeout).await;
    if finding.passed {
        return format!("# ok: worker health check passed: {}", finding.reason);
    }
    let effect = match config.policy {
        Policy::Gate => "`run` does not campaign until a check passes".to_string(),
        Policy::Report => "`run` reports it only (--health-policy report)".to_string(),
    };
    format!(
        "# warning: worker health check failed: {}; {effect}",
        finding.reason
    )
}

/// How often an unhealthy worker is repeated at WARN, with its reason.
const REMIND_EVERY: Duration = Duration::from_secs(60);

/// Runs the checks until `stop`, sending each change of verdict.
pub async fn drive(
    config: HealthConfig,
    prober: Prober,
    mut target: Target,
    verdicts: mpsc::UnboundedSender<Verdict>,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let mut started = Instant::now();
    let mut tally = match target {
        Target::Worker => Tally::new(None, config.failures, config.successes),
        Target::Child(_) => Tally::new(Some(true), config.failures, config.successes),
    };
    let mut reminded = Instant::now();
    loop {
        if let Target::Child(running) = &mut target {
            // Wait for a child to check; when the one checked is gone, its
            // verdict goes with it.
            let since = *running.borrow_and_update();
            match since {
                Some(since) if since == started => {}
                Some(since) => {
                    started = since;
                    tally = Tally::new(Some(true), config.failures, config.successes);
                }
                None => {
                    if tally.healthy == Some(false) {
                        let reason =
                            "the child is not running; its health is checked again when it starts";
                        let _ = verdicts.send(Verdict {
                            healthy: true,
                            reason: reason.to_string(),
                        });
                        tally = Tally::new(Some(true), config.failures, config.successes);
                    }
                    tokio::select! {
                        changed = running.changed() => match changed {
                            Ok(()) => continue,
                            Err(_) => return, // the supervisor is gone
                        },
                        _ = stop.cancelled() => return,
                    }
                }
            }
        }
        let began = Instant::now();
        let finding = tokio::select! {
            f = prober.check(config.timeout) => f,
            _ = stop.cancelled() => return,
        };
        metrics.health_check(finding.passed);
        let outcome = if finding.passed {
            Outcome::Passed
        } else {
            Outcome::Failed
        };
        let starting = began < started + config.start_period;
        if !finding.passed && starting {
            tracing::debug!(reason = %finding.reason, "health check failed within the start period; not counted");
        }
        if let Some(healthy) = tally.record(outcome, starting) {
            reminded = Instant::now();
            let _ = verdicts.send(Verdict {
                healthy,
                reason: finding.reason.clone(),
            });
        } else if tally.healthy == Some(false) && reminded.elapsed() >= REMIND_EVERY {
            reminded = Instant::now();
            tracing::warn!(reason = %finding.reason, policy = config.policy.as_str(), "the worker is still unhealthy");
        }
        let next = began + config.interval;
        let child_changed = async {
            match &mut target {
                Target::Child(running) => {
                    if running.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                Target::Worker => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = child_changed => {}
            _ = stop.cancelled() => return,
        }
    }
}
