//! Resolution of the child's options, each value with its origin.

use super::error::ConfigError;
use super::model::ChildConfig;
use super::options;
use super::resolve::{Origin, Resolver, Value, or_default, show};
use super::sources::Sources;
use super::values::{self, OnChildExit, Signal};
use std::time::Duration;

pub(super) fn child(
    r: &Resolver<'_>,
    s: &Sources<'_>,
    note: &mut impl FnMut(&'static str, String, &Origin),
) -> Result<ChildConfig, ConfigError> {
    let command = if !s.command.is_empty() {
        Value {
            value: s.command.to_vec(),
            origin: Origin::Flag("the command after --"),
        }
    } else if let Some(at) = s.file.and_then(|f| f.list(&options::CHILD_COMMAND)) {
        let origin = r.file_origin(&options::CHILD_COMMAND, &at);
        if at.value.is_empty() || at.value[0].trim().is_empty() {
            return Err(ConfigError(format!(
                "{origin}: the command is empty; give [\"program\", \"arg\", ...] or remove the key"
            )));
        }
        Value {
            value: at.value,
            origin,
        }
    } else {
        Value {
            value: Vec::new(),
            origin: Origin::Default("none (elect-only)"),
        }
    };
    note(
        "child.command",
        format!("{:?}", command.value),
        &command.origin,
    );
    let stop_signal = r.scalar(&options::STOP_SIGNAL, values::parse_signal)?;
    let stop_signal = or_default(stop_signal, Signal::TERM, "");
    note(
        "child.stop_signal",
        format!("{:?}", stop_signal.value.name),
        &stop_signal.origin,
    );
    let stop_timeout = r.scalar(&options::STOP_TIMEOUT, values::parse_duration)?;
    let stop_timeout = or_default(stop_timeout, Duration::from_secs(10), "");
    note(
        "child.stop_timeout",
        format!("{:?}", show(stop_timeout.value)),
        &stop_timeout.origin,
    );
    let on_exit = r.scalar(&options::ON_CHILD_EXIT, values::parse_on_child_exit)?;
    let on_exit = or_default(on_exit, OnChildExit::Release, "");
    note(
        "child.on_exit",
        format!("{:?}", format!("{:?}", on_exit.value).to_lowercase()),
        &on_exit.origin,
    );
    let restart_limit = r.scalar(&options::RESTART_LIMIT, values::parse_restart_limit)?;
    let restart_limit = or_default(restart_limit, Some((5, Duration::from_secs(60))), "");
    note(
        "child.restart_limit",
        format!(
            "{:?}",
            restart_limit
                .value
                .map_or("off".to_string(), |(n, w)| format!("{n}/{}", show(w)))
        ),
        &restart_limit.origin,
    );
    let wait = r.scalar(&options::WAIT, values::parse_duration)?;
    if let Some(wait) = &wait {
        note(
            "child.wait",
            format!("{:?}", show(wait.value)),
            &wait.origin,
        );
        if command.value.is_empty() {
            return Err(ConfigError(format!(
                "child.wait ({}) runs a command once, but no command is configured; give it after -- (leaderd run --wait 30s -- COMMAND)",
                wait.origin
            )));
        }
        if on_exit.value != OnChildExit::Release && !matches!(on_exit.origin, Origin::Default(_)) {
            return Err(ConfigError(format!(
                "child.on_exit ({}) does not apply with child.wait ({}): the command runs once and its exit code is leaderd's; remove one of them",
                on_exit.origin, wait.origin
            )));
        }
    }
    Ok(ChildConfig {
        command: command.value,
        stop_signal: stop_signal.value,
        stop_timeout: stop_timeout.value,
        // Run once: the child's exit ends the run, with its code.
        on_exit: if wait.is_some() {
            OnChildExit::Exit
        } else {
            on_exit.value
        },
        restart_limit: restart_limit.value,
        wait: wait.map(|w| w.value),
        scrub: Vec::new(),
    })
}
