//! leaderd: a leader-election sidecar.
pub mod cli;
pub mod config;
pub mod lease;
pub mod machine;
pub mod timing;
