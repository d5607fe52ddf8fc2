//! The three commands (`run`, `status`, `check`) wired from their parts, and
//! the mapping of their outcomes to exit codes (PRODUCT §1).

pub mod fence;
mod live;
mod status;

pub use live::watch_status;
use status::describe_peek;
pub use status::status;

use crate::admin::AdminConfig;
use crate::config::{Config, ConfigError};
use crate::health::HealthConfig;
use crate::health::probe::Prober;
use crate::lease::{self, LeaseBackend};
use crate::metrics::Metrics;
use crate::status::{Changes, Snapshot};
use crate::work::Work;
use crate::work::child::ChildSpec;
use crate::work::process;
use crate::work::webhook::{WebhookConfig, WebhookSpec, Webhooks, decode_secret};
use crate::{admin, http, runner, shutdown};
use std::process::ExitCode;
use std::sync::Arc;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// A failed command: what to print and which exit code to use.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// Bad configuration or usage: exit 2.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The backend could not be reached: exit 1.
    #[error("{0}")]
    Backend(lease::Error),
    /// Anything else that stops leaderd at run time: exit 1.
    #[error("{0}")]
    Fatal(String),
}

impl Failure {
    pub fn exit_code(&self) -> ExitCode {
        match self {
            Failure::Config(_) => ExitCode::from(2),
            Failure::Backend(e) if e.is_misconfiguration() => ExitCode::from(2),
            Failure::Backend(_) | Failure::Fatal(_) => ExitCode::from(1),
        }
    }
}

fn backend(config: &Config) -> Result<Box<dyn LeaseBackend>, Failure> {
    lease::open(config).map_err(|e| Failure::Config(ConfigError(e.to_string())))
}

/// The sending and receiving ends of the backend's per-term exports.
type TermExports = (
    watch::Sender<Vec<(&'static str, String)>>,
    watch::Receiver<Vec<(&'static str, String)>>,
);

/// What `run` builds before it campaigns. `check` builds the same and drops
/// it, so every start-up error `run` can meet, `check` meets first.
struct Prepared {
    child: Option<ChildSpec>,
    /// `/leader`'s `fence`: the backend's fence exports and the fence's
    /// key, as the child has them.
    fence_exports: std::collections::BTreeMap<String, String>,
    /// The backend's exports for each term: the runner sets them, the
    /// child and `/leader` read them.
    term_exports: TermExports,
    webhooks: Option<Webhooks>,
    backend: Box<dyn LeaseBackend>,
    listener: Option<tokio::net::TcpListener>,
    admin: Option<(tokio::net::UnixListener, std::path::PathBuf)>,
    health: Option<Prober>,
}

async fn prepare(config: &Config, metrics: &Arc<Metrics>) -> Result<Prepared, Failure> {
    let mut child = child_spec(config)?;
    let health = HealthConfig::of(config)
        .map(|h| Prober::new(&h.probe, h.timeout, &config.child.scrub))
        .transpose()
        .map_err(ConfigError)?;
    let webhooks = webhooks(config, metrics)?;
    let mut backend = backend(config)?;
    let term_exports = watch::channel(Vec::new());
    let mut fence_exports = backend.fence_exports();
    if let Some(fenced) = crate::fence::FenceConfig::of(config) {
        fence_exports.extend(fenced.exports());
    }
    if let Some(child) = &mut child {
        child.term_exports = term_exports.1.clone();
        child.fence_exports = fence_exports.clone();
    }
    backend
        .preflight()
        .map_err(|e| ConfigError(e.to_string()))?;
    backend.vet().await.map_err(Failure::Backend)?;
    let listener = match config.http {
        Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            ConfigError(format!(
                "http.listen: cannot listen on {addr}: {e}; choose another address with --http (or `off`), or stop what is using it (to check beside a running leaderd, add --http off)"
            ))
        })?),
        None => None,
    };
    let admin = match AdminConfig::of(config).socket {
        Some(path) => Some((admin::bind(&path).await.map_err(ConfigError)?, path)),
        None => None,
    };
    Ok(Prepared {
        child,
        fence_exports: crate::status::fence_fields(&fence_exports),
        term_exports,
        webhooks,
        backend,
        listener,
        admin,
        health,
    })
}

