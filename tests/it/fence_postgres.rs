//! The PostgreSQL guard (`fence/postgres.sql`, #40) on a real server: a
//! deposed term's late write refused with SQLSTATE LDF01 naming both tokens
//! (READ COMMITTED; REPEATABLE READ, where a concurrent raise shows first as
//! 40001); a paused old transaction holding the new leader only until
//! `idle_in_transaction_session_timeout` ends it, its data gone; a hundred
//! concurrent transactions with random tokens never committing a smaller
//! token after a larger one; and the trigger variant, through PgBouncer in
//! transaction mode too.

use crate::support;

use std::time::{Duration, Instant};
use support::postgres::{PgBouncer, Postgres};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};

const GUARD: &str = include_str!("../../fence/postgres.sql");

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// A server with the fence installed (twice: the file is idempotent) and a
/// table the workers write.
fn fenced() -> Postgres {
    let pg = Postgres::start();
    pg.sql(GUARD);
    pg.sql(GUARD);
    pg.sql(
        "CREATE TABLE results (id bigserial PRIMARY KEY, term bigint NOT NULL, what text NOT NULL)",
    );
    pg
}

async fn client(pg: &Postgres) -> Client {
    let (client, connection) = tokio_postgres::connect(&pg.url(""), NoTls)
        .await
        .expect("a connection");
    tokio::spawn(connection);
    client
}

/// One worker's transaction of term `token`: the check first, then a write.
async fn write(c: &Client, token: i64, what: &str) -> Result<(), tokio_postgres::Error> {
    c.batch_execute("BEGIN").await?;
    let result = async {
        c.query_one("SELECT leaderd_fence_check('jobs', $1)", &[&token])
            .await?;
        c.execute(
            "INSERT INTO results (term, what) VALUES ($1, $2)",
            &[&token, &what],
        )
        .await?;
        c.batch_execute("COMMIT").await
    }
    .await;
    if result.is_err() {
        let _ = c.batch_execute("ROLLBACK").await;
    }
    result
}

fn rows(pg: &Postgres) -> String {
    pg.sql("SELECT string_agg(term || ':' || what, ',' ORDER BY id) FROM results")
}

/// The error is LDF01 and names both tokens.
fn refused(e: &tokio_postgres::Error, old: i64, new: i64) {
    let db = e
        .as_db_error()
        .unwrap_or_else(|| panic!("not a server error: {e}"));
    assert_eq!(db.code().code(), "LDF01", "{db:?}");
    assert!(
        db.message()
            .contains(&format!("fencing token {old} is older than token {new}")),
        "{}",
        db.message()
    );
    assert!(db.hint().is_some_and(|h| h.contains("deposed")), "{db:?}");
}

#[test]
fn a_deposed_terms_late_write_is_refused_naming_both_tokens() {
    let pg = fenced();
    runtime().block_on(async {
        let (old, new) = (client(&pg).await, client(&pg).await);
        write(&old, 5, "old term")
            .await
            .expect("the first term writes");
        write(&new, 7, "new term")
            .await
            .expect("the next term writes");
        // READ COMMITTED: the old term's next transaction is refused.
        let e = write(&old, 5, "late").await.expect_err("a late write");
        refused(&e, 5, 7);
        // The same term again, and a later one, pass.
        write(&new, 7, "again").await.expect("the same term");
        write(&new, 9, "later").await.expect("a later term");

        // REPEATABLE READ: an old transaction whose snapshot predates the
        // raise fails with 40001 first (retrying is right in general), and
        // its retry meets the fence.
        old.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1")
            .await
            .unwrap();
        write(&new, 11, "while the old snapshot lives")
            .await
            .unwrap();
        let e = old
            .query_one("SELECT leaderd_fence_check('jobs', 9)", &[])
            .await
            .expect_err("a stale snapshot");
        assert_eq!(
            e.code(),
            Some(&SqlState::T_R_SERIALIZATION_FAILURE),
            "{e:?}"
        );
        old.batch_execute("ROLLBACK").await.unwrap();
        old.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            .await
            .unwrap();
        let e = old
            .query_one("SELECT leaderd_fence_check('jobs', 9)", &[])
            .await
            .expect_err("the retry");
        refused(&e, 9, 11);
        old.batch_execute("ROLLBACK").await.unwrap();
    });
    assert_eq!(
        rows(&pg),
        "5:old term,7:new term,7:again,9:later,11:while the old snapshot lives"
    );
    assert_eq!(
        pg.sql("SELECT token FROM leaderd_fence WHERE key = 'jobs'"),
        "11"
    );
}

