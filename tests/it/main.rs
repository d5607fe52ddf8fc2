//! Every integration test, in one binary: each module is one behaviour
//! (`cargo test --test it contract::` runs one), the fixtures are in
//! [`support`]. One binary links the crate and its dependencies once,
//! not once per file. The nemesis (`tests/nemesis.rs`) is a program of
//! its own and shares the fixtures.

mod support;

mod child;
mod cluster;
mod commands;
mod contract;
mod election;
mod etcd;
mod failover;
mod faults;
mod fence_cli;
mod fence_etcd;
mod fence_postgres;
mod fence_redis;
mod fence_run;
mod fence_zookeeper;
mod fixtures;
mod health;
mod http;
mod idle;
mod kubernetes;
mod layout;
mod local_files;
mod logs;
mod observability;
mod operations;
mod operators;
mod postgres;
mod postgres_setup;
mod priority;
mod prometheus;
mod redlock;
mod replication;
mod safety;
mod secrets;
mod sentinel;
mod signals;
mod tls;
mod watch;
mod webhook;
mod worker_example;
mod zookeeper;
