//! Reference material generated from the clap definitions, so it cannot
//! drift from the real command line: shell completions and manual pages.

use crate::cli::Cli;
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
    let command = Cli::command();
    match dir {
        Some(dir) => match clap_mangen::generate_to(command, dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!(
                    "leaderd: cannot write the manual pages into {}: {e}; create the directory or choose a writable one",
                    dir.display()
                );
                ExitCode::from(1)
            }
        },
        None => {
            let mut page = Vec::new();
            match clap_mangen::Man::new(command).render(&mut page) {
                Ok(()) => write_stdout(&page),
                Err(e) => {
                    eprintln!("leaderd: cannot render the manual page: {e}");
                    ExitCode::from(1)
                }
            }
        }
    }
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