/// `leaderd run`: campaign until SIGTERM/SIGINT, then release and return.
pub async fn run(config: Config, caught: shutdown::Caught) -> Result<ExitCode, Failure> {
    let signals = caught
        .into_signals()
        .map_err(|e| Failure::Fatal(format!("cannot install signal handlers: {e}")))?;
    let shutdown = signals.requested.clone();
    let metrics = Arc::new(metrics_for(&config));
    let Prepared {
        child,
        fence_exports,
        term_exports: (term_exports, term_exports_rx),
        webhooks,
        backend,
        listener,
        admin,
        health,
    } = prepare(&config, &metrics).await?;
    for note in config.warnings.iter().chain(&backend.notes()) {
        tracing::warn!("{note}");
    }
    let (status_tx, status_rx) = watch::channel(Snapshot::new());
    let changes = Changes::new();
    let http_stop = CancellationToken::new();
    let server = match listener {
        Some(listener) => {
            let bound = listener.local_addr().ok();
            let shown = bound.map_or_else(|| "?".to_string(), |a| a.to_string());
            tracing::info!(address = %shown, "HTTP API listening");
            let app = http::router(http::HttpContext {
                id: config.id.clone(),
                key: config.key.clone(),
                status: status_rx,
                changes: changes.clone(),
                metrics: metrics.clone(),
                stop: http_stop.clone(),
                loopback_only: bound.is_some_and(|a| a.ip().is_loopback()),
                fence_exports,
                term_exports: term_exports_rx,
            });
            Some(tokio::spawn(http::serve(listener, app, http_stop.clone())))
        }
        None => None,
    };
    tracing::info!(
        id = %config.id,
        key = %config.key,
        backend = %backend.describe(),
        ttl = ?config.timing.ttl,
        renew_interval = ?config.timing.renew_interval,
        renew_deadline = ?config.timing.renew_deadline,
        "leaderd starting"
    );
    let (work, work_events) = Work::new(child, webhooks, metrics.clone(), signals);
    let outputs = runner::Outputs {
        status: status_tx,
        changes,
        metrics,
        term_exports,
    };
    let (admin_tx, admin_rx) = tokio::sync::mpsc::unbounded_channel();
    let admin_server = admin.map(|(listener, path)| {
        tracing::info!(socket = %path.display(), "admin socket listening (leaderd step-down)");
        tokio::spawn(admin::serve(listener, path, admin_tx, http_stop.clone()))
    });
    let inputs = runner::Inputs {
        work_events,
        admin: admin_rx,
        health,
    };
    let child_code = runner::run(&config, backend, work, inputs, outputs, shutdown).await;
    http_stop.cancel();
    if let Some(server) = server {
        let _ = server.await;
    }
    if let Some(admin_server) = admin_server {
        let _ = admin_server.await;
    }
    match child_code {
        Some(code) => {
            tracing::info!(code, "leaderd stopped with the exit code of the run");
            Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
        }
        None => {
            tracing::info!("leaderd stopped");
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn metrics_for(config: &Config) -> Metrics {
    let metrics = Metrics::new(&config.key);
    match HealthConfig::of(config) {
        Some(_) => metrics.with_health(),
        None => metrics,
    }
}

/// The webhooks, with the signing secret read and decoded now.
fn webhooks(config: &Config, metrics: &Arc<Metrics>) -> Result<Option<Webhooks>, Failure> {
    let Some(webhook) = WebhookConfig::of(config) else {
        return Ok(None);
    };
    let secret = match (&webhook.secret, &webhook.secret_file) {
        (Some(secret), _) => Some(
            decode_secret(secret.expose())
                .map_err(|e| ConfigError(format!("LEADERD_WEBHOOK_SECRET: {e}")))?,
        ),
        (None, Some(path)) => {
            let (text, mode) = crate::config::read_secret_file(path)
                .map_err(|e| ConfigError(format!("webhook secret file {}: {e}", path.display())))?;
            if let Some(warning) =
                crate::config::loose_secret_file(&"webhook secret file", path, mode)
            {
                tracing::warn!("{warning}");
            }
            Some(
                decode_secret(&text).map_err(|e| {
                    ConfigError(format!("webhook secret file {}: {e}", path.display()))
                })?,
            )
        }
        (None, None) => None,
    };
    if secret.as_ref().is_some_and(|s| s.len() < 24) {
        tracing::warn!(
            "the webhook secret is shorter than 24 bytes; Standard Webhooks recommends 24 to 64 random bytes"
        );
    }
    if secret.is_none() {
        tracing::warn!(
            "webhooks are sent unsigned: set LEADERD_WEBHOOK_SECRET or --webhook-secret-file"
        );
    }
    let spec = WebhookSpec {
        urls: webhook.urls.clone(),
        secret,
        id: config.id.clone(),
        key: config.key.clone(),
    };
    Webhooks::new(spec, metrics.clone())
        .map(Some)
        .map_err(Failure::Fatal)
}

/// The child to run, its program checked now: a typo is an error at start-up,
/// not at first leadership.
fn child_spec(config: &Config) -> Result<Option<ChildSpec>, Failure> {
    let Some((program, args)) = config.child.command.split_first() else {
        return Ok(None);
    };
    let program = process::resolve(program, std::env::var_os("PATH"))
        .map_err(|e| ConfigError(format!("child command: {e}")))?;
    Ok(Some(ChildSpec {
        program,
        args: args.to_vec(),
        id: config.id.clone(),
        key: config.key.clone(),
        ttl: config.timing.ttl,
        stop_signal: config.child.stop_signal,
        on_exit: config.child.on_exit,
        restart_limit: config.child.restart_limit,
        fence_exports: Vec::new(),
        term_exports: watch::channel(Vec::new()).1,
        scrub: config.child.scrub.clone(),
    }))
}

/// `leaderd check --offline`: the effective configuration, validated, with
/// no connection to the backend.
pub fn check_offline(config: Config) -> Result<ExitCode, Failure> {
    let backend = backend(&config)?;
    describe_config(&config, backend.as_ref());
    println!("# ok: configuration is valid (--offline: the backend was not contacted)");
    Ok(ExitCode::SUCCESS)
}

fn describe_config(config: &Config, backend: &dyn LeaseBackend) {
    print!("{}", config.describe());
    for warning in &config.warnings {
        println!("# warning: {warning}");
    }
    for note in backend.notes() {
        println!("# note: {note}");
    }
}

/// `leaderd check`: `run` without the election. The same preparation (the
/// child's program, the webhook secret, the backend, the HTTP address bound
/// and let go), the effective configuration, then a look at the backend and
/// the backend's own check of what `run` will do.
pub async fn check(config: Config) -> Result<ExitCode, Failure> {
    let metrics = Arc::new(metrics_for(&config));
    let Prepared {
        mut backend,
        listener,
        admin,
        health,
        ..
    } = prepare(&config, &metrics).await?;
    drop(listener);
    if let Some((listener, path)) = admin {
        drop(listener);
        let _ = std::fs::remove_file(path);
    }
    describe_config(&config, backend.as_ref());
    let peek = backend.peek().await.map_err(Failure::Backend)?;
    println!(
        "# ok: reached {}; {}",
        backend.describe(),
        describe_peek(&config.key, &peek)
    );
    for line in backend.self_check().await.map_err(Failure::Backend)? {
        println!("# ok: {line}");
    }
    for line in fence::check_lines(&config).await? {
        println!("{line}");
    }
    if let (Some(prober), Some(h)) = (health, HealthConfig::of(&config)) {
        let checks_child = h.target == crate::health::Checked::Child;
        println!(
            "{}",
            crate::health::check_once(&prober, h, checks_child).await
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `leaderd step-down`: asks the leaderd behind the admin socket to step
/// down. Exit 0 stepping down, 3 not the leader, 1 unreachable.
pub fn step_down(
    config: Config,
    hold: Option<&str>,
    to: Option<&str>,
) -> Result<ExitCode, Failure> {
    let Some(path) = &AdminConfig::of(&config).socket else {
        return Err(Failure::Config(ConfigError(
            "no admin socket is configured: give --admin-socket PATH (or LEADERD_ADMIN_SOCKET, or admin.socket), the one the running leaderd listens on".into(),
        )));
    };
    let hold = hold
        .map(|h| crate::config::parse_duration(h).map_err(|e| ConfigError(format!("--for: {e}"))))
        .transpose()?;
    let (stepping_down, answer) = admin::step_down(path, hold, to).map_err(Failure::Fatal)?;
    println!("{answer}");
    Ok(match stepping_down {
        Some(true) => ExitCode::SUCCESS,
        Some(false) => ExitCode::from(3),
        // Refused: no such candidate to hand over to.
        None => ExitCode::from(2),
    })
}
