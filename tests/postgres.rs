//! PostgreSQL against a real server on loopback: the server terminating the
//! leader's session (table and advisory mode), an immediate stop and
//! restart, and the mistakes a person makes (a wrong password, a missing
//! table, a missing grant), each a clear message and exit code 2.

mod support;

use std::time::Duration;
use support::postgres::{PASSWORD, Postgres};
use support::{Leaderd, eventually, probe_child, probe_events, run_to_end};

const PATIENCE: Duration = Duration::from_secs(15);

fn candidate(pg: &Postgres, query: &str, key: &str, id: &str, log: &std::path::Path) -> Leaderd {
    let url = pg.url(query);
    let probe = probe_child();
    Leaderd::run(
        id,
        &[
            "--postgres",
            &url,
            "--key",
            key,
            "--postgres-timeout",
            "300ms",
            "--ttl",
            "2s",
            "--retry-interval",
            "300ms",
            "--",
            &probe,
            support::path_str(log),
        ],
    )
}

/// The one leader, once exactly one leads, and its token.
fn the_leader(nodes: &[Leaderd]) -> (usize, u64) {
    eventually(PATIENCE, "exactly one leader", || {
        let leading: Vec<usize> = (0..nodes.len()).filter(|&i| nodes[i].is_leader()).collect();
        let [one] = leading[..] else { return None };
        let (_, body) = nodes[one].leader()?;
        Some((one, body["fencing_token"].as_u64()?))
    })
}

/// The most children alive at once, over every candidate's probe log.
fn most_alive(logs: &[std::path::PathBuf]) -> usize {
    let mut events: Vec<(u128, i32)> = logs
        .iter()
        .flat_map(|l| probe_events(l))
        .map(|e| (e.ns, if e.kind == "start" { 1 } else { -1 }))
        .collect();
    events.sort();
    let (mut alive, mut most) = (0i32, 0i32);
    for (_, change) in events {
        alive += change;
        most = most.max(alive);
    }
    most as usize
}

fn terminated_sessions_never_make_two_leaders(query: &str) {
    let pg = Postgres::start();
    let key = support::key("pg-terminate");
    let dir = support::Scratch::new(&format!("pg-terminate-{}", support::os::below(1 << 30)));
    let logs: Vec<_> = ["a", "b"].iter().map(|id| dir.join(id)).collect();
    let nodes: Vec<Leaderd> = ["a", "b"]
        .iter()
        .zip(&logs)
        .map(|(id, log)| candidate(&pg, query, &key, id, log))
        .collect();
    let (_, before) = the_leader(&nodes);
    for _ in 0..3 {
        // Every leaderd session, the leader's included.
        pg.sql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'leaderd'");
        std::thread::sleep(Duration::from_millis(700)); // past a renewal
    }
    let (_, after) = the_leader(&nodes);
    assert!(after >= before, "{after} ≥ {before}");
    assert!(most_alive(&logs) <= 1, "two children ran at once");
}

#[test]
fn the_server_terminating_sessions_never_makes_two_leaders_table_mode() {
    terminated_sessions_never_make_two_leaders("");
}

#[test]
fn the_server_terminating_sessions_never_makes_two_leaders_advisory_mode() {
    terminated_sessions_never_make_two_leaders("mode=advisory");
}

#[test]
fn an_immediate_stop_and_restart_leaves_one_leader_with_a_larger_token() {
    let mut pg = Postgres::start();
    let key = support::key("pg-restart");
    let dir = support::Scratch::new(&format!("pg-restart-{}", support::os::below(1 << 30)));
    let logs: Vec<_> = ["a", "b"].iter().map(|id| dir.join(id)).collect();
    let nodes: Vec<Leaderd> = ["a", "b"]
        .iter()
        .zip(&logs)
        .map(|(id, log)| candidate(&pg, "", &key, id, log))
        .collect();
    let (leader, before) = the_leader(&nodes);
    pg.stop_immediate();
    eventually(PATIENCE, "the leader to step down", || {
        (!nodes[leader].is_leader()).then_some(())
    });
    pg.restart();
    let (_, after) = the_leader(&nodes);
    assert!(after > before, "{after} > {before}");
    assert!(most_alive(&logs) <= 1, "two children ran at once");
}

/// `leaderd check` with these flags: exit code and everything it printed.
fn check(args: &[&str]) -> (i32, String) {
    let mut all = vec!["check", "--key", "pg-check"];
    all.extend_from_slice(args);
    let (code, out, err) = run_to_end(&all);
    (code, format!("{out}{err}"))
}

#[test]
fn mistakes_are_clear_configuration_errors() {
    let pg = Postgres::start();
    // A wrong password: said, never echoed.
    let wrong = pg.url("").replace(PASSWORD, "not-the-password-x1");
    let (code, said) = check(&["--postgres", &wrong]);
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("password authentication failed"), "{said}");
    assert!(!said.contains("not-the-password-x1"), "{said}");

    // A missing table: the statement to create it.
    let url = pg.url("");
    let (code, said) = check(&["--postgres", &url, "--postgres-table", "elsewhere"]);
    assert_eq!(code, 2, "{said}");
    assert!(
        said.contains("CREATE TABLE IF NOT EXISTS \"elsewhere\""),
        "{said}"
    );
    // `run` refuses it too, and creates it only when asked.
    let (code, _, err) = run_to_end(&[
        "run",
        "--id",
        "a",
        "--key",
        "k",
        "--postgres",
        &url,
        "--postgres-table",
        "elsewhere",
        "--wait",
        "0",
        "--",
        "true",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--postgres-create-table"), "{err}");
    let (code, said) = check(&[
        "--postgres",
        &url,
        "--postgres-table",
        "elsewhere",
        "--postgres-create-table",
    ]);
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("created the lease table"), "{said}");
    assert!(said.contains("the lease table elsewhere exists"), "{said}");

    // A user without the grants: the GRANT to run.
    pg.sql("CREATE ROLE weak LOGIN PASSWORD 'weak-pw'");
    let weak = url.replace(&format!("postgres:{PASSWORD}@"), "weak:weak-pw@");
    let (code, said) = check(&["--postgres", &weak]);
    assert_eq!(code, 2, "{said}");
    assert!(
        said.contains("GRANT SELECT, INSERT, UPDATE ON \"leaderd_lease\" TO weak"),
        "{said}"
    );
    pg.sql("GRANT SELECT, INSERT, UPDATE ON leaderd_lease TO weak");
    let (code, said) = check(&["--postgres", &weak]);
    assert_eq!(code, 0, "{said}");
    assert!(!said.contains("weak-pw"), "{said}");
}
