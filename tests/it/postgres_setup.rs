//! PostgreSQL set-up against real servers on loopback: the mistakes a
//! person makes (a wrong password, a missing table, a missing grant, a
//! standby), each a clear message and exit code 2; PgBouncer in
//! transaction mode (table mode works, advisory mode is refused).

use crate::support;

use std::time::Duration;
use support::postgres::{PASSWORD, PgBouncer, Postgres};
use support::{Leaderd, eventually, run_to_end};

/// The suite's bound: what is awaited happens by itself, and a machine
/// under load may stall for seconds first.
const PATIENCE: Duration = support::WAIT;

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

#[test]
fn a_standby_is_never_written_to() {
    let primary = Postgres::start();
    let standby = Postgres::standby_of(&primary);
    let (code, said) = check(&["--postgres", &standby.url("")]);
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("standby"), "{said}");
    assert!(said.contains("target_session_attrs=read-write"), "{said}");
    // Both hosts, the standby first: the read-write one is chosen.
    let both = format!(
        "postgres://postgres:{PASSWORD}@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        standby.port, primary.port
    );
    let (code, said) = check(&["--postgres", &both]);
    assert_eq!(code, 0, "{said}");
}

fn through(bouncer: &PgBouncer, query: &str, key: &str, id: &str) -> Leaderd {
    let url = bouncer.url(query);
    Leaderd::run(
        id,
        &[
            "--postgres",
            &url,
            "--key",
            key,
            "--ttl",
            "2s",
            "--retry-interval",
            "300ms",
            "--postgres-timeout",
            "300ms",
        ],
    )
}

#[test]
fn table_mode_works_through_a_transaction_pooler() {
    let pg = Postgres::start();
    let bouncer = PgBouncer::start(&pg, "transaction");
    let key = support::key("pg-bouncer");
    let mut nodes: Vec<Leaderd> = ["a", "b", "c"]
        .iter()
        .map(|id| through(&bouncer, "", &key, id))
        .collect();
    let leader = eventually(PATIENCE, "exactly one leader", || {
        let leading: Vec<usize> = (0..nodes.len()).filter(|&i| nodes[i].is_leader()).collect();
        let [one] = leading[..] else { return None };
        Some(one)
    });
    nodes[leader].wait_log(PATIENCE, "a transaction pooler is in the path");
    nodes[leader].signal("TERM");
    assert!(nodes[leader].wait_exit(PATIENCE).success());
    nodes.remove(leader);
    // Handed over by the waiters' timers (no LISTEN through the pooler).
    eventually(PATIENCE, "the next leader", || {
        (nodes.iter().filter(|n| n.is_leader()).count() == 1).then_some(())
    });
    let (code, said) = check(&["--postgres", &bouncer.url("")]);
    assert_eq!(code, 0, "{said}");
    assert!(
        said.contains("a transaction pooler is in the path"),
        "{said}"
    );
}

#[test]
fn advisory_mode_is_refused_behind_a_transaction_pooler() {
    let pg = Postgres::start();
    let bouncer = PgBouncer::start(&pg, "transaction");
    let url = bouncer.url("mode=advisory");
    let (code, said) = check(&["--postgres", &url]);
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("transaction pooler"), "{said}");
    assert!(said.contains("table mode"), "{said}");
    let (code, _, err) = run_to_end(&[
        "run",
        "--id",
        "a",
        "--key",
        "k",
        "--postgres",
        &url,
        "--wait",
        "0",
        "--",
        "true",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("table mode"), "{err}");
    // A session pooler keeps a session per client: advisory mode is fine.
    let session = PgBouncer::start(&pg, "session");
    let (code, said) = check(&["--postgres", &session.url("mode=advisory")]);
    assert_eq!(code, 0, "{said}");
}

/// A server that speaks TLS with a certificate for `localhost` only, signed
/// by the fixture's CA; leaderd connects to 127.0.0.1.
#[test]
fn tls_modes_mean_what_libpq_says() {
    let pki = support::tls::Pki::new(&format!("pg-tls-{}", support::os::below(1 << 30)));
    let (cert, key) = pki.leaf("server", &["localhost"], false);
    let pg = Postgres::start_tls(&cert, &key);
    let ca = pki.ca();
    let ca = support::path_str(&ca);
    let url = |q: &str| pg.url(q);

    let (code, said) = check(&[
        "--postgres",
        &url(&format!("sslmode=verify-ca&sslrootcert={ca}")),
    ]);
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("sslmode=verify-ca"), "{said}");
    assert!(said.contains("TLS (TLSv1."), "{said}");

    // verify-full checks the name: 127.0.0.1 is not in the certificate.
    let (code, said) = check(&[
        "--postgres",
        &url(&format!("sslmode=verify-full&sslrootcert={ca}")),
    ]);
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("does not name the host"), "{said}");

    // Without the CA, verifying fails; require encrypts without verifying.
    let (code, said) = check(&["--postgres", &url("sslmode=verify-full")]);
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("sslrootcert"), "{said}");
    let (code, said) = check(&["--postgres", &url("sslmode=require")]);
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("TLS (TLSv1."), "{said}");
    assert!(!said.contains(PASSWORD), "{said}");
}
