//! The command line as clap sees it: every option raw and optional, no I/O.
//!
//! Environment variables and the config file are merged in by [`crate::config`],
//! which is also where values are validated, so that one place owns precedence
//! (flag > environment > file > default) and every error can name its source.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Shown by `leaderd --help` and in leaderd(1).
const AFTER_LONG_HELP: &str = "\
Exit status:
  0  clean shutdown after SIGTERM/SIGINT, the lease released; `status`: the lease is held
  1  fatal runtime error; `status`/`check`: the backend is unreachable
  2  usage or configuration error (the message names the flag, env var or file key)
  3  `status`: the lease is vacant
  with on_child_exit = exit: the child's exit code (128+N if it was killed by signal N)

Every option also reads an environment variable (LEADERD_*) and a TOML key;
precedence is flag > environment > file > default. See `leaderd run --help`.

Documentation: README.md and config/leaderd.example.toml in the source tree.";

/// leaderd: a leader-election sidecar. Many copies contend for a lease; the winner is the leader.
#[derive(Debug, Parser)]
#[command(name = "leaderd", version, about, long_about = None, after_long_help = AFTER_LONG_HELP)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Campaign for the lease, serve `/leader`, run the work while leader.
    Run(RunArgs),
    /// Print who holds the lease now, its fencing token and time left
    /// (exit 0 held, 3 vacant, 1 backend unreachable).
    Status(StatusArgs),
    /// Validate the configuration and timing, reach the backend, print the
    /// effective configuration with secrets redacted.
    Check(CheckArgs),
    /// Print a shell completion script for bash, zsh, fish, elvish or powershell.
    Completions(CompletionsArgs),
    /// Print the manual page (roff), e.g. `leaderd manpage > leaderd.1`.
    Manpage(ManpageArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The command to run while leader (after `--`).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Validate only; do not contact the backend (for CI and image builds).
    #[arg(long)]
    pub offline: bool,
    /// The command `run` would start (after `--`), so a `run` command line can
    /// be checked as it stands by replacing `run` with `check`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to print completions for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct ManpageArgs {
    /// Write one page per command (leaderd.1, leaderd-run.1, …) into DIR
    /// instead of printing leaderd.1.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Print the status as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Every configuration flag, unvalidated. `None` means "not given on the command line".
#[derive(Debug, Default, Clone, Args)]
pub struct ConfigArgs {
    /// TOML configuration file [env: LEADERD_CONFIG]
    #[arg(short = 'c', long, value_name = "FILE", help_heading = "Election")]
    pub config: Option<PathBuf>,
    /// Election name: candidates with the same key contend for the same lease [env: LEADERD_KEY] [default: leaderd]
    #[arg(long, value_name = "NAME", help_heading = "Election")]
    pub key: Option<String>,
    /// This candidate's id, shown to others as the holder [env: LEADERD_ID] [default: $POD_NAME, else hostname]
    #[arg(long, value_name = "ID", help_heading = "Election")]
    pub id: Option<String>,

    /// Redis URL, redis://[user:pass@]host:port/db [env: LEADERD_REDIS_URL, comma-separated; or a file: LEADERD_REDIS_URL_FILE]
    #[arg(long = "redis", value_name = "URL", help_heading = "Backend")]
    pub redis: Vec<String>,
    /// Lock file for the single-host backend [env: LEADERD_LOCK_FILE] [default: $XDG_RUNTIME_DIR/leaderd-KEY.lock, else /tmp]
    #[arg(long, value_name = "PATH", help_heading = "Backend")]
    pub lock_file: Option<PathBuf>,
    /// For rediss://: trust only this PEM CA bundle (default: the system's roots) [env: LEADERD_REDIS_TLS_CA]
    #[arg(long, value_name = "FILE", help_heading = "Backend")]
    pub redis_tls_ca: Option<PathBuf>,
    /// For rediss:// with mutual TLS: the client certificate (PEM), with --redis-tls-key [env: LEADERD_REDIS_TLS_CERT]
    #[arg(long, value_name = "FILE", help_heading = "Backend")]
    pub redis_tls_cert: Option<PathBuf>,
    /// For rediss:// with mutual TLS: the client's private key (PEM) [env: LEADERD_REDIS_TLS_KEY]
    #[arg(long, value_name = "FILE", help_heading = "Backend")]
    pub redis_tls_key: Option<PathBuf>,
    /// Timeout of every Redis command [env: LEADERD_REDIS_TIMEOUT] [default: 500ms]
    #[arg(long, value_name = "DUR", help_heading = "Backend")]
    pub redis_timeout: Option<String>,

    /// Lease time to live [env: LEADERD_TTL] [default: 10s]
    #[arg(long, value_name = "DUR", help_heading = "Timing")]
    pub ttl: Option<String>,
    /// How often the leader renews [env: LEADERD_RENEW_INTERVAL] [default: ttl / 3]
    #[arg(long, value_name = "DUR", help_heading = "Timing")]
    pub renew_interval: Option<String>,
    /// Step down when no renewal succeeded for this long [env: LEADERD_RENEW_DEADLINE] [default: ttl × 2/3]
    #[arg(long, value_name = "DUR", help_heading = "Timing")]
    pub renew_deadline: Option<String>,
    /// Wait after backend errors, jittered [env: LEADERD_RETRY_INTERVAL] [default: 2s]
    #[arg(long, value_name = "DUR", help_heading = "Timing")]
    pub retry_interval: Option<String>,

    /// HTTP listen address, or `off` [env: LEADERD_HTTP] [default: 127.0.0.1:4040]
    #[arg(long, value_name = "ADDR", help_heading = "HTTP")]
    pub http: Option<String>,

    /// Signal sent to the child's process group to stop it [env: LEADERD_STOP_SIGNAL] [default: SIGTERM]
    #[arg(long, value_name = "SIG", help_heading = "Work")]
    pub stop_signal: Option<String>,
    /// Grace before SIGKILL when stopping the child [env: LEADERD_STOP_TIMEOUT] [default: 10s]
    #[arg(long, value_name = "DUR", help_heading = "Work")]
    pub stop_timeout: Option<String>,
    /// What to do when the child exits: restart, release or exit [env: LEADERD_ON_CHILD_EXIT] [default: release]
    #[arg(long, value_name = "POLICY", help_heading = "Work")]
    pub on_child_exit: Option<String>,
    /// Webhook to POST elected/demoted events to; repeatable [env: LEADERD_WEBHOOK_URL]
    #[arg(long = "webhook", value_name = "URL", help_heading = "Work")]
    pub webhook: Vec<String>,
    /// File holding the webhook signing secret [env: LEADERD_WEBHOOK_SECRET_FILE; LEADERD_WEBHOOK_SECRET holds the secret itself]
    #[arg(long, value_name = "FILE", help_heading = "Work")]
    pub webhook_secret_file: Option<PathBuf>,

    /// Log format: text or json [env: LEADERD_LOG_FORMAT] [default: text]
    #[arg(long, value_name = "FORMAT", help_heading = "Logging")]
    pub log_format: Option<String>,
    /// Log level or tracing filter, e.g. info or leaderd=debug [env: RUST_LOG] [default: info]
    #[arg(long, value_name = "LEVEL", help_heading = "Logging")]
    pub log_level: Option<String>,
}
