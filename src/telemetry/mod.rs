//! Logging (PRODUCT §8): `text` for terminals, `json` (one object per line)
//! for pipelines, both on stderr so the child's stdout stays its own.
//!
//! Lines go through `writer`: a bounded queue drained by a thread of its
//! own, so a stalled or closed stderr never blocks or kills the control loop.

mod writer;

use crate::config::LogFormat;
use std::io::IsTerminal;
use std::time::Duration;
use tracing_subscriber::EnvFilter;

pub use writer::dropped_lines;

/// How long the last lines get to reach stderr when leaderd exits: long
/// enough for a reader that keeps up, short enough that a stalled pipe never
/// holds the exit up.
const FLUSH_AT_EXIT: Duration = Duration::from_secs(1);

/// Starts the logger. `chatty`: log targets of dependencies that log every
/// reconnection attempt themselves (each backend names its own,
/// `lease::chatty_logs`): their errors only, unless `level` names them.
pub fn init(format: LogFormat, level: &str, chatty: &[&str]) {
    let mut level = level.to_string();
    for name in chatty {
        if !level.contains(name) {
            level.push_str(&format!(",{name}=error"));
        }
    }
    let filter = EnvFilter::try_new(&level).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer::start())
        // A failed write is the writer's to count; tracing-subscriber's own
        // report of it (`eprintln!`) would panic on a closed stderr.
        .log_internal_errors(false)
        .with_target(false);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .init(),
    }
}

/// Waits, boundedly, for the queued lines to be written. Call before exit.
pub fn flush() {
    writer::flush(FLUSH_AT_EXIT);
}