#[test]
fn a_paused_old_transaction_holds_the_new_term_only_until_the_idle_timeout_ends_it() {
    let pg = fenced();
    runtime().block_on(async {
        let (old, new) = (client(&pg).await, client(&pg).await);
        // Below the TTL, as docs/fencing.md says to set it for workers.
        old.batch_execute("SET idle_in_transaction_session_timeout = '2s'")
            .await
            .unwrap();
        old.batch_execute("BEGIN").await.unwrap();
        old.query_one("SELECT leaderd_fence_check('jobs', 5)", &[])
            .await
            .unwrap();
        old.execute("INSERT INTO results (term, what) VALUES (5, 'paused')", &[])
            .await
            .unwrap();
        // The old worker is paused here, inside its transaction. The new
        // term's check waits for the row lock, then wins.
        let asked = Instant::now();
        write(&new, 7, "new term")
            .await
            .expect("the new term writes");
        let waited = asked.elapsed();
        eprintln!("the new term waited {waited:?} for the paused transaction");
        assert!(
            waited >= Duration::from_millis(1500) && waited < Duration::from_secs(15),
            "the new term waited {waited:?} for a paused transaction with a 2 s idle timeout"
        );
        // The old worker wakes: its transaction is gone.
        let e = old
            .batch_execute("COMMIT")
            .await
            .expect_err("ended by the server");
        eprintln!("the paused worker's COMMIT: {e}");
    });
    assert_eq!(rows(&pg), "7:new term");
}

#[test]
fn a_hundred_concurrent_transactions_never_commit_a_smaller_token_after_a_larger() {
    let pg = fenced();
    runtime().block_on(async {
        // Ten connections, each running ten transactions one after the
        // other (a connection carries one transaction at a time).
        let mut tasks = Vec::new();
        for _ in 0..10 {
            let c = client(&pg).await;
            tasks.push(tokio::spawn(async move {
                let mut refused = 0;
                for round in 0..10u64 {
                    // Growing on the whole, overlapping between workers:
                    // many commit, many are refused, in every order.
                    let token = (round * 10 + support::os::below(25)) as i64;
                    match write(&c, token, "x").await {
                        Ok(()) => {}
                        Err(e) if e.as_db_error().is_some_and(|d| d.code().code() == "LDF01") => {
                            refused += 1
                        }
                        Err(e) => panic!("an error other than the fence's: {e:?}"),
                    }
                }
                refused
            }));
        }
        let mut refused = 0;
        for t in tasks {
            refused += t.await.expect("a worker task");
        }
        eprintln!("100 transactions, {refused} refused by the fence");
    });
    // Rows in the order their ids were drawn, which is inside the key's
    // row lock, so in commit order: the tokens never go down.
    let terms: Vec<i64> = pg
        .sql("SELECT string_agg(term::text, ',' ORDER BY id) FROM results")
        .split(',')
        .map(|t| t.parse().unwrap())
        .collect();
    assert!(
        terms.windows(2).all(|w| w[0] <= w[1]),
        "a smaller token committed after a larger one: {terms:?}"
    );
    let top = terms.iter().max().unwrap().to_string();
    assert_eq!(
        pg.sql("SELECT token FROM leaderd_fence WHERE key = 'jobs'"),
        top
    );
}

