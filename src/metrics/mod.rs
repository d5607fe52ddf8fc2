//! Every metric leaderd exports (PRODUCT §7), in one place, encoded by
//! `prometheus-client` as OpenMetrics and rewritten into the Prometheus text
//! format 0.0.4 for scrapers that do not ask for OpenMetrics ([`Format`]).
//!
//! Counters and the histogram are updated where things happen (runner, lease
//! worker, child supervisor, webhooks). The gauges that say who leads are set
//! from the live snapshot at scrape time, so `/metrics` agrees with `/leader`
//! and never reports a lease whose validity has ended.

use crate::lease::Nodes;
use crate::machine::StateName;
use crate::status::LeaderView;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

mod format;
mod process;

pub use format::Format;
use format::text_format;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransitionLabels {
    from: &'static str,
    to: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    op: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabel {
    op: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    event: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AnnounceLabels {
    target: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CountLabel {
    count: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NameLabel {
    name: String,
}

/// Lease operation latency buckets: 0.5 ms … 4 s, covering a local Redis up
/// to the longest sensible timeout.
fn latency_histogram() -> Histogram {
    Histogram::new([
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0,
    ])
}

pub struct Metrics {
    registry: Registry,
    key: String,
    is_leader: Gauge,
    state: Family<StateLabel, Gauge>,
    transitions: Family<TransitionLabels, Counter>,
    lease_ops: Family<OpLabels, Counter>,
    lease_op_seconds: Family<OpLabel, Histogram, fn() -> Histogram>,
    fencing_token: Gauge<u64, AtomicU64>,
    leadership_changes: Counter,
    child_starts: Counter,
    child_exits: Counter,
    webhook_deliveries: Family<WebhookLabels, Counter>,
    /// The backend's herald's writes, copied from its tally at each render.
    announcements: Family<AnnounceLabels, Counter>,
    announced: std::sync::Mutex<Option<std::sync::Arc<crate::lease::herald::Tally>>>,
    master_status: Family<NameLabel, Gauge>,
    log_lines_dropped: Counter,
    backend_up: Gauge,
    duplicate_id: Gauge,
    /// Backends of several servers only: no series otherwise.
    backend_nodes: Family<CountLabel, Gauge>,
    last_nodes: std::sync::Mutex<Option<Nodes>>,
    standby_timed_reads: Gauge,
    last_standby_reads: std::sync::Mutex<Option<crate::lease::StandbyReads>>,
    /// With a health check only (see [`Metrics::with_health`]).
    worker_healthy: Gauge,
    health_checks: Family<ResultLabel, Counter>,
    candidates: Gauge,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

impl Metrics {
    pub fn new(key: &str) -> Metrics {
        let mut registry = Registry::default();
        let m = Metrics {
            key: key.to_string(),
            is_leader: Gauge::default(),
            state: Family::default(),
            transitions: Family::default(),
            lease_ops: Family::default(),
            lease_op_seconds: Family::new_with_constructor(latency_histogram),
            fencing_token: Gauge::default(),
            leadership_changes: Counter::default(),
            child_starts: Counter::default(),
            child_exits: Counter::default(),
            webhook_deliveries: Family::default(),
            announcements: Family::default(),
            announced: std::sync::Mutex::new(None),
            master_status: Family::default(),
            log_lines_dropped: Counter::default(),
            backend_up: Gauge::default(),
            duplicate_id: Gauge::default(),
            backend_nodes: Family::default(),
            last_nodes: std::sync::Mutex::new(None),
            standby_timed_reads: Gauge::default(),
            last_standby_reads: std::sync::Mutex::new(None),
            worker_healthy: Gauge::default(),
            health_checks: Family::default(),
            candidates: Gauge::default(),
            registry: Registry::default(),
        };
        let build_info = Family::<BuildLabels, Gauge>::default();
        build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        registry.register(
            "leaderd_build_info",
            "Always 1; the labels say which leaderd this is",
            build_info,
        );
        registry.register(
            "leaderd_backend_up",
            "1 when the last lease operation got an answer from the backend, 0 when it failed or timed out",
            m.backend_up.clone(),
        );
        registry.register(
            "leaderd_duplicate_id",
            "1 while the lease holder carries this instance's id but not its ownership token: two candidates share an id",
            m.duplicate_id.clone(),
        );
        registry.register(
            "leaderd_backend_nodes",
            "Redlock: masters that answered the last lease operation (count=\"answered\"), configured (\"configured\") and needed (\"quorum\")",
            m.backend_nodes.clone(),
        );
        registry.register(
            "leaderd_standby_timed_reads",
            "1 while a standby asks the store on a timer (its backend has no watch, or the watch or subscription is down: `standby_reads` in /leader says which), 0 while a live watch answers for it",
            m.standby_timed_reads.clone(),
        );
        registry.register_collector(Box::new(process::ProcessMetrics));
        // prometheus-client adds `_total` to counter names.
        registry.register(
            "leaderd_is_leader",
            "1 while this instance holds a valid lease",
            m.is_leader.clone(),
        );
        registry.register(
            "leaderd_state",
            "1 for the current state of the election state machine",
            m.state.clone(),
        );
        registry.register(
            "leaderd_transitions",
            "State machine transitions",
            m.transitions.clone(),
        );
        registry.register(
            "leaderd_lease_operations",
            "Lease operations by result",
            m.lease_ops.clone(),
        );
        registry.register(
            "leaderd_lease_operation_duration_seconds",
            "Lease operation latency",
            m.lease_op_seconds.clone(),
        );
        registry.register(
            "leaderd_fencing_token",
            "Fencing token of the current lease holder, as /leader reports it",
            m.fencing_token.clone(),
        );
        registry.register(
            "leaderd_leadership_changes",
            "Times this instance started or stopped leading",
            m.leadership_changes.clone(),
        );
        registry.register(
            "leaderd_child_starts",
            "Child processes started",
            m.child_starts.clone(),
        );
        registry.register(
            "leaderd_child_exits",
            "Child processes that exited or were stopped",
            m.child_exits.clone(),
        );
        registry.register(
            "leaderd_webhook_deliveries",
            "Webhook deliveries by event and result",
            m.webhook_deliveries.clone(),
        );
        registry.register(
            "leaderd_announcements",
            "What this candidate announced of its terms outside the lease (on Kubernetes: the Service's EndpointSlice, the Lease's Events), by target and result (written, refused: a newer term wrote it, failed, skipped: over the Events' rate limit); the election never waits on them",
            m.announcements.clone(),
        );
        registry.register(
            "leader_election_master_status",
            "client-go compatible: 1 while this instance is the leader",
            m.master_status.clone(),
        );
        registry.register(
            "leaderd_candidates",
            "Candidates in the registry beside the lease, as this instance last read it (itself included)",
            m.candidates.clone(),
        );
        registry.register(
            "leaderd_log_lines_dropped",
            "Log lines dropped because stderr was not read fast enough, or was closed",
            m.log_lines_dropped.clone(),
        );
        for name in StateName::ALL {
            m.state
                .get_or_create(&StateLabel {
                    state: name.as_str(),
                })
                .set(0);
        }
        m.state
            .get_or_create(&StateLabel {
                state: StateName::Idle.as_str(),
            })
            .set(1);
        Metrics { registry, ..m }
    }

    /// Adds the worker-health metrics: exported only when a health check is
    /// configured, so no series claims a health nobody checks.
    pub fn with_health(mut self) -> Metrics {
        self.registry.register(
            "leaderd_worker_healthy",
            "1 while the worker's health check passes (by --health-failures/--health-successes), 0 while it fails or before its first pass",
            self.worker_healthy.clone(),
        );
        self.registry.register(
            "leaderd_health_checks",
            "Worker health checks run, by result (passed or failed)",
            self.health_checks.clone(),
        );
        self
    }

    pub fn candidates(&self, n: usize) {
        self.candidates.set(n as i64);
    }

    pub fn health_check(&self, passed: bool) {
        let result = if passed { "passed" } else { "failed" };
        self.health_checks
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    pub fn transition(&self, from: StateName, to: StateName) {
        self.transitions
            .get_or_create(&TransitionLabels {
                from: from.as_str(),
                to: to.as_str(),
            })
            .inc();
        self.state
            .get_or_create(&StateLabel {
                state: from.as_str(),
            })
            .set(0);
        self.state
            .get_or_create(&StateLabel { state: to.as_str() })
            .set(1);
        let leading = |s: StateName| matches!(s, StateName::Working | StateName::Renewing);
        if leading(from) != leading(to) {
            self.leadership_changes.inc();
        }
    }

    /// `op`: acquire, renew, release; `result`: ok, held, lost, timeout, error.
    pub fn lease_op(&self, op: &'static str, result: &'static str, took: Duration) {
        self.lease_ops.get_or_create(&OpLabels { op, result }).inc();
        self.backend_up
            .set(i64::from(!matches!(result, "timeout" | "error")));
        self.lease_op_seconds
            .get_or_create(&OpLabel { op })
            .observe(took.as_secs_f64());
    }

    /// After each lease operation: how many of a multi-server backend's
    /// servers answered it.
    pub fn backend_nodes(&self, nodes: Option<Nodes>) {
        let Some(n) = nodes else { return };
        for (count, value) in [
            ("answered", n.answered),
            ("configured", n.total),
            ("quorum", n.quorum),
        ] {
            self.backend_nodes
                .get_or_create(&CountLabel { count })
                .set(value as i64);
        }
        *self.last_nodes.lock().unwrap_or_else(|e| e.into_inner()) = Some(n);
    }

    /// After each lease operation: how a standby learns of its holder now.
    pub fn standby_reads(&self, reads: crate::lease::StandbyReads) {
        let timed = reads != crate::lease::StandbyReads::Watch;
        self.standby_timed_reads.set(i64::from(timed));
        *self
            .last_standby_reads
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(reads);
    }

    /// What [`Metrics::standby_reads`] was last told, for `/leader`.
    pub fn last_standby_reads(&self) -> Option<crate::lease::StandbyReads> {
        *self
            .last_standby_reads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// What [`Metrics::backend_nodes`] was last told, for `/leader`.
    pub fn last_nodes(&self) -> Option<Nodes> {
        *self.last_nodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn child_started(&self) {
        self.child_starts.inc();
    }

    pub fn child_exited(&self) {
        self.child_exits.inc();
    }

    /// `result`: delivered or failed.
    pub fn webhook(&self, event: &'static str, result: &'static str) {
        self.webhook_deliveries
            .get_or_create(&WebhookLabels { event, result })
            .inc();
    }

    /// Where the backend's herald counts its writes (none: no series).
    pub fn announcements(&self, tally: std::sync::Arc<crate::lease::herald::Tally>) {
        *self.announced.lock().unwrap_or_else(|e| e.into_inner()) = Some(tally);
    }

    /// The exposition in `format`, with the leadership gauges taken from `view`.
    pub fn render(&self, view: &LeaderView, format: Format) -> String {
        let leading = i64::from(view.is_leader);
        self.is_leader.set(leading);
        self.master_status
            .get_or_create(&NameLabel {
                name: self.key.clone(),
            })
            .set(leading);
        self.fencing_token.set(view.fencing_token.unwrap_or(0));
        self.duplicate_id.set(i64::from(view.duplicate_id));
        self.worker_healthy
            .set(i64::from(view.worker_healthy.unwrap_or(false)));
        let dropped = crate::telemetry::dropped_lines();
        let counted = self.log_lines_dropped.get();
        if dropped > counted {
            self.log_lines_dropped.inc_by(dropped - counted);
        }
        if let Some(tally) = &*self.announced.lock().unwrap_or_else(|e| e.into_inner()) {
            for ((target, result), count) in tally.counts() {
                let counter = self
                    .announcements
                    .get_or_create(&AnnounceLabels { target, result });
                let counted = counter.get();
                if count > counted {
                    counter.inc_by(count - counted);
                }
            }
        }
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        match format {
            Format::OpenMetrics => out,
            Format::Text => text_format(&out),
        }
    }
}
