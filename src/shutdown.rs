//! Signals → one cancellation token. The first SIGTERM or SIGINT cancels the
//! token (the state machine then stops the work and releases the lease); a
//! second one exits at once with 128 + the signal number (the child's guard
//! then kills the child's process group).

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// Installs the handlers and returns the token every task watches. Call it
/// before anything that can block (connecting to Redis), so a signal during
/// start-up is honoured too.
pub fn install() -> std::io::Result<CancellationToken> {
    let token = CancellationToken::new();
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let cancel = token.clone();
    tokio::spawn(async move {
        let mut received = 0;
        loop {
            let (name, number) = tokio::select! {
                _ = term.recv() => ("SIGTERM", signal_hook::consts::SIGTERM),
                _ = int.recv() => ("SIGINT", signal_hook::consts::SIGINT),
            };
            received += 1;
            if received == 1 {
                tracing::info!(
                    signal = name,
                    "shutdown requested: stopping the work and releasing the lease"
                );
                cancel.cancel();
            } else {
                // The child's guard sees leaderd go and kills the child's group.
                tracing::warn!(signal = name, "second signal: exiting at once");
                std::process::exit(128 + number);
            }
        }
    });
    Ok(token)
}