#[test]
fn the_trigger_refuses_a_write_without_a_token_or_with_an_old_one_also_through_pgbouncer() {
    let pg = fenced();
    pg.sql("CREATE TRIGGER leaderd_fence BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON results FOR EACH STATEMENT EXECUTE FUNCTION leaderd_fence_trigger('jobs')");
    let bouncer = PgBouncer::start(&pg, "transaction");
    let through = |sql: &str| -> Result<String, String> {
        let out = std::process::Command::new(support::postgres::bin("psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .args(["-d", &bouncer.url(""), "-c", sql])
            .output()
            .expect("psql runs");
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    };
    let e = through("INSERT INTO results (term, what) VALUES (0, 'forgot')").unwrap_err();
    assert!(
        e.contains("without a fencing token") && e.contains("SET LOCAL"),
        "{e}"
    );
    through("BEGIN; SET LOCAL leaderd.fencing_token = '7'; INSERT INTO results (term, what) VALUES (7, 'new'); COMMIT").unwrap();
    let e = through("BEGIN; SET LOCAL leaderd.fencing_token = '5'; DELETE FROM results; COMMIT")
        .unwrap_err();
    assert!(e.contains("fencing token 5 is older than token 7"), "{e}");
    // SET LOCAL ended with its transaction: the pooled server connection
    // the next client gets carries no token.
    let e = through("UPDATE results SET what = 'no token'").unwrap_err();
    assert!(e.contains("without a fencing token"), "{e}");
    assert_eq!(rows(&pg), "7:new");
}

/// The VM-pause case with PostgreSQL as both the lease and the resource:
/// two `leaderd run` candidates whose child is the shell example worker
/// (`examples/fenced-worker-psql.sh`); the leader's whole tree is stopped
/// past the TTL, the other takes over and writes; the old worker, let run
/// first, writes under its old token and the database refuses it.
#[test]
fn a_paused_leaders_late_write_is_refused_by_the_database_end_to_end() {
    let worker = format!(
        "{}/examples/fenced-worker-psql.sh",
        env!("CARGO_MANIFEST_DIR")
    );
    let psql = support::postgres::bin("psql");
    paused_leader_refused(&worker, &[("PSQL", support::path_str(&psql))]);
}

/// The same with the Rust example worker (`examples/fenced-worker-postgres.rs`).
#[test]
fn a_paused_rust_workers_late_write_is_refused_by_the_database_end_to_end() {
    paused_leader_refused(&support::example("fenced-worker-postgres"), &[]);
}

/// Two candidates on PostgreSQL (lease and resource) whose child is
/// `worker`; the leader's tree paused past the TTL, the other takes over
/// and writes, then the old worker resumes first and is refused.
fn paused_leader_refused(worker: &str, extra_env: &[(&str, &str)]) {
    let pg = fenced();
    let url = pg.url("");
    let key = support::key("fence-pg-e2e");
    let start = |id: &str| {
        let http = format!("127.0.0.1:{}", support::free_port());
        let args = [
            "run",
            "--id",
            id,
            "--http",
            &http,
            "--postgres",
            &url,
            "--key",
            &key,
            "--ttl",
            "2s",
            "--",
            worker,
        ];
        let mut env = vec![("WORKER_DATABASE_URL", url.as_str())];
        env.extend_from_slice(extra_env);
        support::Leaderd::attach(id, &http, support::spawn_with_env(&args, &env))
    };
    let by = |id: &str| {
        pg.sql(&format!(
            "SELECT count(*) FROM results WHERE what LIKE '% by {id}'"
        ))
        .parse::<u64>()
        .unwrap_or(0)
    };
    let a = start("a");
    a.wait_leading(Duration::from_secs(15));
    support::eventually(Duration::from_secs(15), "a's worker to write", || {
        (by("a") > 0).then_some(())
    });
    let old = a.leader().unwrap().1["fencing_token"].as_u64().unwrap();
    let b = start("b");
    support::eventually(Duration::from_secs(10), "b to stand by", || {
        b.leader().map(drop)
    });

    let paused = support::os::tree(a.pid());
    let t0 = Instant::now();
    for pid in &paused {
        support::os::kill(*pid, libc::SIGSTOP);
    }
    let shell = *paused
        .iter()
        .find(|p| support::os::cmdline(**p).contains("fenced-worker") && **p != a.pid())
        .expect("a's worker in its tree");
    support::eventually(Duration::from_secs(20), "b's worker to write", || {
        (by("b") > 0).then_some(())
    });
    let taken = t0.elapsed();
    let new = b.leader().unwrap().1["fencing_token"].as_u64().unwrap();
    assert!(new > old, "{old} → {new}");

    // The old worker (and its sleep) run again before leaderd and its guard.
    for pid in support::os::tree(shell) {
        support::os::kill(pid, libc::SIGCONT);
    }
    let refused = a.wait_log(Duration::from_secs(10), "REFUSED under fencing token");
    let refused_at = t0.elapsed();
    for pid in &paused {
        support::os::kill(*pid, libc::SIGCONT);
    }
    assert!(
        refused.contains(&format!("fencing token {old} is older than token {new}")),
        "{refused}"
    );
    // No row of the old term after the new term's first.
    let terms: Vec<u64> = pg
        .sql("SELECT string_agg(term::text, ',' ORDER BY id) FROM results")
        .split(',')
        .map(|t| t.parse().unwrap())
        .collect();
    let first_new = terms.iter().position(|t| *t == new).expect("b's rows");
    assert!(
        terms[first_new..].iter().all(|t| *t == new),
        "an old term's row after the new term's: {terms:?}"
    );
    eprintln!(
        "paused a (token {old}) at 0; b's worker wrote with token {new} at {taken:?}; \
         a's worker resumed and was refused at {refused_at:?}"
    );
}
