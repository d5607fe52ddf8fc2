//! `leaderd status --watch`: the election, live. On a terminal the view is
//! redrawn in place (the lease, its time left, the candidates, the last
//! changes with their times); otherwise one line per change, or with
//! `--json` one JSON object per change. Ctrl-C (or SIGTERM) ends it with
//! exit 0.
//!
//! [`Live`] is pure: it takes each look (or the error that replaced it)
//! with its time, says whether it was a change, and renders; the loop
//! around it reads the store and writes.

use super::Failure;
use super::status::{Look, describe_candidates, describe_peek, look};
use crate::config::{Config, show_duration};
use std::collections::VecDeque;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;

/// How many changes the terminal view lists.
const HISTORY: usize = 8;

/// What counts as a change: the holder, its token, a contest, the
/// candidates (who, their order, priority, health), an unreadable store;
/// not the time left.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Look {
        holder: Option<String>,
        token: Option<u64>,
        contested: bool,
        candidates: Vec<String>,
    },
    Unreachable(String),
}

impl Seen {
    fn of(outcome: &Result<Look, String>) -> Seen {
        match outcome {
            Ok(look) => Seen::Look {
                holder: look.view.leader.clone(),
                token: look.view.fencing_token,
                contested: look.view.contested,
                candidates: look
                    .view
                    .candidates
                    .iter()
                    .map(|r| format!("{} {} {:?} {:?}", r.id, r.priority, r.healthy, r.successor))
                    .collect(),
            },
            Err(e) => Seen::Unreachable(e.clone()),
        }
    }
}

/// The watcher's memory: the last look, the last reachable one, and the
/// changes of leadership with their times.
#[derive(Debug, Default)]
pub(super) struct Live {
    last: Option<(Result<Look, String>, Seen)>,
    /// The last lease seen: (holder, token, contested).
    lease: Option<(Option<String>, Option<u64>, bool)>,
    history: VecDeque<(SystemTime, String)>,
}

impl Live {
    /// Takes one look, made at `at`; whether anything but the time left
    /// changed since the last.
    pub fn observe(&mut self, outcome: Result<Look, String>, at: SystemTime) -> bool {
        let seen = Seen::of(&outcome);
        let changed = self.last.as_ref().is_none_or(|(_, last)| *last != seen);
        let was_unreachable = matches!(self.last, Some((Err(_), _)));
        match &outcome {
            Err(e) if !was_unreachable => self.note(at, format!("the store is unreachable: {e}")),
            Err(_) => {}
            Ok(look) => {
                if was_unreachable {
                    self.note(at, "the store answers again".to_string());
                }
                let view = &look.view;
                let lease = (view.leader.clone(), view.fencing_token, view.contested);
                if self.lease.as_ref() != Some(&lease) {
                    let text = describe_change(self.lease.as_ref(), &lease);
                    self.note(at, text);
                    self.lease = Some(lease);
                }
            }
        }
        self.last = Some((outcome, seen));
        changed
    }

    fn note(&mut self, at: SystemTime, text: String) {
        if self.history.len() == HISTORY {
            self.history.pop_back();
        }
        self.history.push_front((at, text));
    }

    /// The terminal view, from the top of the screen.
    pub fn frame(&self, key: &str, every: Duration, now: SystemTime) -> String {
        let mut out = format!(
            "leaderd status --watch: {key}, every {}, Ctrl-C quits    {} UTC\n\n",
            show_duration(every),
            clock(now, false)
        );
        match &self.last {
            None => out.push_str("(looking)\n"),
            Some((Err(e), _)) => out.push_str(&format!("the store is unreachable: {e}\n")),
            Some((Ok(look), _)) => {
                out.push_str(&format!("{}\n\n", describe_peek(key, &look.peek)));
                out.push_str(&describe_candidates(
                    &look.view.candidates,
                    look.view.leader.as_deref(),
                ));
                if let Some(e) = &look.view.registry_error {
                    out.push_str(&format!("{e}\n"));
                }
            }
        }
        out.push_str("\nlast changes (UTC):\n");
        for (at, text) in &self.history {
            out.push_str(&format!("  {}  {text}\n", clock(*at, true)));
        }
        out
    }

