//! The one configuration error.

/// A configuration problem. Always exit code 2; the message says what was
/// wrong, where it came from and how to fix it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);
