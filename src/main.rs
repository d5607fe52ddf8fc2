//! `leaderd`: parse → load config → init logs → run; errors to exit codes.

use clap::Parser;
use leaderd::app::{self, Failure};
use leaderd::cli::{Cli, Command, ConfigArgs, FenceCommand};
use leaderd::config::Config;
use leaderd::{reference, shutdown, telemetry};
use std::io::Write;
use std::process::ExitCode;

/// Blocks SIGTERM and SIGINT before `main` runs (the dynamic loader has
/// just finished), so one sent in the first instants after exec stays
/// pending until [`shutdown::catch`] has handlers in place and unblocks them,
/// instead of killing leaderd by default.
#[used]
#[unsafe(link_section = ".init_array")]
static BLOCK_SHUTDOWN_SIGNALS: extern "C" fn() = shutdown::block_before_main;

fn main() -> ExitCode {
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == leaderd::work::guard::ARG)
    {
        leaderd::work::guard::main();
    }
    // What leaderd's parent left behind is not passed on: open descriptors
    // (close-on-exec from now on) and ignored signals.
    leaderd::work::process::cloexec_inherited_fds();
    leaderd::work::process::reset_ignored_signals();
    // Then, so that a signal at any point of start-up is honoured.
    let caught = match shutdown::catch() {
        Ok(caught) => caught,
        Err(e) => {
            return report(Failure::Fatal(format!(
                "cannot install signal handlers: {e}"
            )));
        }
    };
    // One crypto provider for every TLS client (rediss://, webhooks), before
    // any of them is built.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Run(_)) {
        // Only `run` holds anything to release; `status --watch` ends on
        // Ctrl-C as asked, with exit 0.
        let watching = matches!(&cli.command, Command::Status(s) if s.watch);
        if watching {
            return other_command(cli, Some(caught));
        }
        caught.restore_default();
        return other_command(cli, None);
    }
    let Command::Run(run) = &cli.command else {
        unreachable!("checked above")
    };
    let config = match Config::load(&run.config, &run.command, &leaderd::catalog()) {
        Ok(config) => config,
        Err(e) => return report(Failure::Config(e)),
    };
    telemetry::init(
        config.log.format,
        &config.log.level,
        &leaderd::lease::chatty_logs(),
    );
    let outcome = runtime().and_then(|rt| rt.block_on(app::run(config, caught)));
    telemetry::flush();
    match outcome {
        Ok(code) => code,
        Err(failure) => report(failure),
    }
}

/// `status`, `check`, `step-down`, `fence`, `completions`, `manpage`.
fn other_command(cli: Cli, caught: Option<shutdown::Caught>) -> ExitCode {
    let (args, command): (&ConfigArgs, &[String]) = match &cli.command {
        Command::Run(_) => unreachable!("`run` is main's"),
        Command::Status(status) => (&status.config, &[]),
        Command::Check(check) => (&check.config, &check.command),
        Command::StepDown(step) => (&step.config, &[]),
        // Printing the shipped text needs no configuration, so nothing in
        // one can stand in its way.
        Command::Fence(FenceCommand::Install(i)) if !i.apply && i.guard.is_some() => {
            return app::fence::print_guard(i.guard.expect("just checked"));
        }
        Command::Fence(FenceCommand::Install(i)) => (&i.config, &[]),
        Command::Fence(FenceCommand::Check(c)) => (&c.config, &[]),
        Command::Completions(c) => return reference::completions(c.shell),
        Command::Manpage(m) => return reference::manpage(m.dir.as_deref()),
    };
    let config = match Config::load(args, command, &leaderd::catalog()) {
        Ok(config) => config,
        Err(e) => return report(Failure::Config(e)),
    };
    telemetry::init(
        config.log.format,
        &config.log.level,
        &leaderd::lease::chatty_logs(),
    );
    let outcome = runtime().and_then(|rt| {
        rt.block_on(async move {
            match cli.command {
                Command::Status(s) if s.watch => match caught.map(|c| c.into_quiet_stop()) {
                    Some(Ok(stop)) => app::watch_status(config, s.json, s.interval, stop).await,
                    _ => Err(app::Failure::Fatal(
                        "cannot catch SIGINT and SIGTERM".into(),
                    )),
                },
                Command::Status(s) => app::status(config, s.json).await,
                Command::Check(c) if c.offline => app::check_offline(config),
                Command::Check(_) => app::check(config).await,
                Command::StepDown(s) => app::step_down(config, s.hold.as_deref(), s.to.as_deref()),
                Command::Fence(FenceCommand::Install(i)) => {
                    app::fence::install(config, i.guard, i.apply).await
                }
                Command::Fence(FenceCommand::Check(_)) => app::fence::check(config).await,
                Command::Run(_) | Command::Completions(_) | Command::Manpage(_) => {
                    unreachable!("answered before the config is loaded")
                }
            }
        })
    });
    telemetry::flush();
    match outcome {
        Ok(code) => code,
        Err(failure) => report(failure),
    }
}

/// One thread is plenty for one lease, one HTTP listener and a child; it
/// keeps the footprint of a sidecar small.
fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Fatal(format!("cannot start the async runtime: {e}")))
}

fn report(failure: Failure) -> ExitCode {
    // Not `eprintln!`, which panics when stderr is closed.
    let _ = writeln!(std::io::stderr(), "leaderd: {failure}");
    failure.exit_code()
}
