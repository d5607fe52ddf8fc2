//! `leaderd`: parse → load config → init logs → run; errors to exit codes.

use clap::Parser;
use leaderd::app::{self, Failure};
use leaderd::cli::{Cli, Command, ConfigArgs};
use leaderd::config::Config;
use leaderd::{reference, telemetry};
use std::process::ExitCode;

fn main() -> ExitCode {
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == leaderd::work::guard::ARG)
    {
        leaderd::work::guard::main();
    }
    let cli = Cli::parse();
    let (args, command): (&ConfigArgs, &[String]) = match &cli.command {
        Command::Run(run) => (&run.config, &run.command),
        Command::Status(status) => (&status.config, &[]),
        Command::Check(check) => (&check.config, &check.command),
        Command::Completions(c) => return reference::completions(c.shell),
        Command::Manpage(m) => return reference::manpage(m.dir.as_deref()),
    };
    let config = match Config::load(args, command) {
        Ok(config) => config,
        Err(e) => return report(Failure::Config(e)),
    };
    telemetry::init(config.log.format, &config.log.level);
    // One thread is plenty for one lease, one HTTP listener and a child; it
    // keeps the footprint of a sidecar small.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return report(Failure::Fatal(format!(
                "cannot start the async runtime: {e}"
            )));
        }
    };
    let outcome = runtime.block_on(async move {
        match cli.command {
            Command::Run(_) => app::run(config).await,
            Command::Status(s) => app::status(config, s.json).await,
            Command::Check(c) if c.offline => app::check_offline(config),
            Command::Check(_) => app::check(config).await,
            Command::Completions(_) | Command::Manpage(_) => {
                unreachable!("answered before the config is loaded")
            }
        }
    });
    match outcome {
        Ok(code) => code,
        Err(failure) => report(failure),
    }
}

fn report(failure: Failure) -> ExitCode {
    eprintln!("leaderd: {failure}");
    failure.exit_code()
}
