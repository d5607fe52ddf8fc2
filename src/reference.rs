//! Reference material generated from the clap definitions, so it cannot
//! drift from the real command line: shell completions and manual pages.

use crate::cli::{Cli, EXIT_CODES};
use clap::CommandFactory;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

/// `leaderd completions SHELL`: the completion script on stdout.
pub fn completions(shell: clap_complete::Shell) -> ExitCode {
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "leaderd", &mut script);
    write_stdout(&script)
}

/// `leaderd manpage`: leaderd(1) on stdout, or with `--dir` one page per
/// command (leaderd.1, leaderd-run.1, …) written into that directory.
pub fn manpage(dir: Option<&Path>) -> ExitCode {
    let mut command = Cli::command().disable_help_subcommand(true);
    command.build();
    match dir {
        Some(dir) => match write_pages(&command, dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!(
                    "leaderd: cannot write the manual pages into {}: {e}; create the directory or choose a writable one",
                    dir.display()
                );
                ExitCode::from(1)
            }
        },
        None => match page(&command) {
            Ok(page) => write_stdout(&page),
            Err(e) => {
                eprintln!("leaderd: cannot render the manual page: {e}");
                ExitCode::from(1)
            }
        },
    }
}

fn write_pages(command: &clap::Command, dir: &Path) -> std::io::Result<()> {
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir)?;
    }
    let name = command
        .get_display_name()
        .unwrap_or_else(|| command.get_name());
    std::fs::write(dir.join(format!("{name}.1")), page(command)?)
}

/// One page: clap_mangen's sections, with the command after `--` shown as
/// such, and the exit codes in an EXIT STATUS section of their own.
fn page(command: &clap::Command) -> std::io::Result<Vec<u8>> {
    let man = clap_mangen::Man::new(command.clone());
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    let mut synopsis = Vec::new();
    man.render_synopsis_section(&mut synopsis)?;
    man.render_description_section(&mut synopsis)?;
    if command.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut synopsis)?;
    }
    // clap shows the trailing command as a bare positional.
    let text = String::from_utf8_lossy(&synopsis).replace(
        "[\\fICOMMAND\\fR]",
        "[\\fB\\-\\-\\fR \\fICOMMAND\\fR [\\fIARG\\fR]...]",
    );
    out.extend_from_slice(text.as_bytes());
    if command.has_subcommands() {
        man.render_subcommands_section(&mut out)?;
    }
    out.extend_from_slice(exit_status().as_bytes());
    // Subcommands carry no version of their own (clap_mangen would panic).
    if command.get_version().is_some() {
        man.render_version_section(&mut out)?;
    }
    Ok(out)
}

fn exit_status() -> String {
    let mut roff = String::from(".SH \"EXIT STATUS\"\n");
    for (code, meaning) in EXIT_CODES {
        // Backslashes and leading dots would be read as roff requests.
        let meaning = meaning.replace('\\', "\\e").replace('-', "\\-");
        roff.push_str(&format!(".TP\n\\fB{code}\\fR\n{meaning}\n"));
    }
    roff
}

fn write_stdout(bytes: &[u8]) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`leaderd manpage | head`) is not worth a message.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("leaderd: cannot write to stdout: {e}");
            ExitCode::from(1)
        }
    }
}
