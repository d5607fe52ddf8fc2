//! The command line as clap sees it: every option raw and optional, no I/O.
//!
//! Environment variables and the config file are merged in by [`crate::config`],
//! which is also where values are validated, so that one place owns precedence
//! (flag > environment > file > default) and every error can name its source.

pub use crate::config::ConfigArgs;
use crate::config::options::Spec;
use clap::{Arg, ArgAction, ArgMatches, Args, Parser, Subcommand};
use std::path::PathBuf;

/// Every exit status, for `--help` and the man pages' EXIT STATUS section.
pub const EXIT_CODES: &[(&str, &str)] = &[
    (
        "0",
        "clean shutdown after SIGTERM/SIGINT, the lease released; `status`: the lease is held; `step-down`: the leader is stepping down; `fence check`: every resource is fenced",
    ),
    (
        "1",
        "fatal runtime error; `status`/`check`: the backend is unreachable; `step-down`: the admin socket is unreachable; `fence`: a fenced resource is unreachable",
    ),
    (
        "2",
        "usage or configuration error (the message names the flag, env var or file key)",
    ),
    (
        "3",
        "`status`: the lease is vacant; `step-down`: this instance does not lead; `fence check`: a resource is not fenced",
    ),
    (
        "75",
        "`run --wait`: not leader within the wait; the command did not run",
    ),
    (
        "other",
        "with on_child_exit = exit, or `run --wait`: the child's exit code (128+N if it was killed by signal N)",
    ),
];

/// Shown after `leaderd --help`.
fn after_long_help() -> String {
    let mut text = String::from("Exit status:\n");
    for (code, meaning) in EXIT_CODES {
        text.push_str(&format!("  {code:<5} {meaning}\n"));
    }
    text.push_str(
        "\nEvery option also reads an environment variable (LEADERD_*) and a TOML key;\n\
         precedence is flag > environment > file > default. See `leaderd run --help`.\n\n\
         Documentation: README.md and docs/ in the source tree, config/leaderd.example.toml.",
    );
    text
}

/// leaderd: a leader-election sidecar. Many copies contend for a lease; the winner is the leader.
#[derive(Debug, Parser)]
#[command(name = "leaderd", version, about, long_about = None, after_long_help = after_long_help())]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Campaign for the lease, serve `/leader`, run the work while leader.
    Run(RunArgs),
    /// Print who holds the lease now, its fencing token and time left
    /// (exit 0 held, 3 vacant or contested, 1 backend unreachable).
    Status(StatusArgs),
    /// Validate the configuration and timing, reach the backend, print the
    /// effective configuration with secrets redacted.
    Check(CheckArgs),
    /// Ask the running leaderd (through its --admin-socket) to give up the
    /// lease and stay out of the election for a while (exit 0 stepping down,
    /// 3 not the leader, 1 unreachable).
    StepDown(StepDownArgs),
    /// Fencing at the resources the work writes to: install the guards
    /// that refuse a deposed term's writes, or look at them and their
    /// fences (docs/fencing.md).
    #[command(subcommand)]
    Fence(FenceCommand),
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
pub struct StepDownArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Stay out of the election this long instead of --step-down-hold.
    #[arg(long = "for", value_name = "DUR")]
    pub hold: Option<String>,
    /// Hand the lease to this registered, healthy candidate (its --id): the
    /// others are told to let it lead, then the lease is released.
    #[arg(long = "to", value_name = "ID")]
    pub to: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum FenceCommand {
    /// Print the guard for a kind of resource (the shipped code that
    /// refuses a deposed term's writes), or install it with --apply into
    /// the resources --fence-postgres and --fence-redis name.
    Install(FenceInstallArgs),
    /// Tell whether each resource --fence-postgres and --fence-redis name is
    /// fenced (its guard installed as shipped) and the token its fence
    /// holds (exit 0 fenced, 3 not, 1 unreachable, 2
    /// refused credentials or TLS).
    Check(FenceCheckArgs),
}

#[derive(Debug, Args)]
pub struct FenceInstallArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The guard to print: postgres (SQL), redis (a function library, Redis 7 and
    /// Valkey) or redis-eval (the same for EVAL, older Redis); with
    /// --apply, the only kind to install.
    #[arg(value_enum, value_name = "GUARD")]
    pub guard: Option<crate::fence::Guard>,
    /// Install into the configured resources instead of printing (as a
    /// role that may create a table and functions, or FUNCTION LOAD).
    #[arg(long)]
    pub apply: bool,
}

#[derive(Debug, Args)]
pub struct FenceCheckArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
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
    /// Print the status as one JSON object (with --watch: one per change).
    #[arg(long)]
    pub json: bool,
    /// Keep watching: redraw in place on a terminal, else print one line
    /// per change; Ctrl-C ends it (exit 0).
    #[arg(long)]
    pub watch: bool,
    /// With --watch: how often to look at the lease.
    #[arg(long, value_name = "DUR", default_value = "500ms", value_parser = watch_interval, requires = "watch")]
    pub interval: std::time::Duration,
}

/// `--interval`: a duration with a unit, from 50ms (each look is a read
/// of the store) to an hour.
fn watch_interval(text: &str) -> Result<std::time::Duration, String> {
    let every = crate::config::parse_duration(text)?;
    if every < std::time::Duration::from_millis(50) || every > std::time::Duration::from_secs(3600)
    {
        return Err(format!("`{text}` is outside 50ms..1h"));
    }
    Ok(every)
}

/// Every option of leaderd and of every registered backend, as clap sees
/// them.
fn all_options() -> Vec<&'static Spec> {
    crate::config::all_options(&crate::catalog())
}

impl clap::FromArgMatches for ConfigArgs {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut args = ConfigArgs::default();
        for spec in all_options().into_iter().filter(|s| s.flag.is_some()) {
            for value in matches.get_many::<String>(spec.id).into_iter().flatten() {
                args.set(spec, value);
            }
        }
        Ok(args)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Args for ConfigArgs {
    fn augment_args(mut cmd: clap::Command) -> clap::Command {
        for spec in all_options() {
            let Some(flag) = spec.flag else { continue };
            let mut arg = Arg::new(spec.id)
                .long(flag.trim_start_matches("--"))
                .value_name(spec.value_name)
                .help(spec.help_line())
                .help_heading(spec.heading)
                .action(if spec.list {
                    ArgAction::Append
                } else {
                    ArgAction::Set
                });
            if let Some(short) = spec.short {
                arg = arg.short(short);
            }
            if !spec.choices.is_empty() {
                arg = arg.value_parser(Suggest(spec.choices));
            }
            if spec.switch {
                arg = arg
                    .num_args(0..=1)
                    .require_equals(true)
                    .default_missing_value("true");
            }
            cmd = cmd.arg(arg);
        }
        cmd
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// Offers an option's values to completions and `--help` without checking
/// them: the configuration checks every source (flag, env, file) the same
/// way, with messages that name the source.
#[derive(Clone)]
struct Suggest(&'static [&'static str]);

impl clap::builder::TypedValueParser for Suggest {
    type Value = String;

    fn parse_ref(
        &self,
        _cmd: &clap::Command,
        _arg: Option<&Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        Ok(value.to_string_lossy().into_owned())
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            self.0.iter().map(|v| clap::builder::PossibleValue::new(*v)),
        ))
    }
}
