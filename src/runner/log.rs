//! One log event per transition, at DEBUG for the routine ones.

use super::Ident;
use crate::machine::State;

/// How a transition is logged.
pub(super) struct Line<'a> {
    pub(super) reason: &'static str,
    /// The other holder a standby names, when it knows one.
    pub(super) holder: Option<&'a str>,
    /// DEBUG rather than INFO (see [`crate::machine::Reason::routine`]).
    pub(super) quiet: bool,
}

/// One log event per transition: from, to, reason, id, key, fencing token
/// (and the holder a standby saw).
pub(super) fn log_transition(ident: &Ident<'_>, from: &State, to: &State, line: Line<'_>) {
    let fencing_token = fencing_of(to).or_else(|| fencing_of(from));
    let (id, key) = (ident.id, ident.key);
    let (from, to) = (from.name().as_str(), to.name().as_str());
    let Line {
        reason,
        holder,
        quiet,
    } = line;
    // `tracing` fixes an event's level at the call site.
    macro_rules! transition {
        ($level:expr) => {
            tracing::event!(
                $level,
                from,
                to,
                reason,
                id,
                key,
                fencing_token,
                holder,
                "transition"
            )
        };
    }
    if quiet {
        transition!(tracing::Level::DEBUG);
    } else {
        transition!(tracing::Level::INFO);
    }
}

fn fencing_of(state: &State) -> Option<u64> {
    match state {
        State::Working { lease } | State::Renewing { lease, .. } => Some(lease.fencing_token),
        State::Pausing {
            lease: Some(lease), ..
        } => Some(lease.fencing_token),
        _ => None,
    }
}