    /// The last look as one line, for a log: `TIME LEASE; candidates: …`.
    pub fn line(&self, key: &str, at: SystemTime) -> String {
        let stamp = humantime::format_rfc3339_millis(at);
        match &self.last {
            None => format!("{stamp} {key}: not looked at yet"),
            Some((Err(e), _)) => format!("{stamp} {key}: the store is unreachable: {e}"),
            Some((Ok(look), _)) => {
                let leader = look.view.leader.as_deref();
                let candidates: Vec<String> = look
                    .view
                    .candidates
                    .iter()
                    .map(|r| {
                        let role = if Some(r.id.as_str()) == leader {
                            " (leader)"
                        } else {
                            ""
                        };
                        let sick = if r.healthy == Some(false) {
                            " (worker UNHEALTHY)"
                        } else {
                            ""
                        };
                        format!("{}{role}{sick}", r.id)
                    })
                    .collect();
                let listed = if candidates.is_empty() {
                    "none registered".to_string()
                } else {
                    candidates.join(", ")
                };
                format!(
                    "{stamp} {}; candidates: {listed}",
                    describe_peek(key, &look.peek)
                )
            }
        }
    }

    /// The last look as one JSON object: `status --json`'s, with `at`, or
    /// `{at, key, error}` when the store was unreachable.
    pub fn json(&self, key: &str, at: SystemTime) -> String {
        let at = humantime::format_rfc3339_millis(at).to_string();
        let value = match &self.last {
            Some((Ok(look), _)) => {
                let mut value = serde_json::to_value(&look.view).expect("plain struct");
                value["at"] = serde_json::Value::String(at);
                value
            }
            Some((Err(e), _)) => serde_json::json!({"at": at, "key": key, "error": e}),
            None => serde_json::json!({"at": at, "key": key}),
        };
        value.to_string()
    }
}

/// `c1 → c2, fencing token 42`, `c2 → vacant`, `c2 again, fencing token 43`.
fn describe_change(
    before: Option<&(Option<String>, Option<u64>, bool)>,
    (holder, token, contested): &(Option<String>, Option<u64>, bool),
) -> String {
    let name = |h: &Option<String>, contested: bool| match h {
        Some(id) => id.clone(),
        None if contested => "contested".to_string(),
        None => "vacant".to_string(),
    };
    let now = name(holder, *contested);
    let token = token.map_or(String::new(), |t| format!(", fencing token {t}"));
    match before {
        None if holder.is_some() => format!("{now} leads{token}"),
        None => now,
        Some((was, _, _)) if was == holder && holder.is_some() => format!("{now} again{token}"),
        Some((was, _, was_contested)) => {
            format!("{} → {now}{token}", name(was, *was_contested))
        }
    }
}

/// `09:00:01` (or `09:00:01.234`), UTC.
fn clock(at: SystemTime, millis: bool) -> String {
    let full = humantime::format_rfc3339_millis(at).to_string();
    let time = &full[11..full.len() - 1];
    if millis {
        time.to_string()
    } else {
        time[..8].to_string()
    }
}

/// Moves to the top left, then clears to the end of the screen.
const REDRAW: &str = "\x1b[H\x1b[J";
const HIDE_CURSOR: &str = "\x1b[?25l";
const SHOW_CURSOR: &str = "\x1b[?25h";

/// `leaderd status --watch`: looks every `every` until `stop`; exit 0.
/// A store that cannot be reached is shown and looked at again; only a
/// misconfiguration at the first look ends it (exit 2).
pub async fn watch_status(
    config: Config,
    json: bool,
    every: Duration,
    stop: CancellationToken,
) -> Result<ExitCode, Failure> {
    let mut backend = super::backend(&config)?;
    let tty = !json && std::io::stdout().is_terminal();
    let mut live = Live::default();
    let mut out = std::io::stdout();
    if tty && write!(out, "{HIDE_CURSOR}\x1b[2J").is_err() {
        return Ok(ExitCode::SUCCESS);
    }
    let mut first = true;
    loop {
        let outcome = tokio::select! {
            () = stop.cancelled() => break,
            outcome = look(backend.as_mut(), &config.key) => outcome,
        };
        let outcome = match outcome {
            Err(e) if first && e.is_misconfiguration() => return Err(Failure::Backend(e)),
            outcome => outcome,
        };
        first = false;
        let now = SystemTime::now();
        let changed = live.observe(outcome.map_err(|e| e.to_string()), now);
        let text = if tty {
            Some(format!("{REDRAW}{}", live.frame(&config.key, every, now)))
        } else if !changed {
            None
        } else if json {
            Some(format!("{}\n", live.json(&config.key, now)))
        } else {
            Some(format!("{}\n", live.line(&config.key, now)))
        };
        // A closed stdout (`| head`) ends the watch as Ctrl-C does.
        if let Some(text) = text
            && (out.write_all(text.as_bytes()).is_err() || out.flush().is_err())
        {
            return Ok(ExitCode::SUCCESS);
        }
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(every) => {}
        }
    }
    if tty {
        let _ = write!(out, "{SHOW_CURSOR}");
        let _ = out.flush();
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
#[path = "live_tests.rs"]
mod tests;
